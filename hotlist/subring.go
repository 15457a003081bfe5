package hotlist

import (
	"container/heap"
	"math"
	"sync"
	"sync/atomic"
)

// State is a slot's tracking state.
type State uint8

const (
	Idle     State = iota // not tracked: not ready, not in the wheel, not checked out
	Ready                 // in the ready list, claimable now
	Wheel                 // deferred or lease-parked; promoted to Ready at readyAt (its revisit time)
	Inflight              // checked out by a pop whose SQL call is in flight
)

func (s State) String() string {
	return [...]string{"IDLE", "READY", "WHEEL", "INFLIGHT"}[s]
}

const none = int32(-1)

// slot is one partition's entry in one sub-ring.
type slot struct {
	state     State
	drained   bool   // the last took claim exhausted the visible backlog
	tookValid bool   // tookEpoch belongs to the current lease park
	remote    bool   // unconfirmed: tracked only because of remote marks (see Hotlist.prune)
	epoch     uint32 // bumped by every mark
	tookEpoch uint32 // the epoch snapshot of the checkout that took
	gen       uint32 // checkout generation: a stale check-in is ignored
	batch     uint32 // marks accumulated since the entry was last taken
	remoteGen uint32 // the ring's reseed generation at the last remote mark (remote only)
	// readyAt (unix nanos) is when the entry became ready, its place in the
	// ring's line. Ready: the ready list is sorted on it and Take serves the
	// oldest first across sub-rings. Inflight: kept, so a candidate that was
	// not evaluated (Requeue, Abandon) goes back to its old place. Wheel:
	// when it becomes ready (the revisit time), which is also its place once
	// promoted; one field for both keeps the slot at 48 bytes.
	readyAt int64
	takenAt int64 // unix nanos, meaningful in Inflight
	prev    int32 // ready list links, shard-local positions
	next    int32
}

type wheelEntry struct {
	at  int64
	pos int32
}

// wheelHeap is a binary min-heap on the revisit time (a Wheel slot's
// readyAt). Entries are not removed when a slot leaves the wheel; they are
// discarded lazily on drain when the slot no longer matches them.
type wheelHeap []wheelEntry

