package hotlist

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// Visiting order (docs/hotlist.md, "Serving: check out, ask SQL, check
// in"): Take serves ready entries oldest first (readyAt) across every
// sub-ring; a candidate that was not evaluated keeps its place; a visited
// one goes to the back of the line. Issue 20: with requeued candidates sent
// to the tail and round-robin shares per sub-ring, partitions were visited
// in effectively random order (p50 101 ms / p99 625 ms at half load).

func pnames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("p%02d", i)
	}
	return out
}

// clocks runs f with a clock that stands still (every reading ties) and
// with one that moves between steps.
func clocks(t *testing.T, f func(t *testing.T, tick func() time.Time)) {
	for _, step := range []time.Duration{0, time.Millisecond} {
		t.Run(fmt.Sprintf("step=%v", step), func(t *testing.T) {
			now := base
			f(t, func() time.Time { now = now.Add(step); return now })
		})
	}
}

// rotation asserts that seq visits each of the P partitions once per P
// visits, in the same order every round, and that the first round follows
// the marking order all.
func rotation(t *testing.T, seq, all []string) {
	t.Helper()
	P := len(all)
	first := slices.Clone(seq[:P])
	slices.Sort(first)
	if !slices.Equal(first, all) {
		t.Fatalf("the first %d visits %v are not each partition once", P, seq[:P])
	}
	for i := P; i < len(seq); i++ {
		if seq[i] != seq[i-P] {
			t.Fatalf("visit %d is %s, %d visits after %s: not a rotation (%v)", i, seq[i], P, seq[i-P], seq)
		}
	}
	if !slices.Equal(seq[:P], all) {
		t.Fatalf("first round %v, want the marking order", seq[:P])
	}
}

// With P partitions all pending and take-1 / took (leased) / ack-promote
// cycles, each partition is visited once per P takes, in the same order.
// P is not a multiple of the 8 sub-rings, so per-sub-ring shares would
// visit the partitions of the smaller sub-rings more often.
func TestFairStrictRotation(t *testing.T) {
	clocks(t, func(t *testing.T, tick func() time.Time) {
		h := newHL()
		k := KeyOf("t", "q")
		r := h.Register(k, "g", QueueOpts{}, base)
		const P = 21
		all := pnames(P)
		markN(h, k, SourceCommit, tick(), all...)
		var seq []string
		for i := range 4 * P {
			now := tick()
			cs := h.Take(r, 1, now)
			if len(cs) != 1 {
				t.Fatalf("take %d = %v", i, names(cs))
			}
			seq = append(seq, cs[0].Name)
			id := "id-" + cs[0].Name
			h.CheckIn(r, []Result{{Cand: cs[0], Verdict: Took, Until: now.Add(time.Minute), PartitionID: id}}, now)
			if !h.AckRelease(k, "g", id, true, tick()) {
				t.Fatal("an ack with more pending must wake")
			}
		}
		rotation(t, seq, all)
		checkInvariants(t, h)
	})
}

// Issue 20's pop: k candidates checked out, SQL claims the first, the rest
// come back not evaluated. The claimed one goes to the back of the line and
// the others keep their place, so the next pop is offered the next oldest
// and the partitions are still visited in strict rotation.
func TestFairRequeuedCandidatesKeepTheirPlace(t *testing.T) {
	clocks(t, func(t *testing.T, tick func() time.Time) {
		h := newHL()
		k := KeyOf("t", "q")
		r := h.Register(k, "g", QueueOpts{}, base)
		const P, K = 21, 4
		all := pnames(P)
		markN(h, k, SourceCommit, tick(), all...)
		var seq []string
		var offered [][]string
		for i := range 4 * P {
			now := tick()
			cs := h.Take(r, K, now)
			if len(cs) != K {
				t.Fatalf("take %d = %v", i, names(cs))
			}
			seq = append(seq, cs[0].Name)
			offered = append(offered, names(cs))
			res := []Result{{Cand: cs[0], Verdict: Took, AutoAck: true}}
			for _, c := range cs[1:] {
				res = append(res, Result{Cand: c, Verdict: Requeue})
			}
			h.CheckIn(r, res, now)
		}
		rotation(t, seq, all)
		// Each pop was offered the K oldest, in line.
		for i, got := range offered {
			var want []string
			for j := range K {
				want = append(want, all[(i+j)%P])
			}
			if !slices.Equal(got, want) {
				t.Fatalf("take %d offered %v, want %v", i, got, want)
			}
		}
		checkInvariants(t, h)
	})
}

