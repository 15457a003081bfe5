package api

import (
	"bytes"
	"encoding/binary"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"queen-node/broker"
)

// bodyScanner reads a JSON request body in one pass for the fast decoders
// of push and batch ack (fastPushItems, fastAckItems). It checks everything
// it passes over against the JSON grammar encoding/json accepts, so a body
// it gets through is one the field-by-field path can decode too. Where it
// cannot be sure of giving that path's exact result (invalid UTF-8, which
// encoding/json replaces; escaped or case-folded keys; deep nesting) it
// fails, and the caller declines: the field-by-field path then answers.
type bodyScanner struct {
	data []byte
	pos  int
	ws   bool // whitespace was skipped since last reset (payload compaction)
}

// maxScanDepth bounds nesting, far below encoding/json's 10000, so that the
// scanner never accepts what encoding/json refuses for depth.
const maxScanDepth = 1000

// plainByte marks the string bytes that need no further look: printable
// ASCII other than '"' and '\\'.
var plainByte = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

func (s *bodyScanner) skipWS() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
			s.ws = true
		default:
			return
		}
	}
}

// peek skips whitespace and returns the next byte, 0 at the end.
func (s *bodyScanner) peek() byte {
	s.skipWS()
	if s.pos >= len(s.data) {
		return 0
	}
	return s.data[s.pos]
}

// atEnd tells whether only whitespace is left.
func (s *bodyScanner) atEnd() bool {
	s.skipWS()
	return s.pos == len(s.data)
}

// str reads the string starting at pos (a '"') and returns its raw content,
// between the quotes, and whether it holds escapes. It fails on what JSON
// forbids in a string and on invalid UTF-8.
func (s *bodyScanner) str() (raw []byte, escaped, ok bool) {
	d := s.data
	start := s.pos + 1
	i := start
	for {
		// Eight bytes at a time while none needs a look: most of a body is
		// plain string content (payload text, ids).
		for i+8 <= len(d) {
			v := binary.LittleEndian.Uint64(d[i:])
			if (below(v, 0x20)|below(v^'"'*ones, 1)|below(v^'\\'*ones, 1)|v)&highs != 0 {
				break // a control byte, '"', '\\' or a byte >= 0x80 (v's own high bits)
			}
			i += 8
		}
		for i < len(d) && plainByte[d[i]] {
			i++
		}
		if i >= len(d) {
			return nil, false, false
		}
		switch c := d[i]; {
		case c == '"':
			s.pos = i + 1
			return d[start:i], escaped, true
		case c == '\\':
			escaped = true
			if i+1 >= len(d) {
				return nil, false, false
			}
			switch d[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(d) || hex4(d[i+2:i+6]) < 0 {
					return nil, false, false
				}
				i += 6
			default:
				return nil, false, false
			}
		case c < 0x20:
			return nil, false, false
		default:
			r, size := utf8.DecodeRune(d[i:])
			if r == utf8.RuneError && size == 1 {
				return nil, false, false
			}
			i += size
		}
	}
}

const ones, highs = 0x0101010101010101, 0x8080808080808080

// below sets the high bit of some byte of v when a byte of v is below n
// (n <= 0x80; "hasless" from Bit Twiddling Hacks): exact as to whether any
// byte is, which is all str asks.
func below(v uint64, n byte) uint64 {
	return (v - uint64(n)*ones) & ^v & highs
}

// hex4 decodes four hex digits, -1 if they are not.
func hex4(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return -1
		}
		r = r<<4 | rune(c)
	}
	return r
}

// literal reads lit (true, false, null) at pos.
func (s *bodyScanner) literal(lit string) bool {
	if !bytes.HasPrefix(s.data[s.pos:], []byte(lit)) {
		return false
	}
	s.pos += len(lit)
	return true
}

// null reads a null at pos if there is one.
func (s *bodyScanner) null() bool {
	return s.pos < len(s.data) && s.data[s.pos] == 'n' && s.literal("null")
}

// number reads a JSON number at pos. What may follow it is checked by the
// enclosing object or array.
func (s *bodyScanner) number() bool {
	d, i := s.data, s.pos
	if i < len(d) && d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && '1' <= d[i] && d[i] <= '9':
		i = digits(d, i)
	default:
		return false
	}
	if i < len(d) && d[i] == '.' {
		j := digits(d, i+1)
		if j == i+1 {
			return false
		}
		i = j
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		j := digits(d, i)
		if j == i {
			return false
		}
		i = j
	}
	s.pos = i
	return true
}

func digits(d []byte, i int) int {
	for i < len(d) && '0' <= d[i] && d[i] <= '9' {
		i++
	}
	return i
}

// member reads the next member's key of an object whose '{' (first) or
// previous member has been read, and the ':' after it; pos is then at the
// value. done is true at the closing '}', which is consumed.
func (s *bodyScanner) member(first bool) (key []byte, escaped, done, ok bool) {
	c := s.peek()
	if c == '}' {
		s.pos++
		return nil, false, true, true
	}
	if !first {
		if c != ',' {
			return nil, false, false, false
		}
		s.pos++
		c = s.peek()
	}
	if c != '"' {
		return nil, false, false, false
	}
	if key, escaped, ok = s.str(); !ok || s.peek() != ':' {
		return nil, false, false, false
	}
	s.pos++
	s.skipWS()
	return key, escaped, false, true
}

// element moves to the next element of an array whose '[' (first) or
// previous element has been read; pos is then at the element. done is
// true at the closing ']', which is consumed.
func (s *bodyScanner) element(first bool) (done, ok bool) {
	c := s.peek()
	if c == ']' {
		s.pos++
		return true, true
	}
	if !first {
		if c != ',' {
			return false, false
		}
		s.pos++
		s.skipWS()
	}
	return false, true
}

