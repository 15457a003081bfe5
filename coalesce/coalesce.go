// Package coalesce is the bounded coalescing set of dirty hints.
//
// Every local push enqueues a (tenant, queue, partition) hint meaning "this
// partition just received data"; a flusher drains the set every few
// milliseconds and sends the hints to the peers. The set deduplicates, so a
// partition pushed a thousand times in one flush window costs one hint, and it
// is bounded: beyond its capacity new hints are dropped and counted. Dropping
// is safe because hints are only an accelerator; the hot-list's periodic
// reseed from PostgreSQL heals every lost hint.
//
// The package is pure: no goroutines, no I/O. A Set is not safe for
// concurrent use; the caller serializes access (package mesh holds a
// mutex around Add and Drain).
package coalesce

import "strings"

// DefaultCap is the default bound on pending hints (QUEEN_MESH_HINT_CAP).
const DefaultCap = 200000

// Hint names one partition that just received data.
type Hint struct{ Tenant, Queue, Partition string }

// Batch is many hints of one (tenant, queue), in the compact form frames carry.
type Batch struct {
	Tenant, Queue string
	Partitions    []string
}

// minRing is the first ring allocation; the ring then doubles up to the
// capacity, so an idle or lightly used set does not pay for a full-size
// buffer up front.
const minRing = 64

// Set is the bounded coalescing set. The zero value is not usable; call New.
type Set struct {
	capacity int
	pending  map[Hint]struct{}
	// ring holds the pending hints in first-insertion order (FIFO), so Drain
	// hands out the oldest hints first and a hot queue cannot starve others.
	// len(ring) never exceeds capacity: it is the memory bound.
	ring    []Hint
	head, n int
	added   uint64
	dropped uint64
}

// New returns an empty set holding at most capacity pending hints;
// capacity <= 0 means DefaultCap.
func New(capacity int) *Set {
	if capacity <= 0 {
		capacity = DefaultCap
	}
	return &Set{capacity: capacity, pending: make(map[Hint]struct{})}
}

// Add enqueues h. It returns true if h was not pending and is now. A
// duplicate of a pending hint is a no-op and returns false without counting
// a drop: the pending hint already says the same thing. When the set is full
// a new hint is dropped, counted in Dropped, and Add returns false.
//
// A newly accepted hint's strings are copied into one allocation, so the set
// never pins a large buffer (say, a request body) that a name was sliced from.
func (s *Set) Add(h Hint) bool {
	if _, ok := s.pending[h]; ok {
		return false
	}
	if s.n >= s.capacity {
		s.dropped++
		return false
	}
	h = cloneHint(h)
	if s.n == len(s.ring) {
		s.grow()
	}
	s.ring[(s.head+s.n)%len(s.ring)] = h
	s.n++
	s.pending[h] = struct{}{}
	s.added++
	return true
}

// cloneHint copies the three names into a single fresh string.
func cloneHint(h Hint) Hint {
	var b strings.Builder
	b.Grow(len(h.Tenant) + len(h.Queue) + len(h.Partition))
	b.WriteString(h.Tenant)
	b.WriteString(h.Queue)
	b.WriteString(h.Partition)
	all := b.String()
	t, q := len(h.Tenant), len(h.Tenant)+len(h.Queue)
	return Hint{Tenant: all[:t], Queue: all[t:q], Partition: all[q:]}
}

// grow doubles the ring (capped at capacity) and unwraps it so head is 0.
func (s *Set) grow() {
	size := max(2*len(s.ring), minRing)
	size = min(size, s.capacity)
	ring := make([]Hint, size)
	for i := 0; i < s.n; i++ {
		ring[i] = s.ring[(s.head+i)%len(s.ring)]
	}
	s.ring, s.head = ring, 0
}

// Len is the number of pending hints.
func (s *Set) Len() int { return s.n }

// Cap is the bound on pending hints.
func (s *Set) Cap() int { return s.capacity }

// Dropped is the number of hints dropped because the set was full, since
// creation.
func (s *Set) Dropped() uint64 { return s.dropped }

// Added is the number of distinct hints accepted (Add returned true), since
// creation.
func (s *Set) Added() uint64 { return s.added }

// Drain removes and returns up to maxHints pending hints (maxHints <= 0: all
// of them), oldest first, grouped by (tenant, queue). Batches appear in the
// order of their oldest hint, partitions in insertion order.
//
// No Batch's estimated encoded size exceeds maxBatchBytes (<= 0: no limit); a
// queue with more partitions than fit is split into several Batches. The
// estimate (see EstimateSize) never undercounts the msgpack encoding of
// [tenant, queue, [partitions...]]. A Batch always carries at least one
// partition, so a single hint whose own estimate exceeds maxBatchBytes still
// goes out, alone in its Batch.
//
// A drained hint is no longer pending: adding it again is accepted.
func (s *Set) Drain(maxHints, maxBatchBytes int) []Batch {
	take := s.n
	if maxHints > 0 && maxHints < take {
		take = maxHints
	}
	if take == 0 {
		return nil
	}
	type queueKey struct{ tenant, queue string }
	// open maps each queue to the index of its Batch still accepting
	// partitions, and that Batch's running size estimate.
	type openBatch struct{ idx, size int }
	open := make(map[queueKey]openBatch)
	var out []Batch
	for range take {
		h := s.ring[s.head]
		s.ring[s.head] = Hint{} // release the strings to the GC
		s.head = (s.head + 1) % len(s.ring)
		s.n--
		delete(s.pending, h)

		k := queueKey{h.Tenant, h.Queue}
		p := stringSize(h.Partition)
		ob, ok := open[k]
		if ok && maxBatchBytes > 0 && ob.size+p > maxBatchBytes {
			ok = false
		}
		if !ok {
			ob = openBatch{idx: len(out), size: batchOverhead + stringSize(h.Tenant) + stringSize(h.Queue)}
			out = append(out, Batch{Tenant: h.Tenant, Queue: h.Queue})
		}
		out[ob.idx].Partitions = append(out[ob.idx].Partitions, h.Partition)
		ob.size += p
		open[k] = ob
	}
	if s.n == 0 {
		s.head = 0
	}
	return out
}

// batchOverhead is the estimated fixed msgpack cost of one Batch besides its
// strings: the 3-element array header plus the partitions array header,
// counted at the 5-byte maximum so it never undercounts.
const batchOverhead = 1 + 5

// stringSize is the msgpack encoded size of s (header plus bytes).
func stringSize(s string) int {
	n := len(s)
	switch {
	case n < 32:
		return 1 + n
	case n < 1<<8:
		return 2 + n
	case n < 1<<16:
		return 3 + n
	default:
		return 5 + n
	}
}

// EstimateSize is the size estimate Drain uses for b: never below the
// msgpack encoding of [tenant, queue, [partitions...]].
func EstimateSize(b Batch) int {
	size := batchOverhead + stringSize(b.Tenant) + stringSize(b.Queue)
	for _, p := range b.Partitions {
		size += stringSize(p)
	}
	return size
}
