package broker

import (
	"context"
	"time"
)

// earlyTick is the least time between two passes of the early loop, which
// runs the early reseeds after a peer's hints were lost (docs/hotlist.md,
// "Early reseeds after lost hints"): a lost hint's partition is looked for
// within this plus the ring's minimum early interval. The loop sleeps until
// a loss signal or a deferred ring's time (Hotlist.NextEarly), so a node
// without losses is not woken for it.
const earlyTick = 10 * time.Millisecond

// HintsLost implements mesh.LossReceiver: a peer's stream showed a gap, a
// reconnect without continuity, a restart, or an overflow signal. Which
// hints were lost is unknown, so every ring becomes a candidate; the early
// loop runs the reseeds from its own goroutine, never the mesh's.
func (b *Broker) HintsLost(sender string) {
	if b.hot == nil {
		return // the SQL candidate scan reads PostgreSQL on every pop anyway
	}
	b.hot.HintsLost(time.Now()) // kicks the early loop (SetEarlyWake)
}

// kickEarly tells the early loop that the time Hotlist.NextEarly names
// moved earlier (the hot-list's SetEarlyWake hook).
func (b *Broker) kickEarly() {
	select {
	case b.earlyKick <- struct{}{}:
	default: // already kicked
	}
}

// startEarlyLoop runs the early reseeds the hot-list claims, rings with
// parked pops first, through the same reseed path as the floor.
func (b *Broker) startEarlyLoop() {
	b.spawn(func(ctx context.Context) {
		t := time.NewTimer(time.Hour)
		defer t.Stop()
		var last time.Time
		for {
			// Sleep until there is work, and at least earlyTick since the
			// last pass (a burst of signals costs one pass; a ring
			// mid-reseed asks to be looked at again on the next pass). A
			// kick means NextEarly moved earlier: look again.
			var wait time.Duration = -1 // until kicked
			if at := b.hot.NextEarly(); !at.IsZero() {
				wait = max(time.Until(at), earlyTick-time.Since(last), 0)
			}
			if wait != 0 {
				var timeout <-chan time.Time
				if wait > 0 {
					t.Reset(wait)
					timeout = t.C
				}
				select {
				case <-ctx.Done():
					return
				case <-b.earlyKick:
					t.Stop() // no stale tick after Stop since Go 1.23
					continue
				case <-timeout:
				}
			}
			last = time.Now()
			for _, w := range b.hot.EarlyReseeds(last, b.gates.has) {
				b.runReseed(w)
			}
		}
	})
}
