package hotlist

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// base is the fixed start of every test clock; tests advance it by hand.
var base = time.Date(2030, time.January, 1, 0, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return base.Add(d) }

// newHL returns a Hotlist with a deterministic zero reseed phase, after the
// optional mutations of the configuration.
func newHL(mut ...func(*Config)) *Hotlist {
	cfg := DefaultConfig()
	cfg.Jitter = func(time.Duration) time.Duration { return 0 }
	for _, m := range mut {
		m(&cfg)
	}
	return New(cfg)
}

func shards(n int) func(*Config) { return func(c *Config) { c.Shards = n } }

// markN marks partitions with one frame each.
func markN(h *Hotlist, key Key, src Source, now time.Time, names ...string) bool {
	parts := make([]PartMark, len(names))
	for i, n := range names {
		parts[i] = PartMark{Name: n, Count: 1}
	}
	return h.Mark(key, parts, src, now)
}

// slotOf returns a copy of a partition's slot in a ring (the zero, Idle,
// slot when the partition was never seen).
func slotOf(h *Hotlist, r *Ring, name string) slot {
	q := r.q
	q.mu.RLock()
	i, ok := q.index[name]
	q.mu.RUnlock()
	if !ok {
		return slot{state: Idle, prev: none, next: none}
	}
	s, pos := h.sub(r, i)
	s.mu.Lock()
	defer s.mu.Unlock()
	if int(pos) >= len(s.slots) {
		return slot{state: Idle, prev: none, next: none}
	}
	return s.slots[pos]
}

func wantState(t *testing.T, h *Hotlist, r *Ring, name string, want State) slot {
	t.Helper()
	sl := slotOf(h, r, name)
	if sl.state != want {
		t.Fatalf("%s/%s: state %v, want %v", r.group, name, sl.state, want)
	}
	return sl
}

func wantRevisit(t *testing.T, h *Hotlist, r *Ring, name string, want time.Time) {
	t.Helper()
	sl := wantState(t, h, r, name, Wheel)
	if sl.readyAt != want.UnixNano() {
		t.Fatalf("%s: revisit at %v, want %v", name, time.Unix(0, sl.readyAt).Sub(base), want.Sub(base))
	}
}

func names(cs []Candidate) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Name
	}
	return out
}

func takeOne(t *testing.T, h *Hotlist, r *Ring, name string, now time.Time) Candidate {
	t.Helper()
	cs := h.Take(r, 1, now)
	if len(cs) != 1 || cs[0].Name != name {
		t.Fatalf("Take = %v, want [%s]", names(cs), name)
	}
	return cs[0]
}

// warm runs an empty successful reseed so the ring is no longer cold.
func warm(h *Hotlist, r *Ring, now time.Time) {
	if claim(h.BeginReseed(r, now, true)) {
		endReseed(r, true, now)
	}
}

// checkInvariants verifies, for a quiescent Hotlist, that every sub-ring's
// counters equal its slot states, that the ready list is a consistent list
// of exactly the Ready slots sorted on readyAt (headAt mirroring its head),
// that every Wheel slot has a live heap entry,
// and that the Stats totals equal the sums over the registered rings and are
// never negative.
func checkInvariants(t testing.TB, h *Hotlist) {
	t.Helper()
	st := h.Stats()
	h.mu.RLock()
	defer h.mu.RUnlock()
	var sumR, sumW, sumI int64
	rings := 0
	for key, q := range h.queues {
		q.mu.RLock()
		for g, r := range q.rings {
			rings++
			for si, s := range r.subs {
				s.mu.Lock()
				var cr, cw, ci int32
				for _, sl := range s.slots {
					switch sl.state {
					case Ready:
						cr++
					case Wheel:
						cw++
					case Inflight:
						ci++
					}
				}
				if cr != s.nReady.Load() || cw != s.nWheel.Load() || ci != s.nInflight.Load() {
					t.Errorf("%q/%s sub %d: counters r/w/i %d/%d/%d, slots say %d/%d/%d",
						key, g, si, s.nReady.Load(), s.nWheel.Load(), s.nInflight.Load(), cr, cw, ci)
				}
				n, prev := int32(0), none
				for p := s.head; p != none; p = s.slots[p].next {
					if s.slots[p].state != Ready {
						t.Errorf("%q/%s sub %d: ready list holds pos %d in state %v", key, g, si, p, s.slots[p].state)
					}
					if s.slots[p].prev != prev {
						t.Errorf("%q/%s sub %d: broken prev link at pos %d", key, g, si, p)
					}
					if prev != none && s.slots[prev].readyAt > s.slots[p].readyAt {
						t.Errorf("%q/%s sub %d: ready list not sorted on readyAt at pos %d", key, g, si, p)
					}
					prev = p
					if n++; int(n) > len(s.slots) {
						t.Errorf("%q/%s sub %d: ready list cycle", key, g, si)
						break
					}
				}
				if s.tail != prev {
					t.Errorf("%q/%s sub %d: tail %d, list ends at %d", key, g, si, s.tail, prev)
				}
				wantHead := int64(math.MaxInt64)
				if s.head != none {
					wantHead = s.slots[s.head].readyAt
				}
				if got := s.headAt.Load(); got != wantHead {
					t.Errorf("%q/%s sub %d: headAt %d, head's readyAt %d", key, g, si, got, wantHead)
				}
				if n != cr {
					t.Errorf("%q/%s sub %d: ready list length %d, %d Ready slots", key, g, si, n, cr)
				}
				live := map[int32]bool{}
				for _, e := range s.wheel {
					if sl := s.slots[e.pos]; sl.state == Wheel && sl.readyAt == e.at {
						live[e.pos] = true
					}
				}
				for pos, sl := range s.slots {
					if sl.state == Wheel && !live[int32(pos)] {
						t.Errorf("%q/%s sub %d: Wheel slot %d has no heap entry", key, g, si, pos)
					}
				}
				s.mu.Unlock()
				sumR += int64(cr)
				sumW += int64(cw)
				sumI += int64(ci)
			}
		}
		q.mu.RUnlock()
	}
	if st.Ready < 0 || st.Wheel < 0 || st.Inflight < 0 || st.Rings < 0 {
		t.Errorf("negative counters: %+v", st)
	}
	if st.Ready != sumR || st.Wheel != sumW || st.Inflight != sumI {
		t.Errorf("Stats ready/wheel/inflight %d/%d/%d, rings sum to %d/%d/%d",
			st.Ready, st.Wheel, st.Inflight, sumR, sumW, sumI)
	}
	if st.Rings != rings || st.Queues != len(h.queues) {
		t.Errorf("Stats rings/queues %d/%d, registry holds %d/%d", st.Rings, st.Queues, rings, len(h.queues))
	}
}

// ---------------------------------------------------------------- keying

func TestKeyCompositeTenantQueue(t *testing.T) {
	if got := KeyOf("acme", "orders"); got.s != "acme\x1forders" {
		t.Fatalf("Key = %q", got)
	}
	h := newHL()
	k1, k2 := KeyOf("t1", "orders"), KeyOf("t2", "orders")
	r1 := h.Register(k1, "workers", QueueOpts{}, base)
	r2 := h.Register(k2, "workers", QueueOpts{}, base)
	if r1 == r2 || r1.q == r2.q {
		t.Fatal("two tenants' queues of the same name share a ring")
	}
	if r1.Key() != k1 || r2.Key() != k2 || r1.Group() != "workers" {
		t.Fatalf("ring identity: %q %q %q", r1.Key(), r2.Key(), r1.Group())
	}
	markN(h, k1, SourceCommit, base, "p")
	wantState(t, h, r1, "p", Ready)
	wantState(t, h, r2, "p", Idle)
	if cs := h.Take(r2, 8, base); cs != nil {
		t.Fatalf("tenant t2 checked out tenant t1's candidate: %v", names(cs))
	}
	// A bare queue name cannot be passed as a key any more (Key is built
	// only by KeyOf); the nearest spelling, an empty tenant, is another queue.
	if markN(h, KeyOf("", "orders"), SourceCommit, base, "q"); slotOf(h, r1, "q").state != Idle {
		t.Fatal("a bare queue name reached a tenant ring")
	}
	checkInvariants(t, h)
}

// ------------------------------------------------------ three structures

func TestInterningDenseAppendOnlyAndPartitionIDs(t *testing.T) {
	h := newHL(shards(1))
	k := KeyOf("t", "q")
	r := h.Register(k, "g", QueueOpts{}, base)
	markN(h, k, SourceCommit, base, "a", "b", "c")
	markN(h, k, SourceCommit, base, "b", "d")
	q := r.q
	if !slices.Equal(q.names, []string{"a", "b", "c", "d"}) {
		t.Fatalf("names %v", q.names)
	}
	for i, n := range q.names {
		if q.index[n] != uint32(i) {
			t.Fatalf("index[%s] = %d, want %d", n, q.index[n], i)
		}
	}
	cs := h.Take(r, 8, base)
	if !slices.Equal(names(cs), []string{"a", "b", "c", "d"}) {
		t.Fatalf("Take = %v", names(cs))
	}
	// Ids are learned from check-ins and reseed rows; the ack hook finds
	// the entry through them, and knows nothing of an unlearned id.
	res := []Result{{Cand: cs[0], Verdict: Took, Until: at(time.Minute), PartitionID: "id-a"}}
	for _, c := range cs[1:] {
		res = append(res, Result{Cand: c, Verdict: Empty})
	}
	h.CheckIn(r, res, base)
	h.Reseed(r, []ReseedRow{{Name: "e", PartitionID: "id-e"}}, base)
	if q.byID["id-a"] != 0 || q.byID["id-e"] != 4 || q.ids[4] != "id-e" {
		t.Fatalf("byID %v ids %v", q.byID, q.ids)
	}
	if !h.AckRelease(k, "g", "id-unknown", true, base) {
		t.Fatal("ack of an unknown id must still ask for a wake when pending")
	}
	if h.AckRelease(k, "g", "id-a", true, base); slotOf(h, r, "a").state != Ready {
		t.Fatal("ack hook did not find the entry by its learned id")
	}
	checkInvariants(t, h)
}

