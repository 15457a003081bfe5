package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// docNode is one key of the status document: a value (a leaf row) or an
// object of further keys in table order.
type docNode struct {
	key   string
	value any
	kids  []*docNode
}

func (n *docNode) child(key string) *docNode {
	for _, k := range n.kids {
		if k.key == key {
			return k
		}
	}
	k := &docNode{key: key}
	n.kids = append(n.kids, k)
	return k
}

// write appends n as JSON. Keys keep the table's order (a map would sort
// them), so the document reads node first, as it always has.
func (n *docNode) write(buf *bytes.Buffer, enc *json.Encoder) error {
	if n.kids == nil {
		return enc.Encode(n.value) // Encode adds a newline; Indent drops it later
	}
	buf.WriteByte('{')
	for i, k := range n.kids {
		if i > 0 {
			buf.WriteByte(',')
		}
		if err := enc.Encode(k.key); err != nil {
			return err
		}
		buf.WriteByte(':')
		if err := k.write(buf, enc); err != nil {
			return fmt.Errorf("%s: %w", k.key, err)
		}
	}
	buf.WriteByte('}')
	return nil
}

// EncodeStatus writes s as the GET /status document (docs/operations.md),
// indented for curl, from Table.
func EncodeStatus(s *Snapshot) ([]byte, error) {
	root := &docNode{kids: []*docNode{}}
	for _, r := range Table {
		if r.Field == nil {
			continue // a series derived from another field
		}
		n := root
		for _, key := range strings.Split(r.Status, ".") {
			n = n.child(key)
		}
		n.value = r.Field.get(s)
	}
	var compact bytes.Buffer
	enc := json.NewEncoder(&compact)
	enc.SetEscapeHTML(false)
	if err := root.write(&compact, enc); err != nil {
		return nil, fmt.Errorf("encode status: %w", err)
	}
	var out bytes.Buffer
	if err := json.Indent(&out, compact.Bytes(), "", "  "); err != nil {
		return nil, fmt.Errorf("indent status: %w", err)
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}

// DecodeStatus reads a GET /status document back into a Snapshot through
// Table (the `queen-node status` CLI). Fields the document lacks stay
// zero, so an older node's document still reads.
func DecodeStatus(doc []byte) (*Snapshot, error) {
	var root map[string]json.RawMessage
	if err := json.Unmarshal(doc, &root); err != nil {
		return nil, err
	}
	s := &Snapshot{}
	for _, r := range Table {
		if r.Field == nil {
			continue
		}
		raw, ok := lookup(root, r.Status)
		if !ok || string(raw) == "null" {
			continue
		}
		if err := r.Field.set(s, raw); err != nil {
			return nil, fmt.Errorf("%s: %w", r.Status, err)
		}
	}
	return s, nil
}

// lookup finds a dotted path in a decoded object.
func lookup(obj map[string]json.RawMessage, path string) (json.RawMessage, bool) {
	head, rest, nested := strings.Cut(path, ".")
	raw, ok := obj[head]
	if !ok || !nested {
		return raw, ok
	}
	var inner map[string]json.RawMessage
	if json.Unmarshal(raw, &inner) != nil {
		return nil, false
	}
	return lookup(inner, rest)
}
