package api

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"

	"queen-node/broker"
	"queen-node/internal/jsonscan"
	"queen-node/protocol"
)

// ackResult is one element of the single and batch ack response arrays (docs/api.md, "Acks").
type ackResult struct {
	Index         int     `json:"index"`
	TransactionID string  `json:"transactionId"`
	Success       bool    `json:"success"`
	Error         *string `json:"error"`
	QueueName     string  `json:"queueName"`
	PartitionName string  `json:"partitionName"`
	LeaseReleased bool    `json:"leaseReleased"`
	DLQ           bool    `json:"dlq"`
}

func toAckResults(res []broker.AckResult) ackResults {
	out := make(ackResults, 0, len(res))
	for _, a := range res {
		out = append(out, ackResult{
			Index:         a.Index,
			TransactionID: a.TransactionID,
			Success:       a.Success,
			Error:         nullable(a.Error),
			QueueName:     a.QueueName,
			PartitionName: a.PartitionName,
			LeaseReleased: a.LeaseReleased,
			DLQ:           a.DLQ,
		})
	}
	return out
}

// parseAckItem reads one ack (docs/api.md, "Acks"). defaultGroup applies when the
// item names no consumerGroup.
func parseAckItem(o object, defaultGroup string) (broker.AckItem, error) {
	var it broker.AckItem
	tx, ok, err := o.str("transactionId")
	if err != nil || !ok || tx == "" {
		return it, badRequest("transactionId is required")
	}
	pid, ok, err := o.str("partitionId")
	if err != nil || !ok || pid == "" {
		return it, badRequest("partitionId is required")
	}
	if err := checkName("transactionId", tx); err != nil {
		return it, err
	}
	if err := checkName("partitionId", pid); err != nil {
		return it, err
	}
	it.TransactionID, it.PartitionID = tx, pid
	// Unknown statuses go through: the broker answers them per item with
	// "Invalid status" (docs/api.md, "Acks").
	st, _, err := o.str("status")
	if err != nil {
		return it, err
	}
	it.Status = protocol.AckStatus(st)
	if len(st) > broker.MaxNameBytes || !validText(st) {
		return it, badRequest("status must be a short UTF-8 string")
	}
	if it.Group, err = o.optName("consumerGroup"); err != nil {
		return it, err
	}
	if it.Group == "" {
		it.Group = defaultGroup
	}
	if it.LeaseID, err = o.optName("leaseId"); err != nil {
		return it, err
	}
	it.Error = o.errorText("error")
	return it, nil
}

// POST /api/v1/ack
func (s *Server) handleAck(w http.ResponseWriter, r *http.Request, c caller) {
	body, err := s.readObject(w, r)
	if err != nil {
		writeReqError(w, err)
		return
	}
	item, err := parseAckItem(body, broker.QueueMode)
	if err != nil {
		writeReqError(w, err)
		return
	}
	res, err := s.ack(r, c, []broker.AckItem{item})
	if err != nil {
		s.brokerError(w, r, "ack", err)
		return
	}
	writeJSON(w, http.StatusOK, toAckResults(res))
}

// fastAckItems decodes a well-formed batch ack in one pass (jsonscan.Scanner);
// anything unexpected declines (ok false) and goes to the field-by-field
// path for a precise error.
func fastAckItems(raw []byte, maxItems int) ([]broker.AckItem, bool) {
	s := jsonscan.Scanner{Data: raw}
	if s.Peek() != '{' {
		return nil, false
	}
	s.Pos++
	var items []broker.AckItem // nil while there is no acknowledgments array
	var group jsonscan.Field
	for first := true; ; first = false {
		key, escaped, done, ok := s.Member(first)
		if !ok {
			return nil, false
		}
		if done {
			break
		}
		switch string(key) {
		case "consumerGroup":
			ok = s.StringField(&group)
		case "acknowledgments":
			if s.Null() {
				items = nil // null is absent; the last of duplicate keys counts
			} else {
				items, ok = scanAckItems(&s, maxItems)
			}
		default:
			ok = !jsonscan.UnknownKey(key, escaped, "consumerGroup", "acknowledgments") && s.SkipValue(1)
		}
		if !ok {
			return nil, false
		}
	}
	if items == nil || !s.AtEnd() {
		return nil, false
	}
	// The top-level group may follow the array: items without their own
	// get it now (docs/api.md, "Semantics").
	g, ok := fieldName(&group, "", true)
	if !ok {
		return nil, false
	}
	if g == "" {
		g = broker.QueueMode
	}
	for i := range items {
		if items[i].Group == "" {
			items[i].Group = g
		}
	}
	return items, true
}

// scanAckItems reads the acknowledgments array at Pos. Past maxItems it fails,
// and the field-by-field path answers 413.
func scanAckItems(s *jsonscan.Scanner, maxItems int) ([]broker.AckItem, bool) {
	return jsonscan.Array(s, maxItems, func(prev broker.AckItem) (broker.AckItem, bool) { return scanAckItem(s, prev) })
}