func TestShardLocalPositionsNoWastedSlots(t *testing.T) {
	const S = 4
	h := newHL(shards(S))
	k := KeyOf("t", "q")
	r := h.Register(k, "g", QueueOpts{}, base)
	var all []string
	for i := range 12 {
		all = append(all, fmt.Sprintf("p%02d", i))
	}
	markN(h, k, SourceCommit, base, all...)
	if len(r.subs) != S {
		t.Fatalf("%d sub-rings, want %d", len(r.subs), S)
	}
	for si, s := range r.subs {
		if len(s.slots) != 12/S {
			t.Fatalf("sub %d holds %d slots, want %d (index / S, no wasted slots)", si, len(s.slots), 12/S)
		}
		for pos := range s.slots {
			idx := pos*S + si
			if s.slots[pos].state != Ready {
				t.Fatalf("index %d (sub %d pos %d) is %v", idx, si, pos, s.slots[pos].state)
			}
		}
	}
	for i, n := range all {
		s, pos := h.sub(r, uint32(i))
		if s != r.subs[i%S] || pos != int32(i/S) {
			t.Fatalf("index %d maps to (%p, %d), want (sub %d, pos %d)", i, s, pos, i%S, i/S)
		}
		_ = n
	}
	cs := h.Take(r, 12, base)
	if len(cs) != 12 {
		t.Fatalf("took %d", len(cs))
	}
	for _, c := range cs {
		if all[c.Index] != c.Name {
			t.Fatalf("candidate index %d named %q, want %q", c.Index, c.Name, all[c.Index])
		}
	}
	checkInvariants(t, h)
}

// ----------------------------------------------------------------- marks

func TestMarkIdleNoDeferralPushesReadyTail(t *testing.T) {
	h := newHL(shards(1))
	k := KeyOf("t", "q")
	r := h.Register(k, "g", QueueOpts{}, base)
	for _, n := range []string{"c", "a", "b"} {
		if !markN(h, k, SourceCommit, base, n) {
			t.Fatalf("mark %s: IDLE -> READY must ask for a wake", n)
		}
	}
	if got := names(h.Take(r, 8, base)); !slices.Equal(got, []string{"c", "a", "b"}) {
		t.Fatalf("ready order %v, want mark order", got)
	}
	checkInvariants(t, h)
}

func TestMarkAlreadyPendingIsEpochBumpOnly(t *testing.T) {
	h := newHL(shards(1))
	k := KeyOf("t", "q")
	r := h.Register(k, "g", QueueOpts{}, base)
	markN(h, k, SourceCommit, base, "a")
	markN(h, k, SourceCommit, base, "b")
	if markN(h, k, SourceCommit, base, "a") {
		t.Fatal("a mark of an already READY partition is no transition")
	}
	h.Mark(k, []PartMark{{Name: "a", Count: 5}}, SourceCommit, base)
	sl := wantState(t, h, r, "a", Ready)
	if sl.epoch != 3 || sl.batch != 7 {
		t.Fatalf("epoch %d batch %d, want 3 and 7 (every mark bumps the epoch and adds its count)", sl.epoch, sl.batch)
	}
	if rd, _, _ := r.Counts(); rd != 2 {
		t.Fatalf("%d ready, want 2", rd)
	}
	cs := h.Take(r, 8, base)
	if !slices.Equal(names(cs), []string{"a", "b"}) || cs[0].Epoch != 3 {
		t.Fatalf("Take = %v (epoch %d): the re-mark must not re-link the entry", names(cs), cs[0].Epoch)
	}
	checkInvariants(t, h)
}

func TestMarkIdleDelayedSchedulesAtDelayPlusPad(t *testing.T) {
	h := newHL()
	k := KeyOf("t", "q")
	r := h.Register(k, "g", QueueOpts{Delay: 2 * time.Second}, base)
	if markN(h, k, SourceCommit, base, "a") {
		t.Fatal("a delayed mark is no ready transition")
	}
	due := at(2*time.Second + DelayPad)
	wantRevisit(t, h, r, "a", due)
	if DelayPad != 300*time.Millisecond {
		t.Fatalf("DelayPad = %v, spec says 300 ms", DelayPad)
	}
	if keys := h.WheelTick(due.Add(-time.Nanosecond)); keys != nil {
		t.Fatalf("promoted before D + 300 ms: %v", keys)
	}
	if cs := h.Take(r, 8, due.Add(-time.Nanosecond)); cs != nil {
		t.Fatalf("took a deferred entry early: %v", names(cs))
	}
	if keys := h.WheelTick(due); !slices.Equal(keys, []Key{k}) {
		t.Fatalf("WheelTick at D + 300 ms = %v", keys)
	}
	wantState(t, h, r, "a", Ready)
	checkInvariants(t, h)
}

func TestMarkIdleWindowHoldsUntilFirstMarkPlusWindow(t *testing.T) {
	h := newHL()
	k := KeyOf("t", "q")
	W := time.Second
	r := h.Register(k, "g", QueueOpts{Window: W}, base)
	h.Mark(k, []PartMark{{Name: "a", Count: 10}}, SourceCommit, base)
	wantRevisit(t, h, r, "a", at(W))
	h.Mark(k, []PartMark{{Name: "a", Count: 10}}, SourceCommit, at(600*time.Millisecond))
	wantRevisit(t, h, r, "a", at(W)) // first mark + W, not extended by later marks
	if sl := slotOf(h, r, "a"); sl.batch != 20 {
		t.Fatalf("batch %d, want 20", sl.batch)
	}
	h.WheelTick(at(W))
	wantState(t, h, r, "a", Ready)
	checkInvariants(t, h)
}

func TestWindowBufferEarlyPromotionAtBatchThreshold(t *testing.T) {
	h := newHL(func(c *Config) { c.WindowBatch = 10 })
	k := KeyOf("t", "q")
	r := h.Register(k, "g", QueueOpts{Window: time.Minute}, base)

	// IDLE with the batch already full: ready at once.
	if !h.Mark(k, []PartMark{{Name: "full", Count: 10}}, SourceCommit, base) {
		t.Fatal("a full batch must promote (and wake) immediately")
	}
	wantState(t, h, r, "full", Ready)

	// IDLE below the threshold holds; the mark that fills the batch promotes.
	h.Mark(k, []PartMark{{Name: "fat", Count: 4}}, SourceCommit, base)
	wantRevisit(t, h, r, "fat", at(time.Minute))
	h.Mark(k, []PartMark{{Name: "fat", Count: 5}}, SourceCommit, at(time.Second))
	wantState(t, h, r, "fat", Wheel)
	if !h.Mark(k, []PartMark{{Name: "fat", Count: 1}}, SourceCommit, at(2*time.Second)) {
		t.Fatal("the mark that fills the batch must report the ready transition")
	}
	wantState(t, h, r, "fat", Ready)
	if cs := h.Take(r, 8, at(2*time.Second)); len(cs) != 2 {
		t.Fatalf("Take = %v", names(cs))
	}
	checkInvariants(t, h)
}

func TestDelayDeadlineNeverShortened(t *testing.T) {
	for _, opts := range []QueueOpts{{Delay: 2 * time.Second}, {Delay: 2 * time.Second, Window: time.Second}} {
		h := newHL(func(c *Config) { c.WindowBatch = 10 })
		k := KeyOf("t", "q")
		r := h.Register(k, "g", opts, base)
		markN(h, k, SourceCommit, base, "a")
		due := at(2*time.Second + DelayPad)
		wantRevisit(t, h, r, "a", due)
		for i := 1; i <= 5; i++ {
			if h.Mark(k, []PartMark{{Name: "a", Count: 1000}}, SourceCommit, at(time.Duration(i)*100*time.Millisecond)) {
				t.Fatalf("%+v: a fat batch promoted a delayedProcessing entry", opts)
			}
			wantRevisit(t, h, r, "a", due)
		}
		if cs := h.Take(r, 8, at(time.Second)); cs != nil {
			t.Fatalf("%+v: took %v before the delay", opts, names(cs))
		}
		checkInvariants(t, h)
	}
}

func TestMarkInflightOnlyBumpsEpoch(t *testing.T) {
	h := newHL()
	k := KeyOf("t", "q")
	r := h.Register(k, "g", QueueOpts{}, base)
	markN(h, k, SourceCommit, base, "a")
	c := takeOne(t, h, r, "a", base)
	if markN(h, k, SourceCommit, base, "a") {
		t.Fatal("a mark of an INFLIGHT entry is no ready transition")
	}
	sl := wantState(t, h, r, "a", Inflight)
	if sl.epoch != c.Epoch+1 {
		t.Fatalf("epoch %d, want %d", sl.epoch, c.Epoch+1)
	}
	if rd, wh, in := r.Counts(); rd != 0 || wh != 0 || in != 1 {
		t.Fatalf("counts %d/%d/%d", rd, wh, in)
	}
	checkInvariants(t, h)
}

func TestMarkAppliesToEveryGroupRing(t *testing.T) {
	h := newHL()
	k := KeyOf("t", "q")
	r1 := h.Register(k, "g1", QueueOpts{}, base)
	r2 := h.Register(k, "g2", QueueOpts{}, base)
	markN(h, k, SourceCommit, base, "a")
	wantState(t, h, r1, "a", Ready)
	wantState(t, h, r2, "a", Ready)
	// Consuming in g1 leaves g2's candidate alone.
	c := takeOne(t, h, r1, "a", base)
	h.CheckIn(r1, []Result{{Cand: c, Verdict: Empty}}, base)
	wantState(t, h, r1, "a", Idle)
	wantState(t, h, r2, "a", Ready)
	// A group nobody polls has no ring, so no allocation; it discovers the
	// partition through the reseed floor on first contact.
	if h.Lookup(k, "g3") != nil {
		t.Fatal("a mark allocated a ring for an unpolled group")
	}
	if st := h.Stats(); st.Rings != 2 {
		t.Fatalf("%d rings", st.Rings)
	}
	r3 := h.Register(k, "g3", QueueOpts{}, base)
	wantState(t, h, r3, "a", Idle)
	if !r3.Cold() {
		t.Fatal("new ring must be cold")
	}
	if h.Reseed(r3, []ReseedRow{{Name: "a"}}, base) != 1 {
		t.Fatal("reseed did not discover the partition")
	}
	wantState(t, h, r3, "a", Ready)
	checkInvariants(t, h)
}

