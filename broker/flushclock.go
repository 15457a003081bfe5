package broker

import (
	"sync/atomic"
	"time"
)

// flushClock is what one kind of combined flush spends in time: how long
// its flushes ran, and how long the requests it carried waited for them. A
// node runs a push flight per push lane (pushlanes.go; a push spread over
// lanes counts a wait in each) and one claim flight (flushesInFlight), the
// claim flight carrying the CAS acks too: kind "pop" is its flushes with
// claims (and any acks waiting with them), kind "ack" its flushes of acks
// alone. A request's latency is its wait plus its flush; busy time near
// the wall-clock time means requests queue behind the flight
// (docs/operations.md, "Flush time"; docs/benchmarks.md).
type flushClock struct {
	busy   atomic.Int64 // nanoseconds from flushes' start to their end
	runs   atomic.Int64 // flushes counted in busy
	wait   atomic.Int64 // nanoseconds requests waited, arrival to their first flush
	waited atomic.Int64 // requests counted in wait
}

// waitedSince counts one request, arrived at t0, whose first flush starts now.
func (c *flushClock) waitedSince(t0, now time.Time) {
	c.wait.Add(int64(now.Sub(t0)))
	c.waited.Add(1)
}

// ran counts one flush that started at t0 (deferred by the flush, so that
// one ending in a panic is counted too).
func (c *flushClock) ran(t0 time.Time) {
	c.busy.Add(int64(time.Since(t0)))
	c.runs.Add(1)
}

// FlushTimes is a copy of one kind's flushClock, in seconds.
type FlushTimes struct {
	BusySeconds float64 // its flushes' time, start to end
	Runs        int64   // those flushes
	WaitSeconds float64 // summed waits of the requests it carried
	Waited      int64   // those requests
}

func (c *flushClock) snapshot() FlushTimes {
	return FlushTimes{BusySeconds: float64(c.busy.Load()) / 1e9, Runs: c.runs.Load(),
		WaitSeconds: float64(c.wait.Load()) / 1e9, Waited: c.waited.Load()}
}
