package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"queen-node/reads"
)

// TraceReads is the trace calls (docs/api.md, "Traces"); *reads.Service
// implements it.
type TraceReads interface {
	RecordTrace(ctx context.Context, tenant string, req reads.TraceRequest) (id string, found bool, err error)
	MessageTraces(ctx context.Context, tenant, partitionID, transactionID string, p reads.ReadPage) (reads.TracePage, error)
	TracesByName(ctx context.Context, tenant, name string, p reads.ReadPage) (reads.TracePage, error)
	TraceNames(ctx context.Context, tenant string, limit, offset int) ([]reads.TraceName, int64, error)
}

// Trace input and page bounds (docs/api.md, "Traces").
const (
	maxTraceNames      = 32       // names per trace
	maxTraceNameBytes  = 255      // bytes per name
	maxTraceEventBytes = 64       // bytes of eventType
	maxTraceDataBytes  = 64 << 10 // compact JSON bytes of data
	maxMessageTraces   = 1000     // traces per page of one message's (oldest first)
	defaultByNameLimit = 100
	defaultNamesLimit  = 50
	maxTraceLimit      = 1000
	maxTraceOffset     = 100000 // OFFSET walks the index: bound the walk
)

func (s *Server) registerTraces() {
	s.route("POST", "/api/v1/traces", AccessReadWrite, s.handleRecordTrace)
	s.route("GET", "/api/v1/traces/names", AccessReadOnly, s.handleTraceNames)
	s.route("GET", "/api/v1/traces/by-name/{name}", AccessReadOnly, s.handleTracesByName)
	s.route("GET", "/api/v1/traces/{partitionId}/{transactionId}", AccessReadOnly, s.handleMessageTraces)
}

type recordTraceResponse struct {
	Success bool   `json:"success"`
	TraceID string `json:"traceId"`
}

// POST /api/v1/traces
func (s *Server) handleRecordTrace(w http.ResponseWriter, r *http.Request, c caller) {
	body, err := s.readObject(w, r)
	if err != nil {
		writeReqError(w, err)
		return
	}
	req, err := parseTrace(body)
	if err != nil {
		writeReqError(w, err)
		return
	}
	id, found, err := s.r.RecordTrace(r.Context(), c.tenant, req)
	if err != nil {
		s.brokerError(w, r, "record trace", err)
		return
	}
	if !found {
		writeError(w, http.StatusNotFound, "Message not found")
		return
	}
	writeJSON(w, http.StatusCreated, recordTraceResponse{Success: true, TraceID: id})
}

func parseTrace(body object) (reads.TraceRequest, error) {
	var req reads.TraceRequest
	tx, _, err := body.str("transactionId")
	if err != nil {
		return req, err
	}
	pid, _, err := body.str("partitionId")
	if err != nil {
		return req, err
	}
	if tx == "" || pid == "" {
		return req, badRequest("transactionId and partitionId are required")
	}
	if err := checkName("transactionId", tx); err != nil {
		return req, err
	}
	canon, ok := canonicalUUID(pid)
	if !ok {
		return req, badRequest("partitionId must be a UUID")
	}
	req.TransactionID, req.PartitionID = tx, canon
	if req.ConsumerGroup, err = body.group("consumerGroup"); err != nil {
		return req, err
	}
	ev, _, err := body.str("eventType")
	if err != nil {
		return req, err
	}
	if ev == "" {
		ev = "info"
	}
	if len(ev) > maxTraceEventBytes || !validText(ev) {
		return req, badRequest(fmt.Sprintf("eventType must be valid UTF-8 of at most %d bytes", maxTraceEventBytes))
	}
	req.EventType = ev

	data := body.raw("data")
	if data == nil {
		return req, badRequest("data is required")
	}
	if data, err = compactJSON(data); err != nil {
		return req, badRequest("data must be JSON")
	}
	if len(data) > maxTraceDataBytes {
		return req, tooLarge(fmt.Sprintf("data is too large (%d bytes, max %d)", len(data), maxTraceDataBytes))
	}
	// jsonb cannot hold NUL; refuse it here rather than fail in PostgreSQL.
	if bytes.Contains(data, []byte(`\u0000`)) {
		return req, badRequest("data must not contain NUL characters")
	}
	req.Data = data

	req.Names, err = parseTraceNames(body.raw("traceNames"))
	return req, err
}

