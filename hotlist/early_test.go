package hotlist

import (
	"slices"
	"testing"
	"time"
)

// earlyRings registers and warms rings of queues q1..qn (group g) at 0.
func earlyRings(h *Hotlist, n int) []*Ring {
	var rs []*Ring
	for i := range n {
		r := h.Register(KeyOf("t", "q"+string(rune('1'+i))), "g", QueueOpts{}, at(0))
		warm(h, r, at(0))
		rs = append(rs, r)
	}
	return rs
}

func endEarly(h *Hotlist, rs []*Ring, now time.Time) {
	for _, r := range rs {
		endReseed(r, true, now)
	}
}

func ringKeys(rs []*Ring) []Key {
	var out []Key
	for _, r := range rs {
		out = append(out, r.Key())
	}
	return out
}

// A loss makes the rings that matter due at once: parked first, then
// non-empty; an empty ring without a parked pop is left to its next pop.
func TestEarlyReseedOrderParkedThenNonEmpty(t *testing.T) {
	h := newHL()
	rs := earlyRings(h, 3) // q1 parked and empty, q2 non-empty, q3 empty and idle
	markN(h, rs[1].Key(), SourceLocal, at(0), "p")
	parked := func(key Key) bool { return key == rs[0].Key() }

	if got := claimed(h.EarlyReseeds(at(time.Second), parked)); got != nil {
		t.Fatalf("no loss yet, claimed %v", ringKeys(got))
	}
	if claim(h.BeginReseed(rs[2], at(time.Second), false)) {
		t.Fatal("an empty ring's pop reseeded without a loss or a due floor")
	}
	h.HintsLost(at(time.Second))
	got := claimed(h.EarlyReseeds(at(time.Second), parked))
	if want := []Key{rs[0].Key(), rs[1].Key()}; !slices.Equal(ringKeys(got), want) {
		t.Fatalf("claimed %q, want %q (parked first, then non-empty)", ringKeys(got), want)
	}
	endEarly(h, got, at(time.Second))
	// The idle ring was not reseeded, but its next pop does it.
	if !claim(h.BeginReseed(rs[2], at(time.Second+time.Millisecond), false)) {
		t.Fatal("the idle ring's pop did not run the pending early reseed")
	}
	endReseed(rs[2], true, at(time.Second+time.Millisecond))
	if st := h.Stats(); st.EarlyReseeds != 3 || st.LossSignals != 1 {
		t.Fatalf("early reseeds %d (want 3), loss signals %d (want 1)", st.EarlyReseeds, st.LossSignals)
	}
	// All covered: nothing more without a new loss.
	if got := claimed(h.EarlyReseeds(at(2*time.Second), parked)); got != nil {
		t.Fatalf("claimed %v after every loss was covered", ringKeys(got))
	}
	if claim(h.BeginReseed(rs[2], at(2*time.Second), false)) {
		t.Fatal("a covered ring's pop reseeded again")
	}
}

// At most one early reseed per ring per EarlyReseedMin: a flapping link's
// signals are folded into the next one (counted), never dropped.
func TestEarlyReseedPerRingInterval(t *testing.T) {
	h := newHL()
	r := earlyRings(h, 1)[0]
	markN(h, r.Key(), SourceLocal, at(0), "p")
	h.HintsLost(at(time.Second))
	got := claimed(h.EarlyReseeds(at(time.Second), nil))
	if len(got) != 1 {
		t.Fatalf("first loss: %d claimed", len(got))
	}
	endEarly(h, got, at(time.Second+10*time.Millisecond))
	for i := 1; i <= 5; i++ { // a signal every 20 ms
		now := at(time.Second + time.Duration(i)*20*time.Millisecond)
		h.HintsLost(now)
		if got := claimed(h.EarlyReseeds(now, nil)); got != nil {
			t.Fatalf("signal %d at +%v: an early reseed inside the 200 ms interval", i, now.Sub(at(time.Second)))
		}
	}
	if st := h.Stats(); st.EarlySuppressed != 5 {
		t.Fatalf("suppressed %d, want 5", st.EarlySuppressed)
	}
	// The folded signals run at the end of the interval, as one reseed.
	if got := claimed(h.EarlyReseeds(at(time.Second+199*time.Millisecond), nil)); got != nil {
		t.Fatal("ran before the interval ended")
	}
	got = claimed(h.EarlyReseeds(at(time.Second+200*time.Millisecond), nil))
	if len(got) != 1 {
		t.Fatalf("at the interval's end: %d claimed, want 1", len(got))
	}
	endEarly(h, got, at(time.Second+210*time.Millisecond))
	if got := claimed(h.EarlyReseeds(at(2*time.Second), nil)); got != nil {
		t.Fatal("a second reseed for the same signals")
	}
}

