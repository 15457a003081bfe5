package hotlist

import (
	"sort"
	"time"
)

// ViewMaxRings bounds the rings one QueueView lists (a queue with more
// consumer groups says RingsTruncated).
const ViewMaxRings = 100

// QueueView is a read-only snapshot of one queue's rings on this node, for
// an operator to compare with PostgreSQL (docs/hotlist.md, "Inspecting a
// ring").
type QueueView struct {
	Rings          []RingView // by group name
	RingsTruncated bool       // the queue has more than ViewMaxRings rings
}

// RingView is one ring (one consumer group) of a QueueView.
type RingView struct {
	Group                  string
	Ready, Wheel, Inflight int // entry counts, as Ring.Counts
	Unconfirmed            int // entries only remote marks track
	Cold                   bool
	Reseeding              bool
	NextReseedIn           time.Duration // until the reseed floor; negative when overdue
	LastReseedAt           time.Time     // start of the reseed in progress or the last one; zero = none yet
	Entries                []EntryView   // tracked (non-idle) entries, by name, at most maxParts
	Truncated              bool          // the ring tracks more entries than Entries lists
}

// EntryView is one tracked partition of a ring.
type EntryView struct {
	Name        string
	ID          string // partition id, "" until a pop or a reseed learned it
	State       State  // Ready, Wheel or Inflight
	DueIn       time.Duration
	Held        time.Duration // Inflight: since check-out
	Unconfirmed bool          // tracked only because of remote marks
}

// QueueView returns the rings of queue key with up to maxParts tracked
// entries each; false when this node holds no state for the queue. It
// takes the registry and queue read locks only to find the rings and name
// the entries, and one sub-ring lock at a time for a bounded scan, so a
// status read never holds up a pop for long.
func (h *Hotlist) QueueView(key Key, maxParts int, now time.Time) (QueueView, bool) {
	q := h.acquire(key)
	if q == nil {
		return QueueView{}, false
	}
	defer q.release()
	maxParts = max(maxParts, 0)
	q.mu.RLock()
	rings := append([]*Ring(nil), q.list...)
	q.mu.RUnlock()
	sort.Slice(rings, func(i, j int) bool { return rings[i].group < rings[j].group })
	var v QueueView
	if len(rings) > ViewMaxRings {
		rings, v.RingsTruncated = rings[:ViewMaxRings], true
	}
	n := now.UnixNano()
	idx := make([][]uint32, len(rings))
	for k, r := range rings {
		rv := RingView{Group: r.group, Unconfirmed: r.Unconfirmed()}
		rv.Ready, rv.Wheel, rv.Inflight = r.Counts()
		r.resMu.Lock()
		rv.Cold, rv.Reseeding = r.cold, r.reseeding
		rv.NextReseedIn = time.Duration(r.nextReseed - n)
		if r.beganAt != 0 {
			rv.LastReseedAt = time.Unix(0, r.beganAt)
		}
		r.resMu.Unlock()
		rv.Entries, idx[k], rv.Truncated = h.scanRing(r, maxParts, n)
		v.Rings = append(v.Rings, rv)
	}
	// Name the entries: one short read lock for every ring.
	q.mu.RLock()
	for k := range v.Rings {
		for e, i := range idx[k] {
			if int(i) < len(q.names) {
				v.Rings[k].Entries[e].Name, v.Rings[k].Entries[e].ID = q.names[i], q.ids[i]
			}
		}
	}
	q.mu.RUnlock()
	for k := range v.Rings {
		es := v.Rings[k].Entries
		sort.Slice(es, func(i, j int) bool { return es[i].Name < es[j].Name })
	}
	return v, true
}

// scanRing collects up to maxParts non-idle entries of r (unnamed) and
// their partition indexes; truncated when there were more.
func (h *Hotlist) scanRing(r *Ring, maxParts int, n int64) (out []EntryView, idx []uint32, truncated bool) {
	S := uint32(len(r.subs))
	for shard, s := range r.subs {
		if s.nReady.Load()+s.nWheel.Load()+s.nInflight.Load() == 0 {
			continue
		}
		s.mu.Lock()
		for pos := range s.slots {
			sl := &s.slots[pos]
			if sl.state == Idle {
				continue
			}
			if len(out) >= maxParts {
				truncated = true
				break
			}
			e := EntryView{State: sl.state, Unconfirmed: sl.remote}
			switch sl.state {
			case Wheel:
				e.DueIn = time.Duration(sl.readyAt - n)
			case Inflight:
				e.Held = time.Duration(n - sl.takenAt)
			}
			out = append(out, e)
			idx = append(idx, uint32(pos)*S+uint32(shard))
		}
		s.mu.Unlock()
		if truncated {
			break
		}
	}
	return out, idx, truncated
}