func TestMarkQueueWithoutRingStillWakes(t *testing.T) {
	h := newHL()
	k := KeyOf("t", "q")
	// No queue state at all (a partition-targeted long-poll parks on the gate).
	for _, src := range []Source{SourceCommit, SourceRemote} {
		if !markN(h, k, src, base, "a") {
			t.Fatalf("source %d: a queue without a ring must still wake", src)
		}
	}
	if markN(h, k, SourceLocal, base, "a") {
		t.Fatal("local marks never wake inline")
	}
	if got := h.TakeWakes(); !slices.Equal(got, []Key{k}) {
		t.Fatalf("TakeWakes = %v: a local mark of a ringless queue must reach the wake tick", got)
	}
	if st := h.Stats(); st.Queues != 0 || st.Rings != 0 {
		t.Fatalf("a mark allocated queue state: %+v", st)
	}
	// Queue state that lost its only ring.
	h.Register(k, "g", QueueOpts{}, base)
	h.DropGroup("t", "q", "g")
	if !markN(h, k, SourceRemote, base, "b") {
		t.Fatal("a queue whose rings were all dropped must still wake")
	}
	// With a ring, a mark that creates no ready entry does not wake.
	r := h.Register(k, "g", QueueOpts{Delay: time.Second}, base)
	if markN(h, k, SourceCommit, base, "c") {
		t.Fatal("a deferred mark on a ringed queue woke")
	}
	wantState(t, h, r, "c", Wheel)
	checkInvariants(t, h)
}

func TestLocalMarkIsQuietAndQueuedForWakeTick(t *testing.T) {
	h := newHL()
	k1, k2 := KeyOf("t", "q1"), KeyOf("t", "q2")
	h.Register(k1, "g", QueueOpts{}, base)
	h.Register(k2, "g", QueueOpts{}, base)
	if h.TakeWakes() != nil {
		t.Fatal("wakes before any mark")
	}
	for i := range 50 {
		if markN(h, k1, SourceLocal, base, fmt.Sprintf("p%d", i)) {
			t.Fatal("a local mark must be quiet")
		}
	}
	markN(h, k2, SourceLocal, base, "x")
	got := h.TakeWakes()
	slices.SortFunc(got, func(a, b Key) int { return strings.Compare(a.s, b.s) })
	if !slices.Equal(got, []Key{k1, k2}) {
		t.Fatalf("TakeWakes = %v, want one wake per marked queue", got)
	}
	if h.TakeWakes() != nil {
		t.Fatal("TakeWakes did not reset")
	}
	if !markN(h, k1, SourceRemote, base, "r") || !markN(h, k1, SourceCommit, base, "c") {
		t.Fatal("remote and commit marks with a ready transition wake now")
	}
	if h.TakeWakes() != nil {
		t.Fatal("remote/commit marks must not be queued for the wake tick")
	}
	h.Mark(k1, []PartMark{{Name: "s", Count: 1}}, SourceReseed, base)
	st := h.Stats()
	if st.MarksLocal != 51 || st.MarksRemote != 1 || st.MarksCommit != 1 {
		t.Fatalf("mark counters %+v", st)
	}
	checkInvariants(t, h)
}

func TestSetOptsAppliesToLaterMarks(t *testing.T) {
	h := newHL()
	k := KeyOf("t", "q")
	r := h.Register(k, "g", QueueOpts{}, base)
	h.SetOpts(k, QueueOpts{Delay: time.Second})
	markN(h, k, SourceCommit, base, "a")
	wantRevisit(t, h, r, "a", at(time.Second+DelayPad))
	h.SetOpts(KeyOf("t", "unknown"), QueueOpts{Delay: time.Second}) // no state: no-op
	if h.Stats().Queues != 1 {
		t.Fatal("SetOpts allocated a queue")
	}
}

// ----------------------------------------------------------------- serve

func TestTakeDueWheelFirstThenReadyOldestFirst(t *testing.T) {
	h := newHL(shards(2))
	k := KeyOf("t", "q")
	r := h.Register(k, "g", QueueOpts{}, base)
	// "w" (index 0, shard 0) is lease-parked and due at +1 s.
	markN(h, k, SourceCommit, base, "w")
	c := takeOne(t, h, r, "w", base)
	h.CheckIn(r, []Result{{Cand: c, Verdict: Leased, Until: at(time.Hour)}}, base)
	wantRevisit(t, h, r, "w", at(time.Second))
	// 8 ready entries in each shard: e01..e16 → index 1..16.
	var ready []string
	for i := 1; i <= 16; i++ {
		ready = append(ready, fmt.Sprintf("e%02d", i))
	}
	markN(h, k, SourceCommit, base, ready...)

	now := at(time.Second)
	if cs := h.Take(r, 1, now); len(cs) != 1 || cs[0].Name != "w" {
		t.Fatalf("Take(1) = %v: a due wheel entry goes first", names(cs))
	}
	// Then the oldest ready entries across both sub-rings, in marking order.
	if got := names(h.Take(r, 4, now)); !slices.Equal(got, []string{"e01", "e02", "e03", "e04"}) {
		t.Fatalf("Take(4) = %v, want the four oldest in order", got)
	}
	rest := h.Take(r, 100, now)
	if len(rest) != 12 || rest[0].Name != "e05" || rest[11].Name != "e16" {
		t.Fatalf("Take(100) = %v, want e05..e16", names(rest))
	}
	if h.Take(r, 4, now) != nil {
		t.Fatal("Take on an empty ring must return nil")
	}
	if h.Take(r, 0, now) != nil {
		t.Fatal("Take(0) must return nil")
	}
	checkInvariants(t, h)
}

func TestTakeSkipsWheelEntriesNotDue(t *testing.T) {
	h := newHL()
	k := KeyOf("t", "q")
	r := h.Register(k, "g", QueueOpts{Delay: time.Second}, base)
	markN(h, k, SourceCommit, base, "a")
	if cs := h.Take(r, 8, at(time.Second)); cs != nil {
		t.Fatalf("took %v before its revisit", names(cs))
	}
	due := at(time.Second + DelayPad)
	cs := h.Take(r, 8, due) // due: taken directly, no wheel tick needed
	if len(cs) != 1 {
		t.Fatalf("Take at revisit = %v", names(cs))
	}
	wantState(t, h, r, "a", Inflight)
	checkInvariants(t, h)
}

func TestTakeSnapshotsEpochAndGeneration(t *testing.T) {
	h := newHL()
	k := KeyOf("t", "q")
	r := h.Register(k, "g", QueueOpts{}, base)
	markN(h, k, SourceCommit, base, "a")
	markN(h, k, SourceCommit, base, "a")
	c1 := takeOne(t, h, r, "a", base)
	if c1.Epoch != 2 {
		t.Fatalf("snapshot epoch %d, want 2", c1.Epoch)
	}
	sl := wantState(t, h, r, "a", Inflight)
	if sl.batch != 0 || sl.takenAt != base.UnixNano() {
		t.Fatalf("checkout did not reset batch / stamp takenAt: %+v", sl)
	}
	h.CheckIn(r, []Result{{Cand: c1, Verdict: Requeue}}, base)
	c2 := takeOne(t, h, r, "a", base)
	if c2.Gen == c1.Gen {
		t.Fatal("each check-out needs a new generation")
	}
}

// -------------------------------------------------------------- verdicts

func TestEmptyVerdictEpochCASClearsOnlyWithoutInterveningMark(t *testing.T) {
	h := newHL()
	k := KeyOf("t", "q")
	r := h.Register(k, "g", QueueOpts{}, base)

	markN(h, k, SourceCommit, base, "a")
	c := takeOne(t, h, r, "a", base)
	if h.CheckIn(r, []Result{{Cand: c, Verdict: Empty}}, base) {
		t.Fatal("a clear is not worth a wake")
	}
	wantState(t, h, r, "a", Idle)

	// A push commits and marks between check-out and check-in: the CAS fails.
	markN(h, k, SourceCommit, base, "a")
	c = takeOne(t, h, r, "a", base)
	markN(h, k, SourceLocal, base, "a")
	if !h.CheckIn(r, []Result{{Cand: c, Verdict: Empty}}, base) {
		t.Fatal("a re-append after a lost CAS is worth a wake")
	}
	wantState(t, h, r, "a", Ready)

	// A reseed row during the flight moves the epoch too.
	c = takeOne(t, h, r, "a", base)
	h.Reseed(r, []ReseedRow{{Name: "a"}}, base)
	h.CheckIn(r, []Result{{Cand: c, Verdict: Empty}}, base)
	wantState(t, h, r, "a", Ready)

	// And once nothing raced, the clear goes through.
	c = takeOne(t, h, r, "a", base)
	h.CheckIn(r, []Result{{Cand: c, Verdict: Empty}}, base)
	wantState(t, h, r, "a", Idle)
	checkInvariants(t, h)
}

func TestDeferralEmptyRevisitBoundedNeverCleared(t *testing.T) {
	if RevisitMin != 50*time.Millisecond || RevisitMax != 1000*time.Millisecond {
		t.Fatalf("revisit bounds %v..%v, spec says 50 ms..1000 ms", RevisitMin, RevisitMax)
	}
	for _, opts := range []QueueOpts{{Delay: 2 * time.Second}, {Window: time.Second}} {
		t.Run(fmt.Sprintf("%+v", opts), func(t *testing.T) {
			h := newHL()
			k := KeyOf("t", "q")
			r := h.Register(k, "g", opts, base)
			markN(h, k, SourceCommit, base, "a")
			now := at(5 * time.Second)
			h.WheelTick(now)
			const unknown = time.Duration(-1 << 62)
			cases := []struct {
				until, want time.Duration // until relative to the check-in time
			}{
				{unknown, RevisitMax},               // unknown: the upper bound
				{10 * time.Millisecond, RevisitMin}, // floored at 50 ms
				{-time.Second, RevisitMin},          // already visible
				{400 * time.Millisecond, 400 * time.Millisecond},
				{time.Hour, RevisitMax}, // capped at 1 s
			}
			for _, tc := range cases {
				c := takeOne(t, h, r, "a", now) // epoch unchanged: a CAS would clear
				var until time.Time
				if tc.until != unknown {
					until = now.Add(tc.until)
				}
				h.CheckIn(r, []Result{{Cand: c, Verdict: Empty, Until: until}}, now)
				wantRevisit(t, h, r, "a", now.Add(tc.want))
				now = now.Add(tc.want)
				h.WheelTick(now)
				wantState(t, h, r, "a", Ready)
			}
			checkInvariants(t, h)
		})
	}
}

