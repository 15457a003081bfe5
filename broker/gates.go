package broker

import (
	"sync"

	"queen-node/hotlist"
)

// gates are the per-queue long-poll wake gates, keyed by hotlist.Key so a
// hot-list mark and a wake always name the same queue. A parked pop
// subscribes before it asks PostgreSQL, so a wake that lands between its
// query and its park is never lost.
type gates struct {
	mu sync.Mutex
	m  map[hotlist.Key]*gate
}

type gate struct {
	ch      chan struct{} // closed and replaced on every wake
	refs    int           // parked subscribers; the entry is dropped at zero
	deleted uint64        // bumped when the queue is deleted
}

func newGates() *gates { return &gates{m: make(map[hotlist.Key]*gate)} }

// subscribe returns the channel the next wake closes, the queue's deletion
// generation, and a release function the caller must call once.
func (g *gates) subscribe(key hotlist.Key) (<-chan struct{}, uint64, func()) {
	g.mu.Lock()
	e := g.m[key]
	if e == nil {
		e = &gate{ch: make(chan struct{})}
		g.m[key] = e
	}
	e.refs++
	ch, gen := e.ch, e.deleted
	g.mu.Unlock()
	return ch, gen, func() {
		g.mu.Lock()
		e.refs--
		if e.refs == 0 && g.m[key] == e {
			delete(g.m, key)
		}
		g.mu.Unlock()
	}
}

// notify wakes every pop parked on key. It costs nothing when none is.
func (g *gates) notify(key hotlist.Key) bool {
	g.mu.Lock()
	e := g.m[key]
	if e != nil {
		close(e.ch)
		e.ch = make(chan struct{})
	}
	g.mu.Unlock()
	return e != nil
}

// markDeleted wakes the pops parked on key and tells them their queue is gone.
func (g *gates) markDeleted(key hotlist.Key) {
	g.mu.Lock()
	if e := g.m[key]; e != nil {
		e.deleted++
		close(e.ch)
		e.ch = make(chan struct{})
	}
	g.mu.Unlock()
}

// deletedGen returns the deletion generation of a subscribed key.
func (g *gates) deletedGen(key hotlist.Key) uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	if e := g.m[key]; e != nil {
		return e.deleted
	}
	return 0
}

// has tells whether a pop is parked on key.
func (g *gates) has(key hotlist.Key) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	e := g.m[key]
	return e != nil && e.refs > 0
}

// parked returns the number of parked subscribers over all queues.
func (g *gates) parked() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, e := range g.m {
		n += e.refs
	}
	return n
}
