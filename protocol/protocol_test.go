package protocol

import "testing"

// Unknown subscription modes mean all, as in the reference
// (docs/api.md, "Semantics"); only the known spellings are ok.
func TestParseSubMode(t *testing.T) {
	for _, c := range []struct {
		in   string
		mode SubMode
		ok   bool
	}{
		{"", SubAll, true}, {"all", SubAll, true}, {"new", SubNew, true}, {"new-only", SubNew, true},
		{"from_beginning", SubAll, false}, {"NEW", SubAll, false}, {"from", SubAll, false},
	} {
		if mode, ok := ParseSubMode(c.in); mode != c.mode || ok != c.ok {
			t.Errorf("ParseSubMode(%q) = %q, %v; want %q, %v", c.in, mode, ok, c.mode, c.ok)
		}
	}
}