func (h wheelHeap) Len() int           { return len(h) }
func (h wheelHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h wheelHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *wheelHeap) Push(x any)        { *h = append(*h, x.(wheelEntry)) }
func (h *wheelHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// subRing holds the partitions whose index % S is its shard number, at
// shard-local positions index / S, so sub-sharding wastes no slots.
type subRing struct {
	mu    sync.Mutex
	slots []slot
	head  int32 // the ready list, sorted on readyAt (oldest first)
	tail  int32
	wheel wheelHeap

	// headAt is the head's readyAt (math.MaxInt64 when the list is empty),
	// written under mu, so Take finds the oldest head of a ring without
	// taking every sub-ring's lock.
	headAt atomic.Int64

	// counts, readable without the lock (status, top rings, wheel tick skip)
	nReady, nWheel, nInflight atomic.Int32
	nRemote                   atomic.Int32 // unconfirmed entries

	// detached is set (under mu) when the ring was dropped from the
	// registry; a pop still holding it must not move the global totals.
	detached bool
}

func newSubRing() *subRing {
	s := &subRing{head: none, tail: none}
	s.headAt.Store(math.MaxInt64)
	return s
}

// counters is where state changes are also totalled for the whole Hotlist.
type counters struct {
	ready, wheel, inflight, remote atomic.Int64
}

func (s *subRing) slot(pos int32) *slot {
	for int(pos) >= len(s.slots) {
		s.slots = append(s.slots, slot{prev: none, next: none})
	}
	return &s.slots[pos]
}

// set moves a slot to a new state, maintaining the ready list, the wheel
// and the counters. at is the new readyAt when moving to Ready (its place
// in line) or to Wheel (its revisit time).
func (s *subRing) set(pos int32, to State, at int64, c *counters) {
	sl := &s.slots[pos]
	from := sl.state
	if from == Ready {
		s.unlink(pos)
	}
	s.count(from, -1, c)
	sl.state = to
	s.count(to, 1, c)
	switch to {
	case Ready:
		sl.readyAt = at
		s.link(pos)
	case Wheel:
		sl.readyAt = at
		heap.Push(&s.wheel, wheelEntry{at: at, pos: pos})
	case Idle:
		sl.batch, sl.drained, sl.tookValid = 0, false, false
		s.confirm(pos, c)
	}
}

// markRemote flags an entry as tracked only because of remote marks, or
// restamps its generation if it already is.
func (s *subRing) markRemote(pos int32, gen uint32, c *counters) {
	sl := &s.slots[pos]
	if !sl.remote {
		sl.remote = true
		s.nRemote.Add(1)
		if !s.detached {
			c.remote.Add(1)
		}
	}
	sl.remoteGen = gen
}

// confirm clears the unconfirmed flag: a local push, a commit, a reseed row
// or a took/leased verdict showed the partition is real.
func (s *subRing) confirm(pos int32, c *counters) {
	sl := &s.slots[pos]
	if sl.remote {
		sl.remote = false
		s.nRemote.Add(-1)
		if !s.detached {
			c.remote.Add(-1)
		}
	}
}

// discard absorbs the counts of detached sub-rings.
var discard counters

func (s *subRing) count(st State, d int32, c *counters) {
	if s.detached {
		c = &discard
	}
	switch st {
	case Ready:
		s.nReady.Add(d)
		c.ready.Add(int64(d))
	case Wheel:
		s.nWheel.Add(d)
		c.wheel.Add(int64(d))
	case Inflight:
		s.nInflight.Add(d)
		c.inflight.Add(int64(d))
	}
}

// link inserts a slot into the ready list at its readyAt, after any entry
// of the same readyAt. It searches from both ends at once, so the cost is
// the distance to the nearer end: a new mark (the newest) lands at the tail
// in one step, a requeued candidate (among the oldest) near the head in a
// few.
func (s *subRing) link(pos int32) {
	at := s.slots[pos].readyAt
	p, q := s.head, s.tail
	for p != none && q != none {
		if s.slots[q].readyAt <= at {
			s.insertAfter(pos, q)
			return
		}
		if s.slots[p].readyAt > at {
			s.insertBefore(pos, p)
			return
		}
		p, q = s.slots[p].next, s.slots[q].prev
	}
	// The list is empty (on a sorted list the search always stops above).
	s.insertAfter(pos, s.tail)
}

// insertAfter links pos after q (none: at the head).
func (s *subRing) insertAfter(pos, q int32) {
	sl := &s.slots[pos]
	if q == none {
		sl.prev, sl.next = none, s.head
	} else {
		sl.prev, sl.next = q, s.slots[q].next
	}
	if sl.prev != none {
		s.slots[sl.prev].next = pos
	} else {
		s.head = pos
		s.headAt.Store(sl.readyAt)
	}
	if sl.next != none {
		s.slots[sl.next].prev = pos
	} else {
		s.tail = pos
	}
}

func (s *subRing) insertBefore(pos, p int32) { s.insertAfter(pos, s.slots[p].prev) }

func (s *subRing) unlink(pos int32) {
	sl := &s.slots[pos]
	if sl.prev != none {
		s.slots[sl.prev].next = sl.next
	} else {
		s.head = sl.next
		if s.head != none {
			s.headAt.Store(s.slots[s.head].readyAt)
		} else {
			s.headAt.Store(math.MaxInt64)
		}
	}
	if sl.next != none {
		s.slots[sl.next].prev = sl.prev
	} else {
		s.tail = sl.prev
	}
	sl.prev, sl.next = none, none
}

// detach removes the sub-ring's counts from the totals and stops it from
// touching them again.
func (s *subRing) detach(c *counters) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.detached {
		return
	}
	c.ready.Add(-int64(s.nReady.Load()))
	c.wheel.Add(-int64(s.nWheel.Load()))
	c.inflight.Add(-int64(s.nInflight.Load()))
	c.remote.Add(-int64(s.nRemote.Load()))
	s.detached = true
}

// popDue returns the next wheel entry due at now, discarding stale entries.
func (s *subRing) popDue(now int64) (int32, bool) {
	for len(s.wheel) > 0 {
		top := s.wheel[0]
		sl := &s.slots[top.pos]
		if sl.state != Wheel || sl.readyAt != top.at {
			heap.Pop(&s.wheel) // stale: the slot left the wheel or was rescheduled
			continue
		}
		if top.at > now {
			return none, false
		}
		heap.Pop(&s.wheel)
		return top.pos, true
	}
	return none, false
}

// compact drops stale heap entries once they dominate, bounding heap memory
// under churn (a slot rescheduled many times leaves many stale entries).
func (s *subRing) compact() {
	live := int(s.nWheel.Load())
	if len(s.wheel) < 64 || len(s.wheel) < 4*live {
		return
	}
	kept := s.wheel[:0]
	for _, e := range s.wheel {
		sl := &s.slots[e.pos]
		if sl.state == Wheel && sl.readyAt == e.at {
			kept = append(kept, e)
		}
	}
	s.wheel = kept
	heap.Init(&s.wheel)
}
