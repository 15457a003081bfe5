package hotlist

import (
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Source is where a mark comes from.
type Source uint8

const (
	SourceLocal  Source = iota // a local push: quiet, woken by the wake tick
	SourceCommit               // a transaction commit or a DLQ move: wake now
	SourceRemote               // a peer's mesh hint: wake now, never re-broadcast
	SourceReseed               // a reseed row: local discovery
)

// Hotlist is the registry of every queue's interning table and group rings.
// It is safe for concurrent use.
type Hotlist struct {
	cfg Config

	mu     sync.RWMutex // guards queues; a write lock excludes every lookup (idle sweep)
	queues map[Key]*queue
	peak   int // most queues held since the map was last rebuilt (Sweep shrinks it)

	wakeMu sync.Mutex
	wakes  map[Key]struct{} // queues marked quietly since the last TakeWakes

	c     counters
	rings atomic.Int64

	marksLocal, marksRemote, marksCommit atomic.Int64
	reseeds, reseedAdded, reclaimed      atomic.Int64
	walks                                atomic.Int64 // reseed walks claimed and not yet ended
	swept, dropped, pruned               atomic.Int64

	early early
}

// queue is one tenant queue's state: the interning table and its rings.
type queue struct {
	key     Key
	refs    atomic.Int32 // operations in progress; the sweep requires zero
	touched atomic.Bool  // second-chance flag: set by every access, cleared by each sweep
	traced  bool

	mu    sync.RWMutex
	names []string          // index -> partition name, append-only
	index map[string]uint32 // partition name -> index
	ids   []string          // index -> partition id, learned ("" unknown)
	byID  map[string]uint32 // partition id -> index
	rings map[string]*Ring  // consumer group -> ring
	list  []*Ring           // the same rings, for a mark to visit without a map iteration
	opts  QueueOpts
}

// Ring is the candidate ring of one (queue, group).
type Ring struct {
	q     *queue
	group string
	subs  []*subRing
	rr    atomic.Uint32

	// last is the newest readyAt handed out by stamp: entries that join the
	// back of the line get distinct, increasing readyAt values even when
	// their clock readings tie, so the line is a strict order.
	last atomic.Int64

	resMu      sync.Mutex
	nextReseed int64 // unix nanos
	cold       bool  // never reseeded: the pop path reseeds before trusting it
	reseeding  bool
	lastPrune  int64 // unix nanos of the last reseed claimed by BeginPrune
	beganAt    int64 // unix nanos the reseed in progress (or the last one) began

	// Early reseeds (early.go), unix nanos: the latest loss signal applied
	// to this ring, the start of the last reseed that completed (it covers
	// every loss before it), and the start of the last early reseed.
	earlyReq, covered, lastEarly int64
	earlyRun                     atomic.Bool // the reseed in progress is an early one (dark-time histogram)

	// gen counts reseeds begun. A remote mark stamps it on its entry; a
	// complete reseed that began later drops the entries it did not list and
	// that nothing confirmed (Hotlist.prune).
	gen      atomic.Uint32
	beginGen uint32 // gen of the reseed in progress (resMu)
}

// stamp returns the readyAt of an entry joining the back of the line at n:
// n, or just after the newest stamp when that is not older (equal clock
// readings, or a caller whose now was read before another's).
func (r *Ring) stamp(n int64) int64 {
	for {
		l := r.last.Load()
		v := max(n, l+1)
		if r.last.CompareAndSwap(l, v) {
			return v
		}
	}
}

// New returns an empty Hotlist.
func New(cfg Config) *Hotlist {
	return &Hotlist{cfg: cfg.withDefaults(), queues: make(map[Key]*queue), wakes: make(map[Key]struct{})}
}

// Config returns the effective configuration.
func (h *Hotlist) Config() Config { return h.cfg }

// acquire returns the queue of key with its reference held, or nil.
func (h *Hotlist) acquire(key Key) *queue {
	h.mu.RLock()
	q := h.queues[key]
	if q != nil {
		q.refs.Add(1)
		if !q.touched.Load() { // the sweep clears it under h.mu: no race; skip a locked store
			q.touched.Store(true)
		}
	}
	h.mu.RUnlock()
	return q
}

func (q *queue) release() { q.refs.Add(-1) }

// intern returns the index of a partition name, adding it if new.
func (q *queue) intern(name string) uint32 {
	q.mu.RLock()
	i, ok := q.index[name]
	q.mu.RUnlock()
	if ok {
		return i
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if i, ok := q.index[name]; ok {
		return i
	}
	i = uint32(len(q.names))
	q.names = append(q.names, name)
	q.ids = append(q.ids, "")
	q.index[name] = i
	return i
}

// learn remembers the partition id of an index (for the ack hook).
func (q *queue) learn(i uint32, id string) {
	if id == "" {
		return
	}
	q.mu.RLock()
	known := int(i) < len(q.ids) && q.ids[i] == id
	q.mu.RUnlock()
	if known {
		return
	}
	q.mu.Lock()
	if int(i) < len(q.ids) {
		q.ids[i] = id
		q.byID[id] = i
	}
	q.mu.Unlock()
}

func (h *Hotlist) sub(r *Ring, i uint32) (*subRing, int32) {
	s := uint32(len(r.subs))
	return r.subs[i%s], int32(i / s)
}

// trace emits a breadcrumb. Call it only under `if q.traced`: building the
// variadic kv slice allocates, and the hot paths must not when tracing is off.
func (h *Hotlist) trace(q *queue, event string, kv ...any) {
	if q.traced && h.cfg.Trace != nil {
		h.cfg.Trace(q.key, event, kv...)
	}
}

// Register returns the ring of (key, group), creating the queue state and
// the ring if needed. The broker calls it only once the group-seeded marker
// is committed, so the first pop of a name allocates nothing here. A new
// ring is cold, and gets a fixed random reseed phase.
func (h *Hotlist) Register(key Key, group string, opts QueueOpts, now time.Time) *Ring {
	q := h.acquire(key)
	if q == nil {
		h.mu.Lock()
		q = h.queues[key]
		if q == nil {
			q = &queue{key: key, index: map[string]uint32{}, byID: map[string]uint32{}, rings: map[string]*Ring{}, opts: opts}
			if h.cfg.TracePrefix != "" {
				name := key.Queue()
				q.traced = strings.HasPrefix(name, h.cfg.TracePrefix)
			}
			h.queues[key] = q
			h.peak = max(h.peak, len(h.queues))
		}
		q.refs.Add(1)
		q.touched.Store(true)
		h.mu.Unlock()
	}
	defer q.release()
	q.mu.Lock()
	defer q.mu.Unlock()
	q.opts = opts
	if r := q.rings[group]; r != nil {
		return r
	}
	r := &Ring{q: q, group: group, subs: make([]*subRing, h.cfg.Shards), cold: true}
	for i := range r.subs {
		r.subs[i] = newSubRing()
	}
	phase := h.cfg.Jitter(min(h.cfg.MaxPhase, h.cfg.ReseedInterval))
	r.nextReseed = now.Add(phase).UnixNano()
	q.rings[group] = r
	q.list = append(q.list, r)
	h.rings.Add(1)
	if q.traced {
		h.trace(q, "register", "group", group, "phase", phase)
	}
	return r
}

// Lookup returns the ring of (key, group), or nil when it is not registered.
func (h *Hotlist) Lookup(key Key, group string) *Ring {
	q := h.acquire(key)
	if q == nil {
		return nil
	}
	defer q.release()
	q.mu.RLock()
	defer q.mu.RUnlock()
	return q.rings[group]
}

// SetOpts updates a queue's deferral options (learned on every pop).
func (h *Hotlist) SetOpts(key Key, opts QueueOpts) {
	q := h.acquire(key)
	if q == nil {
		return
	}
	defer q.release()
	q.mu.RLock()
	same := q.opts == opts
	q.mu.RUnlock()
	if !same {
		q.mu.Lock()
		q.opts = opts
		q.mu.Unlock()
	}
}

// PartMark is one partition of a mark and the frames pushed to it.
type PartMark struct {
	Name  string
	Count int
}

// Mark records that partitions of a queue just received data, on every
// existing group ring of the queue. It returns whether waking the queue's
// parked pops is useful: some ring gained a ready entry, or the queue has no
// ring at all (a partition-targeted long-poll parks without one). Local
// marks do not ask for an immediate wake; they are queued for TakeWakes.
func (h *Hotlist) Mark(key Key, parts []PartMark, src Source, now time.Time) bool {
	switch src {
	case SourceLocal:
		h.marksLocal.Add(int64(len(parts)))
	case SourceRemote:
		h.marksRemote.Add(int64(len(parts)))
	case SourceCommit:
		h.marksCommit.Add(int64(len(parts)))
	}
	wake := true
	if q := h.acquire(key); q != nil {
		wake = h.markQueue(q, parts, src, now)
		q.release()
	}
	if wake && src == SourceLocal {
		h.wakeMu.Lock()
		h.wakes[key] = struct{}{}
		h.wakeMu.Unlock()
		return false
	}
	return wake
}

func (h *Hotlist) markQueue(q *queue, parts []PartMark, src Source, now time.Time) bool {
	// A mark usually names one or a few partitions: index them on the stack.
	var buf [16]uint32
	var idx []uint32
	if len(parts) <= len(buf) {
		idx = buf[:len(parts)]
	} else {
		idx = make([]uint32, len(parts))
	}
	for i, p := range parts {
		idx[i] = q.intern(p.Name)
	}
	q.mu.RLock()
	defer q.mu.RUnlock()
	if len(q.list) == 0 {
		return true
	}
	wake := false
	for _, r := range q.list {
		for i, p := range parts {
			if h.markSlot(r, idx[i], p.Count, q.opts, src, now) {
				wake = true
			}
		}
	}
	if q.traced {
		h.trace(q, "mark", "partitions", len(parts), "wake", wake)
	}
	return wake
}

// markSlot applies one mark to one ring entry and reports whether it
// entered Ready. q.mu is held (read).
func (h *Hotlist) markSlot(r *Ring, i uint32, count int, opts QueueOpts, src Source, now time.Time) bool {
	s, pos := h.sub(r, i)
	s.mu.Lock()
	defer s.mu.Unlock()
	sl := s.slot(pos)
	// A remote mark that starts tracking an entry (or renews one that only
	// remote marks track) leaves it unconfirmed; any other mark confirms it.
	if src != SourceRemote {
		s.confirm(pos, &h.c)
	} else if sl.state == Idle || sl.remote {
		defer s.markRemote(pos, r.gen.Load(), &h.c) // after the state change below
	}
	sl.epoch++
	sl.batch += uint32(max(count, 1))
	n := now.UnixNano()
	switch sl.state {
	case Idle:
		switch {
		case opts.Delay > 0:
			s.set(pos, Wheel, now.Add(opts.Delay+DelayPad).UnixNano(), &h.c)
		case opts.Window > 0 && int(sl.batch) < h.cfg.WindowBatch:
			s.set(pos, Wheel, now.Add(opts.Window).UnixNano(), &h.c)
		default:
			s.set(pos, Ready, r.stamp(n), &h.c)
			return true
		}
	case Wheel:
		// A windowBuffer hold ends early once the batch is fat enough; a
		// delayedProcessing deadline is never shortened.
		if opts.Delay == 0 && opts.Window > 0 && int(sl.batch) >= h.cfg.WindowBatch && sl.readyAt > n {
			s.set(pos, Ready, r.stamp(n), &h.c)
			return true
		}
	case Ready, Inflight:
		// Ready: nothing to do. Inflight: the epoch bump alone makes the
		// pop's check-in re-append instead of clearing.
	}
	return false
}

// TakeWakes returns the queues marked quietly since the last call (the wake
// tick issues one wake per queue).
func (h *Hotlist) TakeWakes() []Key {
	h.wakeMu.Lock()
	defer h.wakeMu.Unlock()
	if len(h.wakes) == 0 {
		return nil
	}
	out := make([]Key, 0, len(h.wakes))
	for k := range h.wakes {
		out = append(out, k)
	}
	if len(out) > 1024 {
		h.wakes = make(map[Key]struct{}) // a map never shrinks: drop a burst's table
	} else {
		clear(h.wakes)
	}
	return out
}

// Candidate is one checked-out ring entry.
type Candidate struct {
	Index uint32
	Name  string
	Epoch uint32 // the epoch snapshot at check-out
	Gen   uint32 // the check-out generation
}

// Take checks out up to k candidates of the ring: due wheel entries first,
// then ready entries oldest first (by readyAt) across all sub-rings. Each
// becomes Inflight with its epoch snapshotted. It returns nil when nothing
// is ready or due.
func (h *Hotlist) Take(r *Ring, k int, now time.Time) []Candidate {
	if k <= 0 {
		return nil
	}
	q := r.q
	q.refs.Add(1)
	q.touched.Store(true)
	defer q.release()
	n := now.UnixNano()
	out := make([]Candidate, 0, min(k, 16))
	S := len(r.subs)
	start := int(r.rr.Add(1)) % S
	take := func(s *subRing, shard int, pos int32) {
		sl := &s.slots[pos]
		s.set(pos, Inflight, 0, &h.c)
		sl.gen++
		sl.takenAt = n
		sl.batch = 0
		out = append(out, Candidate{Index: uint32(pos)*uint32(S) + uint32(shard), Epoch: sl.epoch, Gen: sl.gen})
	}
	for j := 0; j < S && len(out) < k; j++ {
		shard := (start + j) % S
		s := r.subs[shard]
		if s.nWheel.Load() == 0 {
			continue
		}
		s.mu.Lock()
		for len(out) < k {
			pos, ok := s.popDue(n)
			if !ok {
				break
			}
			// Its readyAt (the revisit time) stays: it has been ready
			// since it fell due, and should it come back unevaluated, that
			// is its place in line.
			take(s, shard, pos)
		}
		s.compact()
		s.mu.Unlock()
	}
	// Ready entries, oldest first: a k-way merge of the sub-ring heads. The
	// heads' readyAt are read without locks; the chosen sub-ring then yields
	// entries, under its lock, while they are no newer than the runner-up
	// head. A head that changed meanwhile (a concurrent pop or check-in) is
	// re-chosen; after a few misses the head is taken anyway, so the order
	// is exact between pops and approximate only across concurrent ones.
	for misses := 0; len(out) < k; {
		// Ties (wheel entries due at the same instant) go to the lowest
		// shard; every other readyAt is distinct (Ring.stamp).
		best, bestAt, next := -1, int64(math.MaxInt64), int64(math.MaxInt64)
		for shard, sr := range r.subs {
			a := sr.headAt.Load()
			if a < bestAt {
				best, bestAt, next = shard, a, bestAt
			} else if a < next {
				next = a
			}
		}
		if best < 0 {
			break
		}
		s := r.subs[best]
		force := misses >= S
		s.mu.Lock()
		got := 0
		for len(out) < k && s.head != none && (s.slots[s.head].readyAt <= next || force && got == 0) {
			take(s, best, s.head)
			got++
		}
		s.mu.Unlock()
		if got == 0 {
			misses++
		}
	}
	if len(out) == 0 {
		return nil
	}
	q.mu.RLock()
	for i := range out {
		out[i].Name = q.names[out[i].Index]
	}
	q.mu.RUnlock()
	if q.traced {
		h.trace(q, "take", "group", r.group, "candidates", len(out))
	}
	return out
}

// Verdict is the claim core's answer for one candidate.
type Verdict uint8

const (
	Took    Verdict = iota // frames delivered
	Empty                  // nothing visible and no live foreign lease
	Leased                 // another worker holds a live lease until Until
	Requeue                // not evaluated (budget ran out, or the row was busy)
)

// evaluated tells whether SQL answered for the partition (any verdict but
// Requeue and unknown ones, which are checked in as not evaluated).
func (v Verdict) evaluated() bool { return v == Took || v == Empty || v == Leased }

// Result is a verdict to check back in.
type Result struct {
	Cand        Candidate
	Verdict     Verdict
	Until       time.Time // Took (leased): lease expiry; Leased: foreign lease expiry; Empty: when deferred data becomes visible, or zero
	Drained     bool      // Took: the claim exhausted the visible backlog
	AutoAck     bool      // Took: no lease was taken
	PartitionID string    // learned for the ack hook; "" if unknown
}

// CheckIn applies the verdicts of a checked-out batch. It returns whether an
// entry became ready (worth waking other parked pops).
func (h *Hotlist) CheckIn(r *Ring, results []Result, now time.Time) bool {
	q := r.q
	q.refs.Add(1)
	q.touched.Store(true)
	defer q.release()
	for _, res := range results {
		q.learn(res.Cand.Index, res.PartitionID)
	}
	q.mu.RLock()
	opts := q.opts
	q.mu.RUnlock()
	wake := false
	// Candidates come in the order Take served them (oldest first). The
	// unevaluated ones are linked newest first, each at the head of what is
	// left (one step each); the others then join the back of the line in
	// the order they were served.
	for j := len(results) - 1; j >= 0; j-- {
		if !results[j].Verdict.evaluated() && h.checkIn(r, results[j], opts, now) {
			wake = true
		}
	}
	for _, res := range results {
		if res.Verdict.evaluated() && h.checkIn(r, res, opts, now) {
			wake = true
		}
	}
	if q.traced {
		h.trace(q, "checkin", "group", r.group, "results", len(results), "wake", wake)
	}
	return wake
}

// checkIn applies one verdict and reports whether the entry became ready.
func (h *Hotlist) checkIn(r *Ring, res Result, opts QueueOpts, now time.Time) (wake bool) {
	n := now.UnixNano()
	s, pos := h.sub(r, res.Cand.Index)
	s.mu.Lock()
	defer s.mu.Unlock()
	if int(pos) >= len(s.slots) {
		return false
	}
	sl := &s.slots[pos]
	if sl.state != Inflight || sl.gen != res.Cand.Gen {
		// A reseed reclaimed this entry meanwhile and someone else owns it.
		return false
	}
	if res.Verdict == Took || res.Verdict == Leased {
		s.confirm(pos, &h.c) // the partition exists and has (or had) data
	}
	switch res.Verdict {
	case Took:
		sl.drained, sl.tookEpoch, sl.tookValid = res.Drained, res.Cand.Epoch, true
		switch {
		case !res.AutoAck:
			// Our own lease: park until expiry (capped); our ack pulls it back early.
			at := min(res.Until.UnixNano(), now.Add(LeaseParkCap).UnixNano())
			s.set(pos, Wheel, at, &h.c)
		case opts.Window > 0:
			// Debounce: the partition just fired, hold it for another window.
			s.set(pos, Wheel, now.Add(opts.Window).UnixNano(), &h.c)
		default:
			// Visited: back of the line, behind everyone older.
			s.set(pos, Ready, r.stamp(n), &h.c)
			wake = true
		}
	case Empty:
		switch {
		case opts.deferral():
			wait := RevisitMax
			if !res.Until.IsZero() {
				wait = max(RevisitMin, min(RevisitMax, res.Until.Sub(now)))
			}
			s.set(pos, Wheel, n+int64(wait), &h.c)
		case sl.epoch == res.Cand.Epoch:
			s.set(pos, Idle, 0, &h.c) // epoch-CAS: no mark since check-out
		default:
			// A push raced the probe: its data is real, and it is new, so
			// the entry goes to the back of the line.
			s.set(pos, Ready, r.stamp(n), &h.c)
			wake = true
		}
	case Leased:
		at := min(res.Until.Add(LeasePad).UnixNano(), now.Add(LeaseParkCap).UnixNano())
		s.set(pos, Wheel, at, &h.c)
	default:
		// Not evaluated: back to its old place in line (near the head),
		// so the next pop asks about it before anything newer.
		s.set(pos, Ready, sl.readyAt, &h.c)
		wake = true
	}
	return wake
}

// Abandon re-appends every candidate of a check-out whose pop was dropped
// before check-in (the drop guard).
func (h *Hotlist) Abandon(r *Ring, cands []Candidate, now time.Time) {
	res := make([]Result, len(cands))
	for i, c := range cands {
		res[i] = Result{Cand: c, Verdict: Requeue}
	}
	h.CheckIn(r, res, now)
}

// AckRelease is the promote-on-ack hook: an ack released the lease of
// (partition id, group). pending tells whether the partition still has
// messages after the group's cursor. The entry is cleared only when the
// claim drained the partition, nothing was marked since its check-out, and
// nothing is pending; otherwise it is made ready. It returns whether to wake
// the queue.
func (h *Hotlist) AckRelease(key Key, group, partitionID string, pending bool, now time.Time) bool {
	q := h.acquire(key)
	if q == nil {
		return pending
	}
	defer q.release()
	q.mu.RLock()
	i, known := q.byID[partitionID]
	r := q.rings[group]
	q.mu.RUnlock()
	if r == nil || !known {
		return pending
	}
	s, pos := h.sub(r, i)
	s.mu.Lock()
	defer s.mu.Unlock()
	sl := s.slot(pos)
	wake := false
	switch sl.state {
	case Wheel, Idle:
		if !pending && sl.tookValid && sl.drained && sl.epoch == sl.tookEpoch {
			if sl.state != Idle {
				s.set(pos, Idle, 0, &h.c)
			}
		} else if pending || sl.state == Wheel {
			// Its claim was served: back of the line.
			s.set(pos, Ready, r.stamp(now.UnixNano()), &h.c)
			wake = true
		}
	case Ready:
		wake = pending
	case Inflight:
		// a mark's epoch bump already makes the in-flight check-in re-append
	}
	sl.tookValid = false
	if q.traced {
		h.trace(q, "ack", "group", group, "pending", pending, "wake", wake)
	}
	return wake
}

// WheelTick promotes every due wheel entry of every ring to Ready and
// returns the keys of the queues that gained ready entries.
func (h *Hotlist) WheelTick(now time.Time) []Key {
	n := now.UnixNano()
	var keys []Key
	for _, q := range h.snapshot() {
		promoted := false
		q.mu.RLock()
		for _, r := range q.rings {
			for _, s := range r.subs {
				if s.nWheel.Load() == 0 {
					continue
				}
				s.mu.Lock()
				for {
					pos, ok := s.popDue(n)
					if !ok {
						break
					}
					// In line since it fell due (readyAt, the revisit
					// time), ahead of anything ready after that.
					s.set(pos, Ready, s.slots[pos].readyAt, &h.c)
					promoted = true
				}
				s.compact()
				s.mu.Unlock()
			}
		}
		q.mu.RUnlock()
		if promoted {
			keys = append(keys, q.key)
			if q.traced {
				h.trace(q, "wheel")
			}
		}
	}
	return keys
}

func (h *Hotlist) snapshot() []*queue {
	h.mu.RLock()
	defer h.mu.RUnlock()
	out := make([]*queue, 0, len(h.queues))
	for _, q := range h.queues {
		out = append(out, q)
	}
	return out
}

// Ready tells whether the ring has a ready entry or a wheel entry due at now,
// without taking any lock a pop holds for long.
func (r *Ring) Ready(now time.Time) bool {
	n := now.UnixNano()
	for _, s := range r.subs {
		if s.nReady.Load() > 0 {
			return true
		}
		if s.nWheel.Load() > 0 {
			s.mu.Lock()
			due := len(s.wheel) > 0 && s.wheel[0].at <= n
			s.mu.Unlock()
			if due {
				return true
			}
		}
	}
	return false
}

// Group returns the ring's consumer group.
func (r *Ring) Group() string { return r.group }

// Key returns the ring's queue key.
func (r *Ring) Key() Key { return r.q.key }

// Counts returns the ring's ready, wheel and inflight entry counts.
func (r *Ring) Counts() (ready, wheel, inflight int) {
	for _, s := range r.subs {
		ready += int(s.nReady.Load())
		wheel += int(s.nWheel.Load())
		inflight += int(s.nInflight.Load())
	}
	return
}
