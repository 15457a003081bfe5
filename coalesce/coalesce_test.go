package coalesce

import (
	"bytes"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/vmihailenco/msgpack/v5"
)

func h(t, q, p string) Hint { return Hint{Tenant: t, Queue: q, Partition: p} }

// flatten lists the drained hints in output order.
func flatten(bs []Batch) []Hint {
	var out []Hint
	for _, b := range bs {
		for _, p := range b.Partitions {
			out = append(out, h(b.Tenant, b.Queue, p))
		}
	}
	return out
}

func TestNewDefaultCap(t *testing.T) {
	for _, c := range []int{0, -1} {
		if got := New(c).Cap(); got != DefaultCap {
			t.Fatalf("New(%d).Cap() = %d, want %d", c, got, DefaultCap)
		}
	}
	if got := New(7).Cap(); got != 7 {
		t.Fatalf("Cap = %d, want 7", got)
	}
}

func TestAddDeduplicates(t *testing.T) {
	s := New(10)
	if !s.Add(h("t", "q", "p")) {
		t.Fatal("first Add = false")
	}
	for range 1000 {
		if s.Add(h("t", "q", "p")) {
			t.Fatal("duplicate Add = true")
		}
	}
	// Same partition name in another queue or tenant is a different hint.
	if !s.Add(h("t", "q2", "p")) || !s.Add(h("t2", "q", "p")) {
		t.Fatal("distinct hints not accepted")
	}
	if s.Len() != 3 || s.Added() != 3 || s.Dropped() != 0 {
		t.Fatalf("Len=%d Added=%d Dropped=%d, want 3 3 0", s.Len(), s.Added(), s.Dropped())
	}
	if got := flatten(s.Drain(0, 0)); len(got) != 3 {
		t.Fatalf("drained %d hints, want 3", len(got))
	}
}

func TestBoundDropsAndCounts(t *testing.T) {
	s := New(3)
	for i := range 3 {
		if !s.Add(h("t", "q", fmt.Sprint(i))) {
			t.Fatalf("Add %d refused below the bound", i)
		}
	}
	for i := 3; i < 8; i++ {
		if s.Add(h("t", "q", fmt.Sprint(i))) {
			t.Fatalf("Add %d accepted beyond the bound", i)
		}
	}
	// A duplicate of a pending hint at the bound is not a drop.
	if s.Add(h("t", "q", "0")) {
		t.Fatal("duplicate accepted")
	}
	if s.Len() != 3 || s.Dropped() != 5 || s.Added() != 3 {
		t.Fatalf("Len=%d Dropped=%d Added=%d, want 3 5 3", s.Len(), s.Dropped(), s.Added())
	}
	// The oldest hints are kept, the newest dropped.
	want := []Hint{h("t", "q", "0"), h("t", "q", "1"), h("t", "q", "2")}
	if got := flatten(s.Drain(0, 0)); !reflect.DeepEqual(got, want) {
		t.Fatalf("drained %v, want %v", got, want)
	}
	// Room again after a drain; the drop counter never goes back.
	if !s.Add(h("t", "q", "9")) || s.Dropped() != 5 {
		t.Fatalf("after drain: Dropped=%d", s.Dropped())
	}
}

func TestDrainMaxHints(t *testing.T) {
	s := New(100)
	for i := range 10 {
		s.Add(h("t", "q", fmt.Sprint(i)))
	}
	got := flatten(s.Drain(4, 0))
	if len(got) != 4 || got[0].Partition != "0" || got[3].Partition != "3" {
		t.Fatalf("first drain = %v", got)
	}
	if s.Len() != 6 {
		t.Fatalf("Len = %d, want 6", s.Len())
	}
	got = flatten(s.Drain(100, 0))
	if len(got) != 6 || got[0].Partition != "4" || got[5].Partition != "9" {
		t.Fatalf("second drain = %v", got)
	}
	if s.Drain(5, 0) != nil {
		t.Fatal("drain of empty set is not nil")
	}
}

// TestDrainFIFOAcrossQueues: a hot queue that keeps adding new partitions
// cannot starve a queue whose single hint is older.
func TestDrainFIFOAcrossQueues(t *testing.T) {
	s := New(1000)
	s.Add(h("t", "hot", "h0"))
	s.Add(h("t", "cold", "c0"))
	for i := 1; i < 100; i++ {
		s.Add(h("t", "hot", fmt.Sprintf("h%d", i)))
	}
	s.Add(h("t", "cold2", "x"))

	bs := s.Drain(2, 0)
	want := []Batch{{"t", "hot", []string{"h0"}}, {"t", "cold", []string{"c0"}}}
	if !reflect.DeepEqual(bs, want) {
		t.Fatalf("Drain(2) = %v, want %v", bs, want)
	}
	// Grouping by queue: the remaining hot hints come in one batch, ahead
	// of cold2 whose hint is newest.
	bs = s.Drain(0, 0)
	if len(bs) != 2 || bs[0].Queue != "hot" || len(bs[0].Partitions) != 99 || bs[1].Queue != "cold2" {
		t.Fatalf("Drain(all) = %d batches: %+v", len(bs), bs)
	}
	for i, p := range bs[0].Partitions {
		if p != fmt.Sprintf("h%d", i+1) {
			t.Fatalf("partition %d = %q: order not kept", i, p)
		}
	}
}