// skipValue reads and checks the value at pos; depth is its nesting.
func (s *bodyScanner) skipValue(depth int) bool {
	if s.pos >= len(s.data) || depth > maxScanDepth {
		return false
	}
	switch s.data[s.pos] {
	case '"':
		_, _, ok := s.str()
		return ok
	case '{':
		s.pos++
		for first := true; ; first = false {
			_, _, done, ok := s.member(first)
			if !ok {
				return false
			}
			if done {
				return true
			}
			if !s.skipValue(depth + 1) {
				return false
			}
		}
	case '[':
		s.pos++
		for first := true; ; first = false {
			done, ok := s.element(first)
			if !ok {
				return false
			}
			if done {
				return true
			}
			if !s.skipValue(depth + 1) {
				return false
			}
		}
	case 't':
		return s.literal("true")
	case 'f':
		return s.literal("false")
	case 'n':
		return s.literal("null")
	}
	return s.number()
}

// unknownKey is called for a key the decoder does not use. It tells
// whether the body must be left to the field-by-field path: the key is
// escaped or not ASCII (it might decode to a known key), or it equals a
// known key but for case (the old struct decoder matched those; keeping
// them declined keeps one behaviour).
func unknownKey(key []byte, escaped bool, known ...string) bool {
	if escaped {
		return true
	}
	for _, c := range key {
		if c >= utf8.RuneSelf {
			return true
		}
	}
	for _, k := range known {
		if len(k) == len(key) && strings.EqualFold(k, string(key)) {
			return true
		}
	}
	return false
}

// estimateItems sizes an array's slice from its first element: the bytes
// left from that element on, over its length. Batches are usually of
// similar elements, so one allocation replaces a series of doublings; a
// wrong guess only means append grows the slice as usual.
func estimateItems(left, first, maxItems int) int {
	return min(left/max(first, 1)+1, maxItems)
}

// jsonField is the raw value of a string field as last seen in an object
// (encoding/json keeps the last of duplicate keys); set is false when it
// was absent or null.
type jsonField struct {
	raw     []byte
	escaped bool
	set     bool
}

// stringField reads a string or null at pos into f; anything else fails.
func (s *bodyScanner) stringField(f *jsonField) bool {
	if s.null() {
		*f = jsonField{}
		return true
	}
	if s.pos >= len(s.data) || s.data[s.pos] != '"' {
		return false
	}
	raw, escaped, ok := s.str()
	*f = jsonField{raw: raw, escaped: escaped, set: ok}
	return ok
}

// text returns the field's decoded value, "" when unset. prev is the same
// field of the previous element: an equal value reuses its string instead
// of allocating (queue, partition, lease and group names repeat in a
// batch). ok is false for an escape encoding/json would turn into U+FFFD.
func (f *jsonField) text(prev string) (string, bool) {
	switch {
	case !f.set:
		return "", true
	case f.escaped:
		return unquote(f.raw)
	case string(f.raw) == prev:
		return prev, true
	}
	return string(f.raw), true
}

// name is text for a name field: ok also requires what checkName does, and
// allows "" (unset too) when optional.
func (f *jsonField) name(prev string, optional bool) (string, bool) {
	v, ok := f.text(prev)
	switch {
	case !ok || len(v) > broker.MaxNameBytes:
		return "", false
	case v == "":
		return "", optional
	case f.escaped:
		return v, validText(v)
	}
	return v, true // str has checked it is UTF-8 without control bytes (NUL)
}

// unquote decodes the content of a JSON string that str has checked. It
// fails on a \u escape that is not a valid code point or surrogate pair:
// encoding/json replaces those by U+FFFD, and the fast path leaves that to it.
func unquote(raw []byte) (string, bool) {
	var b strings.Builder
	b.Grow(len(raw))
	for i := 0; i < len(raw); {
		c := raw[i]
		if c != '\\' {
			b.WriteByte(c)
			i++
			continue
		}
		switch e := raw[i+1]; e {
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'u':
			r := hex4(raw[i+2:])
			if utf16.IsSurrogate(r) {
				if i+12 > len(raw) || raw[i+6] != '\\' || raw[i+7] != 'u' {
					return "", false
				}
				if r = utf16.DecodeRune(r, hex4(raw[i+8:])); r == utf8.RuneError {
					return "", false
				}
				i += 6
			}
			b.WriteRune(r)
			i += 6
			continue
		default: // '"', '\\', '/'
			b.WriteByte(e)
		}
		i += 2
	}
	return b.String(), true
}

// scanArray reads a JSON array of objects at pos with item, which gets the
// element before (whose names it may reuse). An empty array is an empty,
// non-nil slice; more than maxItems elements fail, before the extra one is
// decoded. The slice is sized once, from the first element's length.
func scanArray[T any](s *bodyScanner, maxItems int, item func(prev T) (T, bool)) ([]T, bool) {
	if s.pos >= len(s.data) || s.data[s.pos] != '[' {
		return nil, false
	}
	s.pos++
	items := []T{} // [] is an empty batch, not an absent array
	var prev T
	for first := true; ; first = false {
		done, ok := s.element(first)
		if !ok {
			return nil, false
		}
		if done {
			return items, true
		}
		if len(items) == maxItems {
			return nil, false
		}
		start := s.pos
		it, ok := item(prev)
		if !ok {
			return nil, false
		}
		if len(items) == 0 {
			items = make([]T, 0, estimateItems(len(s.data)-start, s.pos-start, maxItems))
		}
		items = append(items, it)
		prev = it
	}
}
