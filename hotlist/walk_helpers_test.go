package hotlist

import (
	"sync"
	"time"
)

// testWalks keeps the walk a rule test claimed, by ring, so the rule tests
// keep the claim-then-end shape in which docs/hotlist.md states the rules.
// Production code holds its *Walk and defers End (TestWalk* pin that).
var testWalks sync.Map // *Ring -> *Walk

// claim records a claimed walk and tells whether there is one.
func claim(w *Walk) bool {
	if w == nil {
		return false
	}
	testWalks.Store(w.r, w)
	return true
}

// claimed records claimed walks and returns their rings.
func claimed(ws []*Walk) []*Ring {
	var out []*Ring
	for _, w := range ws {
		claim(w)
		out = append(out, w.r)
	}
	return out
}

// endReseed ends r's claimed walk as a complete one when ok.
func endReseed(r *Ring, ok bool, now time.Time) { endWalk(r, ok, ok, now) }

// endWalk ends r's claimed walk.
func endWalk(r *Ring, ok, complete bool, now time.Time) {
	v, loaded := testWalks.LoadAndDelete(r)
	if !loaded {
		panic("endWalk: no walk claimed on this ring")
	}
	v.(*Walk).End(ok, complete, now)
}
