package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"unicode/utf8"

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
	raw, err := s.readBody(w, r)
	if err != nil {
		writeReqError(w, err)
		return
	}
	items, err := decodePush(raw, s.cfg.MaxPushItems)
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

// decodePush decodes a push body (API.md 4.3): the fast path when it can,
// else the field-by-field path, which names the exact problem. Both refuse
// more than maxItems items before decoding any of them.
func decodePush(raw []byte, maxItems int) ([]broker.PushItem, error) {
	if items, ok := fastPushItems(raw, maxItems); ok {
		return items, nil
	}
	return slowPushItems(raw, maxItems)
}

// slowPushItems is the field-by-field decoder of a push body.
func slowPushItems(raw []byte, maxItems int) ([]broker.PushItem, error) {
	body, err := parseObject(raw, "request body")
	if err != nil {
		return nil, err
	}
	raws, ok, err := body.array("items", maxItems)
	var tm *tooManyError
	if errors.As(err, &tm) {
		return nil, tooLarge(fmt.Sprintf("too many items: %d (max %d per request)", tm.n, tm.max))
	}
	if err != nil || !ok {
		return nil, badRequest("items array is required")
	}
	return parsePushItems(raws)
}

// fastPushBody decodes a well-formed push in one pass (the field-by-field
// path costs about twice the CPU on the push hot path). Any surprise sends
// the request to the slow path, which gives the precise error.
type fastPushBody struct {
	Items limitedArray[fastPushItem] `json:"items"`
}

type fastPushItem struct {
	Queue         json.RawMessage `json:"queue"`
	Partition     json.RawMessage `json:"partition"`
	TransactionID json.RawMessage `json:"transactionId"`
	TraceID       json.RawMessage `json:"traceId"`
	Payload       json.RawMessage `json:"payload"`
}

func fastPushItems(raw []byte, maxItems int) ([]broker.PushItem, bool) {
	fb := fastPushBody{Items: limitedArray[fastPushItem]{max: maxItems}}
	if err := json.Unmarshal(raw, &fb); err != nil || fb.Items.elems == nil ||
		foldedKeyVariant(raw, "items", "queue", "partition", "transactionId", "traceId", "payload") {
		return nil, false
	}
	items := make([]broker.PushItem, len(fb.Items.elems))
	var err error
	for i, f := range fb.Items.elems {
		q, ok := fastString(f.Queue, false)
		if !ok || checkName("queue", q) != nil {
			return nil, false
		}
		it := broker.PushItem{Queue: q, Payload: f.Payload}
		if it.Partition, ok = fastString(f.Partition, true); !ok || len(it.Partition) > broker.MaxNameBytes || !validText(it.Partition) {
			return nil, false
		}
		if it.TransactionID, ok = fastString(f.TransactionID, true); !ok || len(it.TransactionID) > broker.MaxNameBytes || !validText(it.TransactionID) {
			return nil, false
		}
		trace, ok := fastString(f.TraceID, true)
		if !ok {
			return nil, false
		}
		if trace != "" {
			canon, ok := canonicalUUID(trace)
			if !ok {
				return nil, false
			}
			it.TraceID = &canon
		}
		if !utf8.Valid(f.Payload) {
			return nil, false
		}
		if len(f.Payload) == 0 {
			it.Payload = json.RawMessage("{}") // absent payload is {}; null stays null
		} else if bytes.ContainsAny(f.Payload, " \t\r\n") {
			// Store the compact form (numbers and strings keep their text);
			// most clients send compact JSON and skip this pass.
			if it.Payload, err = compactJSON(f.Payload); err != nil {
				return nil, false
			}
		}
		items[i] = it
	}
	return items, true
}

// fastString decodes a JSON string; absent or null is "" when optional.
func fastString(v json.RawMessage, optional bool) (string, bool) {
	if len(v) == 0 || isNull(v) {
		return "", optional
	}
	if v[0] != '"' {
		return "", false
	}
	var s string
	if json.Unmarshal(v, &s) != nil {
		return "", false
	}
	return s, true
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
	} else if !utf8.Valid(it.Payload) {
		return it, badRequest("payload must be valid UTF-8")
	}
	// producerSub in the body is deliberately ignored (API.md 7).
	return it, nil
}
