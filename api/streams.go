package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"unicode/utf8"

	"queen-node/broker"
	"queen-node/reads"
)

// The /streams/v1 routes serve Queen's stream processors (docs/api.md,
// "Streams"): query registration, state reads and the atomic cycle.

// StreamReads is the registration and state read of the /streams/v1
// routes; *reads.Service implements it. The cycle is Broker's.
type StreamReads interface {
	RegisterStreamQuery(ctx context.Context, tenant string, q reads.StreamQuery) (reads.StreamRegistration, error)
	StreamState(ctx context.Context, tenant, queryID, partitionID string, f reads.StreamStateFilter, maxBytes int64) ([]reads.StreamStateRow, error)
}

// Input bounds of the streams routes (docs/api.md, "Streams").
const (
	MaxStreamKeyBytes  = 4096 // a state key
	MaxStreamHashBytes = 1024 // config_hash (a SHA-256 hex is 64)
	MaxStreamKeys      = 10000
)

func (s *Server) registerStreams() {
	s.route("POST", "/streams/v1/queries", AccessReadWrite, s.handleStreamQuery)
	// A read: a read-only token may inspect state (e.g. a dashboard).
	s.route("POST", "/streams/v1/state/get", AccessReadOnly, s.handleStreamState)
	s.route("POST", "/streams/v1/cycle", AccessReadWrite, s.handleStreamCycle)
}

type streamQueryResponse struct {
	Success bool   `json:"success"`
	QueryID string `json:"query_id"`
	Name    string `json:"name"`
	Fresh   bool   `json:"fresh"`
	Reset   bool   `json:"reset"`
}

type streamFailure struct {
	Success bool   `json:"success"`
	Error   string `json:"error"`
}

// POST /streams/v1/queries
func (s *Server) handleStreamQuery(w http.ResponseWriter, r *http.Request, c caller) {
	o, err := s.readObject(w, r)
	if err != nil {
		writeReqError(w, err)
		return
	}
	q, err := parseStreamQuery(o)
	if err != nil {
		writeReqError(w, err)
		return
	}
	reg, err := s.r.RegisterStreamQuery(r.Context(), c.tenant, q)
	if errors.Is(err, reads.ErrStreamConfigMismatch) {
		writeJSON(w, http.StatusConflict, streamFailure{Error: err.Error()})
		return
	}
	if err != nil {
		s.brokerError(w, r, "stream register", err)
		return
	}
	writeJSON(w, http.StatusOK, streamQueryResponse{Success: true, QueryID: reg.QueryID, Name: q.Name,
		Fresh: reg.Fresh, Reset: reg.Reset})
}

func parseStreamQuery(o object) (reads.StreamQuery, error) {
	var q reads.StreamQuery
	var err error
	if q.Name, err = reqName(o, "name"); err != nil {
		return q, err
	}
	if q.SourceQueue, err = reqName(o, "source_queue"); err != nil {
		return q, err
	}
	sink, err := o.optName("sink_queue")
	if err != nil {
		return q, err
	}
	if sink != "" {
		q.SinkQueue = &sink
	}
	h, ok, err := o.str("config_hash")
	if err != nil {
		return q, err
	}
	if !ok || h == "" || len(h) > MaxStreamHashBytes || !validText(h) {
		return q, badRequest(fmt.Sprintf("config_hash must be a non-empty string of at most %d bytes", MaxStreamHashBytes))
	}
	q.ConfigHash = h
	if q.Reset, _, err = o.boolean("reset"); err != nil {
		return q, err
	}
	return q, nil
}

// reqName reads a required name field (checkName's rules).
func reqName(o object, key string) (string, error) {
	v, _, err := o.str(key)
	if err != nil {
		return "", err
	}
	return v, checkName(key, v)
}

// reqUUID reads a required UUID field in canonical form.
func reqUUID(o object, key string) (string, error) {
	v, ok, err := o.str(key)
	if err != nil {
		return "", err
	}
	canon, valid := canonicalUUID(v)
	if !ok || !valid {
		return "", badRequest(key + " must be a UUID")
	}
	return canon, nil
}

