package hotlist

import (
	"fmt"
	"runtime"
	"testing"
)

// Speed of the state machine (docs/hotlist.md, "Speed of the state machine"):
//
//	go test -run '^$' -bench . -benchmem ./hotlist/

// benchParts returns n single-partition marks, built before any timing.
func benchParts(n int) [][]PartMark {
	out := make([][]PartMark, n)
	for i := range out {
		out[i] = []PartMark{{Name: fmt.Sprintf("p%d", i), Count: 1}}
	}
	return out
}

// benchQueue returns a Hotlist with one queue of the given number of group
// rings and the key of the queue.
func benchQueue(rings int) (*Hotlist, []*Ring, Key) {
	h := newHL()
	k := KeyOf("tenant", "bench")
	rs := make([]*Ring, rings)
	for g := range rs {
		rs[g] = h.Register(k, fmt.Sprintf("g%d", g), QueueOpts{}, base)
	}
	return h, rs, k
}

// drain checks every ready entry of the rings out and back in as Empty, so
// every entry is Idle again (outside the timed region).
func drain(b *testing.B, h *Hotlist, rs []*Ring) {
	b.Helper()
	for _, r := range rs {
		for {
			cs := h.Take(r, 256, base)
			if cs == nil {
				break
			}
			res := make([]Result, len(cs))
			for i, c := range cs {
				res[i] = Result{Cand: c, Verdict: Empty}
			}
			h.CheckIn(r, res, base)
		}
	}
}

// benchMark measures one single-partition mark per op.
//
// pending: the partition is already Ready, so a mark is an epoch bump.
// Otherwise every mark is an Idle -> Ready transition: it cycles over a set
// of idle partitions, and re-idles them (untimed) once all are Ready.
func benchMark(b *testing.B, src Source, rings int, pending bool) {
	h, rs, k := benchQueue(rings)
	const set = 4096
	parts := benchParts(set)
	for _, p := range parts {
		h.Mark(k, p, SourceCommit, base) // intern every name, every slot exists
	}
	if !pending {
		drain(b, h, rs)
	}
	h.TakeWakes()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		j := i % set
		if !pending && j == 0 && i > 0 {
			b.StopTimer()
			drain(b, h, rs)
			b.StartTimer()
		}
		h.Mark(k, parts[j], src, base)
	}
	b.StopTimer()
	checkInvariants(b, h)
}

func BenchmarkMark(b *testing.B) {
	for _, rings := range []int{1, 4} {
		b.Run(fmt.Sprintf("rings=%d/pending", rings), func(b *testing.B) { benchMark(b, SourceLocal, rings, true) })
		b.Run(fmt.Sprintf("rings=%d/idle-to-ready", rings), func(b *testing.B) { benchMark(b, SourceLocal, rings, false) })
	}
}

func BenchmarkMarkRemote(b *testing.B) {
	for _, rings := range []int{1, 4} {
		b.Run(fmt.Sprintf("rings=%d/pending", rings), func(b *testing.B) { benchMark(b, SourceRemote, rings, true) })
		b.Run(fmt.Sprintf("rings=%d/idle-to-ready", rings), func(b *testing.B) { benchMark(b, SourceRemote, rings, false) })
	}
}

// BenchmarkTakeCheckIn measures one Take of k candidates and the CheckIn
// of their k verdicts per op, on a ring of 10,000 Ready partitions: k=16
// (the old check-out of a partitions=1 pop, the names without a suffix) and
// k=4 (the current one). Requeue puts every entry back (a steady state);
// Empty clears them, so the ring is re-marked (untimed) once it runs dry.
func BenchmarkTakeCheckIn(b *testing.B) {
	const size = 10_000
	for _, v := range []struct {
		name    string
		verdict Verdict
		k       int
	}{{"requeue", Requeue, 16}, {"empty", Empty, 16}, {"requeue-k4", Requeue, 4}, {"empty-k4", Empty, 4}} {
		k := v.k
		b.Run(v.name, func(b *testing.B) {
			h, rs, key := benchQueue(1)
			r := rs[0]
			parts := benchParts(size)
			refill := func() {
				for _, p := range parts {
					h.Mark(key, p, SourceCommit, base)
				}
			}
			refill()
			res := make([]Result, 0, k)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				cs := h.Take(r, k, base)
				if len(cs) < k {
					b.StopTimer()
					h.CheckIn(r, toResults(res[:0], cs, v.verdict), base)
					refill()
					b.StartTimer()
					cs = h.Take(r, k, base)
				}
				h.CheckIn(r, toResults(res[:0], cs, v.verdict), base)
			}
			b.StopTimer()
			checkInvariants(b, h)
		})
	}
}

