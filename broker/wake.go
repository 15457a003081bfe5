package broker

import (
	"context"
	"time"
)

// The wake loop wakes the pops parked on queues that local pushes marked
// quietly (docs/hotlist.md, "Background ticks"): one notify per marked queue,
// so a hot queue is woken at most once per wakeTick rather than once per
// push. Every quiet mark is followed by a kick (afterPush is the only path
// that marks quietly), so the loop runs only when kicked: at once on an idle
// node (a fixed tick made every local wake wait half a tick on average), at
// most once per wakeTick under load. It has no ticker: an idle node is not
// woken 200 times a second for nothing (docs/benchmarks.md, "What an idle
// node spends").

// kickWakes tells the wake loop that quiet marks may be waiting.
func (b *Broker) kickWakes() {
	select {
	case b.wakeKick <- struct{}{}:
	default: // already kicked
	}
}

// startWakeLoop runs the wake loop until Close.
func (b *Broker) startWakeLoop() {
	b.spawn(func(ctx context.Context) {
		every := b.cfg.Hotlist.WakeTick
		if every <= 0 {
			every = wakeTick
		}
		var last time.Time
		for {
			select {
			case <-ctx.Done():
				return
			case <-b.wakeKick:
			}
			if wait := every - time.Since(last); wait > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(wait):
				}
			}
			keys := b.hot.TakeWakes()
			if len(keys) == 0 {
				continue
			}
			last = time.Now()
			for _, key := range keys {
				b.gates.notify(key)
			}
		}
	})
}
