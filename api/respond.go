package api

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"queen-node/broker"
	"queen-node/reads"
)

// Timestamp layouts of responses, as in the reference: UTC with Z; microseconds for
// message createdAt, milliseconds elsewhere.
const (
	layoutMicro = "2006-01-02T15:04:05.000000Z"
	layoutMilli = "2006-01-02T15:04:05.000Z"
)

func fmtMicro(t time.Time) string { return t.UTC().Format(layoutMicro) }
func fmtMilli(t time.Time) string { return t.UTC().Format(layoutMilli) }

// fmtMilliOrNull renders the zero time as JSON null.
func fmtMilliOrNull(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := fmtMilli(t)
	return &s
}

// nullable renders "" as JSON null.
func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// respBufs recycles writeJSON's buffers: a push or batch-ack answer of 100
// items is 20-40 KB, which a fresh buffer grew to by doubling on every
// request. Buffers past maxPooledResp are left to the GC.
var respBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

const maxPooledResp = 1 << 20

// writeJSON encodes v fully before writing, so an encoding failure is a
// clean 500 rather than a truncated body. HTML escaping is off so payloads
// come back byte-for-byte as stored.
func writeJSON(w http.ResponseWriter, status int, v any) {
	buf := respBufs.Get().(*bytes.Buffer)
	buf.Reset()
	defer func() {
		if buf.Cap() <= maxPooledResp {
			respBufs.Put(buf) // Write has returned: nothing holds its bytes
		}
	}()
	if a, ok := v.(jsonAppender); ok {
		buf.Write(a.appendJSON(buf.AvailableBuffer()))
		buf.WriteByte('\n') // as Encode ends
	} else if err := encodeJSON(buf, v); err != nil {
		status = http.StatusInternalServerError
		buf.Reset()
		buf.WriteString(`{"error":"internal error: encode response"}` + "\n")
	}
	w.Header().Set("Content-Type", "application/json")
	// A Content-Length keeps a push or batch-ack answer (past 2 KB) from
	// being chunked: one write system call instead of three or four.
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

func encodeJSON(buf *bytes.Buffer, v any) error {
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

type errorBody struct {
	Error string `json:"error"`
}

// writeError writes the error body, {"error": ...} (docs/api.md, "Semantics").
func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, errorBody{Error: msg})
}

// reqError is a validation failure found by this package.
type reqError struct {
	status int
	msg    string
}

func (e *reqError) Error() string { return e.msg }

func badRequest(msg string) error { return &reqError{status: http.StatusBadRequest, msg: msg} }
func tooLarge(msg string) error   { return &reqError{status: http.StatusRequestEntityTooLarge, msg: msg} }

// writeReqError answers a validation error from this package.
func writeReqError(w http.ResponseWriter, err error) {
	var re *reqError
	if errors.As(err, &re) {
		writeError(w, re.status, re.msg)
		return
	}
	writeError(w, http.StatusBadRequest, err.Error())
}

// brokerError answers an error returned by the Broker or the Reads: user errors keep
// their status, an unreachable database is 503, the rest is a logged 500.
func (s *Server) brokerError(w http.ResponseWriter, r *http.Request, op string, err error) {
	switch {
	case errors.Is(err, broker.ErrQueueDeleted):
		writeError(w, http.StatusConflict, broker.ErrQueueDeleted.Error())
	case errors.Is(err, broker.ErrBufferItemTooLarge):
		writeError(w, http.StatusRequestEntityTooLarge, err.Error()) // could never be replayed (broker/maintenance.go)
	case errors.Is(err, broker.ErrMaintenanceRefused):
		writeError(w, http.StatusServiceUnavailable, err.Error()) // a full push buffer, a transaction during push maintenance
	case errors.Is(err, broker.ErrUnavailable), errors.Is(err, reads.ErrUnavailable): // one value (pg's); both named for the reader
		// The broker reports the outage itself; per request this is noise.
		s.log.Debug("database unavailable", "op", op, "error", err)
		writeError(w, http.StatusServiceUnavailable, "database unavailable")
	case r.Context().Err() != nil && errors.Is(err, context.Canceled):
		// The client went away; nobody reads this answer.
		s.log.Debug("request canceled", "op", op, "path", r.URL.Path)
		writeError(w, http.StatusServiceUnavailable, "request canceled")
	default:
		s.internalError(w, r, "request failed", "op", op, "error", err)
	}
}

// internalError logs a 500's detail under a fresh error id and answers only
// the id: the detail (SQL text, table names, a panic) is the operator's, not
// the client's (docs/api.md, "Semantics", storage failure).
func (s *Server) internalError(w http.ResponseWriter, r *http.Request, msg string, kv ...any) {
	id := errorID()
	s.log.Error(msg, append([]any{"error_id", id, "method", r.Method, "path", r.URL.Path}, kv...)...)
	writeError(w, http.StatusInternalServerError, "internal error "+id+"; the node's log has the detail under error_id="+id)
}

// errorID is 8 random bytes in hex: enough to find one line in the logs.
func errorID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// truncate cuts s to at most n bytes without splitting a UTF-8 sequence.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