// A requeued candidate is served before anything that became ready after
// it was marked, in one sub-ring and across sub-rings.
func TestFairRequeueServedBeforeLaterReady(t *testing.T) {
	for _, n := range []int{1, 8} {
		t.Run(fmt.Sprintf("shards=%d", n), func(t *testing.T) {
			h := newHL(shards(n))
			k := KeyOf("t", "q")
			r := h.Register(k, "g", QueueOpts{}, base)
			markN(h, k, SourceCommit, at(1*time.Millisecond), "a", "b")
			cs := h.Take(r, 2, at(2*time.Millisecond))
			if got := names(cs); !slices.Equal(got, []string{"a", "b"}) {
				t.Fatalf("Take = %v", got)
			}
			markN(h, k, SourceCommit, at(3*time.Millisecond), "c")
			h.CheckIn(r, []Result{{Cand: cs[0], Verdict: Took, AutoAck: true}, {Cand: cs[1], Verdict: Requeue}}, at(4*time.Millisecond))
			if got := names(h.Take(r, 8, at(5*time.Millisecond))); !slices.Equal(got, []string{"b", "c", "a"}) {
				t.Fatalf("order %v, want [b c a]: the requeued b keeps its place, the served a goes last", got)
			}
			checkInvariants(t, h)
		})
	}
}

// Ready entries are served oldest first across the sub-rings, whatever
// sub-ring each lives in: marked in an order that visits the sub-rings
// unevenly, they are taken in that order, over several takes.
func TestFairOldestFirstAcrossSubRings(t *testing.T) {
	h := newHL() // 8 sub-rings: p<i> lives in sub-ring i%8
	k := KeyOf("t", "q")
	r := h.Register(k, "g", QueueOpts{}, base)
	all := pnames(16)
	markN(h, k, SourceCommit, base, all...) // intern p00..p15 in index order
	for _, c := range h.Take(r, 16, base) {
		h.CheckIn(r, []Result{{Cand: c, Verdict: Empty}}, base)
	}
	order := []int{5, 13, 2, 10, 15, 0, 8, 3, 11, 6, 14, 1, 9, 4, 12, 7}
	var want []string
	for i, p := range order {
		markN(h, k, SourceCommit, at(time.Duration(i+1)*time.Millisecond), all[p])
		want = append(want, all[p])
	}
	now := at(time.Second)
	var got []string
	for _, n := range []int{3, 5, 100} {
		got = append(got, names(h.Take(r, n, now))...)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("taken %v, want the marking order %v", got, want)
	}
	checkInvariants(t, h)
}

// The drop guard returns candidates to their place, in their order, even
// when two pops' guards fire in the opposite order.
func TestFairAbandonKeepsOrder(t *testing.T) {
	for _, n := range []int{1, 8} {
		t.Run(fmt.Sprintf("shards=%d", n), func(t *testing.T) {
			h := newHL(shards(n))
			k := KeyOf("t", "q")
			r := h.Register(k, "g", QueueOpts{}, base)
			markN(h, k, SourceCommit, base, "a", "b", "c", "d", "e", "f")
			popA := h.Take(r, 2, at(time.Millisecond))
			popB := h.Take(r, 2, at(time.Millisecond))
			markN(h, k, SourceCommit, at(2*time.Millisecond), "g")
			h.Abandon(r, popB, at(3*time.Millisecond))
			h.Abandon(r, popA, at(3*time.Millisecond))
			want := []string{"a", "b", "c", "d", "e", "f", "g"}
			if got := names(h.Take(r, 100, at(4*time.Millisecond))); !slices.Equal(got, want) {
				t.Fatalf("order after the drop guards %v, want %v", got, want)
			}
			checkInvariants(t, h)
		})
	}
}

