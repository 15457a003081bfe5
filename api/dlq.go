package api

import (
	"errors"
	"net/http"
	"time"

	"queen-node/broker"
	"queen-node/protocol"
	"queen-node/reads"
)

// DLQ page size bounds.
const (
	defaultDLQLimit = 100
	maxDLQLimit     = 10000
)

// dlqMessage is a DLQ entry as the clients read it; its data is written
// after these fields, verbatim (answer.object).
type dlqMessage struct {
	ID            string  `json:"id"`
	TransactionID string  `json:"transactionId"`
	PartitionID   string  `json:"partitionId"`
	Queue         string  `json:"queue"`
	Partition     string  `json:"partition"`
	ConsumerGroup string  `json:"consumerGroup"`
	ErrorMessage  string  `json:"errorMessage"`
	RetryCount    int     `json:"retryCount"`
	ProducerSub   *string `json:"producerSub"`
	CreatedAt     string  `json:"createdAt"`
	FailedAt      string  `json:"failedAt"`
	// Superseded: a seek moved the group's cursor back over the message or
	// the group was deleted; it can be dropped, not retried (an addition to
	// the reference's shape).
	Superseded bool `json:"superseded"`
}

type pagination struct {
	Limit  int `json:"limit"`
	Offset int `json:"offset"`
}

// dlqHead is the DLQ answer before its messages.
type dlqHead struct {
	Total      int        `json:"total"`
	Limit      int        `json:"limit"`
	Offset     int        `json:"offset"`
	Pagination pagination `json:"pagination"`
	// Truncated: the byte bound (Config.MaxReadBytes) ended the page
	// before limit; the rest starts at NextOffset (docs/api.md, "Read
	// answers"). NextOffset is absent otherwise.
	Truncated  bool `json:"truncated"`
	NextOffset *int `json:"nextOffset,omitempty"`
}

// nextOffset is where a truncated page's rest starts; nil when the page was
// not truncated.
func nextOffset(truncated bool, offset, n int) *int {
	if !truncated {
		return nil
	}
	next := offset + n
	return &next
}

// GET /api/v1/dlq
func (s *Server) handleDLQ(w http.ResponseWriter, r *http.Request, c caller) {
	q := r.URL.Query()
	dq := reads.DLQQuery{
		Queue:     q.Get("queue"),
		Group:     q.Get("consumerGroup"), // a filter: "" = every group
		Partition: q.Get("partition"),
		Limit:     clamp(queryInt(q, "limit", defaultDLQLimit), 1, maxDLQLimit),
		Offset:    max(queryInt(q, "offset", 0), 0),
		MaxBytes:  s.cfg.MaxReadBytes,
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

	page, err := s.r.ListDLQ(r.Context(), c.tenant, dq)
	if err != nil {
		s.brokerError(w, r, "list dlq", err)
		return
	}
	var size int64
	for _, e := range page.Entries {
		size += int64(len(e.Data)) + answerRowOverhead
	}
	a := s.startAnswer(w, size)
	a.open(dlqHead{Total: page.Total, Limit: dq.Limit, Offset: dq.Offset,
		Pagination: pagination{Limit: dq.Limit, Offset: dq.Offset},
		Truncated:  page.Truncated, NextOffset: nextOffset(page.Truncated, dq.Offset, len(page.Entries))})
	a.str(`,"messages":[`)
	for i, e := range page.Entries {
		if i > 0 {
			a.str(",")
		}
		a.object(dlqMessage{
			ID:            e.ID,
			TransactionID: e.TransactionID,
			PartitionID:   e.PartitionID,
			Queue:         e.Queue,
			Partition:     e.Partition,
			ConsumerGroup: e.ConsumerGroup,
			ErrorMessage:  e.ErrorMessage,
			RetryCount:    e.RetryCount,
			ProducerSub:   e.ProducerSub,
			CreatedAt:     fmtMilli(e.CreatedAt),
			FailedAt:      fmtMilli(e.FailedAt),
			Superseded:    e.Superseded,
		}, rawField{key: "data", val: e.Data})
	}
	a.str("]}\n")
	if err := a.finish(); err != nil {
		s.log.Debug("dlq answer not delivered", "error", err)
	}
}

type dlqRetryResponse struct {
	Success       bool   `json:"success"`
	PartitionID   string `json:"partitionId"`
	TransactionID string `json:"transactionId"` // the dead-lettered message's
	ConsumerGroup string `json:"consumerGroup"`
	Queue         string `json:"queue"`
	Partition     string `json:"partition"`
	// The copy appended for the group.
	RetryTransactionID string `json:"retryTransactionId"`
}

type dlqDropResponse struct {
	Success       bool   `json:"success"`
	PartitionID   string `json:"partitionId"`
	TransactionID string `json:"transactionId"`
	ConsumerGroup string `json:"consumerGroup"`
	Dropped       int    `json:"dropped"` // entries deleted, superseded ones included
}

// dlqKey reads the dead letter a retry or drop names: the message in the
// path, the group (required: several groups may dead-letter one message)
// in the query.
func dlqKey(r *http.Request) (pid, txid, group string, err error) {
	if pid, txid, err = messageKey(r); err != nil {
		return "", "", "", err
	}
	group = r.URL.Query().Get("consumerGroup")
	if group == "" {
		return "", "", "", badRequest("consumerGroup is required (" + protocol.QueueMode + " in queue mode)")
	}
	return pid, txid, group, checkName("consumerGroup", group)
}

// POST /api/v1/dlq/{partitionId}/{transactionId}/retry?consumerGroup=G
func (s *Server) handleDLQRetry(w http.ResponseWriter, r *http.Request, c caller) {
	pid, txid, group, err := dlqKey(r)
	if err != nil {
		writeReqError(w, err)
		return
	}
	res, err := s.b.RetryDeadLetter(r.Context(), c.tenant, pid, txid, group)
	switch {
	case errors.Is(err, broker.ErrTxIDTaken):
		writeError(w, http.StatusConflict, broker.ErrTxIDTaken.Error())
		return
	case errors.Is(err, broker.ErrDLQSuperseded):
		writeError(w, http.StatusConflict, broker.ErrDLQSuperseded.Error())
		return
	case err != nil:
		s.readsError(w, r, "retry dead letter", "Dead letter", err)
		return
	}
	s.log.Info("dead letter retried", "tenant", c.tenant, "queue", res.Queue, "partition", res.Partition,
		"group", group, "transactionId", txid, "copy", res.TxID, "offset", res.Offset)
	writeJSON(w, http.StatusOK, dlqRetryResponse{Success: true, PartitionID: pid, TransactionID: txid,
		ConsumerGroup: group, Queue: res.Queue, Partition: res.Partition, RetryTransactionID: res.TxID})
}

// DELETE /api/v1/dlq/{partitionId}/{transactionId}?consumerGroup=G
func (s *Server) handleDLQDrop(w http.ResponseWriter, r *http.Request, c caller) {
	pid, txid, group, err := dlqKey(r)
	if err != nil {
		writeReqError(w, err)
		return
	}
	n, err := s.r.DropDeadLetter(r.Context(), c.tenant, pid, txid, group)
	if err != nil {
		s.readsError(w, r, "drop dead letter", "Dead letter", err)
		return
	}
	s.log.Info("dead letter dropped", "tenant", c.tenant, "partitionId", pid, "group", group,
		"transactionId", txid, "entries", n)
	writeJSON(w, http.StatusOK, dlqDropResponse{Success: true, PartitionID: pid, TransactionID: txid,
		ConsumerGroup: group, Dropped: n})
}
