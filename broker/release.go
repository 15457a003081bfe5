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
// leases of skipped rows are then released each on its own, waiting for
// the lock, in their own goroutine, while the flushes go on.
type releaser struct {
	b       *Broker
	timeout time.Duration // bounds each statement; releaseTimeout
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
	releaseTimeout = 5 * time.Second // one release statement
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
		released, busy, err := r.release(tenant, leases, true)
		if err != nil {
			for _, j := range jobs {
				close(j.done)
			}
			continue
		}
		for _, j := range jobs {
			if !busy[j.lease] {
				if released[j.lease] {
					r.b.stats.LeasesDropped.Add(1)
				}
				close(j.done)
				continue
			}
			// A row of this lease is held: release it alone, once the
			// holder is done with it.
			found := released[j.lease]
			go func() {
				defer close(j.done)
				if again, _, err := r.release(tenant, []string{j.lease}, false); (err == nil && again[j.lease]) || found {
					r.b.stats.LeasesDropped.Add(1)
				}
			}()
		}
	}
}

// release runs one statement under its own deadline, and counts it.
func (r *releaser) release(tenant string, leases []string, skipLocked bool) (released, busy map[string]bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	defer cancel()
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
