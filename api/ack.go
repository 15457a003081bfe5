package api

import (
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
	if len(it.Status) > broker.MaxNameBytes {
		return it, badRequest("status is too long")
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

// POST /api/v1/ack/batch
func (s *Server) handleAckBatch(w http.ResponseWriter, r *http.Request, _ *string) {
	body, err := s.readObject(w, r)
	if err != nil {
		writeReqError(w, err)
		return
	}
	// The top-level group applies to items without their own (API.md 9).
	group, err := body.group("consumerGroup")
	if err != nil {
		writeReqError(w, err)
		return
	}
	raws, ok, err := body.array("acknowledgments")
	if err != nil || !ok {
		writeError(w, http.StatusBadRequest, "acknowledgments array is required")
		return
	}
	if len(raws) > s.cfg.MaxAckItems {
		writeError(w, http.StatusRequestEntityTooLarge,
			fmt.Sprintf("too many acknowledgments: %d (max %d per request)", len(raws), s.cfg.MaxAckItems))
		return
	}
	items := make([]broker.AckItem, 0, len(raws))
	for _, raw := range raws {
		o, err := parseObject(raw, "acknowledgment")
		if err != nil || isNull(raw) {
			writeError(w, http.StatusBadRequest, "each acknowledgment must be an object")
			return
		}
		it, err := parseAckItem(o, group)
		if err != nil {
			writeReqError(w, err)
			return
		}
		items = append(items, it)
	}
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
