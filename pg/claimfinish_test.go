package pg

import (
	"strings"
	"testing"
)

// finish puts a claim's messages in offset order, whatever order the
// statement's plan returned them in, and refuses an offset returned twice.
func TestFinishOrdersAndRefusesRepeats(t *testing.T) {
	a := PopArgs{Names: []string{"p"}, Budget: 10}
	h := fastHead{pid: "x", last: 9, nread: 3, nkept: 3}
	out := h.outcome(a)
	for _, off := range []int64{7, 5, 9} {
		out.Messages = append(out.Messages, PopMessage{Off: off})
	}
	if err := h.finish(out, a); err != nil {
		t.Fatal(err)
	}
	for i, want := range []int64{5, 7, 9} {
		if got := out.Messages[i].Off; got != want {
			t.Fatalf("message %d at offset %d, want %d", i, got, want)
		}
	}
	if !out.Verdicts[0].Drained {
		t.Fatal("served up to the watermark, not drained")
	}

	out = h.outcome(a)
	for _, off := range []int64{5, 9, 5} {
		out.Messages = append(out.Messages, PopMessage{Off: off})
	}
	if err := h.finish(out, a); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("an offset returned twice: %v, want an error", err)
	}
}
