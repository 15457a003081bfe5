package api

import (
	"encoding/json"
	"net/http"
	"time"

	"queen-node/broker"
)

// DLQ page size bounds.
const (
	defaultDLQLimit = 100
	maxDLQLimit     = 10000
)

type dlqMessage struct {
	ID            string          `json:"id"`
	TransactionID string          `json:"transactionId"`
	PartitionID   string          `json:"partitionId"`
	Queue         string          `json:"queue"`
	Partition     string          `json:"partition"`
	ConsumerGroup string          `json:"consumerGroup"`
	ErrorMessage  string          `json:"errorMessage"`
	RetryCount    int             `json:"retryCount"`
	Data          json.RawMessage `json:"data"`
	ProducerSub   *string         `json:"producerSub"`
	CreatedAt     string          `json:"createdAt"`
	FailedAt      string          `json:"failedAt"`
}

type pagination struct {
	Limit  int `json:"limit"`
	Offset int `json:"offset"`
}

type dlqResponse struct {
	Messages   []dlqMessage `json:"messages"`
	Total      int          `json:"total"`
	Limit      int          `json:"limit"`
	Offset     int          `json:"offset"`
	Pagination pagination   `json:"pagination"`
}

// GET /api/v1/dlq
func (s *Server) handleDLQ(w http.ResponseWriter, r *http.Request, c caller) {
	q := r.URL.Query()
	dq := broker.DLQQuery{
		Queue:     q.Get("queue"),
		Group:     q.Get("consumerGroup"), // a filter: "" = every group
		Partition: q.Get("partition"),
		Limit:     clamp(queryInt(q, "limit", defaultDLQLimit), 1, maxDLQLimit),
		Offset:    max(queryInt(q, "offset", 0), 0),
	}
	for _, f := range []struct{ kind, v string }{
		{"queue", dq.Queue}, {"consumerGroup", dq.Group}, {"partition", dq.Partition},
	} {
		if f.v != "" {
			if err := checkName(f.kind, f.v); err != nil {
				writeReqError(w, err)
				return
			}
		}
	}
	for _, f := range []struct {
		key string
		dst **time.Time
	}{{"from", &dq.From}, {"to", &dq.To}} {
		v := q.Get(f.key)
		if v == "" {
			continue
		}
		t, ok := parseTime(v)
		if !ok {
			writeError(w, http.StatusBadRequest, f.key+" must be an ISO-8601 timestamp")
			return
		}
		*f.dst = &t
	}

	entries, total, err := s.b.ListDLQ(r.Context(), c.tenant, dq)
	if err != nil {
		s.brokerError(w, r, "list dlq", err)
		return
	}
	msgs := make([]dlqMessage, 0, len(entries))
	for _, e := range entries {
		data := e.Data
		if data == nil {
			data = json.RawMessage("null")
		}
		msgs = append(msgs, dlqMessage{
			ID:            e.ID,
			TransactionID: e.TransactionID,
			PartitionID:   e.PartitionID,
			Queue:         e.Queue,
			Partition:     e.Partition,
			ConsumerGroup: e.ConsumerGroup,
			ErrorMessage:  e.ErrorMessage,
			RetryCount:    e.RetryCount,
			Data:          data,
			ProducerSub:   e.ProducerSub,
			CreatedAt:     fmtMilli(e.CreatedAt),
			FailedAt:      fmtMilli(e.FailedAt),
		})
	}
	writeJSON(w, http.StatusOK, dlqResponse{
		Messages:   msgs,
		Total:      total,
		Limit:      dq.Limit,
		Offset:     dq.Offset,
		Pagination: pagination{Limit: dq.Limit, Offset: dq.Offset},
	})
}
