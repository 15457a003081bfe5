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
// instead of one per lease. Each caller waits for the flush that carries
// its lease: a pop served here after a release must find the messages
// free.
type releaser struct {
	b       *Broker
	mu      sync.Mutex
	pending []*release
	running bool
}

type release struct {
	tenant, lease string
	done          chan struct{}
}

// releaseMax bounds the leases of one flush; the rest wait for the next.
const releaseMax = 1000

// drop releases lease (of tenant) and returns once a flush has run it.
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
	defer func() {
		for _, j := range batch {
			close(j.done)
		}
	}()
	byTenant := map[string][]string{}
	for _, j := range batch {
		byTenant[j.tenant] = append(byTenant[j.tenant], j.lease)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for tenant, leases := range byTenant {
		found, err := r.b.db.ReleaseLeases(ctx, tenant, leases)
		if err != nil {
			if !errors.Is(err, context.Canceled) {
				r.b.log.Warn("release undelivered leases", "tenant", tenant, "leases", len(leases), "error", err)
			}
			continue
		}
		// A forwarded pop's lease may never have been claimed: only
		// those found count.
		r.b.stats.LeasesDropped.Add(found)
		r.b.stats.ReleaseFlushes.Add(1)
	}
}