// streamKey checks a state key: any text PostgreSQL stores byte-exact.
func streamKey(k string) error {
	if len(k) > MaxStreamKeyBytes {
		return badRequest(fmt.Sprintf("key is too long (%d bytes, max %d)", len(k), MaxStreamKeyBytes))
	}
	if !validText(k) {
		return badRequest("key must be valid UTF-8 without NUL characters")
	}
	return nil
}

// POST /streams/v1/state/get
func (s *Server) handleStreamState(w http.ResponseWriter, r *http.Request, c caller) {
	o, err := s.readObject(w, r)
	if err != nil {
		writeReqError(w, err)
		return
	}
	qid, pid, f, err := parseStreamStateGet(o)
	if err != nil {
		writeReqError(w, err)
		return
	}
	rows, err := s.r.StreamState(r.Context(), c.tenant, qid, pid, f, s.cfg.MaxReadBytes)
	switch {
	case errors.Is(err, reads.ErrStreamNotFound):
		writeJSON(w, http.StatusNotFound, streamFailure{Error: err.Error()})
		return
	case errors.Is(err, reads.ErrStreamStateTooLarge):
		writeJSON(w, http.StatusUnprocessableEntity, streamFailure{Error: err.Error()})
		return
	case errors.Is(err, reads.ErrStreamStateTooManyBytes):
		// All or nothing: the client cannot page, and would take part of
		// the state for all of it (docs/api.md, "Read answers").
		writeJSON(w, http.StatusRequestEntityTooLarge, streamFailure{Error: fmt.Sprintf(
			"state read larger than %d bytes (QUEEN_READ_MAX_BYTES): %v", s.cfg.MaxReadBytes, err)})
		return
	case err != nil:
		s.brokerError(w, r, "stream state", err)
		return
	}
	var size int64
	for _, row := range rows {
		size += int64(len(row.Key) + len(row.Value) + 20)
	}
	a := s.startAnswer(w, size)
	a.str(`{"success":true,"rows":[`)
	for i, row := range rows {
		if i > 0 {
			a.str(",")
		}
		a.str(`{"key":`)
		a.jsonString(row.Key)
		a.str(`,"value":`)
		a.raw(row.Value, false) // the stored JSON text, verbatim
		a.str("}")
	}
	a.str("]}\n")
	if err := a.finish(); err != nil {
		s.log.Debug("state answer not delivered", "error", err)
	}
}

func parseStreamStateGet(o object) (qid, pid string, f reads.StreamStateFilter, err error) {
	if qid, err = reqUUID(o, "query_id"); err != nil {
		return
	}
	if pid, err = reqUUID(o, "partition_id"); err != nil {
		return
	}
	// null and [] both mean "no key filter" (the client sends either).
	keys, _, err := o.array("keys", MaxStreamKeys)
	if err != nil {
		var tm *tooManyError
		if errors.As(err, &tm) {
			err = tooLarge("keys: " + tm.Error())
		}
		return
	}
	for _, raw := range keys {
		var k string
		if json.Unmarshal(raw, &k) != nil {
			err = badRequest("keys must be strings")
			return
		}
		if err = streamKey(k); err != nil {
			return
		}
		f.Keys = append(f.Keys, k)
	}
	prefix, _, err := o.str("key_prefix")
	if err != nil {
		return
	}
	if prefix != "" {
		if err = streamKey(prefix); err != nil {
			return
		}
		f.KeyPrefix = &prefix
	}
	ripe, ok, err := o.integer("ripe_at_or_before", math.MinInt64, math.MaxInt64)
	if err != nil {
		return
	}
	if ok {
		v := int64(ripe)
		f.RipeAtOrBefore = &v
	}
	return
}

type streamCycleResponse struct {
	Success bool `json:"success"`
	Acked   int  `json:"acked"`
	Pushed  int  `json:"pushed"`
}

