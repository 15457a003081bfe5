// Package jsonscan reads JSON in one pass for the fast decoders of the hot
// path: the push and batch-ack request bodies (package api) and the owner's
// answers to forwarded pushes and acks (package forward). Reflection-based
// decoding costs several times the CPU there. A fast decoder built on it
// declines (reports not ok) wherever it cannot be sure of giving exactly
// its general path's result (api's field-by-field decoders, encoding/json
// in forward), and its caller then decodes the same bytes that way; so a
// fast decoder can only be faster, never different.
package jsonscan

import (
	"bytes"
	"encoding/binary"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// Scanner reads a JSON document in one pass. It checks everything it
// passes over against the JSON grammar encoding/json accepts, so a
// document it gets through is one encoding/json can decode too. Where a
// value could decode differently (invalid UTF-8, which encoding/json
// replaces; deep nesting) a method fails; keys that might match a known
// one differently (escaped, non-ASCII or case-folded) are for the caller
// to decline, with UnknownKey.
type Scanner struct {
	Data []byte // the document
	Pos  int    // the next byte to read
	WS   bool   // whitespace was skipped since the caller last reset it (payload compaction)
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

// SkipWS skips whitespace, noting in WS that it did.
func (s *Scanner) SkipWS() {
	for s.Pos < len(s.Data) {
		switch s.Data[s.Pos] {
		case ' ', '\t', '\n', '\r':
			s.Pos++
			s.WS = true
		default:
			return
		}
	}
}

// Peek skips whitespace and returns the next byte, 0 at the end.
func (s *Scanner) Peek() byte {
	s.SkipWS()
	if s.Pos >= len(s.Data) {
		return 0
	}
	return s.Data[s.Pos]
}

// AtEnd tells whether only whitespace is left.
func (s *Scanner) AtEnd() bool {
	s.SkipWS()
	return s.Pos == len(s.Data)
}

// Str reads the string starting at Pos (a '"') and returns its raw content,
// between the quotes, and whether it holds escapes. It fails on what JSON
// forbids in a string and on invalid UTF-8.
func (s *Scanner) Str() (raw []byte, escaped, ok bool) {
	d := s.Data
	start := s.Pos + 1
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
			s.Pos = i + 1
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
// byte is, which is all Str asks.
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

// Literal reads lit (true, false, null) at Pos.
func (s *Scanner) Literal(lit string) bool {
	if !bytes.HasPrefix(s.Data[s.Pos:], []byte(lit)) {
		return false
	}
	s.Pos += len(lit)
	return true
}

// Null reads a null at Pos if there is one.
func (s *Scanner) Null() bool {
	return s.Pos < len(s.Data) && s.Data[s.Pos] == 'n' && s.Literal("null")
}

// Number reads a JSON number at Pos. What may follow it is checked by the
// enclosing object or array.
func (s *Scanner) Number() bool {
	d, i := s.Data, s.Pos
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
	s.Pos = i
	return true
}

// Int reads a JSON number at Pos that is an integer literal (no fraction
// or exponent) within int's range, as encoding/json decodes into an int;
// any other number fails, without checking what follows it.
func (s *Scanner) Int() (int, bool) {
	start := s.Pos
	if !s.Number() {
		return 0, false
	}
	n, err := strconv.ParseInt(string(s.Data[start:s.Pos]), 10, strconv.IntSize)
	return int(n), err == nil
}

func digits(d []byte, i int) int {
	for i < len(d) && '0' <= d[i] && d[i] <= '9' {
		i++
	}
	return i
}

// Member reads the next member's key of an object whose '{' (first) or
// previous member has been read, and the ':' after it; Pos is then at the
// value. done is true at the closing '}', which is consumed.
func (s *Scanner) Member(first bool) (key []byte, escaped, done, ok bool) {
	c := s.Peek()
	if c == '}' {
		s.Pos++
		return nil, false, true, true
	}
	if !first {
		if c != ',' {
			return nil, false, false, false
		}
		s.Pos++
		c = s.Peek()
	}
	if c != '"' {
		return nil, false, false, false
	}
	if key, escaped, ok = s.Str(); !ok || s.Peek() != ':' {
		return nil, false, false, false
	}
	s.Pos++
	s.SkipWS()
	return key, escaped, false, true
}

// Element moves to the next element of an array whose '[' (first) or
// previous element has been read; Pos is then at the element. done is
// true at the closing ']', which is consumed.
func (s *Scanner) Element(first bool) (done, ok bool) {
	c := s.Peek()
	if c == ']' {
		s.Pos++
		return true, true
	}
	if !first {
		if c != ',' {
			return false, false
		}
		s.Pos++
		s.SkipWS()
	}
	return false, true
}

// SkipValue reads and checks the value at Pos; depth is its nesting.
func (s *Scanner) SkipValue(depth int) bool {
	if s.Pos >= len(s.Data) || depth > maxScanDepth {
		return false
	}
	switch s.Data[s.Pos] {
	case '"':
		_, _, ok := s.Str()
		return ok
	case '{':
		s.Pos++
		for first := true; ; first = false {
			_, _, done, ok := s.Member(first)
			if !ok {
				return false
			}
			if done {
				return true
			}
			if !s.SkipValue(depth + 1) {
				return false
			}
		}
	case '[':
		s.Pos++
		for first := true; ; first = false {
			done, ok := s.Element(first)
			if !ok {
				return false
			}
			if done {
				return true
			}
			if !s.SkipValue(depth + 1) {
				return false
			}
		}
	case 't':
		return s.Literal("true")
	case 'f':
		return s.Literal("false")
	case 'n':
		return s.Literal("null")
	}
	return s.Number()
}

// UnknownKey is called for a key the decoder does not use. It tells
// whether the document must be left to the general path: the key is
// escaped or not ASCII (it might decode, or fold, to a known key: in
// encoding/json U+017F folds to 's' and U+212A to 'k'), or it equals a
// known key but for case (encoding/json matches those; api's field-by-field
// path does not, and declining them keeps one behaviour on both paths).
func UnknownKey(key []byte, escaped bool, known ...string) bool {
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

// EstimateItems sizes an array's slice from its first element: the bytes
// left from that element on, over its length. Batches are usually of
// similar elements, so one allocation replaces a series of doublings; a
// wrong guess only means append grows the slice as usual.
func EstimateItems(left, first, maxItems int) int {
	return min(left/max(first, 1)+1, maxItems)
}

// Field is the raw value of a string field as last seen in an object
// (encoding/json keeps the last of duplicate keys); Set is false when it
// was absent or null.
type Field struct {
	Raw     []byte // the string's content between its quotes, escapes undecoded
	Escaped bool   // Raw holds escapes
	Set     bool   // a string was seen (the last occurrence was not null)
}

// StringField reads a string or null at Pos into f; anything else fails.
func (s *Scanner) StringField(f *Field) bool {
	if s.Null() {
		*f = Field{}
		return true
	}
	if s.Pos >= len(s.Data) || s.Data[s.Pos] != '"' {
		return false
	}
	raw, escaped, ok := s.Str()
	*f = Field{Raw: raw, Escaped: escaped, Set: ok}
	return ok
}

// Text returns the field's decoded value, "" when unset. prev is the same
// field of the previous element: an equal value reuses its string instead
// of allocating (queue, partition, lease and group names repeat in a
// batch). ok is false for an escape encoding/json would turn into U+FFFD.
func (f *Field) Text(prev string) (string, bool) {
	switch {
	case !f.Set:
		return "", true
	case f.Escaped:
		return Unquote(f.Raw)
	case string(f.Raw) == prev:
		return prev, true
	}
	return string(f.Raw), true
}

// Unquote decodes the content of a JSON string that Str has checked. It
// fails on a \u escape that is not a valid code point or surrogate pair:
// encoding/json replaces those by U+FFFD, and the fast decoders leave that to it.
func Unquote(raw []byte) (string, bool) {
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

// Array reads a JSON array of objects at Pos with item, which gets the
// element before (whose names it may reuse). An empty array is an empty,
// non-nil slice; more than maxItems elements fail, before the extra one is
// decoded. The slice is sized once, from the first element's length.
func Array[T any](s *Scanner, maxItems int, item func(prev T) (T, bool)) ([]T, bool) {
	if s.Pos >= len(s.Data) || s.Data[s.Pos] != '[' {
		return nil, false
	}
	s.Pos++
	items := []T{} // [] is an empty batch, not an absent array
	var prev T
	for first := true; ; first = false {
		done, ok := s.Element(first)
		if !ok {
			return nil, false
		}
		if done {
			return items, true
		}
		if len(items) == maxItems {
			return nil, false
		}
		start := s.Pos
		it, ok := item(prev)
		if !ok {
			return nil, false
		}
		if len(items) == 0 {
			items = make([]T, 0, EstimateItems(len(s.Data)-start, s.Pos-start, maxItems))
		}
		items = append(items, it)
		prev = it
	}
}
