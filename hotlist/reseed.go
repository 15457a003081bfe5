package hotlist

import (
	"sync/atomic"
	"time"
)

// ReseedRow is one probably-pending partition reported by the reseed query.
type ReseedRow struct {
	Name        string
	PartitionID string
	Age         time.Duration // since the partition's last write, when AgeKnown
	AgeKnown    bool
}

// Cold tells whether the ring was never reseeded; the pop path reseeds it
// before trusting an empty answer.
func (r *Ring) Cold() bool {
	r.resMu.Lock()
	defer r.resMu.Unlock()
	return r.cold
}

// Walk is one claimed reseed of a ring: BeginReseed, BeginPrune,
// DueReseeds(By) and EarlyReseeds hand one out, the caller applies the
// walk's pages with Reseed and then calls End (docs/hotlist.md, "Reseed
// walks"). End must run once the walk is over, whatever happened (defer
// it): an open walk keeps its ring "reseeding", so no floor, prune or early
// reseed could claim the ring again. End is idempotent, and a walk that
// ended touches its ring no more, so a stale walk can never end a later
// one. OpenWalks counts the walks not yet ended. A walk belongs to one
// goroutine.
type Walk struct {
	h     *Hotlist
	r     *Ring
	ended atomic.Bool
}

// begin claims a reseed walk of r begun at n and opens a new generation:
// remote marks from here on are not pruned by it. r.resMu is held.
func (h *Hotlist) begin(r *Ring, n int64) *Walk {
	r.reseeding = true
	r.beganAt = n
	r.beginGen = r.gen.Add(1)
	h.walks.Add(1)
	return &Walk{h: h, r: r}
}

// OpenWalks returns how many claimed reseed walks have not ended yet.
func (h *Hotlist) OpenWalks() int64 { return h.walks.Load() }

// Ring returns the walk's ring.
func (w *Walk) Ring() *Ring { return w.r }

// Reseed applies one page of the walk (see Hotlist.Reseed). After End it
// does nothing and returns 0.
func (w *Walk) Reseed(rows []ReseedRow, now time.Time) int {
	if w.ended.Load() {
		return 0
	}
	return w.h.Reseed(w.r, rows, now)
}

// End finishes the walk; only the first call counts. ok: every page was
// read without error (it warms the ring and schedules the next reseed an
// interval after the previous due time, keeping the ring's random phase).
// complete: the walk also reached the last page, so it may drop the
// unconfirmed remote-marked entries it did not list (prune). A walk
// released without running passes false, false.
func (w *Walk) End(ok, complete bool, now time.Time) {
	if !w.ended.CompareAndSwap(false, true) {
		return
	}
	w.h.walks.Add(-1)
	w.h.endWalk(w.r, ok, ok && complete, now)
}

// Ended tells whether End was called.
func (w *Walk) Ended() bool { return w.ended.Load() }

// BeginReseed claims the ring's reseed if it is cold or due at now (or
// force), so concurrent callers do not run the same scan twice. It returns
// nil when it did not claim it; otherwise the caller runs the query,
// applies each page with Walk.Reseed, and ends the walk.
func (h *Hotlist) BeginReseed(r *Ring, now time.Time, force bool) *Walk {
	r.resMu.Lock()
	defer r.resMu.Unlock()
	n := now.UnixNano()
	if r.reseeding {
		return nil
	}
	due := force || r.cold || r.nextReseed <= n
	if h.earlyDue(r, n) {
		// A pending early reseed (lost hints) runs on this pop: the ring is
		// empty or its floor is due anyway. When nothing else makes it due
		// it takes a token of the node-wide budget, as the early loop's do,
		// so polled empty rings cannot multiply the early reseed rate.
		if due || h.takeTokens(1, n) == 1 {
			w := h.begin(r, n)
			r.lastEarly = n
			r.earlyRun.Store(true)
			h.early.runs.Add(1)
			return w
		}
		// No token: the early loop looks again when one is back, and claims
		// the ring then if this pop parked on it.
		h.early.suppressed.Add(1)
		h.early.wakeBy(n + int64(time.Second)/int64(h.cfg.EarlyReseedRate))
	}
	if !due {
		return nil
	}
	return h.begin(r, n)
}

