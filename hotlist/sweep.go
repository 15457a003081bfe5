package hotlist

import (
	"slices"
	"time"
)

// Sweep drops the whole state of every queue that nobody touched for a full
// interval (second-chance flag clear), that no operation holds, and whose
// every entry is Idle. It returns how many queues it dropped.
func (h *Hotlist) Sweep(now time.Time) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	dropped := 0
	for key, q := range h.queues {
		if q.touched.Swap(false) || q.refs.Load() != 0 || !q.allIdle() {
			continue
		}
		delete(h.queues, key)
		h.rings.Add(-int64(len(q.rings)))
		for _, r := range q.rings {
			for _, sr := range r.subs {
				sr.detach(&h.c)
			}
		}
		dropped++
	}
	h.swept.Add(int64(dropped))
	if h.peak >= 1024 && len(h.queues) <= h.peak/4 {
		// A Go map never shrinks: after a burst of random queue names its
		// table would keep the peak's size. Rebuild it at the live size.
		m := make(map[Key]*queue, len(h.queues))
		for k, q := range h.queues {
			m[k] = q
		}
		h.queues, h.peak = m, len(m)
	}
	return dropped
}

func (q *queue) allIdle() bool {
	for _, r := range q.rings {
		ready, wheel, inflight := r.Counts()
		if ready+wheel+inflight != 0 {
			return false
		}
	}
	return true
}

// DropQueue forgets a queue entirely (the queue was deleted).
func (h *Hotlist) DropQueue(key Key) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if q := h.queues[key]; q != nil {
		delete(h.queues, key)
		h.dropRings(q, "")
	}
}

// DropGroup drops the group's ring on one queue (queue != "") or on every
// queue of the tenant, and only that tenant's: on a shared cell a group
// name such as "workers" is common to many tenants.
func (h *Hotlist) DropGroup(tenant, queue, group string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	if queue != "" {
		if q := h.queues[KeyOf(tenant, queue)]; q != nil {
			n += h.dropRings(q, group)
		}
		return n
	}
	for key, q := range h.queues {
		if key.Tenant() == tenant {
			n += h.dropRings(q, group)
		}
	}
	return n
}

// dropRings removes one group's ring ("" = all) and its counts. h.mu is held.
func (h *Hotlist) dropRings(q *queue, group string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	for g, r := range q.rings {
		if group != "" && g != group {
			continue
		}
		for _, sr := range r.subs {
			sr.detach(&h.c)
		}
		delete(q.rings, g)
		q.list = slices.DeleteFunc(q.list, func(x *Ring) bool { return x == r })
		h.rings.Add(-1)
		h.dropped.Add(1)
		n++
	}
	return n
}
