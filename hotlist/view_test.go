package hotlist

import (
	"testing"
	"time"
)

// TestQueueView follows one queue through marks, a take, a lease-held
// check-in and an ack, and checks what the view reports at each step.
func TestQueueView(t *testing.T) {
	h := newHL(shards(2))
	key := KeyOf("t1", "q")
	if _, ok := h.QueueView(key, 10, at(0)); ok {
		t.Fatal("view of an unknown queue: registered")
	}
	ra := h.Register(key, "a", QueueOpts{}, at(0))
	h.Register(key, "b", QueueOpts{}, at(0))
	markN(h, key, SourceLocal, at(time.Millisecond), "p1", "p2", "p3")

	v, ok := h.QueueView(key, 10, at(time.Second))
	if !ok || len(v.Rings) != 2 || v.Rings[0].Group != "a" || v.Rings[1].Group != "b" {
		t.Fatalf("view: %+v %v", v, ok)
	}
	a := v.Rings[0]
	if a.Ready != 3 || a.Wheel != 0 || a.Inflight != 0 || !a.Cold || a.Truncated || len(a.Entries) != 3 {
		t.Fatalf("ring a after marks: %+v", a)
	}
	for i, want := range []string{"p1", "p2", "p3"} {
		if e := a.Entries[i]; e.Name != want || e.State != Ready {
			t.Fatalf("entry %d: %+v, want %s ready", i, e, want)
		}
	}
	// The zero phase (newHL) puts the floor at 0: a second overdue.
	if a.NextReseedIn != -time.Second {
		t.Fatalf("next reseed in %v", a.NextReseedIn)
	}

	// A pop checks out every entry of ring a; ring b is untouched.
	cands := h.Take(ra, 10, at(2*time.Second))
	if len(cands) != 3 {
		t.Fatalf("took %d", len(cands))
	}
	v, _ = h.QueueView(key, 10, at(2*time.Second+500*time.Millisecond))
	a, b := v.Rings[0], v.Rings[1]
	if a.Inflight != 3 || a.Ready != 0 || b.Ready != 3 || b.Inflight != 0 {
		t.Fatalf("after take: a %+v b %+v", a, b)
	}
	for _, e := range a.Entries {
		if e.State != Inflight || e.Held != 500*time.Millisecond {
			t.Fatalf("in-flight entry: %+v", e)
		}
	}

	// p1 is taken with a lease (parked on the wheel until the capped
	// expiry, its id learned), p2 is empty (idle), p3 requeued (ready).
	until := at(time.Minute)
	h.CheckIn(ra, []Result{
		{Cand: cands[0], Verdict: Took, Until: until, PartitionID: "id-" + cands[0].Name},
		{Cand: cands[1], Verdict: Empty},
		{Cand: cands[2], Verdict: Requeue},
	}, at(3*time.Second))
	v, _ = h.QueueView(key, 10, at(3*time.Second+200*time.Millisecond))
	a = v.Rings[0]
	if a.Wheel != 1 || a.Ready != 1 || a.Inflight != 0 || len(a.Entries) != 2 {
		t.Fatalf("after check-in: %+v", a)
	}
	byName := map[string]EntryView{}
	for _, e := range a.Entries {
		byName[e.Name] = e
	}
	leased := byName[cands[0].Name]
	if leased.State != Wheel || leased.ID != "id-"+cands[0].Name || leased.DueIn != LeaseParkCap-200*time.Millisecond {
		t.Fatalf("leased entry: %+v", leased)
	}
	if e := byName[cands[2].Name]; e.State != Ready {
		t.Fatalf("requeued entry: %+v", e)
	}

	// The ack of the drained-less lease makes it ready again.
	h.AckRelease(key, "a", "id-"+cands[0].Name, true, at(4*time.Second))
	v, _ = h.QueueView(key, 10, at(4*time.Second))
	if a = v.Rings[0]; a.Ready != 2 || a.Wheel != 0 {
		t.Fatalf("after ack: %+v", a)
	}
}

// TestQueueViewBounds: the entries per ring stop at maxParts and say so,
// remote marks show as unconfirmed, and a reseed shows as warm with its
// start time.
func TestQueueViewBounds(t *testing.T) {
	h := newHL(shards(4))
	key := KeyOf("t1", "q")
	r := h.Register(key, "g", QueueOpts{}, at(0))
	var names []string
	for i := 0; i < 50; i++ {
		names = append(names, "p"+string(rune('A'+i)))
	}
	markN(h, key, SourceRemote, at(0), names...)
	v, _ := h.QueueView(key, 5, at(0))
	if g := v.Rings[0]; g.Unconfirmed != 50 || !g.Entries[0].Unconfirmed {
		t.Fatalf("remote marks: %+v", g)
	}
	if !claim(h.BeginReseed(r, at(time.Second), false)) {
		t.Fatal("reseed not claimed")
	}
	v, _ = h.QueueView(key, 5, at(time.Second))
	g := v.Rings[0]
	if !g.Reseeding || !g.LastReseedAt.Equal(at(time.Second)) {
		t.Fatalf("reseed in progress: %+v", g)
	}
	rows := make([]ReseedRow, len(names))
	for i, n := range names {
		rows[i] = ReseedRow{Name: n}
	}
	h.Reseed(r, rows, at(time.Second)) // confirms every entry
	endReseed(r, true, at(2*time.Second))
	v, _ = h.QueueView(key, 5, at(2*time.Second))
	g = v.Rings[0]
	if g.Ready != 50 || g.Unconfirmed != 0 || len(g.Entries) != 5 || !g.Truncated || g.Cold || g.Reseeding {
		t.Fatalf("bounded view: ready %d entries %d truncated %v cold %v", g.Ready, len(g.Entries), g.Truncated, g.Cold)
	}
	if g.NextReseedIn != DefaultReseedInterval-2*time.Second {
		t.Fatalf("next reseed in %v", g.NextReseedIn)
	}
	if v, _ = h.QueueView(key, 0, at(2*time.Second)); len(v.Rings[0].Entries) != 0 || !v.Rings[0].Truncated {
		t.Fatalf("maxParts 0: %+v", v.Rings[0])
	}
	if v, _ = h.QueueView(key, 50, at(2*time.Second)); len(v.Rings[0].Entries) != 50 || v.Rings[0].Truncated {
		t.Fatalf("maxParts 50: %d entries, truncated %v", len(v.Rings[0].Entries), v.Rings[0].Truncated)
	}
}

// TestQueueViewConcurrent reads views while pops take and check in and
// pushes mark new partitions (run with -race): the counts a view reports
// are never negative and its entries never exceed the bound.
func TestQueueViewConcurrent(t *testing.T) {
	h := newHL(shards(4))
	key := KeyOf("t1", "q")
	r := h.Register(key, "g", QueueOpts{}, at(0))
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 2000; i++ {
			markN(h, key, SourceCommit, at(0), "p"+string(rune('A'+i%40)))
			cs := h.Take(r, 4, at(0))
			res := make([]Result, len(cs))
			for j, c := range cs {
				res[j] = Result{Cand: c, Verdict: Empty}
			}
			h.CheckIn(r, res, at(0))
		}
	}()
	for {
		select {
		case <-done:
			return
		default:
		}
		v, ok := h.QueueView(key, 8, at(0))
		if !ok || len(v.Rings) != 1 {
			t.Fatalf("view: %+v", v)
		}
		g := v.Rings[0]
		if g.Ready < 0 || g.Wheel < 0 || g.Inflight < 0 || len(g.Entries) > 8 {
			t.Fatalf("view: %+v", g)
		}
	}
}
