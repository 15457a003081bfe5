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
// leases of skipped rows are tried again, skipping still, with a growing
// pause (5 ms to 100 ms), each answered as soon as its rows are free. No
// statement waits for a lock: held rows take no pool connection. A lease
// whose rows stay held past releaseTimeout is logged and left to expire.
type releaser struct {
	b       *Broker
	timeout time.Duration // bounds a release, from its flush; releaseTimeout
	mu      sync.Mutex
	pending []*release
	running bool
}

type release struct {
	tenant, lease string
	done          chan struct{}
}

const (
	releaseMax     = 1000            // leases in one flush; the rest wait for the next
	releaseTimeout = 5 * time.Second // a release, including its waits for held rows
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
		// The bound counts from here, for the leases that have to wait
		// too.
		ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
		released, busy, err := r.release(ctx, tenant, leasesOf(jobs), true)
		if err != nil {
			cancel()
			for _, j := range jobs {
				close(j.done)
			}
			continue
		}
		found := map[string]bool{} // busy leases some of whose rows were released
		waiting := r.settle(jobs, released, busy, found)
		if len(waiting) == 0 {
			cancel()
			continue
		}
		// Rows of these leases are held: tried again, still skipping
		// what is held, until each is free or the bound passes. No
		// statement waits for a lock, so held rows take no pool
		// connection, and each lease returns as soon as its own rows
		// are free.
		go func() {
			defer cancel()
			pause := 5 * time.Millisecond
			for len(waiting) > 0 {
				t := time.NewTimer(pause)
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
					r.b.log.Warn("release undelivered leases: their rows stayed held past the bound", "tenant", tenant,
						"leases", len(waiting), "bound", r.timeout)
					for _, j := range waiting {
						close(j.done)
					}
					return
				}
				pause = min(2*pause, 100*time.Millisecond)
				released, busy, err := r.release(ctx, tenant, leasesOf(waiting), true)
				if err != nil {
					continue // the bound ends it
				}
				waiting = r.settle(waiting, released, busy, found)
			}
		}()
	}
}

// settle counts and answers the jobs whose leases are not busy, and
// returns the others. found holds the leases of the jobs still waiting
// that earlier statements released rows of.
func (r *releaser) settle(jobs []*release, released, busy, found map[string]bool) []*release {
	var waiting []*release
	done := map[string]bool{}
	for _, j := range jobs {
		if busy[j.lease] {
			if released[j.lease] {
				found[j.lease] = true
			}
			waiting = append(waiting, j)
			continue
		}
		if released[j.lease] || found[j.lease] {
			done[j.lease] = true
		}
	}
	r.count(done) // before their callers return
	for _, j := range jobs {
		if !busy[j.lease] {
			close(j.done)
		}
	}
	return waiting
}

func leasesOf(jobs []*release) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.lease
	}
	return out
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
