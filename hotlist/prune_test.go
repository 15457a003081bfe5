package hotlist

import (
	"fmt"
	"testing"
	"time"
)

// warmRing registers a ring and finishes its first (cold) reseed.
func warmRing(t *testing.T, h *Hotlist, key Key) *Ring {
	t.Helper()
	r := h.Register(key, "g", QueueOpts{}, at(0))
	if !claim(h.BeginReseed(r, at(0), false)) {
		t.Fatal("cold ring not claimable")
	}
	endReseed(r, true, at(0))
	return r
}

// A remote mark of an untracked partition leaves it unconfirmed; a local or
// commit mark, a reseed row and a took or leased verdict confirm it.
func TestRemoteMarksStayUnconfirmedUntilSomethingConfirmsThem(t *testing.T) {
	h := newHL()
	r := warmRing(t, h, KeyOf("t", "q"))
	markN(h, KeyOf("t", "q"), SourceRemote, at(1), "a", "b", "c", "d", "e")
	if r.Unconfirmed() != 5 || h.Stats().Unconfirmed != 5 {
		t.Fatalf("unconfirmed %d / %d, want 5", r.Unconfirmed(), h.Stats().Unconfirmed)
	}
	markN(h, KeyOf("t", "q"), SourceLocal, at(1), "a")
	markN(h, KeyOf("t", "q"), SourceCommit, at(1), "b")
	h.Reseed(r, []ReseedRow{{Name: "c", PartitionID: "pc"}}, at(1))
	markN(h, KeyOf("t", "q"), SourceRemote, at(1), "a") // a remote mark never unconfirms
	if r.Unconfirmed() != 2 {
		t.Fatalf("unconfirmed %d, want 2 (d, e)", r.Unconfirmed())
	}
	cands := h.Take(r, 16, at(2))
	var res []Result
	for _, c := range cands {
		switch c.Name {
		case "d":
			res = append(res, Result{Cand: c, Verdict: Leased, Until: at(time.Minute)})
		case "e":
			res = append(res, Result{Cand: c, Verdict: Empty})
		default:
			res = append(res, Result{Cand: c, Verdict: Requeue})
		}
	}
	h.CheckIn(r, res, at(2))
	if r.Unconfirmed() != 0 || h.Stats().Unconfirmed != 0 {
		t.Fatalf("unconfirmed %d after leased/empty verdicts", r.Unconfirmed())
	}
	wantState(t, h, r, "e", Idle)
}

// A complete reseed drops, in one pass, every unconfirmed entry that it did
// not list and that was remote-marked before it began; entries marked while
// it ran, confirmed ones and checked-out ones stay.
func TestCompleteReseedPrunesUnconfirmedEntriesInBulk(t *testing.T) {
	h := newHL()
	key := KeyOf("t", "q")
	r := warmRing(t, h, key)
	fakes := make([]string, 100000)
	for i := range fakes {
		fakes[i] = fmt.Sprintf("fake-%06d", i)
	}
	markN(h, key, SourceRemote, at(1), fakes...)
	markN(h, key, SourceRemote, at(1), "real-remote")
	markN(h, key, SourceLocal, at(1), "real-local")
	inflight := h.Take(r, 1, at(1)) // fake-000000 is checked out
	markN(h, key, SourceRemote, at(1), inflight[0].Name)

	if !claim(h.BeginReseed(r, at(2), true)) {
		t.Fatal("reseed not claimable")
	}
	markN(h, key, SourceRemote, at(2), "during") // after Begin: may be real and unseen by the walk
	h.Reseed(r, []ReseedRow{{Name: "real-remote", PartitionID: "p1"}}, at(2))
	endReseed(r, true, at(2))

	st := h.Stats()
	if st.Pruned != int64(len(fakes)-1) || st.Ready != 3 || st.Inflight != 1 {
		t.Fatalf("pruned %d (want %d), ready %d (want 3), inflight %d", st.Pruned, len(fakes)-1, st.Ready, st.Inflight)
	}
	for _, n := range []string{"real-remote", "real-local", "during"} {
		wantState(t, h, r, n, Ready)
	}
	for _, f := range fakes[:2] {
		if f != inflight[0].Name {
			wantState(t, h, r, f, Idle)
		}
	}
	wantState(t, h, r, inflight[0].Name, Inflight)
	// The next take reaches the real entries at once.
	got := names(h.Take(r, 16, at(3)))
	if len(got) != 3 {
		t.Fatalf("take after prune: %v", got)
	}
}

// A walk that stopped early (page cap, error) prunes nothing: it did not see
// every partition with work.
func TestIncompleteReseedDoesNotPrune(t *testing.T) {
	h := newHL()
	key := KeyOf("t", "q")
	r := warmRing(t, h, key)
	markN(h, key, SourceRemote, at(1), "x", "y")
	claim(h.BeginReseed(r, at(2), true))
	endWalk(r, true, false, at(2))
	claim(h.BeginReseed(r, at(3), true))
	endReseed(r, false, at(3))
	if st := h.Stats(); st.Pruned != 0 || st.Ready != 2 {
		t.Fatalf("an incomplete reseed pruned: %+v", st)
	}
}

// A pop claims an early pruning reseed only when the ring holds at least
// SuspectUnconfirmed unconfirmed entries, at most once per PruneEvery.
func TestBeginPruneThresholdAndPace(t *testing.T) {
	h := newHL(func(c *Config) { c.SuspectUnconfirmed = 10; c.PruneEvery = time.Second })
	key := KeyOf("t", "q")
	r := warmRing(t, h, key)
	for i := 0; i < 9; i++ {
		markN(h, key, SourceRemote, at(time.Second), fmt.Sprintf("f%d", i))
	}
	if claim(h.BeginPrune(r, at(time.Second))) {
		t.Fatal("claimed below the threshold")
	}
	markN(h, key, SourceRemote, at(time.Second), "f9")
	if !claim(h.BeginPrune(r, at(time.Second))) {
		t.Fatal("not claimed at the threshold")
	}
	endReseed(r, true, at(time.Second))
	if r.Unconfirmed() != 0 || h.Stats().Pruned != 10 {
		t.Fatalf("unconfirmed %d pruned %d", r.Unconfirmed(), h.Stats().Pruned)
	}
	for i := 0; i < 10; i++ {
		markN(h, key, SourceRemote, at(1500*time.Millisecond), fmt.Sprintf("g%d", i))
	}
	if claim(h.BeginPrune(r, at(1500*time.Millisecond))) {
		t.Fatal("claimed twice within PruneEvery")
	}
	if !claim(h.BeginPrune(r, at(2*time.Second+time.Millisecond))) {
		t.Fatal("not claimed after PruneEvery")
	}
	if claim(h.BeginPrune(r, at(5*time.Second))) {
		t.Fatal("claimed while a reseed is in progress")
	}
	endReseed(r, true, at(5*time.Second))
}