func TestLeasedVerdictNeverCleared(t *testing.T) {
	h := newHL()
	k := KeyOf("t", "q")
	r := h.Register(k, "g", QueueOpts{}, base)
	markN(h, k, SourceCommit, base, "a")
	now := base
	for i := range 30 {
		c := takeOne(t, h, r, "a", now)
		until := now.Add(time.Duration(i-10) * 100 * time.Millisecond) // past, near and far expiries
		if h.CheckIn(r, []Result{{Cand: c, Verdict: Leased, Until: until}}, now) {
			t.Fatal("a lease park is not worth a wake")
		}
		wantState(t, h, r, "a", Wheel)
		now = now.Add(LeaseParkCap)
		h.WheelTick(now)
		wantState(t, h, r, "a", Ready)
	}
	checkInvariants(t, h)
}

func TestLeasedParkCappedAt1s(t *testing.T) {
	if LeasePad != 300*time.Millisecond || LeaseParkCap != time.Second {
		t.Fatalf("LeasePad %v LeaseParkCap %v", LeasePad, LeaseParkCap)
	}
	h := newHL()
	k := KeyOf("t", "q")
	r := h.Register(k, "g", QueueOpts{}, base)
	markN(h, k, SourceCommit, base, "a")
	now := base
	for _, tc := range []struct{ lease, want time.Duration }{
		{200 * time.Millisecond, 500 * time.Millisecond}, // T + 300 ms
		{700 * time.Millisecond, time.Second},
		{5 * time.Minute, time.Second}, // capped: a lost promote costs one probe per second
	} {
		c := takeOne(t, h, r, "a", now)
		h.CheckIn(r, []Result{{Cand: c, Verdict: Leased, Until: now.Add(tc.lease)}}, now)
		wantRevisit(t, h, r, "a", now.Add(tc.want))
		now = now.Add(tc.want)
		h.WheelTick(now)
	}
	checkInvariants(t, h)
}

func TestTookLeasedGoesToWheelNotReady(t *testing.T) {
	h := newHL()
	k := KeyOf("t", "q")
	r := h.Register(k, "g", QueueOpts{}, base)
	markN(h, k, SourceCommit, base, "a")
	c := takeOne(t, h, r, "a", base)
	if h.CheckIn(r, []Result{{Cand: c, Verdict: Took, Until: at(400 * time.Millisecond)}}, base) {
		t.Fatal("a leased took is not worth a wake")
	}
	wantRevisit(t, h, r, "a", at(400*time.Millisecond)) // lease expiry
	if cs := h.Take(r, 8, base); cs != nil {
		t.Fatalf("a leased took went back to ready: %v", names(cs))
	}
	h.WheelTick(at(400 * time.Millisecond))
	c = takeOne(t, h, r, "a", at(400*time.Millisecond))
	h.CheckIn(r, []Result{{Cand: c, Verdict: Took, Until: at(time.Hour)}}, at(400*time.Millisecond))
	wantRevisit(t, h, r, "a", at(1400*time.Millisecond)) // capped at 1 s
	checkInvariants(t, h)
}

func TestTookAutoAckReturnsToReady(t *testing.T) {
	for _, opts := range []QueueOpts{{}, {Delay: time.Second}} {
		h := newHL()
		k := KeyOf("t", "q")
		r := h.Register(k, "g", opts, base)
		markN(h, k, SourceCommit, base, "a")
		now := at(2 * time.Second)
		c := takeOne(t, h, r, "a", now)
		if !h.CheckIn(r, []Result{{Cand: c, Verdict: Took, AutoAck: true}}, now) {
			t.Fatalf("%+v: auto-ack took back to ready must wake", opts)
		}
		wantState(t, h, r, "a", Ready)
		checkInvariants(t, h)
	}
}

func TestTookAutoAckWindowDebounced(t *testing.T) {
	h := newHL()
	k := KeyOf("t", "q")
	W := 800 * time.Millisecond
	r := h.Register(k, "g", QueueOpts{Window: W}, base)
	markN(h, k, SourceCommit, base, "a")
	now := at(W)
	c := takeOne(t, h, r, "a", now)
	if h.CheckIn(r, []Result{{Cand: c, Verdict: Took, AutoAck: true}}, now) {
		t.Fatal("a debounced took is not worth a wake")
	}
	wantRevisit(t, h, r, "a", now.Add(W))
	if cs := h.Take(r, 8, now.Add(W-time.Nanosecond)); cs != nil {
		t.Fatalf("re-probed inside the window: %v", names(cs))
	}
	checkInvariants(t, h)
}

func TestRequeueKeepsPlace(t *testing.T) {
	h := newHL(shards(1))
	k := KeyOf("t", "q")
	r := h.Register(k, "g", QueueOpts{}, base)
	markN(h, k, SourceCommit, base, "a", "b")
	c := takeOne(t, h, r, "a", base)
	if !h.CheckIn(r, []Result{{Cand: c, Verdict: Requeue}}, base) {
		t.Fatal("requeue must wake")
	}
	if got := names(h.Take(r, 8, base)); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("order after requeue %v, want a back at its place (the head)", got)
	}
	checkInvariants(t, h)
}

func TestAbandonReappends(t *testing.T) {
	h := newHL()
	k := KeyOf("t", "q")
	r := h.Register(k, "g", QueueOpts{}, base)
	markN(h, k, SourceCommit, base, "a", "b", "c")
	cs := h.Take(r, 8, base)
	if len(cs) != 3 {
		t.Fatalf("Take = %v", names(cs))
	}
	h.Abandon(r, cs, base) // the drop guard of a dropped pop
	for _, n := range []string{"a", "b", "c"} {
		wantState(t, h, r, n, Ready)
	}
	// A drop guard firing after a reseed reclaimed (and someone re-took) the
	// entry is ignored.
	cs = h.Take(r, 8, base)
	h.Reseed(r, []ReseedRow{{Name: "a"}}, at(time.Minute))
	again := takeOne(t, h, r, "a", at(time.Minute))
	h.Abandon(r, cs, at(time.Minute))
	wantState(t, h, r, "a", Inflight)
	wantState(t, h, r, "b", Ready)
	h.CheckIn(r, []Result{{Cand: again, Verdict: Empty}}, at(time.Minute))
	wantState(t, h, r, "a", Idle)
	checkInvariants(t, h)
}

// ---------------------------------------------------------------- acking

// leasedTook checks out name and checks it in as a leased took.
func leasedTook(t *testing.T, h *Hotlist, r *Ring, name, id string, drained bool, now time.Time) Candidate {
	t.Helper()
	c := takeOne(t, h, r, name, now)
	h.CheckIn(r, []Result{{Cand: c, Verdict: Took, Until: now.Add(time.Minute), Drained: drained, PartitionID: id}}, now)
	wantState(t, h, r, name, Wheel)
	return c
}

func TestPromoteOnAckPendingMakesReady(t *testing.T) {
	h := newHL()
	k := KeyOf("t", "q")
	r := h.Register(k, "g", QueueOpts{}, base)
	markN(h, k, SourceCommit, base, "a")
	leasedTook(t, h, r, "a", "id-a", true, base)
	markN(h, k, SourceCommit, at(100*time.Millisecond), "a") // pushed during the lease
	now := at(200 * time.Millisecond)
	if !h.AckRelease(k, "g", "id-a", true, now) {
		t.Fatal("a promote must wake the queue")
	}
	// Claimable at once, not at lease expiry.
	takeOne(t, h, r, "a", now)
	// Unknown group or queue: nothing to do, wake only if pending.
	if h.AckRelease(k, "nobody", "id-a", false, now) || !h.AckRelease(KeyOf("t", "zz"), "g", "id-a", true, now) {
		t.Fatal("AckRelease without a ring must return pending")
	}
	checkInvariants(t, h)
}

func TestAckClearsOnlyDrainedWithoutMarkSince(t *testing.T) {
	type step func(h *Hotlist, k Key, r *Ring)
	nothing := func(*Hotlist, Key, *Ring) {}
	markAfter := func(h *Hotlist, k Key, r *Ring) { markN(h, k, SourceCommit, at(time.Millisecond), "a") }
	for _, tc := range []struct {
		name    string
		drained bool
		raceIn  bool // a mark between check-out and check-in
		after   step
		pending bool
		want    State
	}{
		{"drained-quiet-not-pending", true, false, nothing, false, Idle},
		{"drained-but-pending", true, false, nothing, true, Ready},
		{"not-drained", false, false, nothing, false, Ready},
		{"mark-during-lease", true, false, markAfter, false, Ready},
		{"mark-during-probe", true, true, nothing, false, Ready},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHL()
			k := KeyOf("t", "q")
			r := h.Register(k, "g", QueueOpts{}, base)
			markN(h, k, SourceCommit, base, "a")
			c := takeOne(t, h, r, "a", base)
			if tc.raceIn {
				markN(h, k, SourceCommit, base, "a")
			}
			h.CheckIn(r, []Result{{Cand: c, Verdict: Took, Until: at(time.Minute), Drained: tc.drained, PartitionID: "id-a"}}, base)
			tc.after(h, k, r)
			wake := h.AckRelease(k, "g", "id-a", tc.pending, at(10*time.Millisecond))
			wantState(t, h, r, "a", tc.want)
			if wake != (tc.want == Ready) {
				t.Fatalf("wake %v for state %v", wake, tc.want)
			}
			checkInvariants(t, h)
		})
	}
}