// scanAckItem reads one acknowledgment object at Pos; prev is the one before
// it, whose names it reuses when equal. Group stays "" when the item names
// none.
func scanAckItem(s *jsonscan.Scanner, prev broker.AckItem) (broker.AckItem, bool) {
	var it broker.AckItem
	if s.Pos >= len(s.Data) || s.Data[s.Pos] != '{' {
		return it, false
	}
	s.Pos++
	var txID, partitionID, status, group, leaseID jsonscan.Field
	var errRaw []byte // nil: absent or null
	for first := true; ; first = false {
		key, escaped, done, ok := s.Member(first)
		if !ok {
			return it, false
		}
		if done {
			break
		}
		switch string(key) {
		case "transactionId":
			ok = s.StringField(&txID)
		case "partitionId":
			ok = s.StringField(&partitionID)
		case "status":
			ok = s.StringField(&status)
		case "consumerGroup":
			ok = s.StringField(&group)
		case "leaseId":
			ok = s.StringField(&leaseID)
		case "error":
			if s.Null() {
				errRaw = nil
			} else {
				start := s.Pos
				ok = s.SkipValue(4)
				errRaw = s.Data[start:s.Pos]
			}
		default:
			ok = !jsonscan.UnknownKey(key, escaped, "transactionId", "partitionId", "status", "consumerGroup", "leaseId", "error") &&
				s.SkipValue(4)
		}
		if !ok {
			return it, false
		}
	}
	var ok1, ok2, ok4, ok5 bool
	it.TransactionID, ok1 = fieldName(&txID, "", false)
	it.PartitionID, ok2 = fieldName(&partitionID, prev.PartitionID, false)
	st, ok3 := fieldName(&status, string(prev.Status), true) // unknown statuses go through, as in parseAckItem
	it.Status = protocol.AckStatus(st)
	it.Group, ok4 = fieldName(&group, prev.Group, true)
	it.LeaseID, ok5 = fieldName(&leaseID, prev.LeaseID, true)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 {
		return it, false
	}
	if n := len(errRaw); n >= 2 && errRaw[0] == '"' && n-2 <= maxErrorText && bytes.IndexByte(errRaw, '\\') < 0 {
		// A short plain string is stored as is: str has checked it is valid
		// UTF-8 without NUL, which is all errorText would change.
		it.Error = string(errRaw[1 : n-1])
	} else if errRaw != nil {
		it.Error = errorText(errRaw)
	}
	return it, true
}

// POST /api/v1/ack/batch
func (s *Server) handleAckBatch(w http.ResponseWriter, r *http.Request, c caller) {
	raw, err := s.readBody(w, r)
	if err != nil {
		writeReqError(w, err)
		return
	}
	items, err := decodeAckBatch(raw, s.cfg.MaxAckItems)
	if err != nil {
		writeReqError(w, err)
		return
	}
	s.ackItems(w, r, c, items)
}

// decodeAckBatch decodes a batch ack body: the fast path when
// it can, else the field-by-field path, which names the exact problem.
// Both refuse more than maxItems acknowledgments before decoding them.
func decodeAckBatch(raw []byte, maxItems int) ([]broker.AckItem, error) {
	if items, ok := fastAckItems(raw, maxItems); ok {
		return items, nil
	}
	return slowAckItems(raw, maxItems)
}

// slowAckItems is the field-by-field decoder of a batch ack body.
func slowAckItems(raw []byte, maxItems int) ([]broker.AckItem, error) {
	body, err := parseObject(raw, "request body")
	if err != nil {
		return nil, err
	}
	// The top-level group applies to items without their own (docs/api.md, "Semantics").
	group, err := body.group("consumerGroup")
	if err != nil {
		return nil, err
	}
	raws, ok, err := body.array("acknowledgments", maxItems)
	var tm *tooManyError
	if errors.As(err, &tm) {
		return nil, tooLarge(fmt.Sprintf("too many acknowledgments: %d (max %d per request)", tm.n, tm.max))
	}
	if err != nil || !ok {
		return nil, badRequest("acknowledgments array is required")
	}
	items := make([]broker.AckItem, 0, len(raws))
	for _, raw := range raws {
		o, err := parseObject(raw, "acknowledgment")
		if err != nil || isNull(raw) {
			return nil, badRequest("each acknowledgment must be an object")
		}
		it, err := parseAckItem(o, group)
		if err != nil {
			return nil, err
		}
		items = append(items, it)
	}
	return items, nil
}

func (s *Server) ackItems(w http.ResponseWriter, r *http.Request, c caller, items []broker.AckItem) {
	out := ackResults{}
	if len(items) > 0 {
		res, err := s.ack(r, c, items)
		if err != nil {
			s.brokerError(w, r, "ack batch", err)
			return
		}
		out = toAckResults(res)
	}
	writeJSON(w, http.StatusOK, out)
}

// leaseResponse is the lease extend answer (docs/api.md, "Semantics"): `newExpiresAt` for Go and JS, `expiresAt`
// for the reference shape.
type leaseResponse struct {
	LeaseID      string  `json:"leaseId"`
	Success      bool    `json:"success"`
	NewExpiresAt *string `json:"newExpiresAt"`
	ExpiresAt    *string `json:"expiresAt"`
	Error        *string `json:"error"`
}

// POST /api/v1/lease/{leaseId}/extend
func (s *Server) handleLeaseExtend(w http.ResponseWriter, r *http.Request, c caller) {
	leaseID := r.PathValue("leaseId")
	if err := checkName("leaseId", leaseID); err != nil {
		writeReqError(w, err)
		return
	}
	body, err := s.readObject(w, r)
	if err != nil {
		writeReqError(w, err)
		return
	}
	seconds, ok, err := body.integer("seconds", 1, maxLeaseSeconds)
	if err != nil {
		writeReqError(w, err)
		return
	}
	if !ok {
		seconds = DefaultLeaseExtendSeconds
	}
	res, err := s.b.ExtendLease(r.Context(), c.tenant, leaseID, seconds)
	if err != nil {
		s.brokerError(w, r, "extend lease", err)
		return
	}
	exp := fmtMilliOrNull(res.ExpiresAt)
	writeJSON(w, http.StatusOK, leaseResponse{
		LeaseID:      leaseID,
		Success:      res.Success,
		NewExpiresAt: exp,
		ExpiresAt:    exp,
		Error:        nullable(res.Error),
	})
}
