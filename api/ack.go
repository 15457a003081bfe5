package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"queen-node/broker"
)

// ackResult is one element of the API.md 4.5 / 4.6 response arrays.
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

func toAckResults(res []broker.AckResult) []ackResult {
	out := make([]ackResult, 0, len(res))
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

// parseAckItem reads one ack (API.md 4.5). defaultGroup applies when the
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
	// "Invalid status" (API.md 2.6).
	if it.Status, _, err = o.str("status"); err != nil {
		return it, err
	}
	if len(it.Status) > broker.MaxNameBytes || !validText(it.Status) {
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
func (s *Server) handleAck(w http.ResponseWriter, r *http.Request, _ *string) {
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
	res, err := s.b.Ack(r.Context(), s.cfg.Tenant, []broker.AckItem{item})
	if err != nil {
		s.brokerError(w, r, "ack", err)
		return
	}
	writeJSON(w, http.StatusOK, toAckResults(res))
}

// fastAckBody decodes a well-formed batch ack in one pass; anything
// unexpected goes to the field-by-field path for a precise error.
type fastAckBody struct {
	ConsumerGroup   json.RawMessage       `json:"consumerGroup"`
	Acknowledgments limitedArray[fastAck] `json:"acknowledgments"`
}

type fastAck struct {
	TransactionID json.RawMessage `json:"transactionId"`
	PartitionID   json.RawMessage `json:"partitionId"`
	Status        json.RawMessage `json:"status"`
	ConsumerGroup json.RawMessage `json:"consumerGroup"`
	LeaseID       json.RawMessage `json:"leaseId"`
	Error         json.RawMessage `json:"error"`
}

func fastAckItems(raw []byte, maxItems int) ([]broker.AckItem, bool) {
	fb := fastAckBody{Acknowledgments: limitedArray[fastAck]{max: maxItems}}
	if err := json.Unmarshal(raw, &fb); err != nil || fb.Acknowledgments.elems == nil ||
		foldedKeyVariant(raw, "consumerGroup", "acknowledgments", "transactionId", "partitionId", "status", "leaseId", "error") {
		return nil, false
	}
	group, ok := fastString(fb.ConsumerGroup, true)
	if !ok || len(group) > broker.MaxNameBytes || !validText(group) {
		return nil, false
	}
	if group == "" {
		group = broker.QueueMode
	}
	items := make([]broker.AckItem, len(fb.Acknowledgments.elems))
	for i, a := range fb.Acknowledgments.elems {
		var it broker.AckItem
		var ok1, ok2, ok3, ok4, ok5 bool
		it.TransactionID, ok1 = fastString(a.TransactionID, false)
		it.PartitionID, ok2 = fastString(a.PartitionID, false)
		it.Status, ok3 = fastString(a.Status, true)
		it.Group, ok4 = fastString(a.ConsumerGroup, true)
		it.LeaseID, ok5 = fastString(a.LeaseID, true)
		if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || it.TransactionID == "" || it.PartitionID == "" ||
			len(it.TransactionID) > broker.MaxNameBytes || len(it.PartitionID) > broker.MaxNameBytes ||
			len(it.Status) > broker.MaxNameBytes || len(it.Group) > broker.MaxNameBytes || len(it.LeaseID) > broker.MaxNameBytes ||
			!validText(it.TransactionID) || !validText(it.PartitionID) || !validText(it.Status) ||
			!validText(it.Group) || !validText(it.LeaseID) {
			return nil, false
		}
		if it.Group == "" {
			it.Group = group
		}
		if len(a.Error) > 0 {
			it.Error = object{"error": a.Error}.errorText("error")
		}
		items[i] = it
	}
	return items, true
}

// POST /api/v1/ack/batch
func (s *Server) handleAckBatch(w http.ResponseWriter, r *http.Request, _ *string) {
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
	s.ackItems(w, r, items)
}

// decodeAckBatch decodes a batch ack body (API.md 4.6): the fast path when
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
	// The top-level group applies to items without their own (API.md 9).
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

func (s *Server) ackItems(w http.ResponseWriter, r *http.Request, items []broker.AckItem) {
	out := []ackResult{}
	if len(items) > 0 {
		res, err := s.b.Ack(r.Context(), s.cfg.Tenant, items)
		if err != nil {
			s.brokerError(w, r, "ack batch", err)
			return
		}
		out = toAckResults(res)
	}
	writeJSON(w, http.StatusOK, out)
}

// leaseResponse is API.md 4.7: `newExpiresAt` for Go and JS, `expiresAt`
// for the reference shape.
type leaseResponse struct {
	LeaseID      string  `json:"leaseId"`
	Success      bool    `json:"success"`
	NewExpiresAt *string `json:"newExpiresAt"`
	ExpiresAt    *string `json:"expiresAt"`
	Error        *string `json:"error"`
}

// POST /api/v1/lease/{leaseId}/extend
func (s *Server) handleLeaseExtend(w http.ResponseWriter, r *http.Request, _ *string) {
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
	res, err := s.b.ExtendLease(r.Context(), s.cfg.Tenant, leaseID, seconds)
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
