package api

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"time"

	"queen-node/protocol"
)

// Reads whose rows carry user-sized JSON (payloads, state values, trace
// data) are bounded in bytes by Config.MaxReadBytes, in SQL (package pg),
// and written by an answer: the rows are held once, as the broker read
// them, and their encoding goes to the client as it is made, through a
// 64 KiB buffer, never as a second copy of the whole answer (writeJSON
// encodes whole, and encoding/json re-validates and copies every
// json.RawMessage on the way). docs/api.md, "Read answers".

// answerRowOverhead is what a row's keys, ids and times add to its JSON
// values, for the write deadline (as pop's 400 bytes per message).
const answerRowOverhead = protocol.RowEnvelopeBytes

// answer writes one 200 JSON answer.
type answer struct {
	bw      *bufio.Writer
	obj     bytes.Buffer  // one small value's encoding
	enc     *json.Encoder // into obj, HTML escaping off
	scratch []byte        // one string's encoding
	err     error         // the first write error; later writes are skipped
}

// startAnswer writes the status and headers of a 200 JSON answer of about
// size bytes. As for a pop answer, the client has WriteTimeout plus the
// time to take size bytes at PopMinReadRate: a slow but steady link gets a
// large answer, a client that stops reading does not hold the handler.
func (s *Server) startAnswer(w http.ResponseWriter, size int64) *answer {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	d := s.cfg.WriteTimeout + time.Duration(float64(size)/float64(s.cfg.PopMinReadRate)*float64(time.Second))
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(d))
	a := &answer{bw: bufio.NewWriterSize(w, 64<<10)}
	a.enc = json.NewEncoder(&a.obj)
	a.enc.SetEscapeHTML(false) // as writeJSON: values come back as stored
	return a
}

// write writes p; bufio hands a large p to the client without copying it.
func (a *answer) write(p []byte) {
	if a.err == nil {
		_, a.err = a.bw.Write(p)
	}
}

func (a *answer) str(s string) {
	if a.err == nil {
		_, a.err = a.bw.WriteString(s)
	}
}

// encode encodes v, a small value, into a.obj and returns its encoding
// without the encoder's newline; nil on failure (a.err is set).
func (a *answer) encode(v any) []byte {
	a.obj.Reset()
	if err := a.enc.Encode(v); err != nil {
		if a.err == nil {
			a.err = err
		}
		return nil
	}
	return bytes.TrimSuffix(a.obj.Bytes(), []byte("\n"))
}

// rawField is a JSON value written verbatim under key: a payload or a
// value as stored (nil = null). compact compacts it first (jsonb text has
// spaces; meant for small values).
type rawField struct {
	key     string
	val     []byte
	compact bool
}

// open writes v, a struct that encodes as a non-empty JSON object, without
// its closing brace, so fields can follow.
func (a *answer) open(v any) {
	b := a.encode(v)
	if b == nil {
		return
	}
	a.write(bytes.TrimSuffix(b, []byte("}")))
}

// object writes v (as open) followed by fields, and closes it.
func (a *answer) object(v any, fields ...rawField) {
	a.open(v)
	for _, f := range fields {
		a.str(`,"`)
		a.str(f.key) // keys are this package's constants: nothing to escape
		a.str(`":`)
		a.raw(f.val, f.compact)
	}
	a.str("}")
}

// raw writes a JSON value verbatim; nil is null.
func (a *answer) raw(v []byte, compact bool) {
	switch {
	case len(v) == 0:
		a.str("null")
	case compact:
		a.obj.Reset()
		if err := json.Compact(&a.obj, v); err != nil {
			a.write(v) // stored JSON, valid: not reached
			return
		}
		a.write(a.obj.Bytes())
	default:
		a.write(v)
	}
}

// jsonString writes s as a JSON string.
func (a *answer) jsonString(s string) {
	a.scratch = appendJSONString(a.scratch[:0], s)
	a.write(a.scratch)
}

// finish flushes the answer; an error means the client may not have it all.
func (a *answer) finish() error {
	if a.err == nil {
		a.err = a.bw.Flush()
	}
	return a.err
}
