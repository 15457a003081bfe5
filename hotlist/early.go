package hotlist

import (
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Early reseeds (docs/hotlist.md, "Early reseeds after lost hints"). A peer
// stream that shows a gap, a reconnect without continuity, a sender restart
// or an overflow signal means some hints never arrived, though not which:
// the sender's tenants and queues are unknown, so every ring is a
// candidate. HintsLost records the loss; EarlyReseeds moves the rings that
// matter (parked consumers first, then non-empty rings) ahead of their floor
// through the normal reseed path, rate-limited per ring and per node. The
// other rings are left to their next pop, which runs the reseed itself when
// it finds the ring empty (BeginReseed honours a pending early reseed), or
// to the floor.

// early is the node-wide state of early reseeds.
type early struct {
	lossAt  atomic.Int64 // unix nanos of the latest loss signal, 0 = none yet
	pending atomic.Bool  // a new loss signal since the last pass
	wakeAt  atomic.Int64 // unix nanos when a deferred ring may run, 0 = none
	onWake  func()       // SetEarlyWake's hook, called when wakeAt moves earlier

	mu     sync.Mutex // the node-wide token bucket
	tokens float64
	tokAt  int64

	signals, runs, suppressed atomic.Int64
	dark                      histogram
}

// DarkBoundsMs are the upper bounds, in milliseconds, of the dark-time
// histogram buckets (the last bucket is unbounded).
var DarkBoundsMs = []int64{10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000}

// histogram counts observations per DarkBoundsMs bucket, lock-free.
type histogram struct {
	buckets [13]atomic.Uint64 // len(DarkBoundsMs)+1
	count   atomic.Uint64
	sumMs   atomic.Int64
}

func (h *histogram) observe(ms int64) {
	ms = max(ms, 0)
	i := sort.Search(len(DarkBoundsMs), func(i int) bool { return ms <= DarkBoundsMs[i] })
	h.buckets[i].Add(1)
	h.count.Add(1)
	h.sumMs.Add(ms)
}

// Histogram is a snapshot of the dark-time histogram: Buckets[i] counts the
// observations in (DarkBoundsMs[i-1], DarkBoundsMs[i]], the last one those
// above every bound (not cumulative).
type Histogram struct {
	Buckets []uint64
	Count   uint64
	SumMs   int64
}

func (h *histogram) snapshot() Histogram {
	out := Histogram{Buckets: make([]uint64, len(h.buckets)), Count: h.count.Load(), SumMs: h.sumMs.Load()}
	for i := range h.buckets {
		out.Buckets[i] = h.buckets[i].Load()
	}
	return out
}

// HintsLost records that hints from a peer were lost at now. It only
// stores the time: the next EarlyReseeds applies it to the rings, so a burst
// of signals costs one pass.
func (h *Hotlist) HintsLost(now time.Time) {
	n := now.UnixNano()
	h.early.signals.Add(1)
	for {
		old := h.early.lossAt.Load()
		if n <= old || h.early.lossAt.CompareAndSwap(old, n) {
			break
		}
	}
	h.early.pending.Store(true)
	if h.early.onWake != nil {
		h.early.onWake()
	}
}

// SetEarlyWake sets a hook called whenever the time NextEarly names moves
// earlier: a loss signal, or a ring deferred by its interval or by the
// node's budget, also on a pop's path (BeginReseed). A caller that sleeps
// until NextEarly re-reads it when called. Set it before any other call; it
// must not block or call back into the Hotlist.
func (h *Hotlist) SetEarlyWake(f func()) { h.early.onWake = f }

// NextEarly is when the next EarlyReseeds pass may have work: zero when
// nothing is pending (no loss signal since the last pass and no deferred
// ring), now's time when a signal is pending, else the earliest time a
// deferred ring may run. A caller that waits for it (or for HintsLost)
// need not poll EarlyReseeds.
func (h *Hotlist) NextEarly() time.Time {
	if h.early.pending.Load() {
		return time.Unix(0, max(h.early.lossAt.Load(), 1))
	}
	if w := h.early.wakeAt.Load(); w != 0 {
		return time.Unix(0, w)
	}
	return time.Time{}
}

// earlyDue tells whether the ring has a pending early reseed that its rate
// limit lets run at n. r.resMu is held.
func (h *Hotlist) earlyDue(r *Ring, n int64) bool {
	return r.earlyReq > r.covered && n >= max(r.earlyReq, r.lastEarly+int64(h.cfg.EarlyReseedMin))
}

// EarlyReseeds claims the rings whose early reseed is due at now, those
// parked(key) names first, then non-empty ones, at most as many as the
// node-wide budget allows (EarlyReseedRate a second, a burst of one
// second's worth). The caller runs and ends each walk as after
// BeginReseed. Empty rings
// without a parked consumer are not claimed: their next pop reseeds them.
// With no loss signal since the last pass and no deferred ring due, it
// costs two atomic loads; otherwise one pass over the rings.
func (h *Hotlist) EarlyReseeds(now time.Time, parked func(key Key) bool) []*Walk {
	n := now.UnixNano()
	if !h.early.pending.Swap(false) {
		if w := h.early.wakeAt.Load(); w == 0 || n < w {
			return nil
		}
	}
	h.early.wakeAt.Store(0)
	wake := int64(0) // earliest time a ring deferred by this pass may run
	defer func() {
		if wake > 0 {
			h.early.wakeBy(wake)
		}
	}()
	defer1 := func(at int64) {
		if wake == 0 || at < wake {
			wake = at
		}
	}
	loss := h.early.lossAt.Load()
	minIv := int64(h.cfg.EarlyReseedMin)
	var hot, busy []*Ring
	for _, q := range h.snapshot() {
		q.mu.RLock()
		isParked := -1
		for _, r := range q.rings {
			r.resMu.Lock()
			if loss > r.earlyReq {
				r.earlyReq = loss
				if r.lastEarly > 0 && loss < r.lastEarly+minIv {
					// Folded into the next early reseed, at the end of
					// the ring's minimum interval.
					h.early.suppressed.Add(1)
				}
			}
			switch {
			case r.earlyReq <= r.covered || r.cold:
				// Nothing pending (a cold ring reseeds on its first pop).
			case r.reseeding:
				defer1(n) // look again on the next pass
			case !h.earlyDue(r, n):
				defer1(max(r.earlyReq, r.lastEarly+minIv))
			default:
				if isParked < 0 {
					isParked = 0
					if parked != nil && parked(q.key) {
						isParked = 1
					}
				}
				if isParked == 1 {
					hot = append(hot, r)
				} else if ready, wheel, inflight := r.Counts(); ready+wheel+inflight > 0 {
					busy = append(busy, r)
				}
			}
			r.resMu.Unlock()
		}
		q.mu.RUnlock()
	}
	cands := append(hot, busy...)
	if len(cands) == 0 {
		return nil
	}
	allowed := h.takeTokens(len(cands), n)
	if allowed < len(cands) {
		// The rest wait for the bucket to refill by one token.
		defer1(n + int64(time.Second)/int64(h.cfg.EarlyReseedRate))
		h.early.suppressed.Add(int64(len(cands) - allowed))
	}
	var out []*Walk
	for _, r := range cands {
		if len(out) == allowed {
			break
		}
		r.resMu.Lock()
		if !r.reseeding && h.earlyDue(r, n) {
			w := h.begin(r, n)
			r.lastEarly = n
			r.earlyRun.Store(true)
			h.early.runs.Add(1)
			out = append(out, w)
		}
		r.resMu.Unlock()
	}
	return out
}

// wakeBy makes the next EarlyReseeds pass run at n at the latest.
func (e *early) wakeBy(n int64) {
	for {
		old := e.wakeAt.Load()
		if old != 0 && old <= n {
			return
		}
		if e.wakeAt.CompareAndSwap(old, n) {
			if e.onWake != nil {
				e.onWake()
			}
			return
		}
	}
}

// takeTokens takes up to want tokens from the node-wide bucket at n.
func (h *Hotlist) takeTokens(want int, n int64) int {
	e := &h.early
	e.mu.Lock()
	defer e.mu.Unlock()
	rate := float64(h.cfg.EarlyReseedRate)
	if e.tokAt == 0 {
		e.tokens = rate
	} else if n > e.tokAt {
		e.tokens = min(rate, e.tokens+rate*float64(n-e.tokAt)/1e9)
	}
	e.tokAt = n
	got := min(want, int(e.tokens))
	e.tokens -= float64(got)
	return got
}
