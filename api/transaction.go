package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/google/uuid"

	"queen-node/broker"
	"queen-node/protocol"
)

// txResponse is the answer of POST /api/v1/transaction. Results mix ack and push shapes.
type txResponse struct {
	TransactionID string  `json:"transactionId"`
	Success       bool    `json:"success"`
	Error         *string `json:"error"`
	Results       []any   `json:"results"`
}

type txAckResult struct {
	Index         int     `json:"index"`
	Type          string  `json:"type"`
	Success       bool    `json:"success"`
	TransactionID string  `json:"transactionId"`
	Error         *string `json:"error"`
	DLQ           bool    `json:"dlq"`
}

type txPushResult struct {
	Index         int                 `json:"index"`
	Type          string              `json:"type"`
	Success       bool                `json:"success"`
	TransactionID string              `json:"transactionId"`
	MessageID     *string             `json:"messageId"`
	PartitionID   *string             `json:"partitionId"`
	QueueName     string              `json:"queueName"`
	Status        protocol.PushStatus `json:"status"`
	Error         string              `json:"error,omitempty"`
}

// txFailure is a transaction refused before reaching the broker. The
// reference makes an invalid operation a failed transaction (HTTP 200,
// success:false), not a 400: Go tests treat any HTTP error as fatal.
type txFailure struct{ msg string }

func (e *txFailure) Error() string { return e.msg }

// POST /api/v1/transaction
func (s *Server) handleTransaction(w http.ResponseWriter, r *http.Request, c caller) {
	body, err := s.readObject(w, r)
	if err != nil {
		writeReqError(w, err)
		return
	}
	ops, leases, err := s.parseTransaction(body)
	if err != nil {
		var tf *txFailure
		if errors.As(err, &tf) {
			id, _ := uuid.NewV7()
			writeJSON(w, http.StatusOK, txResponse{TransactionID: id.String(), Error: &tf.msg, Results: []any{}})
			return
		}
		writeReqError(w, err)
		return
	}
	res, err := s.b.Transaction(r.Context(), c.tenant, c.sub, ops, leases)
	if err != nil {
		s.brokerError(w, r, "transaction", err)
		return
	}
	out := txResponse{TransactionID: res.TransactionID, Success: res.Success, Results: []any{}}
	if !res.Success {
		msg := res.Error
		if msg == "" {
			msg = "transaction failed"
		}
		out.Error = &msg
	}
	for _, t := range res.Results {
		if t.Type == "push" {
			pr := txPushResult{
				Index: t.Index, Type: t.Type, Success: t.Success, TransactionID: t.TransactionID,
				MessageID: nullable(t.MessageID), PartitionID: nullable(t.PartitionID),
				QueueName: t.QueueName, Status: t.Status, Error: t.Error,
			}
			out.Results = append(out.Results, pr)
			continue
		}
		out.Results = append(out.Results, txAckResult{
			Index: t.Index, Type: t.Type, Success: t.Success, TransactionID: t.TransactionID,
			Error: nullable(t.Error), DLQ: t.DLQ,
		})
	}
	writeJSON(w, http.StatusOK, out)
}

// parseTransaction returns a *reqError for a malformed request (400/413)
// and a *txFailure for an invalid operation.
func (s *Server) parseTransaction(body object) ([]broker.TxOp, []string, error) {
	var tm *tooManyError
	raws, ok, err := body.array("operations", s.cfg.MaxTxOps)
	if errors.As(err, &tm) {
		return nil, nil, tooLarge(fmt.Sprintf("too many operations: %d (max %d per transaction)", tm.n, tm.max))
	}
	if err != nil || !ok {
		return nil, nil, badRequest("operations array required")
	}
	if len(raws) == 0 {
		return nil, nil, badRequest("operations array cannot be empty")
	}

	var leases []string
	leaseRaws, _, err := body.array("requiredLeases", s.cfg.MaxTxOps)
	if errors.As(err, &tm) {
		return nil, nil, tooLarge(fmt.Sprintf("too many requiredLeases: %d (max %d)", tm.n, tm.max))
	}
	if err != nil {
		return nil, nil, badRequest("requiredLeases must be an array of strings")
	}
	for _, lr := range leaseRaws {
		var id string
		if err := json.Unmarshal(lr, &id); err != nil {
			return nil, nil, badRequest("requiredLeases must be an array of strings")
		}
		if id == "" {
			continue // Go may send empty ids for messages without a lease
		}
		if err := checkName("requiredLeases item", id); err != nil {
			return nil, nil, err
		}
		leases = append(leases, id)
	}

	ops := make([]broker.TxOp, 0, len(raws))
	pushed := 0
	for i, raw := range raws {
		o, err := parseObject(raw, "operation")
		if err != nil || isNull(raw) {
			return nil, nil, &txFailure{fmt.Sprintf("operation %d must be an object", i)}
		}
		typ, _, _ := o.str("type")
		switch typ {
		case "ack":
			// Each ack op names its own group; default __QUEUE_MODE__.
			it, err := parseAckItem(o, broker.QueueMode)
			if err != nil {
				return nil, nil, &txFailure{fmt.Sprintf("operation %d: %v", i, err)}
			}
			ops = append(ops, broker.TxOp{Type: "ack", Ack: it})
		case "push":
			items, ok, err := o.array("items", s.cfg.MaxPushItems-pushed)
			if errors.As(err, &tm) {
				return nil, nil, tooLarge(fmt.Sprintf("too many pushed items (max %d per transaction)", s.cfg.MaxPushItems))
			}
			if err != nil || !ok {
				return nil, nil, &txFailure{fmt.Sprintf("operation %d: items array is required", i)}
			}
			pushed += len(items)
			parsed, err := parsePushItems(items)
			if err != nil {
				return nil, nil, &txFailure{fmt.Sprintf("operation %d: %v", i, err)}
			}
			ops = append(ops, broker.TxOp{Type: "push", Items: parsed})
		default:
			return nil, nil, &txFailure{fmt.Sprintf("operation %d: unknown operation type %q (want \"ack\" or \"push\")", i, truncate(typ, 64))}
		}
	}
	return ops, leases, nil
}