// A walk that began before a loss does not cover it: the ring stays due.
func TestEarlyReseedLossDuringWalkStaysPending(t *testing.T) {
	h := newHL()
	r := earlyRings(h, 1)[0]
	markN(h, r.Key(), SourceLocal, at(0), "p")
	if !claim(h.BeginReseed(r, at(time.Second), true)) {
		t.Fatal("claim")
	}
	h.HintsLost(at(time.Second + time.Millisecond))
	if got := claimed(h.EarlyReseeds(at(time.Second+time.Millisecond), nil)); got != nil {
		t.Fatal("claimed a ring whose reseed is in progress")
	}
	endReseed(r, true, at(time.Second+2*time.Millisecond))
	got := claimed(h.EarlyReseeds(at(time.Second+3*time.Millisecond), nil))
	if len(got) != 1 {
		t.Fatal("a loss signalled during a walk was treated as covered by it")
	}
}

// The node-wide budget: EarlyReseedRate a second, a burst of one second's
// worth; rings past it wait for a later pass.
func TestEarlyReseedNodeBudget(t *testing.T) {
	h := newHL(func(c *Config) { c.EarlyReseedRate = 2 })
	rs := earlyRings(h, 5)
	for _, r := range rs {
		markN(h, r.Key(), SourceLocal, at(0), "p")
	}
	h.HintsLost(at(time.Second))
	got := claimed(h.EarlyReseeds(at(time.Second), nil))
	if len(got) != 2 {
		t.Fatalf("claimed %d, want the budget of 2", len(got))
	}
	endEarly(h, got, at(time.Second))
	if st := h.Stats(); st.EarlySuppressed != 3 {
		t.Fatalf("suppressed %d, want 3", st.EarlySuppressed)
	}
	if got := claimed(h.EarlyReseeds(at(time.Second+100*time.Millisecond), nil)); len(got) != 0 {
		t.Fatalf("claimed %d with no token refilled", len(got))
	}
	got = claimed(h.EarlyReseeds(at(time.Second+500*time.Millisecond), nil))
	if len(got) != 1 {
		t.Fatalf("after 500 ms at 2/s: claimed %d, want 1", len(got))
	}
	endEarly(h, got, at(time.Second+500*time.Millisecond))
	got = claimed(h.EarlyReseeds(at(3*time.Second), nil))
	if len(got) != 2 {
		t.Fatalf("with the bucket full again: claimed %d, want the last 2", len(got))
	}
}

// The floor tick does not run pending early reseeds: an idle ring's waits
// for its pop (or its own floor), so a loss cannot reseed every ring.
func TestEarlyReseedNotClaimedByFloorTick(t *testing.T) {
	h := newHL()
	rs := earlyRings(h, 3)
	h.HintsLost(at(time.Second))
	if got := claimed(h.EarlyReseeds(at(time.Second), nil)); got != nil {
		t.Fatalf("claimed idle empty rings %v", ringKeys(got))
	}
	if got := claimed(h.DueReseeds(at(2 * time.Second))); len(got) != 0 {
		t.Fatalf("the floor tick claimed %d rings before their floor", len(got))
	}
	if got := claimed(h.DueReseeds(at(DefaultReseedInterval))); len(got) != len(rs) {
		t.Fatalf("the floor claimed %d rings at its interval, want %d", len(got), len(rs))
	}
}

