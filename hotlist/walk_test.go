package hotlist

import (
	"testing"
	"time"
)

// A walk cannot be left half-ended or ended twice: End is idempotent, a
// stale walk's End cannot end the ring's next walk, and OpenWalks counts
// what is still open (the broker's tests assert it drops to zero).
func TestWalkEndIsIdempotent(t *testing.T) {
	h := newHL()
	r := h.Register(KeyOf("t", "q"), "g", QueueOpts{}, base)
	w := h.BeginReseed(r, base, true)
	if w == nil || w.Ring() != r || h.OpenWalks() != 1 {
		t.Fatalf("claim: walk %v, open %d", w, h.OpenWalks())
	}
	if h.BeginReseed(r, base, true) != nil || h.BeginPrune(r, base) != nil || len(h.DueReseeds(at(time.Hour))) != 0 {
		t.Fatal("a ring with an open walk was claimed again")
	}
	w.End(true, true, at(time.Second))
	next := r.nextReseed
	w.End(false, false, at(time.Hour)) // ignored
	if !w.Ended() || h.OpenWalks() != 0 || h.Stats().Reseeds != 1 || r.nextReseed != next || r.Cold() {
		t.Fatalf("second End changed the ring: open %d, reseeds %d, next %d -> %d, cold %v",
			h.OpenWalks(), h.Stats().Reseeds, next, r.nextReseed, r.Cold())
	}
	// The stale walk neither reseeds nor ends the ring's next walk.
	w2 := h.BeginReseed(r, at(2*time.Second), true)
	if w2 == nil {
		t.Fatal("no claim after End")
	}
	if w.Reseed([]ReseedRow{{Name: "a"}}, at(2*time.Second)) != 0 {
		t.Fatal("an ended walk applied rows")
	}
	w.End(true, true, at(2*time.Second))
	if h.BeginReseed(r, at(2*time.Second), true) != nil || h.OpenWalks() != 1 {
		t.Fatal("a stale walk's End ended the ring's next walk")
	}
	if w2.Reseed([]ReseedRow{{Name: "a"}}, at(2*time.Second)) != 1 {
		t.Fatal("the open walk did not apply its row")
	}
	w2.End(false, false, at(3*time.Second))
	if h.OpenWalks() != 0 {
		t.Fatalf("open walks %d after every End", h.OpenWalks())
	}
}

// Every claim hands out a walk that OpenWalks counts until it ends.
func TestOpenWalksCountsEveryClaim(t *testing.T) {
	h := newHL(func(c *Config) { c.SuspectUnconfirmed = 1 })
	var ws []*Walk
	for i, q := range []string{"a", "b", "c"} {
		r := h.Register(KeyOf("t", q), "g", QueueOpts{}, base)
		switch i {
		case 0:
			ws = append(ws, h.BeginReseed(r, base, false)) // cold
		case 1:
			markN(h, r.Key(), SourceRemote, base, "p")
			ws = append(ws, h.BeginPrune(r, at(time.Second)))
		}
	}
	ws = append(ws, h.DueReseeds(at(time.Hour))...) // the third ring
	if len(ws) != 3 || h.OpenWalks() != 3 {
		t.Fatalf("walks %d, open %d", len(ws), h.OpenWalks())
	}
	for _, w := range ws {
		if w == nil {
			t.Fatal("a claim returned no walk")
		}
		w.End(true, true, at(time.Hour))
	}
	if h.OpenWalks() != 0 {
		t.Fatalf("open walks %d", h.OpenWalks())
	}
}
