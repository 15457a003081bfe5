package broker

import (
	"context"
	"errors"
	"sync"
	"time"
)

// releaser merges the lease releases that arrive while one is being
// written into one statement per tenant (pg.DB.ReleaseLeases), as the
// push combiner merges pushes (combine.go): one flush at a time, no
// timer. A release is a pop's answer its client did not take: a client
// that left, a write that failed, a forwarded pop whose answer never came
// (ReleaseForwarded, twice). Those come in bursts (a load balancer
// cutting its long-polls, a peer failing under many pops), and one
// statement for a burst costs PostgreSQL one round trip and one commit
// instead of one per lease. Each caller waits for its own release: a pop
// served after a release must find the messages free.
//
// The merged statement skips rows another transaction holds (an ack of
// that lease, a purge), so one held row cannot hold up the others; the
// leases of a flush's skipped rows are then released together in one
// statement that waits for the locks, in a goroutine, one such statement
// at a time (releaseBlocking), while the flushes go on. A lease whose
// rows stay held past the bound (releaseTimeout) is left to expire.
type releaser struct {
	b        *Broker
	timeout  time.Duration // bounds each statement; releaseTimeout
	blocking chan struct{} // the blocking statements running; releaseBlocking at most
	mu       sync.Mutex
	pending  []*release
	running  bool
}

type release struct {
	tenant, lease string
	done          chan struct{}
}

const (
	releaseMax     = 1000            // leases in one flush; the rest wait for the next
	releaseTimeout = 5 * time.Second // one release statement
	// releaseBlocking bounds the statements that wait for held rows, each
	// on a pool connection, so held rows cannot take the pool.
	releaseBlocking = 1
)

// drop releases lease (of tenant) and returns once it is released, or
// its statement failed (logged; the lease then ends at its expiry).
func (r *releaser) drop(tenant, lease string) {
	j := &release{tenant: tenant, lease: lease, done: make(chan struct{})}
	r.mu.Lock()
	r.pending = append(r.pending, j)
	if !r.running {
		r.running = true
		go r.run()
	}
	r.mu.Unlock()
	<-j.done
}

// run flushes until nothing is pending; one runs at a time.
func (r *releaser) run() {
	for {
		r.mu.Lock()
		batch := r.pending[:min(len(r.pending), releaseMax)]
		r.pending = r.pending[len(batch):]
		if len(batch) == 0 {
			r.running = false
			r.pending = nil
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
		r.flush(batch)
	}
}

func (r *releaser) flush(batch []*release) {
	byTenant := map[string][]*release{}
	for _, j := range batch {
		byTenant[j.tenant] = append(byTenant[j.tenant], j)
	}
	for tenant, jobs := range byTenant {
		leases := make([]string, len(jobs))
		for i, j := range jobs {
			leases[i] = j.lease
		}
		ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
		released, busy, err := r.release(ctx, tenant, leases, true)
		cancel()
		if err != nil {
			for _, j := range jobs {
				close(j.done)
			}
			continue
		}
		now := map[string]bool{}
		for l := range released {
			if !busy[l] {
				now[l] = true
			}
		}
		r.count(now) // before their callers return
		var waiting []*release
		for _, j := range jobs {
			if busy[j.lease] {
				waiting = append(waiting, j)
			} else {
				close(j.done)
			}
		}
		if len(waiting) == 0 {
			continue
		}
		// Rows of these leases are held: released together, once the
		// holders are done, by one statement that waits for the locks;
		// one such statement at a time (each holds a pool connection
		// while it waits), all within the bound from now.
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
			defer cancel()
			defer func() {
				for _, j := range waiting {
					close(j.done)
				}
			}()
			again := make([]string, len(waiting))
			for i, j := range waiting {
				again[i] = j.lease
			}
			var late map[string]bool
			var err error
			select {
			case r.blocking <- struct{}{}:
				late, _, err = r.release(ctx, tenant, again, false)
				<-r.blocking
			case <-ctx.Done():
				err = ctx.Err()
				r.b.log.Warn("release undelivered leases: rows held past the bound", "tenant", tenant, "leases", len(again))
			}
			found := map[string]bool{}
			for _, l := range again {
				// (rows of a busy lease the first statement did take
				// count it too)
				if (err == nil && late[l]) || released[l] {
					found[l] = true
				}
			}
			r.count(found)
		}()
	}
}

// count adds the leases a flush found to the counter, each once.
func (r *releaser) count(released map[string]bool) {
	r.b.stats.LeasesDropped.Add(int64(len(released)))
}

// release runs one statement, and counts it.
func (r *releaser) release(ctx context.Context, tenant string, leases []string, skipLocked bool) (released, busy map[string]bool, err error) {
	released, busy, err = r.b.db.ReleaseLeases(ctx, tenant, leases, skipLocked)
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			r.b.log.Warn("release undelivered leases", "tenant", tenant, "leases", len(leases), "error", err)
		}
		return nil, nil, err
	}
	r.b.stats.ReleaseFlushes.Add(1)
	return released, busy, nil
}
