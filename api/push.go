package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"unicode/utf8"

	"queen-node/broker"
	"queen-node/internal/jsonscan"
	"queen-node/protocol"
)

// pushResult is one element of the push response array (docs/api.md, "Semantics"). Both id
// spellings are sent because Go reads camelCase and JS/1.x snake_case.
type pushResult struct {
	Index           int                 `json:"index"`
	Status          protocol.PushStatus `json:"status"`
	TransactionID   string              `json:"transactionId"`
	TransactionIDSn string              `json:"transaction_id"`
	MessageID       *string             `json:"message_id"`
	PartitionIDSn   *string             `json:"partition_id"`
	PartitionID     *string             `json:"partitionId"`
	TraceID         *string             `json:"trace_id"`
	QueueName       string              `json:"queueName"`
	Error           string              `json:"error,omitempty"` // only with "failed"
}

// POST /api/v1/push
func (s *Server) handlePush(w http.ResponseWriter, r *http.Request, c caller) {
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
	out := pushResults{}
	if len(items) > 0 {
		res, err := s.push(r, c, items)
		if err != nil {
			s.brokerError(w, r, "push", err)
			return
		}
		out = make(pushResults, 0, len(res))
		for _, p := range res {
			out = append(out, toPushResult(p))
		}
	}
	writeJSON(w, http.StatusCreated, out)
}

func toPushResult(p broker.PushResult) pushResult {
	pid := nullable(p.PartitionID) // one allocation for both spellings
	pr := pushResult{
		Index:           p.Index,
		Status:          p.Status,
		TransactionID:   p.TransactionID,
		TransactionIDSn: p.TransactionID,
		MessageID:       nullable(p.MessageID),
		PartitionIDSn:   pid,
		PartitionID:     pid,
		TraceID:         p.TraceID,
		QueueName:       p.Queue,
	}
	if p.Status == protocol.PushFailed {
		pr.Error = p.Error
		if pr.Error == "" {
			pr.Error = "push failed"
		}
	}
	return pr
}

// decodePush decodes a push body: the fast path when it can,
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

// fastPushItems decodes a well-formed push body in one pass (jsonscan.Scanner):
// the field-by-field path costs several times the CPU on the push hot path.
// Any surprise declines (ok false) and sends the request to that path, which
// gives the precise error. Payloads are slices of raw, which the request owns.
func fastPushItems(raw []byte, maxItems int) ([]broker.PushItem, bool) {
	s := jsonscan.Scanner{Data: raw}
	if s.Peek() != '{' {
		return nil, false
	}
	s.Pos++
	var items []broker.PushItem // nil while there is no items array
	for first := true; ; first = false {
		key, escaped, done, ok := s.Member(first)
		if !ok {
			return nil, false
		}
		if done {
			break
		}
		switch string(key) {
		case "items":
			if s.Null() {
				items = nil // null is absent; the last of duplicate keys counts
			} else if items, ok = scanPushItems(&s, maxItems); !ok {
				return nil, false
			}
		default:
			if jsonscan.UnknownKey(key, escaped, "items") || !s.SkipValue(1) {
				return nil, false
			}
		}
	}
	if items == nil || !s.AtEnd() {
		return nil, false
	}
	return items, true
}

// scanPushItems reads the items array at Pos. Past maxItems it fails, and the
// field-by-field path answers 413: what was decoded until then is bounded
// by maxItems, whatever the size of the body.
func scanPushItems(s *jsonscan.Scanner, maxItems int) ([]broker.PushItem, bool) {
	return jsonscan.Array(s, maxItems, func(prev broker.PushItem) (broker.PushItem, bool) { return scanPushItem(s, prev) })
}

// scanPushItem reads one item object at Pos; prev is the item before it, whose
// names it reuses when equal.
func scanPushItem(s *jsonscan.Scanner, prev broker.PushItem) (broker.PushItem, bool) {
	var it broker.PushItem
	if s.Pos >= len(s.Data) || s.Data[s.Pos] != '{' {
		return it, false
	}
	s.Pos++
	var queue, partition, txID, trace jsonscan.Field
	var payload []byte
	hasPayload, payloadWS := false, false
	for first := true; ; first = false {
		key, escaped, done, ok := s.Member(first)
		if !ok {
			return it, false
		}
		if done {
			break
		}
		switch string(key) {
		case "queue":
			ok = s.StringField(&queue)
		case "partition":
			ok = s.StringField(&partition)
		case "transactionId":
			ok = s.StringField(&txID)
		case "traceId":
			ok = s.StringField(&trace)
		case "payload":
			start := s.Pos
			s.WS = false
			ok = s.SkipValue(4)
			// Capacity capped: an append to a payload must not write into raw.
			payload, hasPayload, payloadWS = s.Data[start:s.Pos:s.Pos], true, s.WS
		default:
			ok = !jsonscan.UnknownKey(key, escaped, "queue", "partition", "transactionId", "traceId", "payload") && s.SkipValue(4)
		}
		if !ok {
			return it, false
		}
	}
	var ok1, ok2, ok3, ok4 bool
	it.Queue, ok1 = fieldName(&queue, prev.Queue, false)
	// partition "" = Default, transactionId "" = generated (broker contract).
	it.Partition, ok2 = fieldName(&partition, prev.Partition, true)
	it.TransactionID, ok3 = fieldName(&txID, "", true)
	traceID, ok4 := trace.Text("")
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return it, false
	}
	if traceID != "" {
		canon, ok := canonicalUUID(traceID)
		if !ok {
			return it, false
		}
		it.TraceID = &canon
	}
	switch {
	case !hasPayload:
		it.Payload = json.RawMessage("{}") // absent payload is {}; null stays null
	case payloadWS:
		// Store the compact form (numbers and strings keep their text);
		// most clients send compact JSON and skip this pass.
		var err error
		if it.Payload, err = compactJSON(payload); err != nil {
			return it, false
		}
	default:
		it.Payload = payload
	}
	return it, true
}

// parsePushItems validates every item before anything is stored: one bad
// item rejects the whole request (docs/api.md, "Semantics").
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
			// The reference 5xx'd on this; docs/api.md: 400, never 5xx.
			return it, badRequest("traceId must be a UUID")
		}
		it.TraceID = &canon
	}
	// Absent payload is {}; an explicit null is kept as null (docs/api.md, "Semantics").
	p, present := o["payload"]
	if !present {
		it.Payload = json.RawMessage("{}")
	} else if it.Payload, err = compactJSON(p); err != nil {
		return it, badRequest("payload is not valid JSON")
	} else if !utf8.Valid(it.Payload) {
		return it, badRequest("payload must be valid UTF-8")
	}
	// producerSub in the body is deliberately ignored (docs/api.md, "Semantics").
	return it, nil
}
