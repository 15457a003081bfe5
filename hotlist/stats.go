package hotlist

import "sort"

// Stats are the hot-list's counters and gauges.
type Stats struct {
	Rings, Queues               int
	Ready, Wheel, Inflight      int64
	MarksLocal, MarksRemote     int64
	MarksCommit                 int64
	Reseeds, ReseedAdded        int64
	Reclaimed, Swept, RingsDrop int64
	Unconfirmed                 int64 // entries only remote marks track
	Pruned                      int64 // unconfirmed entries a reseed dropped

	// Early reseeds after lost hints (early.go).
	LossSignals     int64     // HintsLost calls (gaps and overflow signals from peers)
	EarlyReseeds    int64     // early reseeds begun
	EarlySuppressed int64     // per ring: loss signals folded into a later early reseed by the per-ring interval or the node budget
	DarkTime        Histogram // age of the last write of partitions an early reseed found missing from their ring
}

// Stats returns the counters; it takes only the registry read lock.
func (h *Hotlist) Stats() Stats {
	h.mu.RLock()
	queues := len(h.queues)
	h.mu.RUnlock()
	return Stats{
		Rings: int(h.rings.Load()), Queues: queues,
		Ready: h.c.ready.Load(), Wheel: h.c.wheel.Load(), Inflight: h.c.inflight.Load(),
		MarksLocal: h.marksLocal.Load(), MarksRemote: h.marksRemote.Load(), MarksCommit: h.marksCommit.Load(),
		Reseeds: h.reseeds.Load(), ReseedAdded: h.reseedAdded.Load(),
		Reclaimed: h.reclaimed.Load(), Swept: h.swept.Load(), RingsDrop: h.dropped.Load(),
		Unconfirmed: h.c.remote.Load(), Pruned: h.pruned.Load(),
		LossSignals: h.early.signals.Load(), EarlyReseeds: h.early.runs.Load(),
		EarlySuppressed: h.early.suppressed.Load(), DarkTime: h.early.dark.snapshot(),
	}
}

// RingStat describes one ring for the report and the status endpoint.
type RingStat struct {
	Tenant, Queue, Group   string
	Ready, Wheel, Inflight int
}

// TopRings returns the n busiest non-empty rings ranked by ready + wheel
// (ties broken by name, so the listing is stable).
func (h *Hotlist) TopRings(n int) []RingStat {
	var all []RingStat
	for _, q := range h.snapshot() {
		tenant, name := q.key.Split()
		q.mu.RLock()
		for g, r := range q.rings {
			ready, wheel, inflight := r.Counts()
			if ready+wheel+inflight == 0 {
				continue
			}
			all = append(all, RingStat{Tenant: tenant, Queue: name, Group: g, Ready: ready, Wheel: wheel, Inflight: inflight})
		}
		q.mu.RUnlock()
	}
	sort.Slice(all, func(i, j int) bool {
		a, b := all[i], all[j]
		if a.Ready+a.Wheel != b.Ready+b.Wheel {
			return a.Ready+a.Wheel > b.Ready+b.Wheel
		}
		if a.Queue != b.Queue {
			return a.Queue < b.Queue
		}
		if a.Group != b.Group {
			return a.Group < b.Group
		}
		return a.Tenant < b.Tenant
	})
	if n < 0 {
		n = 0
	}
	if len(all) > n {
		all = all[:n]
	}
	return all
}
