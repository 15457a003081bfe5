package hotlist

import (
	"testing"
	"time"
)

// The pop path's early reseeds (BeginReseed on an empty ring) count against
// the node-wide budget like the early loop's: without it, every polled
// empty ring ran one walk per EarlyReseedMin under a lossy link, so a node
// with thousands of polled rings ran thousands of walks a second whatever
// QUEEN_HOTLIST_EARLY_RESEED_RATE said (docs/hotlist.md, "Rate limits").
func TestEarlyReseedPopPathWithinNodeBudget(t *testing.T) {
	h := newHL(func(c *Config) { c.EarlyReseedRate = 2 })
	rs := earlyRings(h, 5) // all empty, none parked: left to their pops
	h.HintsLost(at(time.Second))
	if got := claimed(h.EarlyReseeds(at(time.Second), nil)); len(got) != 0 {
		t.Fatalf("claimed %d empty unparked rings", len(got))
	}
	ran := 0
	for _, r := range rs {
		if claim(h.BeginReseed(r, at(time.Second), false)) {
			ran++
			endReseed(r, true, at(time.Second))
		}
	}
	if ran != 2 {
		t.Fatalf("pops ran %d early reseeds at once, want the node budget of 2", ran)
	}
	// The rest are still due: their pops run them as the bucket refills.
	ran = 0
	for _, r := range rs {
		if claim(h.BeginReseed(r, at(3*time.Second), false)) {
			ran++
			endReseed(r, true, at(3*time.Second))
		}
	}
	if ran != 2 {
		t.Fatalf("with the bucket full again pops ran %d, want 2", ran)
	}
	// A due floor or a forced reseed is not an early one: no token needed.
	if !claim(h.BeginReseed(rs[4], at(3*time.Second), true)) {
		t.Fatal("a forced reseed was refused for want of a token")
	}
}

// A pop refused an early reseed for want of a token must not leave the ring
// to the floor: the early loop looks again once a token is back and claims
// the ring if the pop parked on it.
func TestEarlyReseedPopRefusedIsRetriedByTheLoop(t *testing.T) {
	h := newHL(func(c *Config) { c.EarlyReseedRate = 1 })
	rs := earlyRings(h, 2)
	kicks := 0
	h.SetEarlyWake(func() { kicks++ })
	h.HintsLost(at(time.Second))
	if kicks != 1 {
		t.Fatalf("a loss signal called the wake hook %d times, want 1", kicks)
	}
	if got := claimed(h.EarlyReseeds(at(time.Second), nil)); len(got) != 0 {
		t.Fatalf("claimed %d empty unparked rings", len(got))
	}
	if !claim(h.BeginReseed(rs[0], at(time.Second), false)) {
		t.Fatal("the first pop did not get the token")
	}
	endReseed(rs[0], true, at(time.Second))
	before := kicks
	if claim(h.BeginReseed(rs[1], at(time.Second), false)) {
		t.Fatal("the second pop ran without a token")
	}
	// A loop sleeping until NextEarly must hear of the refusal: the hook
	// is called and NextEarly names the token's return.
	if kicks == before {
		t.Fatal("the refused pop did not call the wake hook: a sleeping early loop would never run it")
	}
	if next := h.NextEarly(); next.IsZero() || next.After(at(2*time.Second)) {
		t.Fatalf("NextEarly after the refusal: %v, want by the token's return", next)
	}
	// The second pop parks on its ring; no new loss arrives.
	parked := func(key Key) bool { return key == rs[1].Key() }
	if got := claimed(h.EarlyReseeds(at(time.Second+500*time.Millisecond), parked)); len(got) != 0 {
		t.Fatalf("claimed %d before a token is back", len(got))
	}
	got := claimed(h.EarlyReseeds(at(2*time.Second), parked))
	if len(got) != 1 || got[0] != rs[1] {
		t.Fatalf("the parked ring refused at its pop was not claimed once a token was back: %v", ringKeys(got))
	}
}

// The churn pass (broker/churn.go) claims every ring with a cutoff far
// ahead of now. The claim must record the real start of the walk: a walk
// recorded as begun 45 s in the future counted every loss signalled in the
// next 45 s as covered, so no early reseed ran after a membership change
// until then.
func TestChurnClaimDoesNotCoverLaterLosses(t *testing.T) {
	h := newHL()
	r := earlyRings(h, 1)[0]
	markN(h, r.Key(), SourceLocal, at(0), "p") // non-empty: the early loop claims it
	start := at(time.Second)
	hc := h.Config()
	got := claimed(h.DueReseedsBy(start, start.Add(hc.ReseedInterval+hc.MaxPhase))) // as the churn pass does
	if len(got) != 1 {
		t.Fatalf("churn claim: %d rings", len(got))
	}
	endReseed(r, true, start.Add(10*time.Millisecond))
	h.HintsLost(start.Add(time.Second))
	if got := claimed(h.EarlyReseeds(start.Add(time.Second), nil)); len(got) != 1 {
		t.Fatalf("a loss 1 s after a churn pass claimed %d rings, want 1: the pass was taken to cover it", len(got))
	}
}