func TestAckNotDrainedKeepsEntry(t *testing.T) {
	// A 1000-message backlog consumed in batches of 100 has no in-lease
	// marks, yet 900 messages remain after the first batch: only the claim's
	// drained flag may let the ack clear the entry. Each next batch must be
	// claimable right after the ack, without waiting for the lease park.
	for _, pendingKnown := range []bool{false, true} {
		t.Run(fmt.Sprintf("pendingKnown=%v", pendingKnown), func(t *testing.T) {
			h := newHL()
			k := KeyOf("t", "q")
			r := h.Register(k, "g", QueueOpts{}, base)
			h.Mark(k, []PartMark{{Name: "a", Count: 1000}}, SourceCommit, base)
			backlog := 1000
			now := base
			for batch := 1; backlog > 0; batch++ {
				backlog -= 100
				leasedTook(t, h, r, "a", "id-a", backlog == 0, now)
				now = now.Add(10 * time.Millisecond) // well inside the 1 s park
				pending := pendingKnown && backlog > 0
				h.AckRelease(k, "g", "id-a", pending, now)
				if backlog > 0 {
					sl := wantState(t, h, r, "a", Ready)
					_ = sl
				}
				if batch > 10 {
					t.Fatal("runaway")
				}
			}
			wantState(t, h, r, "a", Idle)
			checkInvariants(t, h)
		})
	}
}

func TestAckLeavesReadyAndInflightAlone(t *testing.T) {
	h := newHL()
	k := KeyOf("t", "q")
	r := h.Register(k, "g", QueueOpts{}, base)
	markN(h, k, SourceCommit, base, "a")
	leasedTook(t, h, r, "a", "id-a", true, base)
	h.WheelTick(at(time.Second)) // the capped park ran out before the ack
	wantState(t, h, r, "a", Ready)
	if h.AckRelease(k, "g", "id-a", false, at(time.Second)) {
		t.Fatal("nothing pending, already ready: no wake")
	}
	wantState(t, h, r, "a", Ready)
	c := takeOne(t, h, r, "a", at(time.Second))
	h.AckRelease(k, "g", "id-a", false, at(time.Second))
	wantState(t, h, r, "a", Inflight)
	h.CheckIn(r, []Result{{Cand: c, Verdict: Empty}}, at(time.Second))
	wantState(t, h, r, "a", Idle)
	checkInvariants(t, h)
}

// ---------------------------------------------------------------- reseed

func TestReseedAddsMissingAndOverIncludes(t *testing.T) {
	h := newHL()
	k := KeyOf("t", "q")
	r := h.Register(k, "g", QueueOpts{}, base)
	markN(h, k, SourceCommit, base, "ready", "parked", "flying")
	c := h.Take(r, 8, base)
	for _, cc := range c {
		switch cc.Name {
		case "ready":
			h.CheckIn(r, []Result{{Cand: cc, Verdict: Requeue}}, base)
		case "parked":
			h.CheckIn(r, []Result{{Cand: cc, Verdict: Leased, Until: at(time.Minute)}}, base)
		}
	}
	before := map[string]uint32{}
	for _, n := range []string{"ready", "parked", "flying"} {
		before[n] = slotOf(h, r, n).epoch
	}
	rows := []ReseedRow{{Name: "ready", PartitionID: "1"}, {Name: "parked", PartitionID: "2"}, {Name: "flying", PartitionID: "3"}, {Name: "lost", PartitionID: "4"}, {Name: "leased-elsewhere", PartitionID: "5"}}
	if got := h.Reseed(r, rows, at(time.Second)); got != 2 {
		t.Fatalf("Reseed added %d, want 2 (only the missing ones)", got)
	}
	wantState(t, h, r, "ready", Ready)
	wantState(t, h, r, "parked", Wheel)
	wantState(t, h, r, "flying", Inflight)
	wantState(t, h, r, "lost", Ready)
	wantState(t, h, r, "leased-elsewhere", Ready)
	for n, e := range before {
		if slotOf(h, r, n).epoch != e+1 {
			t.Fatalf("%s: a reseed row is a mark and must bump the epoch", n)
		}
	}
	if st := h.Stats(); st.ReseedAdded != 2 {
		t.Fatalf("ReseedAdded %d", st.ReseedAdded)
	}
	// The over-included lease-held partition stays tracked: the tri-state
	// parks it rather than clearing it.
	cs := h.Take(r, 8, at(time.Second))
	for _, cc := range cs {
		if cc.Name == "leased-elsewhere" {
			h.CheckIn(r, []Result{{Cand: cc, Verdict: Leased, Until: at(time.Minute)}}, at(time.Second))
		}
	}
	wantState(t, h, r, "leased-elsewhere", Wheel)
	// Reseed rows teach partition ids to the ack hook.
	h.AckRelease(k, "g", "5", true, at(time.Second))
	wantState(t, h, r, "leased-elsewhere", Ready)
	checkInvariants(t, h)
}

// A reseed row is old backlog, not a fresh push: it becomes Ready even on a
// deferral queue (parking it for the whole delay would stall messages that
// are already visible); the empty verdict then schedules the exact revisit.
func TestReseedRowIsReadyEvenOnDeferralQueues(t *testing.T) {
	h := newHL()
	kd, kw := KeyOf("t", "delay"), KeyOf("t", "window")
	rd := h.Register(kd, "g", QueueOpts{Delay: time.Hour}, base)
	rw := h.Register(kw, "g", QueueOpts{Window: 700 * time.Millisecond}, base)
	h.Reseed(rd, []ReseedRow{{Name: "a"}}, base)
	h.Reseed(rw, []ReseedRow{{Name: "a"}}, base)
	wantState(t, h, rd, "a", Ready)
	wantState(t, h, rw, "a", Ready)
	// not yet visible: the empty verdict's visibility time bounds the revisit
	c := takeOne(t, h, rd, "a", base)
	h.CheckIn(rd, []Result{{Cand: c, Verdict: Empty, Until: at(200 * time.Millisecond)}}, base)
	wantRevisit(t, h, rd, "a", at(200*time.Millisecond))
	checkInvariants(t, h)
}

func TestReseedReclaimsStrandedInflight(t *testing.T) {
	h := newHL(func(c *Config) { c.StrandedAfter = 10 * time.Second })
	k := KeyOf("t", "q")
	r := h.Register(k, "g", QueueOpts{}, base)
	markN(h, k, SourceCommit, base, "a", "b")
	cs := h.Take(r, 8, base) // the pop is dropped: nobody checks these in
	rows := []ReseedRow{{Name: "a"}, {Name: "b"}}

	// A fresh in-flight entry is not reclaimed (its pop may still check in).
	if got := h.Reseed(r, rows, at(5*time.Second)); got != 0 {
		t.Fatalf("fresh in-flight reclaimed: added %d", got)
	}
	wantState(t, h, r, "a", Inflight)

	if got := h.Reseed(r, rows[:1], at(11*time.Second)); got != 1 {
		t.Fatalf("stranded in-flight not reclaimed: added %d", got)
	}
	wantState(t, h, r, "a", Ready)
	wantState(t, h, r, "b", Inflight) // not listed: left alone
	if st := h.Stats(); st.Reclaimed != 1 {
		t.Fatalf("Reclaimed %d", st.Reclaimed)
	}
	// The stale check-in of the dropped pop is ignored, whether the entry
	// sits in ready or was re-taken meanwhile.
	for _, c := range cs {
		if c.Name == "a" {
			h.CheckIn(r, []Result{{Cand: c, Verdict: Empty}}, at(12*time.Second))
			wantState(t, h, r, "a", Ready)
			fresh := takeOne(t, h, r, "a", at(12*time.Second))
			h.CheckIn(r, []Result{{Cand: c, Verdict: Empty}}, at(12*time.Second))
			wantState(t, h, r, "a", Inflight)
			h.CheckIn(r, []Result{{Cand: fresh, Verdict: Requeue}}, at(12*time.Second))
			wantState(t, h, r, "a", Ready)
		}
	}
	checkInvariants(t, h)
}

func TestReseedPhaseWithinMinOf15sAndInterval(t *testing.T) {
	for _, tc := range []struct {
		interval, wantMax time.Duration
	}{
		{30 * time.Second, 15 * time.Second},
		{4 * time.Second, 4 * time.Second},
	} {
		var maxes []time.Duration
		phases := []time.Duration{3 * time.Second, 1 * time.Second}
		h := newHL(func(c *Config) {
			c.ReseedInterval = tc.interval
			c.Jitter = func(max time.Duration) time.Duration {
				maxes = append(maxes, max)
				return phases[len(maxes)-1]
			}
		})
		k := KeyOf("t", "q")
		r1 := h.Register(k, "g1", QueueOpts{}, base)
		r2 := h.Register(k, "g2", QueueOpts{}, base)
		h.Register(k, "g1", QueueOpts{}, base) // already registered: no new phase
		if !slices.Equal(maxes, []time.Duration{tc.wantMax, tc.wantMax}) {
			t.Fatalf("interval %v: Jitter called with %v, want [%v %v] once per ring", tc.interval, maxes, tc.wantMax, tc.wantMax)
		}
		warm(h, r1, base)
		warm(h, r2, base)
		for i, r := range []*Ring{r1, r2} {
			if claim(h.BeginReseed(r, at(phases[i]-time.Nanosecond), false)) {
				t.Fatalf("ring %d reseeded before its phase", i)
			}
		}
		if got := claimed(h.DueReseeds(at(phases[1]))); len(got) != 1 || got[0] != r2 {
			t.Fatalf("DueReseeds at g2's phase = %v", got)
		}
		if got := claimed(h.DueReseeds(at(phases[0]))); len(got) != 1 || got[0] != r1 {
			t.Fatalf("DueReseeds at g1's phase = %v", got)
		}
	}
	// The default jitter stays in [0, max).
	for range 1000 {
		if d := randomJitter(15 * time.Second); d < 0 || d >= 15*time.Second {
			t.Fatalf("randomJitter = %v", d)
		}
	}
	if randomJitter(0) != 0 {
		t.Fatal("randomJitter(0)")
	}
}