// POST /streams/v1/cycle
func (s *Server) handleStreamCycle(w http.ResponseWriter, r *http.Request, c caller) {
	o, err := s.readObject(w, r)
	if err != nil {
		writeReqError(w, err)
		return
	}
	cyc, err := s.parseStreamCycle(o)
	if err != nil {
		writeReqError(w, err)
		return
	}
	res, err := s.b.StreamCycle(r.Context(), c.tenant, c.sub, cyc)
	if errors.Is(err, broker.ErrStreamNotFound) {
		writeJSON(w, http.StatusNotFound, streamFailure{Error: err.Error()})
		return
	}
	if err != nil {
		s.brokerError(w, r, "stream cycle", err)
		return
	}
	if !res.Success {
		// Refused, nothing applied; a retry cannot succeed, so not a 5xx
		// (which the client retries).
		writeJSON(w, http.StatusConflict, streamFailure{Error: res.Error})
		return
	}
	writeJSON(w, http.StatusOK, streamCycleResponse{Success: true, Acked: res.Acked, Pushed: res.Pushed})
}

func (s *Server) parseStreamCycle(o object) (broker.StreamCycle, error) {
	var c broker.StreamCycle
	var err error
	if c.QueryID, err = reqUUID(o, "query_id"); err != nil {
		return c, err
	}
	if c.PartitionID, err = reqUUID(o, "partition_id"); err != nil {
		return c, err
	}
	if c.Group, err = reqName(o, "consumer_group"); err != nil {
		return c, err
	}
	ops, _, err := o.array("state_ops", s.cfg.MaxTxOps)
	if err != nil {
		return c, tooMany("state_ops", err)
	}
	for i, raw := range ops {
		op, err := parseStateOp(raw)
		if err != nil {
			return c, badRequest(fmt.Sprintf("state_ops[%d]: %s", i, err.Error()))
		}
		c.Ops = append(c.Ops, op)
	}
	items, _, err := o.array("push_items", s.cfg.MaxPushItems)
	if err != nil {
		return c, tooMany("push_items", err)
	}
	if c.Push, err = parsePushItems(items); err != nil {
		return c, badRequest("push_items: " + err.Error())
	}
	if c.ReleaseLease, _, err = o.boolean("release_lease"); err != nil {
		return c, err
	}
	if raw := o.raw("ack"); raw != nil {
		a, err := parseObject(raw, "ack")
		if err != nil {
			return c, err
		}
		ack := &broker.StreamAck{}
		if ack.LeaseID, err = reqName(a, "leaseId"); err != nil {
			return c, badRequest("ack." + err.Error())
		}
		if ack.TransactionID, err = a.optName("transactionId"); err != nil {
			return c, badRequest("ack." + err.Error())
		}
		st, _, err := a.str("status")
		if err != nil || (st != "" && st != "completed") {
			return c, badRequest(`ack.status must be "completed"`)
		}
		n, ok, err := a.integer("count", 0, math.MaxInt32)
		if err != nil {
			return c, badRequest("ack." + err.Error())
		}
		if !ok && !c.ReleaseLease {
			return c, badRequest("ack.count is required when release_lease is false")
		}
		ack.Count = n
		c.Ack = ack
	}
	return c, nil
}

// tooMany turns an array's *tooManyError into a 413 naming the field.
func tooMany(field string, err error) error {
	var tm *tooManyError
	if errors.As(err, &tm) {
		return tooLarge(field + ": " + tm.Error())
	}
	return err
}

func parseStateOp(raw json.RawMessage) (broker.StreamStateOp, error) {
	var op broker.StreamStateOp
	o, err := parseObject(raw, "op")
	if err != nil || isNull(raw) {
		return op, errors.New("must be an object")
	}
	typ, _, err := o.str("type")
	if err != nil {
		return op, err
	}
	switch typ {
	case "upsert":
	case "delete":
		op.Delete = true
	default:
		return op, fmt.Errorf("unknown type %q (want upsert or delete); nothing was applied", typ)
	}
	k, ok, err := o.str("key")
	if err != nil || !ok {
		return op, errors.New("key must be a string")
	}
	if err := streamKey(k); err != nil {
		return op, err
	}
	op.Key = k
	if !op.Delete {
		// An upsert without value (the client omits a nil one) stores JSON
		// null, which reads back as the nil it was.
		v := bytes.TrimSpace(o["value"])
		if len(v) == 0 {
			v = []byte("null")
		}
		if !utf8.Valid(v) {
			return op, errors.New("value must be valid UTF-8")
		}
		op.Value = string(v)
	}
	return op, nil
}