// Dark time: only partitions an early reseed found missing from the ring,
// by the age of their last write.
func TestEarlyReseedDarkTime(t *testing.T) {
	h := newHL()
	r := earlyRings(h, 1)[0]
	markN(h, r.Key(), SourceLocal, at(0), "held")
	// A floor reseed's finds are not counted.
	if !claim(h.BeginReseed(r, at(time.Second), true)) {
		t.Fatal("claim")
	}
	h.Reseed(r, []ReseedRow{{Name: "floor", Age: time.Second, AgeKnown: true}}, at(time.Second))
	endReseed(r, true, at(time.Second))
	h.HintsLost(at(2 * time.Second))
	got := claimed(h.EarlyReseeds(at(2*time.Second), nil))
	if len(got) != 1 {
		t.Fatal("no early reseed")
	}
	added := h.Reseed(r, []ReseedRow{
		{Name: "held", Age: 5 * time.Second, AgeKnown: true},         // already in the ring
		{Name: "lost-a", Age: 40 * time.Millisecond, AgeKnown: true}, // (25, 50]
		{Name: "lost-b", Age: 3 * time.Second, AgeKnown: true},       // (2500, 5000]
		{Name: "lost-c"}, // age unknown
	}, at(2*time.Second))
	endReseed(r, true, at(2*time.Second))
	if added != 3 {
		t.Fatalf("added %d, want 3", added)
	}
	d := h.Stats().DarkTime
	if d.Count != 2 || d.SumMs != 3040 || d.Buckets[2] != 1 || d.Buckets[8] != 1 {
		t.Fatalf("dark time %+v, want 2 observations (40 ms, 3 s)", d)
	}
}

// NextEarly tells a waiting early loop when to look: never without a loss,
// at once after one, and at a deferred ring's time after a pass that could
// not run it yet. A loop that sleeps until then runs every reseed a loop
// polling EarlyReseeds would.
func TestNextEarlyFollowsSignalsAndDeferredRings(t *testing.T) {
	h := newHL()
	r := earlyRings(h, 1)[0]
	markN(h, r.Key(), SourceLocal, at(0), "p")
	if got := h.NextEarly(); !got.IsZero() {
		t.Fatalf("no loss: next pass at %v, want never", got)
	}
	h.HintsLost(at(time.Second))
	if got := h.NextEarly(); !got.Equal(at(time.Second)) {
		t.Fatalf("after a loss: next pass at %v, want the loss's time", got)
	}
	got := claimed(h.EarlyReseeds(at(time.Second), nil))
	if len(got) != 1 {
		t.Fatalf("first loss: %d claimed", len(got))
	}
	endEarly(h, got, at(time.Second+10*time.Millisecond))
	if got := h.NextEarly(); !got.IsZero() {
		t.Fatalf("after the pass: next at %v, want never", got)
	}
	// A loss inside the ring's 200 ms interval is deferred to its end.
	h.HintsLost(at(time.Second + 50*time.Millisecond))
	if got := claimed(h.EarlyReseeds(at(time.Second+50*time.Millisecond), nil)); got != nil {
		t.Fatal("ran inside the interval")
	}
	next := h.NextEarly()
	if !next.Equal(at(time.Second + 200*time.Millisecond)) {
		t.Fatalf("deferred ring: next pass at %v, want the interval's end", next.Sub(at(0)))
	}
	if got := claimed(h.EarlyReseeds(next, nil)); len(got) != 1 {
		t.Fatalf("at the announced time: %d claimed, want 1", len(got))
	}
}
