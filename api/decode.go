package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"queen-node/broker"
)

// Request bodies are decoded into maps of raw fields rather than structs:
// The Queen API needs null == absent, unknown fields ignored, and per-field error
// messages for wrong types, which struct decoding cannot give.

// object is one decoded JSON object; values are raw and not yet validated.
type object map[string]json.RawMessage

// readObject reads the request body (bounded by MaxBodyBytes) as a JSON
// object. An empty body is an empty object: clients send `{}` or nothing
// on some POSTs, and the field checks then give the precise error.
func (s *Server) readObject(w http.ResponseWriter, r *http.Request) (object, error) {
	body, err := s.readBody(w, r)
	if err != nil {
		return nil, err
	}
	return parseObject(body, "request body")
}

// readBody reads the request body, bounded by MaxBodyBytes.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	limit := s.cfg.MaxBodyBytes
	if r.ContentLength > limit {
		return nil, tooLarge(fmt.Sprintf("request body too large (limit %d bytes)", limit))
	}
	// Sized from Content-Length when given, so a large body is not copied
	// through io.ReadAll's doublings.
	var buf bytes.Buffer
	if r.ContentLength > 0 {
		buf.Grow(int(r.ContentLength) + bytes.MinRead) // ReadFrom wants MinRead spare bytes to read EOF without growing
	}
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, limit))
	body := buf.Bytes()
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, tooLarge(fmt.Sprintf("request body too large (limit %d bytes)", limit))
		}
		if errors.Is(err, errBodyTimeout) {
			// The connection cannot be read any more: close it after the answer.
			w.Header().Set("Connection", "close")
			return nil, &reqError{status: http.StatusRequestTimeout,
				msg: fmt.Sprintf("request body not received within %v", s.cfg.BodyTimeout)}
		}
		return nil, badRequest("cannot read request body: " + err.Error())
	}
	return body, nil
}

// parseObject decodes raw as a JSON object; null and empty are empty.
func parseObject(raw []byte, what string) (object, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return object{}, nil
	}
	if raw[0] != '{' {
		if !json.Valid(raw) {
			return nil, badRequest("invalid JSON in " + what)
		}
		return nil, badRequest(what + " must be a JSON object")
	}
	var o object
	if err := json.Unmarshal(raw, &o); err != nil {
		return nil, badRequest("invalid JSON in " + what + ": " + err.Error())
	}
	if o == nil {
		o = object{}
	}
	return o, nil
}

// raw returns the field's raw JSON, or nil when absent or null.
func (o object) raw(key string) json.RawMessage {
	v, ok := o[key]
	if !ok || isNull(v) {
		return nil
	}
	return v
}

func isNull(v json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(v), []byte("null")) }

// str returns a string field; ok is false when absent or null. A value of
// another JSON type is an error.
func (o object) str(key string) (val string, ok bool, err error) {
	v := o.raw(key)
	if v == nil {
		return "", false, nil
	}
	if err := json.Unmarshal(v, &val); err != nil {
		return "", false, badRequest(key + " must be a string")
	}
	return val, true, nil
}

// boolean returns a boolean field; ok is false when absent or null.
func (o object) boolean(key string) (val bool, ok bool, err error) {
	v := o.raw(key)
	if v == nil {
		return false, false, nil
	}
	if err := json.Unmarshal(v, &val); err != nil {
		return false, false, badRequest(key + " must be a boolean")
	}
	return val, true, nil
}

// integer returns an integer field within [min, max]; ok is false when
// absent or null. Integral floats (300.0, 3e2) are accepted because JSON
// does not distinguish them.
func (o object) integer(key string, min, max int64) (val int, ok bool, err error) {
	v := o.raw(key)
	if v == nil {
		return 0, false, nil
	}
	want := badRequest(fmt.Sprintf("%s must be an integer from %d to %d", key, min, max))
	// json.Number would also accept a quoted "300"; JSON types matter here.
	if c := bytes.TrimSpace(v)[0]; c != '-' && (c < '0' || c > '9') {
		return 0, false, want
	}
	var n json.Number
	if err := json.Unmarshal(v, &n); err != nil {
		return 0, false, want
	}
	i, err := strconv.ParseInt(n.String(), 10, 64)
	if err != nil {
		f, ferr := strconv.ParseFloat(n.String(), 64)
		if ferr != nil || f != math.Trunc(f) || f < float64(min) || f > float64(max) {
			return 0, false, want
		}
		i = int64(f)
	}
	if i < min || i > max {
		return 0, false, want
	}
	return int(i), true, nil
}

