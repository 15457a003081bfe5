package api

import (
	"encoding/json"
	"fmt"
	"net/http"

	"queen-node/broker"
)

// pushResult is one element of the API.md 4.3 response array. Both id
// spellings are sent because Go reads camelCase and JS/1.x snake_case.
type pushResult struct {
	Index           int     `json:"index"`
	Status          string  `json:"status"`
	TransactionID   string  `json:"transactionId"`
	TransactionIDSn string  `json:"transaction_id"`
	MessageID       *string `json:"message_id"`
	PartitionIDSn   *string `json:"partition_id"`
	PartitionID     *string `json:"partitionId"`
	TraceID         *string `json:"trace_id"`
	QueueName       string  `json:"queueName"`
	Error           string  `json:"error,omitempty"` // only with "failed"
}

// POST /api/v1/push
func (s *Server) handlePush(w http.ResponseWriter, r *http.Request, sub *string) {
	body, err := s.readObject(w, r)
	if err != nil {
		writeReqError(w, err)
		return
	}
	raws, ok, err := body.array("items")
	if err != nil || !ok {
		writeError(w, http.StatusBadRequest, "items array is required")
		return
	}
	if len(raws) > s.cfg.MaxPushItems {
		writeError(w, http.StatusRequestEntityTooLarge,
			fmt.Sprintf("too many items: %d (max %d per request)", len(raws), s.cfg.MaxPushItems))
		return
	}
	items, err := parsePushItems(raws)
	if err != nil {
		writeReqError(w, err)
		return
	}
	out := []pushResult{}
	if len(items) > 0 {
		res, err := s.b.Push(r.Context(), s.cfg.Tenant, sub, items)
		if err != nil {
			s.brokerError(w, r, "push", err)
			return
		}
		out = make([]pushResult, 0, len(res))
		for _, p := range res {
			out = append(out, toPushResult(p))
		}
	}
	writeJSON(w, http.StatusCreated, out)
}

func toPushResult(p broker.PushResult) pushResult {
	pr := pushResult{
		Index:           p.Index,
		Status:          p.Status,
		TransactionID:   p.TransactionID,
		TransactionIDSn: p.TransactionID,
		MessageID:       nullable(p.MessageID),
		PartitionIDSn:   nullable(p.PartitionID),
		PartitionID:     nullable(p.PartitionID),
		TraceID:         p.TraceID,
		QueueName:       p.Queue,
	}
	if p.Status == "failed" {
		pr.Error = p.Error
		if pr.Error == "" {
			pr.Error = "push failed"
		}
	}
	return pr
}

// parsePushItems validates every item before anything is stored: one bad
// item rejects the whole request (API.md 4.3).
func parsePushItems(raws []json.RawMessage) ([]broker.PushItem, error) {
	items := make([]broker.PushItem, 0, len(raws))
	for _, raw := range raws {
		it, err := parsePushItem(raw)
		if err != nil {
			return nil, err
		}
		items = append(items, it)
	}
	return items, nil
}

func parsePushItem(raw json.RawMessage) (broker.PushItem, error) {
	var it broker.PushItem
	o, err := parseObject(raw, "item")
	if err != nil || isNull(raw) {
		return it, badRequest("each item must be an object")
	}
	q, ok, err := o.str("queue")
	if err != nil || !ok {
		return it, badRequest("Queue must be a string")
	}
	if err := checkName("queue", q); err != nil {
		return it, err
	}
	it.Queue = q
	// partition "" = Default, transactionId "" = generated (broker contract).
	if it.Partition, err = o.optName("partition"); err != nil {
		return it, err
	}
	if it.TransactionID, err = o.optName("transactionId"); err != nil {
		return it, err
	}
	trace, _, err := o.str("traceId")
	if err != nil {
		return it, err
	}
	if trace != "" {
		canon, ok := canonicalUUID(trace)
		if !ok {
			// The reference 5xx'd on this; API.md requires 400 or null.
			return it, badRequest("traceId must be a UUID")
		}
		it.TraceID = &canon
	}
	// Absent payload is {}; an explicit null is kept as null (API.md 4.3).
	p, present := o["payload"]
	if !present {
		it.Payload = json.RawMessage("{}")
	} else if it.Payload, err = compactJSON(p); err != nil {
		return it, badRequest("payload is not valid JSON")
	}
	// producerSub in the body is deliberately ignored (API.md 7).
	return it, nil
}
