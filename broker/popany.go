package broker

import (
	"context"
	"time"
)

// PopAny pops from the first of the tenant's queues whose namespace and task
// match ("" matches any value) that has messages, trying queues by priority,
// highest first, ties in name order (pg.DB.MatchQueues, at most
// pg.MaxMatchQueues queues). req.Queue and req.Partition are ignored; the
// result names the queue served. With req.Wait it parks on the wake gates
// of every matching queue until messages arrive or req.Timeout passes,
// listing the queues again every round so new ones are seen. It returns nil
// when there is nothing (the API answers 204).
func (b *Broker) PopAny(ctx context.Context, tenant, namespace, task string, req PopRequest) (*PopResult, error) {
	b.stats.Pops.Add(1)
	req.Partition = ""
	var deadline time.Time
	if req.Wait {
		deadline = time.Now().Add(req.Timeout)
	}
	backoff := b.cfg.PopBackoffMin
	for {
		// Pop maintenance answers empty; its channel wakes a parked pop.
		paused, pausedNow := b.popGate()
		if pausedNow {
			b.stats.PopsEmpty.Add(1)
			return nil, nil
		}
		queues, err := b.db.MatchQueues(ctx, tenant, namespace, task)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, wrap(err)
		}
		var (
			wakes    []<-chan struct{}
			releases []func()
		)
		releaseAll := func() {
			for _, r := range releases {
				r()
			}
		}
		if req.Wait {
			// Subscribe before asking PostgreSQL: a push to any matching
			// queue that commits while the tries run still wakes us.
			for _, q := range queues {
				wake, _, release := b.gates.subscribe(queueKey(tenant, q))
				wakes = append(wakes, wake)
				releases = append(releases, release)
			}
		}
		for _, q := range queues {
			r := req
			r.Queue = q
			// A long-poll takes the hot-list's quiet path (no SQL for an
			// empty ring), as Pop does: parked, it costs the database nothing.
			res, err := b.popOnce(ctx, b.popArgs(tenant, r), req.Wait)
			if err != nil || res != nil {
				releaseAll()
				return res, err
			}
		}
		remaining := time.Until(deadline)
		if !req.Wait || remaining <= 0 {
			releaseAll()
			b.stats.PopsEmpty.Add(1)
			return nil, nil
		}
		woken := make(chan struct{})
		stop := make(chan struct{})
		for _, w := range wakes {
			go func(w <-chan struct{}) {
				select {
				case <-w:
					select {
					case woken <- struct{}{}:
					case <-stop:
					}
				case <-stop:
				}
			}(w)
		}
		timer := time.NewTimer(min(backoff, remaining))
		select {
		case <-woken:
			backoff = b.cfg.PopBackoffMin
		case <-paused:
		case <-timer.C:
			backoff = min(backoff*2, b.cfg.PopBackoffMax)
		case <-ctx.Done():
		}
		timer.Stop()
		close(stop)
		releaseAll()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
}