func TestReseedRunsOnNonEmptyRing(t *testing.T) {
	h := newHL()
	k := KeyOf("t", "q")
	r := h.Register(k, "g", QueueOpts{}, base)
	warm(h, r, base)
	markN(h, k, SourceCommit, base, "busy1", "busy2")
	// "lost" was erroneously dropped from this busy ring (a missed hint).
	now := at(DefaultReseedInterval)
	got := claimed(h.DueReseeds(now))
	if len(got) != 1 || got[0] != r {
		t.Fatalf("DueReseeds on a non-empty ring = %v", got)
	}
	if h.Reseed(r, []ReseedRow{{Name: "busy1"}, {Name: "busy2"}, {Name: "lost"}}, now) != 1 {
		t.Fatal("the floor did not recover the lost partition")
	}
	endReseed(r, true, now)
	wantState(t, h, r, "lost", Ready)
	checkInvariants(t, h)
}

func TestEndReseedKeepsPhase(t *testing.T) {
	const phase = 7 * time.Second
	iv := DefaultReseedInterval
	setup := func() (*Hotlist, *Ring) {
		h := newHL(func(c *Config) { c.Jitter = func(time.Duration) time.Duration { return phase } })
		r := h.Register(KeyOf("t", "q"), "g", QueueOpts{}, base)
		return h, r
	}
	due := func(h *Hotlist, r *Ring, now time.Time) bool {
		got := claimed(h.DueReseeds(now))
		return len(got) == 1 && got[0] == r
	}
	notDue := func(t *testing.T, h *Hotlist, r *Ring, next time.Time) {
		t.Helper()
		if due(h, r, next.Add(-time.Nanosecond)) {
			t.Fatalf("reseed due before %v", next.Sub(base))
		}
	}

	t.Run("on-time", func(t *testing.T) {
		h, r := setup()
		warm(h, r, base) // the cold pop-path reseed does not move the phase
		notDue(t, h, r, at(phase))
		if !due(h, r, at(phase)) {
			t.Fatal("not due at the phase")
		}
		endReseed(r, true, at(phase+500*time.Millisecond)) // the scan took 500 ms
		notDue(t, h, r, at(phase+iv))
		warm(h, r, at(20*time.Second)) // a forced reseed between floors
		notDue(t, h, r, at(phase+iv))
		if !due(h, r, at(phase+iv)) {
			t.Fatal("not due one interval after the previous due time")
		}
		endReseed(r, false, at(phase+iv)) // a failed reseed is retried at the next tick
		if !due(h, r, at(phase+iv+2*time.Second)) {
			t.Fatal("a failed reseed was not retried")
		}
		endReseed(r, true, at(phase+iv+2*time.Second)) // late by a tick: phase kept
		notDue(t, h, r, at(phase+2*iv))
		if !due(h, r, at(phase+2*iv)) {
			t.Fatal("phase lost after a late reseed")
		}
	})

	// After an outage longer than an interval (PostgreSQL down, every floor
	// failing), every overdue ring is reseeded on the same recovery tick. If
	// each then restarts at "now + interval", all of them share one phase and
	// reseed as the synchronised storm the fixed random phase exists to avoid.
	t.Run("late-by-more-than-an-interval", func(t *testing.T) {
		h, r := setup()
		warm(h, r, base)
		recovery := at(phase + 4*iv + 13*time.Second)
		if !due(h, r, recovery) {
			t.Fatal("not due after the outage")
		}
		endReseed(r, true, recovery)
		next := at(phase + 5*iv) // the first phase-aligned time after recovery
		notDue(t, h, r, next)
		if !due(h, r, next) {
			t.Fatalf("after a reseed %v late the ring lost its phase (%v + k·%v)", recovery.Sub(at(phase+iv)), phase, iv)
		}
	})
}

func TestColdRingUntilFirstReseed(t *testing.T) {
	h := newHL(func(c *Config) { c.Jitter = func(time.Duration) time.Duration { return 5 * time.Second } })
	k := KeyOf("t", "q")
	r := h.Register(k, "g", QueueOpts{}, base)
	if !r.Cold() {
		t.Fatal("a new ring is cold")
	}
	if !claim(h.BeginReseed(r, base, false)) {
		t.Fatal("a cold ring may be reseeded before its phase")
	}
	if claim(h.BeginReseed(r, base, true)) {
		t.Fatal("a second concurrent reseed of one ring was claimed")
	}
	if got := claimed(h.DueReseeds(at(time.Hour))); len(got) != 0 {
		t.Fatalf("DueReseeds claimed a ring that is being reseeded: %v", got)
	}
	endReseed(r, false, base)
	if !r.Cold() {
		t.Fatal("a failed reseed warmed the ring")
	}
	if !claim(h.BeginReseed(r, base, false)) {
		t.Fatal("after a failure the cold ring is claimable again")
	}
	endReseed(r, true, base)
	if r.Cold() {
		t.Fatal("a successful reseed must warm the ring")
	}
	if claim(h.BeginReseed(r, base, false)) {
		t.Fatal("a warm ring is not reseeded before it is due")
	}
	if !claim(h.BeginReseed(r, base, true)) {
		t.Fatal("force must claim a warm ring")
	}
	endReseed(r, true, base)
	if again := h.Register(k, "g", QueueOpts{}, base); again != r || again.Cold() {
		t.Fatal("re-registering must return the same warm ring")
	}
	if st := h.Stats(); st.Reseeds != 2 {
		t.Fatalf("Reseeds %d, want 2 successful", st.Reseeds)
	}
}

// ------------------------------------------------------ memory and sweep

func TestIdleSweepSecondChance(t *testing.T) {
	h := newHL()
	k := KeyOf("t", "q")
	r := h.Register(k, "g", QueueOpts{}, base)
	markN(h, k, SourceCommit, base, "a")
	c := takeOne(t, h, r, "a", base)
	h.CheckIn(r, []Result{{Cand: c, Verdict: Empty}}, base) // last use; every entry IDLE
	if n := h.Sweep(at(time.Minute)); n != 0 {
		t.Fatal("dropped within one sweep of the last use")
	}
	// Any access in between grants another full interval.
	if h.Lookup(k, "g") == nil {
		t.Fatal("lookup")
	}
	if n := h.Sweep(at(2 * time.Minute)); n != 0 {
		t.Fatal("dropped right after an access")
	}
	if n := h.Sweep(at(3 * time.Minute)); n != 1 {
		t.Fatalf("not dropped on the second sweep after the last use (dropped %d)", n)
	}
	if h.Lookup(k, "g") != nil {
		t.Fatal("state survived the sweep")
	}
	st := h.Stats()
	if st.Queues != 0 || st.Rings != 0 || st.Swept != 1 {
		t.Fatalf("stats after sweep %+v", st)
	}
	// Every kind of access counts as use.
	for name, touch := range map[string]func(r *Ring){
		"lookup": func(*Ring) { h.Lookup(k, "g") },
		"ack":    func(*Ring) { h.AckRelease(k, "g", "id", false, base) },
		"opts":   func(*Ring) { h.SetOpts(k, QueueOpts{}) },
		"take":   func(r *Ring) { h.Take(r, 1, base) },
		"check":  func(r *Ring) { h.CheckIn(r, nil, base) },
	} {
		r := h.Register(k, "g", QueueOpts{}, base)
		h.Sweep(base) // clears the flag
		touch(r)
		if h.Sweep(base) != 0 {
			t.Fatalf("%s did not count as an access", name)
		}
		if h.Sweep(base) != 1 {
			t.Fatalf("%s: not dropped two sweeps later", name)
		}
	}
	checkInvariants(t, h)
}

func TestIdleSweepSkipsHeldQueue(t *testing.T) {
	h := newHL()
	k := KeyOf("t", "q")
	h.Register(k, "g", QueueOpts{}, base)
	q := h.acquire(k) // an operation in progress
	for range 3 {
		if h.Sweep(base) != 0 {
			t.Fatal("swept a queue an operation holds")
		}
	}
	q.release()
	if h.Sweep(base) != 1 {
		t.Fatal("not dropped once released and untouched")
	}
}

func TestIdleSweepSkipsNonIdleQueue(t *testing.T) {
	for _, st := range []State{Ready, Wheel, Inflight} {
		h := newHL()
		k := KeyOf("t", "q")
		r := h.Register(k, "g", QueueOpts{}, base)
		markN(h, k, SourceCommit, base, "a")
		switch st {
		case Wheel:
			c := takeOne(t, h, r, "a", base)
			h.CheckIn(r, []Result{{Cand: c, Verdict: Leased, Until: at(time.Hour)}}, base)
		case Inflight:
			takeOne(t, h, r, "a", base)
		}
		wantState(t, h, r, "a", st)
		for range 4 {
			if h.Sweep(base) != 0 {
				t.Fatalf("swept a queue with a %v entry", st)
			}
		}
		checkInvariants(t, h)
	}
}

func TestDropGroupOnlyThatTenant(t *testing.T) {
	h := newHL()
	type ring struct{ tenant, queue, group string }
	all := []ring{
		{"t1", "orders", "workers"}, {"t1", "jobs", "workers"}, {"t1", "orders", "audit"},
		{"t2", "orders", "workers"}, {"t1x", "orders", "workers"},
	}
	rs := map[ring]*Ring{}
	for _, x := range all {
		k := KeyOf(x.tenant, x.queue)
		rs[x] = h.Register(k, x.group, QueueOpts{}, base)
		markN(h, k, SourceCommit, base, "p")
	}
	if n := h.DropGroup("t1", "", "workers"); n != 2 {
		t.Fatalf("DropGroup across t1's queues dropped %d, want 2", n)
	}
	for _, x := range all {
		got := h.Lookup(KeyOf(x.tenant, x.queue), x.group)
		gone := x.tenant == "t1" && x.group == "workers"
		if (got == nil) != gone {
			t.Fatalf("%+v: present=%v after dropping t1/workers", x, got != nil)
		}
	}
	if n := h.DropGroup("t1", "orders", "audit"); n != 1 {
		t.Fatalf("DropGroup on one queue dropped %d", n)
	}
	if h.DropGroup("t9", "", "workers") != 0 {
		t.Fatal("dropped another tenant's ring")
	}
	st := h.Stats()
	if st.Rings != 2 || st.RingsDrop != 3 || st.Ready != 2 {
		t.Fatalf("stats %+v", st)
	}
	// Re-registering after a drop cold-starts a fresh ring.
	if r := h.Register(KeyOf("t1", "orders"), "workers", QueueOpts{}, base); !r.Cold() || slotOf(h, r, "p").state != Idle {
		t.Fatal("a dropped ring survived")
	}
	h.DropQueue(KeyOf("t2", "orders"))
	h.DropQueue(KeyOf("t2", "nothing"))
	checkInvariants(t, h)
}