// array returns an array field's elements; ok is false when absent or null.
// More than maxElems elements is a *tooManyError, found by counting before
// any element is decoded: a request's memory stays a small multiple of its
// body however many tiny elements it holds.
func (o object) array(key string, maxElems int) (elems []json.RawMessage, ok bool, err error) {
	v := o.raw(key)
	if v == nil {
		return nil, false, nil
	}
	if n, isArray := countElements(v); !isArray {
		return nil, false, badRequest(key + " must be an array")
	} else if n > maxElems {
		return nil, false, &tooManyError{n: n, max: maxElems}
	}
	if err := json.Unmarshal(v, &elems); err != nil {
		return nil, false, badRequest(key + " must be an array")
	}
	if elems == nil {
		elems = []json.RawMessage{}
	}
	return elems, true, nil
}

// tooManyError is an array longer than its limit; callers word the 413.
type tooManyError struct{ n, max int }

func (e *tooManyError) Error() string { return fmt.Sprintf("%d elements (max %d)", e.n, e.max) }

// countElements counts the elements of the JSON array data without
// decoding them; isArray is false when data is not an array. data must be
// valid JSON (every caller's input has passed json.Unmarshal's validation);
// on other input the count is meaningless but the call is safe.
func countElements(data []byte) (n int, isArray bool) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '[' {
		return 0, false
	}
	depth, inString, escaped, empty := 0, false, false, true
	for _, c := range data {
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		case '"':
			inString = true
		case '[', '{':
			depth++
		case ']', '}':
			depth--
			continue
		case ',':
			if depth == 1 {
				n++
			}
			continue
		}
		if depth >= 1 && !(depth == 1 && c == '[') {
			empty = false // a value starts inside the outer array
		}
	}
	if !empty {
		n++
	}
	return n, true
}

// checkName enforces the name rule (docs/api.md, "Input bounds"): non-empty, at most 255 bytes; and what
// PostgreSQL text can hold: valid UTF-8 without NUL (a path segment or a
// query string can carry either).
func checkName(kind, name string) error {
	if name == "" {
		return badRequest(kind + " must not be empty")
	}
	if len(name) > broker.MaxNameBytes {
		return badRequest(fmt.Sprintf("%s is too long (%d bytes, max %d)", kind, len(name), broker.MaxNameBytes))
	}
	if !validText(name) {
		return badRequest(kind + " must be valid UTF-8 without NUL characters")
	}
	return nil
}

// validText tells whether PostgreSQL can store s as text.
func validText(s string) bool {
	return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0
}

// optName reads an optional string field that, when non-empty, must be a
// valid name. "" or absent returns "".
func (o object) optName(key string) (string, error) {
	v, _, err := o.str(key)
	if err != nil {
		return "", err
	}
	if v == "" {
		return "", nil
	}
	return v, checkName(key, v)
}

// group reads a consumerGroup field; absent, null or "" is QueueMode.
func (o object) group(key string) (string, error) {
	g, err := o.optName(key)
	if err != nil || g != "" {
		return g, err
	}
	return broker.QueueMode, nil
}

// maxErrorText bounds the failure text an ack stores in the DLQ.
const maxErrorText = 4096

// errorText reads an ack's `error`.
func (o object) errorText(key string) string {
	v := o.raw(key)
	if v == nil {
		return ""
	}
	return errorText(v)
}

// errorText is an ack's `error` as stored, from its raw JSON (not null).
// Any non-string JSON is kept as its JSON text rather than refused: it is
// informational only.
func errorText(v json.RawMessage) string {
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		s = string(bytes.TrimSpace(v))
	}
	// Informational text: make it storable rather than refuse the ack.
	s = strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", "\uFFFD"), "\uFFFD")
	return truncate(s, maxErrorText)
}

// parseTime accepts RFC 3339 / ISO-8601 with or without fractional seconds,
// with Z or an offset. A space instead of '+' is repaired: an unencoded
// '+' in a query string decodes as a space.
func parseTime(s string) (time.Time, bool) {
	s = strings.TrimSpace(s)
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil && strings.Contains(s, " ") {
		t, err = time.Parse(time.RFC3339Nano, strings.Replace(s, " ", "+", 1))
	}
	return t, err == nil
}

// queryBool reads a query flag as the reference does: true for "true" or "1", false otherwise.
func queryBool(q url.Values, key string, def bool) bool {
	if !q.Has(key) {
		return def
	}
	v := q.Get(key)
	return v == "true" || v == "1"
}

// queryInt falls back to def when absent or unparseable (reference behaviour).
func queryInt(q url.Values, key string, def int) int {
	v := q.Get(key)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		return def
	}
	return n
}

func clamp(v, lo, hi int) int {
	return max(lo, min(v, hi))
}

// canonicalUUID validates a trace id; the stored form is canonical.
func canonicalUUID(s string) (string, bool) {
	u, err := uuid.Parse(s)
	if err != nil {
		return "", false
	}
	return u.String(), true
}

// compactJSON returns the canonical compact form of a payload; numbers and
// strings keep their exact text.
func compactJSON(raw json.RawMessage) (json.RawMessage, error) {
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return nil, err
	}
	return json.RawMessage(buf.Bytes()), nil
}