// parseTraceNames reads traceNames: null, one string or an array of
// strings (as the reference accepts); duplicates are dropped.
func parseTraceNames(v json.RawMessage) ([]string, error) {
	if v == nil {
		return nil, nil
	}
	var names []string
	var one string
	if json.Unmarshal(v, &one) == nil {
		names = []string{one}
	} else {
		o := object{"traceNames": v}
		elems, _, err := o.array("traceNames", maxTraceNames)
		if err != nil {
			if _, many := err.(*tooManyError); many {
				return nil, badRequest(fmt.Sprintf("traceNames: at most %d names", maxTraceNames))
			}
			return nil, badRequest("traceNames must be null, a string or an array of strings")
		}
		for _, e := range elems {
			var n string
			if err := json.Unmarshal(e, &n); err != nil {
				return nil, badRequest("traceNames must be null, a string or an array of strings")
			}
			names = append(names, n)
		}
	}
	out := names[:0]
	seen := map[string]bool{}
	for _, n := range names {
		if n == "" || len(n) > maxTraceNameBytes || !validText(n) {
			return nil, badRequest(fmt.Sprintf("each trace name must be 1 to %d bytes of UTF-8 without NUL", maxTraceNameBytes))
		}
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out, nil
}

// traceJSON is a trace as the reference returns it (snake_case keys); its
// data, and by name its message_payload, are written after these fields
// (answer.object).
type traceJSON struct {
	ID            string   `json:"id"`
	TransactionID string   `json:"transaction_id,omitempty"` // by-name only
	PartitionID   string   `json:"partition_id,omitempty"`   // by-name only
	EventType     string   `json:"event_type"`
	ConsumerGroup string   `json:"consumer_group"`
	WorkerID      string   `json:"worker_id"`
	CreatedAt     string   `json:"created_at"`
	QueueName     *string  `json:"queue_name,omitempty"`
	PartitionName *string  `json:"partition_name,omitempty"`
	TraceNames    []string `json:"trace_names"`
}

// traceHead is a trace list's answer before its traces. Truncated: the
// byte bound (Config.MaxReadBytes) ended the page before limit; the rest
// starts at NextOffset (docs/api.md, "Read answers").
type traceHead struct {
	Total      *int64      `json:"total,omitempty"`      // by name
	Pagination *pagination `json:"pagination,omitempty"` // by name
	Truncated  bool        `json:"truncated"`
	NextOffset *int        `json:"nextOffset,omitempty"`
}

// writeTraces writes a page of traces; byName adds each trace's message.
func (s *Server) writeTraces(w http.ResponseWriter, r *http.Request, head traceHead, traces []reads.Trace, byName bool) {
	var size int64
	for _, t := range traces {
		size += int64(len(t.Data)+len(t.Payload)) + answerRowOverhead
	}
	a := s.startAnswer(w, size)
	a.open(head)
	a.str(`,"traces":[`)
	for i, t := range traces {
		if i > 0 {
			a.str(",")
		}
		j := traceJSON{ID: t.ID, EventType: t.EventType, ConsumerGroup: t.ConsumerGroup,
			WorkerID: t.WorkerID, CreatedAt: fmtMilli(t.CreatedAt), TraceNames: t.Names}
		if j.TraceNames == nil {
			j.TraceNames = []string{}
		}
		// data is jsonb, whose text has spaces: compacted, at most 64 KiB.
		data := rawField{key: "data", val: t.Data, compact: true}
		if !byName {
			a.object(j, data)
			continue
		}
		j.TransactionID, j.PartitionID = t.TransactionID, t.PartitionID
		j.QueueName, j.PartitionName = &t.Queue, &t.Partition
		a.object(j, data, rawField{key: "message_payload", val: t.Payload}) // nil (gone) is null
	}
	a.str("]}\n")
	if err := a.finish(); err != nil {
		s.log.Debug("traces answer not delivered", "path", r.URL.Path, "error", err)
	}
}

// GET /api/v1/traces/{partitionId}/{transactionId}?limit&offset
func (s *Server) handleMessageTraces(w http.ResponseWriter, r *http.Request, c caller) {
	pid, ok := canonicalUUID(r.PathValue("partitionId"))
	if !ok {
		writeError(w, http.StatusBadRequest, "partitionId must be a UUID")
		return
	}
	tx := r.PathValue("transactionId")
	if err := checkName("transactionId", tx); err != nil {
		writeReqError(w, err)
		return
	}
	limit, offset, err := pageParams(r, maxMessageTraces, maxMessageTraces, maxTraceOffset)
	if err != nil {
		writeReqError(w, err)
		return
	}
	page, err := s.r.MessageTraces(r.Context(), c.tenant, pid, tx,
		reads.ReadPage{Limit: limit, Offset: offset, MaxBytes: s.cfg.MaxReadBytes})
	if err != nil {
		s.brokerError(w, r, "message traces", err)
		return
	}
	s.writeTraces(w, r, traceHead{Truncated: page.Truncated, NextOffset: nextOffset(page.Truncated, offset, len(page.Traces))},
		page.Traces, false)
}

// pageParams reads limit (clamped to [1, maxTraceLimit]) and offset (400
// past maxTraceOffset: a silently clamped offset would return the wrong page).
func pageParams(r *http.Request, defLimit, maxLimit, maxOffset int) (limit, offset int, err error) {
	q := r.URL.Query()
	limit = clamp(queryInt(q, "limit", defLimit), 1, maxLimit)
	offset = max(queryInt(q, "offset", 0), 0)
	if offset > maxOffset {
		return 0, 0, badRequest(fmt.Sprintf("offset must be at most %d", maxOffset))
	}
	return limit, offset, nil
}

type traceNameJSON struct {
	TraceName    string `json:"trace_name"`
	TraceCount   int64  `json:"trace_count"`
	MessageCount int64  `json:"message_count"`
	LastSeen     string `json:"last_seen"`
}

// GET /api/v1/traces/by-name/{name}
func (s *Server) handleTracesByName(w http.ResponseWriter, r *http.Request, c caller) {
	name := r.PathValue("name")
	if name == "" || len(name) > maxTraceNameBytes || !validText(name) {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("trace name must be 1 to %d bytes of UTF-8 without NUL", maxTraceNameBytes))
		return
	}
	limit, offset, err := pageParams(r, defaultByNameLimit, maxTraceLimit, maxTraceOffset)
	if err != nil {
		writeReqError(w, err)
		return
	}
	page, err := s.r.TracesByName(r.Context(), c.tenant, name,
		reads.ReadPage{Limit: limit, Offset: offset, MaxBytes: s.cfg.MaxReadBytes})
	if err != nil {
		s.brokerError(w, r, "traces by name", err)
		return
	}
	s.writeTraces(w, r, traceHead{Total: &page.Total, Pagination: &pagination{Limit: limit, Offset: offset},
		Truncated: page.Truncated, NextOffset: nextOffset(page.Truncated, offset, len(page.Traces))}, page.Traces, true)
}

// GET /api/v1/traces/names
func (s *Server) handleTraceNames(w http.ResponseWriter, r *http.Request, c caller) {
	limit, offset, err := pageParams(r, defaultNamesLimit, maxTraceLimit, maxTraceOffset)
	if err != nil {
		writeReqError(w, err)
		return
	}
	names, total, err := s.r.TraceNames(r.Context(), c.tenant, limit, offset)
	if err != nil {
		s.brokerError(w, r, "trace names", err)
		return
	}
	out := make([]traceNameJSON, len(names))
	for i, n := range names {
		out[i] = traceNameJSON{TraceName: n.Name, TraceCount: n.TraceCount, MessageCount: n.MessageCount,
			LastSeen: fmtMilli(n.LastSeen)}
	}
	writeJSON(w, http.StatusOK, map[string]any{"trace_names": out, "total": total,
		"pagination": pagination{Limit: limit, Offset: offset}})
}
