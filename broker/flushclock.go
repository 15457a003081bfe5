package broker

import (
	"sync/atomic"
	"time"
)

// flushClock is what one kind of combined flush (push, claim, CAS ack)
// spends in time: how long its one flight was busy, and how long the
// requests it carried waited for it. A node runs one flush of each kind at
// a time (flushesInFlight), so a request's latency is its wait plus its
// flush; busy time near the wall-clock time means requests queue behind
// the flight (docs/operations.md, "Flush time"; docs/benchmarks.md).
type flushClock struct {
	busy   atomic.Int64 // nanoseconds spent in flushes
	wait   atomic.Int64 // nanoseconds requests waited, arrival to their first flush
	waited atomic.Int64 // requests counted in wait
}

// waitedSince counts one request, arrived at t0, whose first flush starts now.
func (c *flushClock) waitedSince(t0, now time.Time) {
	c.wait.Add(int64(now.Sub(t0)))
	c.waited.Add(1)
}

// ran counts one flush that started at t0.
func (c *flushClock) ran(t0 time.Time) { c.busy.Add(int64(time.Since(t0))) }

// FlushTimes is a copy of one kind's flushClock, in seconds.
type FlushTimes struct {
	BusySeconds float64 // time its flight was busy
	WaitSeconds float64 // summed waits of the requests it carried
	Waited      int64   // those requests
}

func (c *flushClock) snapshot() FlushTimes {
	return FlushTimes{BusySeconds: float64(c.busy.Load()) / 1e9, WaitSeconds: float64(c.wait.Load()) / 1e9,
		Waited: c.waited.Load()}
}