// The ring counters must stay exact when a consumer group (or queue) is
// deleted while one of its pops is between check-out and check-in: the
// pop's late check-in acts on the detached ring.
func TestDropGroupDuringPopKeepsCountersExact(t *testing.T) {
	for _, drop := range []string{"group", "queue"} {
		t.Run(drop, func(t *testing.T) {
			h := newHL()
			k := KeyOf("t", "q")
			r := h.Register(k, "g", QueueOpts{}, base)
			markN(h, k, SourceCommit, base, "a", "b")
			cs := h.Take(r, 8, base)
			if drop == "group" {
				h.DropGroup("t", "q", "g")
			} else {
				h.DropQueue(k)
			}
			h.CheckIn(r, []Result{{Cand: cs[0], Verdict: Requeue}, {Cand: cs[1], Verdict: Leased, Until: at(time.Second)}}, base)
			h.WheelTick(at(time.Hour))
			checkInvariants(t, h)
			if st := h.Stats(); st.Ready != 0 || st.Wheel != 0 || st.Inflight != 0 {
				t.Fatalf("no ring left, yet Stats ready/wheel/inflight = %d/%d/%d", st.Ready, st.Wheel, st.Inflight)
			}
		})
	}
}

// --------------------------------------------------------------- wheel

func TestWheelTickPromotesDueAndReturnsKeys(t *testing.T) {
	h := newHL()
	k1, k2, k3 := KeyOf("t", "q1"), KeyOf("t", "q2"), KeyOf("t", "q3")
	r1 := h.Register(k1, "g", QueueOpts{Delay: time.Second}, base)
	h.Register(k1, "g2", QueueOpts{Delay: time.Second}, base)
	r2 := h.Register(k2, "g", QueueOpts{Delay: 5 * time.Second}, base)
	h.Register(k3, "g", QueueOpts{}, base)
	markN(h, k1, SourceCommit, base, "a", "b")
	markN(h, k2, SourceCommit, base, "a")
	markN(h, k3, SourceCommit, base, "a") // ready, nothing to promote
	now := at(time.Second + DelayPad)
	if got := h.WheelTick(now); !slices.Equal(got, []Key{k1}) {
		t.Fatalf("WheelTick = %v, want [%s] once", got, k1)
	}
	wantState(t, h, r1, "a", Ready)
	wantState(t, h, r1, "b", Ready)
	wantState(t, h, r2, "a", Wheel)
	if got := h.WheelTick(now); got != nil {
		t.Fatalf("second tick = %v", got)
	}
	if !r1.Ready(now) || r2.Ready(now) || !r2.Ready(at(5*time.Second+DelayPad)) {
		t.Fatal("Ring.Ready must report ready or due-wheel entries only")
	}
	checkInvariants(t, h)
}

func TestStaleHeapEntriesDiscardedLazily(t *testing.T) {
	h := newHL(shards(1))
	k := KeyOf("t", "q")
	r := h.Register(k, "g", QueueOpts{}, base)
	s := r.subs[0]
	park := func(name string, now time.Time) {
		t.Helper()
		c := takeOne(t, h, r, name, now)
		h.CheckIn(r, []Result{{Cand: c, Verdict: Leased, Until: now.Add(time.Hour), PartitionID: "id-" + name}}, now)
	}

	// A slot that left the wheel keeps its heap entry until a drain meets
	// it, and that stale entry must not resurrect the (now IDLE) slot.
	markN(h, k, SourceCommit, base, "a")
	park("a", base) // heap: a@1s
	h.AckRelease(k, "g", "id-a", true, base)
	c := takeOne(t, h, r, "a", base)
	h.CheckIn(r, []Result{{Cand: c, Verdict: Empty}}, base)
	wantState(t, h, r, "a", Idle)
	if len(s.wheel) != 1 {
		t.Fatalf("heap %d: the stale entry should still be there (lazy)", len(s.wheel))
	}
	if got := h.WheelTick(at(time.Second)); got != nil {
		t.Fatalf("a stale entry fired: %v", got)
	}
	if cs := h.Take(r, 8, at(time.Second)); cs != nil {
		t.Fatalf("a stale entry was checked out: %v", names(cs))
	}
	wantState(t, h, r, "a", Idle)

	// A slot rescheduled later: the old, earlier entry is discarded, not fired.
	markN(h, k, SourceCommit, at(2*time.Second), "b")
	park("b", at(2*time.Second)) // b@3s
	h.AckRelease(k, "g", "id-b", true, at(2500*time.Millisecond))
	park("b", at(2500*time.Millisecond)) // b@3.5s, b@3s stale
	if len(s.wheel) < 2 {
		t.Fatalf("heap holds %d entries, want the stale ones kept until a drain", len(s.wheel))
	}
	if got := h.WheelTick(at(3 * time.Second)); got != nil {
		t.Fatalf("a stale entry fired: %v", got)
	}
	wantState(t, h, r, "b", Wheel)
	if len(s.wheel) != 1 {
		t.Fatalf("the drain kept %d heap entries, want only the live one", len(s.wheel))
	}
	if cs := h.Take(r, 8, at(3*time.Second)); cs != nil {
		t.Fatalf("took %v on a stale entry", names(cs))
	}
	if got := h.WheelTick(at(3500 * time.Millisecond)); !slices.Equal(got, []Key{k}) {
		t.Fatalf("live entry did not fire: %v", got)
	}
	wantState(t, h, r, "b", Ready)
	c = takeOne(t, h, r, "b", at(3500*time.Millisecond))
	h.CheckIn(r, []Result{{Cand: c, Verdict: Empty}}, at(3500*time.Millisecond))

	// Under churn the stale entries pile up below a live, earlier one; the
	// heap stays bounded by compaction.
	now := at(10 * time.Second)
	markN(h, k, SourceCommit, now, "c")
	park("c", now) // live, earliest: stays on top
	markN(h, k, SourceCommit, now, "d")
	park("d", now)
	for range 500 {
		now = now.Add(time.Millisecond)
		h.AckRelease(k, "g", "id-d", true, now)
		park("d", now)
		h.WheelTick(now)
	}
	if n := len(s.wheel); n > 64 {
		t.Fatalf("heap grew to %d entries for 2 live ones", n)
	}
	checkInvariants(t, h)
}

// ------------------------------------------------------------ observing

func TestTopRingsRankedStable(t *testing.T) {
	h := newHL()
	mk := func(queue, group string, nReady, nWheel, nInflight int) {
		k := KeyOf("t", queue)
		r := h.Register(k, group, QueueOpts{}, base)
		total := nReady + nWheel + nInflight
		var ps []string
		for i := range total {
			ps = append(ps, fmt.Sprintf("%s-%s-%d", queue, group, i))
		}
		// Marks reach every ring of the queue: give each ring its own queue
		// or register the others after.
		for _, p := range ps {
			h.Reseed(r, []ReseedRow{{Name: p}}, base)
		}
		cs := h.Take(r, nWheel+nInflight, base)
		for i, c := range cs {
			if i < nWheel {
				h.CheckIn(r, []Result{{Cand: c, Verdict: Leased, Until: at(time.Hour)}}, base)
			}
		}
	}
	mk("b", "g", 3, 0, 0)
	mk("a", "g", 1, 2, 0) // ties b's 3
	mk("c", "g", 5, 0, 0)
	mk("d", "g", 0, 0, 9) // only in flight: ranked by ready + wheel = 0
	h.Register(KeyOf("t", "e"), "g", QueueOpts{}, base)
	mk("a", "h", 0, 3, 0) // ties too; group breaks it
	want := []string{"c/g", "a/g", "a/h", "b/g", "d/g"}
	for range 50 {
		var got []string
		for _, rs := range h.TopRings(10) {
			got = append(got, rs.Queue+"/"+rs.Group)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("TopRings = %v, want %v", got, want)
		}
	}
	top := h.TopRings(2)
	if len(top) != 2 || top[0].Queue != "c" || top[0].Ready != 5 || top[1].Wheel != 2 || top[1].Ready != 1 {
		t.Fatalf("TopRings(2) = %+v", top)
	}
	if top[0].Tenant != "t" {
		t.Fatalf("tenant %q", top[0].Tenant)
	}
}

// Two tenants with the same queue and group names and the same load are
// common on a shared cell. Their order must not depend on map iteration,
// or the TOPN listing shows an arbitrary, unstable subset.
func TestTopRingsStableAcrossTenants(t *testing.T) {
	h := newHL()
	for _, tenant := range []string{"t-b", "t-a", "t-c"} {
		k := KeyOf(tenant, "orders")
		r := h.Register(k, "workers", QueueOpts{}, base)
		h.Reseed(r, []ReseedRow{{Name: "p"}}, base)
	}
	for i := range 200 {
		top := h.TopRings(1)
		if len(top) != 1 || top[0].Tenant != "t-a" {
			t.Fatalf("call %d: TopRings(1) = %+v, want the tie broken by tenant (t-a)", i, top)
		}
		all := h.TopRings(3)
		if all[0].Tenant != "t-a" || all[1].Tenant != "t-b" || all[2].Tenant != "t-c" {
			t.Fatalf("call %d: order %s,%s,%s", i, all[0].Tenant, all[1].Tenant, all[2].Tenant)
		}
	}
}