func toResults(dst []Result, cs []Candidate, v Verdict) []Result {
	for _, c := range cs {
		dst = append(dst, Result{Cand: c, Verdict: v})
	}
	return dst
}

// partitionBytes measures the heap cost of tracking n partitions: intern is
// the per-queue interning cost of a partition (name index, id table; the
// name strings themselves are the caller's and excluded), slot the cost of
// one partition in one more group ring.
func partitionBytes(n int) (intern, slot float64) {
	parts := benchParts(n)
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	h0 := heap()
	h, _, k := benchQueue(1)
	for _, p := range parts {
		h.Mark(k, p, SourceCommit, base)
	}
	h1 := heap()
	h.Register(k, "second", QueueOpts{}, base)
	for _, p := range parts {
		h.Mark(k, p, SourceCommit, base)
	}
	h2 := heap()
	runtime.KeepAlive(h)
	runtime.KeepAlive(parts)
	slot = float64(int64(h2)-int64(h1)) / float64(n)
	intern = float64(int64(h1)-int64(h0))/float64(n) - slot
	return intern, slot
}

// BenchmarkBytesPerPartition reports the bytes per tracked partition for
// 100,000 partitions: B/part-intern once per queue, B/part-ring once per
// group ring. (Its ns/op is the cost of the whole measurement.)
func BenchmarkBytesPerPartition(b *testing.B) {
	var intern, slot float64
	for i := 0; i < b.N; i++ {
		intern, slot = partitionBytes(100_000)
	}
	b.ReportMetric(intern, "B/part-intern")
	b.ReportMetric(slot, "B/part-ring")
}

func TestBytesPerPartition(t *testing.T) {
	if testing.Short() {
		t.Skip("memory measurement")
	}
	intern, slot := partitionBytes(100_000)
	t.Logf("per tracked partition: %.1f B interning (once per queue) + %.1f B per group ring", intern, slot)
	// A slot is 48 bytes; append growth may leave up to ~1.25-2x capacity.
	if slot <= 0 || slot > 128 {
		t.Errorf("%.1f B per partition per ring", slot)
	}
	if intern <= 0 || intern > 256 {
		t.Errorf("%.1f B of interning per partition", intern)
	}
}

// The single-partition mark of the common case allocates nothing.
func TestMarkDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes allocation counts")
	}
	for _, rings := range []int{1, 4} {
		h, _, k := benchQueue(rings)
		p := []PartMark{{Name: "p0", Count: 1}}
		h.Mark(k, p, SourceLocal, base)
		four := benchParts(4)
		batch := []PartMark{four[0][0], four[1][0], four[2][0], four[3][0]}
		h.Mark(k, batch, SourceLocal, base)
		for _, src := range []Source{SourceLocal, SourceRemote, SourceCommit} {
			if n := testing.AllocsPerRun(1000, func() { h.Mark(k, p, src, base) }); n != 0 {
				t.Errorf("rings=%d source %d: %v allocs per single-partition mark", rings, src, n)
			}
			if n := testing.AllocsPerRun(1000, func() { h.Mark(k, batch, src, base) }); n != 0 {
				t.Errorf("rings=%d source %d: %v allocs per 4-partition mark", rings, src, n)
			}
		}
	}
}
