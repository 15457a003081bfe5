package broker

import "time"

// earlyTick is how often the node looks for early reseeds to run after a
// peer's hints were lost (docs/hotlist.md, "Early reseeds after lost
// hints"). Without a loss signal a tick costs one atomic swap; with one, a
// lost hint's partition is looked for within this tick plus the ring's
// minimum early interval.
const earlyTick = 10 * time.Millisecond

// HintsLost implements mesh.LossReceiver: a peer's stream showed a gap, a
// reconnect without continuity, a restart, or an overflow signal. Which
// hints were lost is unknown, so every ring becomes a candidate; the early
// loop runs the reseeds from its own goroutine, never the mesh's.
func (b *Broker) HintsLost(sender string) {
	if b.hot == nil {
		return // the SQL candidate scan reads PostgreSQL on every pop anyway
	}
	b.hot.HintsLost(time.Now())
}

// startEarlyLoop runs the early reseeds the hot-list claims, rings with
// parked pops first, through the same reseed path as the floor.
func (b *Broker) startEarlyLoop() {
	b.every(earlyTick, func(now time.Time) {
		for _, w := range b.hot.EarlyReseeds(now, b.gates.has) {
			b.runReseed(w)
		}
	})
}