func TestDrainGroupsInterleavedQueues(t *testing.T) {
	s := New(100)
	s.Add(h("t", "a", "1"))
	s.Add(h("t", "b", "1"))
	s.Add(h("t", "a", "2"))
	s.Add(h("u", "a", "1")) // same queue name, other tenant
	s.Add(h("t", "b", "2"))
	got := s.Drain(0, 0)
	want := []Batch{
		{"t", "a", []string{"1", "2"}},
		{"t", "b", []string{"1", "2"}},
		{"u", "a", []string{"1"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestDrainSplitsByBytes(t *testing.T) {
	s := New(10000)
	const n = 1000
	for i := range n {
		s.Add(h("tenant", "queue", fmt.Sprintf("partition-%04d", i)))
	}
	const limit = 512
	bs := s.Drain(0, limit)
	if len(bs) < 2 {
		t.Fatalf("%d batches, want a split", len(bs))
	}
	var all []string
	for i, b := range bs {
		if b.Tenant != "tenant" || b.Queue != "queue" || len(b.Partitions) == 0 {
			t.Fatalf("batch %d malformed: %+v", i, b)
		}
		if est := EstimateSize(b); est > limit {
			t.Fatalf("batch %d estimate %d > %d", i, est, limit)
		}
		// The batch is as full as the limit allows (except the last).
		if i < len(bs)-1 {
			if est := EstimateSize(b) + stringSize(bs[i+1].Partitions[0]); est <= limit {
				t.Fatalf("batch %d closed early at %d", i, EstimateSize(b))
			}
		}
		all = append(all, b.Partitions...)
	}
	if len(all) != n {
		t.Fatalf("%d partitions out, want %d", len(all), n)
	}
	for i, p := range all {
		if p != fmt.Sprintf("partition-%04d", i) {
			t.Fatalf("order lost at %d: %q", i, p)
		}
	}
}

// A hint bigger than the limit still goes out, alone.
func TestDrainOversizedHintAlone(t *testing.T) {
	s := New(10)
	big := strings.Repeat("p", 100)
	s.Add(h("t", "q", big))
	s.Add(h("t", "q", "small"))
	bs := s.Drain(0, 50)
	if len(bs) != 2 || bs[0].Partitions[0] != big || bs[1].Partitions[0] != "small" {
		t.Fatalf("got %+v", bs)
	}
}

// The estimate never undercounts the real msgpack encoding of a batch.
func TestEstimateIsConservative(t *testing.T) {
	for _, n := range []int{0, 1, 31, 32, 255, 256, 65535, 65536} {
		name := strings.Repeat("x", n)
		for _, parts := range [][]string{{"p"}, {name}, make([]string, 16), make([]string, 70000)} {
			b := Batch{Tenant: name, Queue: "q", Partitions: parts}
			var buf bytes.Buffer
			enc := msgpack.NewEncoder(&buf)
			_ = enc.EncodeArrayLen(3)
			_ = enc.EncodeString(b.Tenant)
			_ = enc.EncodeString(b.Queue)
			_ = enc.EncodeArrayLen(len(b.Partitions))
			for _, p := range b.Partitions {
				_ = enc.EncodeString(p)
			}
			if est := EstimateSize(b); est < buf.Len() {
				t.Fatalf("name %d, %d parts: estimate %d < encoded %d", n, len(parts), est, buf.Len())
			}
		}
	}
}

func TestReAddAfterDrain(t *testing.T) {
	s := New(10)
	s.Add(h("t", "q", "p"))
	s.Drain(0, 0)
	if s.Len() != 0 {
		t.Fatalf("Len after drain = %d", s.Len())
	}
	if !s.Add(h("t", "q", "p")) {
		t.Fatal("re-add after drain refused")
	}
	if s.Added() != 2 {
		t.Fatalf("Added = %d, want 2", s.Added())
	}
	// A partial drain only frees what it took.
	s.Add(h("t", "q", "other"))
	s.Drain(1, 0) // takes "p"
	if !s.Add(h("t", "q", "p")) {
		t.Fatal("drained hint refused")
	}
	if s.Add(h("t", "q", "other")) {
		t.Fatal("still-pending hint accepted twice")
	}
}

// Add must not keep the caller's backing memory alive.
func TestAddCopiesNames(t *testing.T) {
	s := New(10)
	body := []byte("tenant/queue/partition")
	str := string(body)
	s.Add(h(str[:6], str[7:12], str[13:]))
	x := s.ring[0]
	if x.Tenant != "tenant" || x.Queue != "queue" || x.Partition != "partition" {
		t.Fatalf("stored %+v", x)
	}
	if unsafe.StringData(x.Partition) == unsafe.StringData(str[13:]) {
		t.Fatal("stored partition shares the caller's memory")
	}
	// Pending lookup still works by value.
	if s.Add(h("tenant", "queue", "partition")) {
		t.Fatal("duplicate by value accepted")
	}
}

// Memory stays bounded by capacity under long churn: the ring never grows
// past the capacity, and drained slots are cleared.
func TestMemoryBoundedUnderChurn(t *testing.T) {
	const capacity = 1000
	s := New(capacity)
	id := 0
	queues := []string{"q0", "q1", "q2", "q3", "q4", "q5", "q6"}
	for round := range 600 {
		// Bursts larger than the capacity, partial drains of varying size.
		for range 300 + round%900 {
			s.Add(h("t", queues[id%7], strconv.Itoa(id)))
			id++
		}
		s.Drain(1+round%700, 4096)
		if len(s.ring) > capacity || cap(s.ring) > capacity {
			t.Fatalf("round %d: ring len %d cap %d > capacity %d", round, len(s.ring), cap(s.ring), capacity)
		}
		if s.Len() != len(s.pending) || s.Len() > capacity {
			t.Fatalf("round %d: Len %d, map %d", round, s.Len(), len(s.pending))
		}
	}
	// Every slot outside the pending window is zeroed, so nothing drained
	// is retained.
	for i := s.n; i < len(s.ring); i++ {
		if s.ring[(s.head+i)%len(s.ring)] != (Hint{}) {
			t.Fatalf("slot %d still holds a drained hint", i)
		}
	}
	if s.Added()+s.Dropped() != uint64(id) {
		t.Fatalf("Added %d + Dropped %d != %d adds", s.Added(), s.Dropped(), id)
	}
}

// Model test: random adds and drains against a plain ordered list.
func TestModel(t *testing.T) {
	const capacity = 50
	s := New(capacity)
	var model []Hint
	var dropped uint64
	seed := uint64(1)
	rnd := func(n int) int {
		seed = seed*6364136223846793005 + 1442695040888963407
		return int((seed >> 33) % uint64(n))
	}
	for step := range 20000 {
		if rnd(4) > 0 {
			x := h(fmt.Sprint("t", rnd(2)), fmt.Sprint("q", rnd(3)), fmt.Sprint(rnd(40)))
			dup := false
			for _, m := range model {
				if m == x {
					dup = true
				}
			}
			wantOK := !dup && len(model) < capacity
			if !dup && !wantOK {
				dropped++
			}
			if wantOK {
				model = append(model, x)
			}
			if got := s.Add(x); got != wantOK {
				t.Fatalf("step %d: Add(%v) = %v, want %v", step, x, got, wantOK)
			}
			continue
		}
		n := rnd(20)
		take := len(model)
		if n > 0 && n < take {
			take = n
		}
		got := s.Drain(n, 0)
		taken := model[:take]
		// Same multiset, each queue's partitions in FIFO order.
		if g := flatten(got); len(g) != take {
			t.Fatalf("step %d: drained %d, want %d", step, len(g), take)
		}
		for _, b := range got {
			var want []string
			for _, m := range taken {
				if m.Tenant == b.Tenant && m.Queue == b.Queue {
					want = append(want, m.Partition)
				}
			}
			if !reflect.DeepEqual(b.Partitions, want) {
				t.Fatalf("step %d: batch %s/%s = %v, want %v", step, b.Tenant, b.Queue, b.Partitions, want)
			}
		}
		model = append([]Hint(nil), model[take:]...)
		if s.Len() != len(model) || s.Dropped() != dropped {
			t.Fatalf("step %d: Len %d Dropped %d, want %d %d", step, s.Len(), s.Dropped(), len(model), dropped)
		}
	}
}

func BenchmarkAddDuplicate(b *testing.B) {
	s := New(0)
	x := h("default", "orders", "customer-42")
	s.Add(x)
	b.ReportAllocs()
	for b.Loop() {
		s.Add(x)
	}
}

// BenchmarkAddDrain: one flush window of 1000 distinct hints over 10 queues,
// then a drain, as the flusher would do.
func BenchmarkAddDrain(b *testing.B) {
	s := New(0)
	hints := make([]Hint, 1000)
	for i := range hints {
		hints[i] = h("default", fmt.Sprint("queue-", i%10), fmt.Sprint("partition-", i))
	}
	b.ReportAllocs()
	for b.Loop() {
		for _, x := range hints {
			s.Add(x)
		}
		if bs := s.Drain(0, 60<<10); len(bs) != 10 {
			b.Fatalf("%d batches", len(bs))
		}
	}
}