// Unconfirmed returns how many of the ring's entries only remote marks
// track (nothing confirmed that their partition has data).
func (r *Ring) Unconfirmed() int {
	n := 0
	for _, s := range r.subs {
		n += int(s.nRemote.Load())
	}
	return n
}

// BeginPrune claims a reseed of the ring ahead of its floor when at least
// SuspectUnconfirmed entries are unconfirmed remote marks and the last such
// claim is PruneEvery old: one keyset walk of the partitions that really have
// work then drops every unconfirmed entry it does not list (a complete
// Walk.End), instead of one empty probe each (docs/hotlist.md, "Unconfirmed
// remote marks"). It returns nil when it did not claim; the caller runs and
// ends the walk as after BeginReseed.
func (h *Hotlist) BeginPrune(r *Ring, now time.Time) *Walk {
	if r.Unconfirmed() < h.cfg.SuspectUnconfirmed {
		return nil
	}
	r.resMu.Lock()
	defer r.resMu.Unlock()
	n := now.UnixNano()
	if r.reseeding || n-r.lastPrune < int64(h.cfg.PruneEvery) {
		return nil
	}
	r.lastPrune = n
	return h.begin(r, n)
}

// DueReseeds claims every ring whose reseed floor is due at now; the
// caller runs and ends every walk.
func (h *Hotlist) DueReseeds(now time.Time) []*Walk { return h.DueReseedsBy(now, now) }

// DueReseedsBy claims, at now, every ring whose reseed floor is due by
// (the churn pass claims every ring with a cutoff far ahead). The walks
// are recorded as begun at now, never at by: a walk covers only the losses
// signalled before it really began (early.go).
func (h *Hotlist) DueReseedsBy(now, by time.Time) []*Walk {
	var out []*Walk
	for _, q := range h.snapshot() {
		q.mu.RLock()
		for _, r := range q.rings {
			// The floor only: a pending early reseed is EarlyReseeds' to
			// rate-limit, or the ring's next pop's.
			r.resMu.Lock()
			if !r.reseeding && (r.cold || r.nextReseed <= by.UnixNano()) {
				out = append(out, h.begin(r, now.UnixNano()))
			}
			r.resMu.Unlock()
		}
		q.mu.RUnlock()
	}
	return out
}

// Reseed applies one page of the reseed query to the ring as reseed marks:
// every listed partition (lease-held ones included) becomes tracked, and an
// Inflight entry stranded by a dropped pop is reclaimed. It returns how many
// entries were missing from the ring. A walk applies its pages with
// Walk.Reseed; the pop path also teaches a ring what a SQL scan found with
// it directly (rows need no claim: only pruning and scheduling do).
func (h *Hotlist) Reseed(r *Ring, rows []ReseedRow, now time.Time) int {
	q := r.q
	q.refs.Add(1)
	defer q.release()
	idx := make([]uint32, len(rows))
	for i, row := range rows {
		idx[i] = q.intern(row.Name)
		q.learn(idx[i], row.PartitionID)
	}
	added := 0
	early := r.earlyRun.Load()
	stranded := now.Add(-h.cfg.StrandedAfter).UnixNano()
	for k, i := range idx {
		s, pos := h.sub(r, i)
		s.mu.Lock()
		sl := s.slot(pos)
		s.confirm(pos, &h.c) // PostgreSQL listed it: its partition has work
		switch sl.state {
		case Idle:
			// Ready even on a deferral queue: a reseed row is usually old
			// backlog (a cold ring after a restart, a sweep or a group
			// delete), not a fresh push, and parking it for a whole delay
			// would stall visible messages. PostgreSQL enforces the cut; an
			// empty verdict comes back with the exact revisit time.
			added++
			sl.epoch++
			sl.batch++
			// Back of the line, as a mark: placing it by the row's age
			// would cost a sorted insert per row of a 10,000-row page.
			s.set(pos, Ready, r.stamp(now.UnixNano()), &h.c)
			if early && rows[k].AgeKnown {
				// Found by an early reseed, missing from the ring: without
				// it the partition would have stayed dark until the floor.
				h.early.dark.observe(rows[k].Age.Milliseconds())
			}
		case Inflight:
			sl.epoch++
			if sl.takenAt <= stranded {
				// Nobody will check this in: a mark or a promote cannot
				// re-link it, so the reseed does.
				sl.gen++
				s.set(pos, Ready, sl.readyAt, &h.c) // never evaluated: its old place
				added++
				h.reclaimed.Add(1)
			}
		default:
			sl.epoch++
		}
		s.mu.Unlock()
	}
	h.reseedAdded.Add(int64(added))
	return added
}