// A wheel promotion takes its place at its revisit time: ahead of an entry
// marked after that time, even when the tick that promotes it runs later.
func TestFairWheelPromotionInLineAtRevisitTime(t *testing.T) {
	h := newHL(shards(1))
	k := KeyOf("t", "q")
	r := h.Register(k, "g", QueueOpts{}, base)
	markN(h, k, SourceCommit, base, "a")
	c := takeOne(t, h, r, "a", base)
	h.CheckIn(r, []Result{{Cand: c, Verdict: Took, Until: at(200 * time.Millisecond)}}, base)
	wantRevisit(t, h, r, "a", at(200*time.Millisecond))
	markN(h, k, SourceCommit, at(300*time.Millisecond), "b")
	h.WheelTick(at(400 * time.Millisecond))
	if sl := wantState(t, h, r, "a", Ready); sl.readyAt != at(200*time.Millisecond).UnixNano() {
		t.Fatalf("promoted with readyAt %v, want its revisit time", time.Unix(0, sl.readyAt).Sub(base))
	}
	if got := names(h.Take(r, 8, at(500*time.Millisecond))); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("order %v, want [a b]", got)
	}
	checkInvariants(t, h)
}

// A due wheel entry taken directly by Take and then not evaluated keeps
// its revisit time as its place, as a promoted one would.
func TestFairRequeuedWheelEntryKeepsRevisitTime(t *testing.T) {
	h := newHL(shards(1))
	k := KeyOf("t", "q")
	r := h.Register(k, "g", QueueOpts{}, base)
	markN(h, k, SourceCommit, base, "a")
	c := takeOne(t, h, r, "a", base)
	h.CheckIn(r, []Result{{Cand: c, Verdict: Leased, Until: at(100 * time.Millisecond)}}, base)
	markN(h, k, SourceCommit, at(time.Second), "b") // after a's revisit (lease + pad)
	c = takeOne(t, h, r, "a", at(2*time.Second))    // due: served first
	h.CheckIn(r, []Result{{Cand: c, Verdict: Requeue}}, at(2*time.Second))
	if got := names(h.Take(r, 8, at(2*time.Second))); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("order %v, want [a b]", got)
	}
	checkInvariants(t, h)
}

// Visited entries go to the back of the line: an ack promote, an autoAck
// took, and an empty verdict re-appended because a mark raced the probe.
func TestFairVisitedGoToTheBack(t *testing.T) {
	h := newHL()
	k := KeyOf("t", "q")
	r := h.Register(k, "g", QueueOpts{}, base)
	markN(h, k, SourceCommit, base, "a", "b", "c", "d")
	cs := h.Take(r, 3, at(time.Millisecond))
	markN(h, k, SourceCommit, at(2*time.Millisecond), "c") // races c's probe
	h.CheckIn(r, []Result{
		{Cand: cs[0], Verdict: Took, Until: at(time.Minute), PartitionID: "id-a"},
		{Cand: cs[1], Verdict: Took, AutoAck: true},
		{Cand: cs[2], Verdict: Empty},
	}, at(3*time.Millisecond))
	markN(h, k, SourceCommit, at(4*time.Millisecond), "e")
	h.AckRelease(k, "g", "id-a", true, at(5*time.Millisecond))
	// b and c were checked in (in served order) at 3 ms, e marked at 4, a
	// promoted at 5; d, never checked out, kept its place.
	want := []string{"d", "b", "c", "e", "a"}
	if got := names(h.Take(r, 8, at(6*time.Millisecond))); !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
	checkInvariants(t, h)
}

// A stranded candidate that a reseed reclaims was never evaluated: it
// returns to its old place.
func TestFairReclaimedStrandedKeepsPlace(t *testing.T) {
	h := newHL(shards(1))
	k := KeyOf("t", "q")
	r := h.Register(k, "g", QueueOpts{}, base)
	markN(h, k, SourceCommit, base, "a")
	h.Take(r, 1, base) // the pop is lost without its drop guard
	markN(h, k, SourceCommit, at(time.Second), "b")
	later := at(time.Minute)
	h.Reseed(r, []ReseedRow{{Name: "a"}, {Name: "c"}}, later)
	if got := names(h.Take(r, 8, later)); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("order %v, want [a b c]", got)
	}
	checkInvariants(t, h)
}