func TestStatsCountersMatchStates(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	h := newHL(shards(3), func(c *Config) { c.WindowBatch = 4 })
	type rq struct {
		key Key
		r   *Ring
	}
	var rings []rq
	optsFor := []QueueOpts{{}, {Delay: 300 * time.Millisecond}, {Window: 200 * time.Millisecond}}
	for qi := range 3 {
		k := KeyOf(fmt.Sprintf("t%d", qi%2), fmt.Sprintf("q%d", qi))
		for _, g := range []string{"g1", "g2"} {
			rings = append(rings, rq{k, h.Register(k, g, optsFor[qi], base)})
		}
	}
	now := base
	var out [][]Candidate
	var outRing []*Ring
	for step := range 5000 {
		x := rings[rng.IntN(len(rings))]
		p := fmt.Sprintf("p%d", rng.IntN(20))
		switch rng.IntN(10) {
		case 0, 1:
			h.Mark(x.key, []PartMark{{Name: p, Count: 1 + rng.IntN(3)}}, Source(rng.IntN(4)), now)
		case 2:
			if cs := h.Take(x.r, 1+rng.IntN(5), now); cs != nil {
				out, outRing = append(out, cs), append(outRing, x.r)
			}
		case 3, 4:
			if len(out) == 0 {
				continue
			}
			i := rng.IntN(len(out))
			var res []Result
			for _, c := range out[i] {
				res = append(res, Result{Cand: c, Verdict: Verdict(rng.IntN(4)), AutoAck: rng.IntN(2) == 0,
					Drained: rng.IntN(2) == 0, Until: now.Add(time.Duration(rng.IntN(3000)) * time.Millisecond),
					PartitionID: "id-" + c.Name})
			}
			if rng.IntN(8) == 0 {
				h.Abandon(outRing[i], out[i], now)
			} else {
				h.CheckIn(outRing[i], res, now)
			}
			out, outRing = slices.Delete(out, i, i+1), slices.Delete(outRing, i, i+1)
		case 5:
			h.AckRelease(x.key, x.r.Group(), "id-"+p, rng.IntN(2) == 0, now)
		case 6:
			h.WheelTick(now)
		case 7:
			now = now.Add(time.Duration(rng.IntN(700)) * time.Millisecond)
		case 8:
			h.Reseed(x.r, []ReseedRow{{Name: p, PartitionID: "id-" + p}}, now)
		case 9:
			h.Sweep(now)
			h.TakeWakes()
			// A swept queue is forgotten: later callers register afresh
			// (holding a ring across a sweep is not a supported sequence).
			for i, x := range rings {
				if h.Lookup(x.key, x.r.Group()) != x.r {
					rings[i].r = h.Register(x.key, x.r.Group(), optsFor[i/2], now)
				}
			}
		}
		if step%50 == 0 {
			checkInvariants(t, h)
			if t.Failed() {
				t.Fatalf("step %d", step)
			}
		}
	}
	checkInvariants(t, h)
}

func TestTraceOnlyMatchingPrefix(t *testing.T) {
	var mu sync.Mutex
	events := map[Key][]string{}
	h := newHL(func(c *Config) {
		c.TracePrefix = "ord"
		c.Trace = func(key Key, event string, kv ...any) {
			mu.Lock()
			events[key] = append(events[key], event)
			mu.Unlock()
		}
	})
	ko, kj := KeyOf("t", "orders"), KeyOf("t", "jobs")
	ro := h.Register(ko, "g", QueueOpts{}, base)
	rj := h.Register(kj, "g", QueueOpts{}, base)
	for _, x := range []struct {
		k Key
		r *Ring
	}{{ko, ro}, {kj, rj}} {
		markN(h, x.k, SourceCommit, base, "a")
		cs := h.Take(x.r, 1, base)
		h.CheckIn(x.r, []Result{{Cand: cs[0], Verdict: Empty}}, base)
	}
	if len(events[kj]) != 0 {
		t.Fatalf("untraced queue emitted %v", events[kj])
	}
	got := strings.Join(events[ko], ",")
	if got != "register,mark,take,checkin" {
		t.Fatalf("trace of orders = %s", got)
	}
	// Off by default.
	h2 := newHL()
	if h2.Register(ko, "g", QueueOpts{}, base).q.traced {
		t.Fatal("tracing on without a prefix")
	}
}

func TestConfigDefaults(t *testing.T) {
	c := New(Config{}).Config()
	if c.Shards != 8 || c.WindowBatch != 100 || c.ReseedInterval != 30*time.Second ||
		c.MaxPhase != 15*time.Second || c.StrandedAfter != 10*time.Second || c.Jitter == nil {
		t.Fatalf("defaults %+v", c)
	}
	if got := New(Config{Shards: 3}).Config().Shards; got != 3 {
		t.Fatalf("Shards %d", got)
	}
	if Idle.String() != "IDLE" || Inflight.String() != "INFLIGHT" {
		t.Fatal("State.String")
	}
}

// A stranded Inflight entry whose partition has nothing pending is never
// listed by a reseed; ending the walk reclaims it so the queue can be swept.
func TestEndReseedReclaimsUnlistedStrandedInflight(t *testing.T) {
	h := newHL(func(c *Config) { c.StrandedAfter = 10 * time.Second })
	k := KeyOf("t", "q")
	r := h.Register(k, "g", QueueOpts{}, base)
	markN(h, k, SourceCommit, base, "a")
	h.Take(r, 8, base) // dropped pop
	if !claim(h.BeginReseed(r, at(5*time.Second), true)) {
		t.Fatal("reseed not claimed")
	}
	h.Reseed(r, nil, at(5*time.Second))
	endReseed(r, true, at(5*time.Second))
	wantState(t, h, r, "a", Inflight) // still fresh
	claim(h.BeginReseed(r, at(11*time.Second), true))
	h.Reseed(r, nil, at(11*time.Second))
	endReseed(r, true, at(11*time.Second))
	wantState(t, h, r, "a", Ready)
	if st := h.Stats(); st.Inflight != 0 || st.Reclaimed != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// ---------------------------------------------------------------- scale

func TestTenThousandQuietMarksOneWakePerTick(t *testing.T) {
	h := newHL()
	k := KeyOf("t", "busy")
	h.Register(k, "g", QueueOpts{}, base)
	for i := range 10_000 {
		// 500 partitions marked 20 times each: idle->ready and epoch bumps.
		if markN(h, k, SourceLocal, at(time.Duration(i)*time.Microsecond), fmt.Sprintf("p%d", i%500)) {
			t.Fatal("a local mark must be quiet")
		}
	}
	if got := h.TakeWakes(); !slices.Equal(got, []Key{k}) {
		t.Fatalf("TakeWakes = %d keys %v, want the one marked queue", len(got), got)
	}
	if got := h.TakeWakes(); got != nil {
		t.Fatalf("second TakeWakes = %v, want nil", got)
	}

	// Three queues (one with two rings, one without a ring) marked 10,000 times in all.
	keys := []Key{KeyOf("t", "a"), KeyOf("t", "b"), KeyOf("u", "a")}
	h.Register(keys[0], "g", QueueOpts{}, base)
	h.Register(keys[1], "g", QueueOpts{}, base)
	h.Register(keys[1], "g2", QueueOpts{}, base)
	for i := range 10_000 {
		markN(h, keys[i%3], SourceLocal, base, fmt.Sprintf("p%d", i%97))
	}
	got := h.TakeWakes()
	slices.SortFunc(got, func(a, b Key) int { return strings.Compare(a.s, b.s) })
	if !slices.Equal(got, keys) {
		t.Fatalf("TakeWakes = %v, want one wake per marked queue %v", got, keys)
	}
	if got := h.TakeWakes(); got != nil {
		t.Fatalf("second TakeWakes = %v, want nil", got)
	}
	if st := h.Stats(); st.MarksLocal != 20_000 {
		t.Fatalf("MarksLocal = %d", st.MarksLocal)
	}
	checkInvariants(t, h)
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

func TestHundredThousandRandomNamesBoundedAfterTwoSweeps(t *testing.T) {
	const pops = 100_000
	h := newHL()
	rng := rand.New(rand.NewPCG(1, 2))
	before := heapInUse()
	parts := []PartMark{{Name: "p0", Count: 1}}
	for i := range pops {
		// One pop on a random queue name: the ring is registered, the
		// partition it learned of is checked out and found empty.
		now := at(time.Duration(i) * time.Microsecond)
		k := KeyOf("tenant", fmt.Sprintf("random-%016x", rng.Uint64()))
		r := h.Register(k, "g", QueueOpts{}, now)
		h.Mark(k, parts, SourceLocal, now)
		if i%1000 == 999 {
			h.TakeWakes() // the wake tick
		}
		cs := h.Take(r, 16, now)
		if len(cs) != 1 {
			t.Fatalf("pop %d: Take = %v", i, names(cs))
		}
		h.CheckIn(r, []Result{{Cand: cs[0], Verdict: Empty}}, now)
	}
	peak := heapInUse()
	st := h.Stats()
	if st.Queues != pops || st.Rings != pops || st.Ready+st.Wheel+st.Inflight != 0 {
		t.Fatalf("after the pops: %+v", st)
	}
	if n := h.Sweep(at(time.Minute)); n != 0 {
		t.Fatalf("first sweep dropped %d queues used within the interval", n)
	}
	if n := h.Sweep(at(2 * time.Minute)); n != pops {
		t.Fatalf("second sweep dropped %d queues, want %d", n, pops)
	}
	st = h.Stats()
	if st.Queues != 0 || st.Rings != 0 || st.Swept != pops {
		t.Fatalf("after two sweeps: %+v", st)
	}
	after := heapInUse()
	runtime.KeepAlive(h)
	mb := func(b uint64) float64 { return float64(b) / (1 << 20) }
	t.Logf("heap in use: %.1f MB before, %.1f MB with %d queues, %.1f MB after two sweeps",
		mb(before), mb(peak), pops, mb(after))
	if after > before+2<<20 {
		t.Fatalf("heap in use %.1f MB after two sweeps, %.1f MB before: ring memory not bounded", mb(after), mb(before))
	}
	checkInvariants(t, h)
}