// endWalk finishes a reseed walk (Walk.End). A successful one warms the
// ring and schedules the next one an interval after the previous due time,
// keeping the ring's random phase. A complete one (every page walked) also
// drops the unconfirmed remote-marked entries it did not list (prune).
func (h *Hotlist) endWalk(r *Ring, ok, complete bool, now time.Time) {
	r.resMu.Lock()
	defer r.resMu.Unlock()
	r.reseeding = false
	r.earlyRun.Store(false)
	if !ok {
		return
	}
	// Every loss signalled before this walk began is covered by it.
	r.covered = max(r.covered, r.beganAt)
	if complete {
		h.prune(r, r.beginGen)
	}
	h.reseeds.Add(1)
	r.cold = false
	n := now.UnixNano()
	if r.nextReseed <= n {
		// Skip whole intervals: a reseed late by several intervals (after an
		// outage) keeps its phase, so rings do not resynchronise into one
		// scan storm.
		iv := int64(h.cfg.ReseedInterval)
		r.nextReseed += ((n-r.nextReseed)/iv + 1) * iv
	}
	h.reclaimUnlisted(r, now)
	if r.q.traced {
		h.trace(r.q, "reseed", "group", r.group)
	}
}

// prune drops every Ready or Wheel entry that only remote marks track, was
// last remote-marked before the reseed of generation gen began, and that the
// reseed did not list (listing confirms). Why that loses nothing: a peer
// sends a hint only after its push committed, so a real partition's push
// committed before the mark, hence before the reseed began and before its
// query ran; PostgreSQL's walk therefore saw it and listed it if it still
// had work for the group. A mark during the reseed carries the new
// generation and stays. Inflight entries are left to their check-in. It
// costs one pass over the ring's slots, only when it holds unconfirmed
// entries.
func (h *Hotlist) prune(r *Ring, gen uint32) {
	dropped := 0
	for _, s := range r.subs {
		if s.nRemote.Load() == 0 {
			continue
		}
		s.mu.Lock()
		for pos := range s.slots {
			sl := &s.slots[pos]
			if sl.remote && sl.remoteGen < gen && (sl.state == Ready || sl.state == Wheel) {
				s.set(int32(pos), Idle, 0, &h.c)
				dropped++
			}
		}
		s.mu.Unlock()
	}
	h.pruned.Add(int64(dropped))
	if dropped > 0 && r.q.traced {
		h.trace(r.q, "prune", "group", r.group, "dropped", dropped)
	}
}

// reclaimUnlisted re-appends Inflight entries stranded by a dropped pop that
// the reseed did not list (their partition had nothing pending): without
// this they would stay Inflight forever and block the idle sweep. Ready is
// stale in excess at worst: one empty probe clears it.
func (h *Hotlist) reclaimUnlisted(r *Ring, now time.Time) {
	stranded := now.Add(-h.cfg.StrandedAfter).UnixNano()
	for _, s := range r.subs {
		if s.nInflight.Load() == 0 {
			continue
		}
		s.mu.Lock()
		for pos := range s.slots {
			sl := &s.slots[pos]
			if sl.state == Inflight && sl.takenAt <= stranded {
				sl.gen++
				s.set(int32(pos), Ready, sl.readyAt, &h.c) // never evaluated: its old place
				h.reclaimed.Add(1)
			}
		}
		s.mu.Unlock()
	}
}
