package broker

import (
	"context"
	"errors"
	"sync"
	"time"
)

// releaser merges the lease releases that arrive while one is being
// written into one statement per tenant (pg.DB.ReleaseLeases), as the
// push combiner merges pushes (combine.go): one flush at a time (the
// push path runs one per lane), no timer. A release is a pop's answer its client did not take: a client
// that left, a write that failed, a forwarded pop whose answer never came
// (ReleaseForwarded, twice). Those come in bursts (a load balancer
// cutting its long-polls, a peer failing under many pops), and one
// statement for a burst costs PostgreSQL one round trip and one commit
// instead of one per lease. Each caller waits for its own release: a pop
// served after a release must find the messages free.
//
// The statement skips rows another transaction holds (an ack of that
// lease, a purge), so one held row cannot hold up the others. The leases
// of skipped rows join one set of held leases, which a single goroutine
// tries again, one statement per tenant per round, still skipping, after
// a growing pause (5 ms to 100 ms, 5 ms again when a lease joins); each
// caller is answered at the first round that finds its lease's rows free. No statement waits for a lock,
// so held rows take no pool connection while they are held. A lease whose
// rows stay held past releaseTimeout from its flush is logged and left to
// expire.
type releaser struct {
	b       *Broker
	timeout time.Duration // bounds a release, from its flush; releaseTimeout

	mu      sync.Mutex
	pending []*release
	running bool

	heldMu   sync.Mutex
	held     map[string][]*release // by tenant: callers whose leases' rows were held
	retrying bool
	kick     chan struct{} // a lease joined held: the retry loop's pause starts again
}

type release struct {
	tenant, lease string
	done          chan struct{}
	until         time.Time // the bound, once its rows were found held
	found         bool      // a statement released rows of its lease
}

const (
	releaseMax     = 1000            // leases in one flush; the rest wait for the next
	releaseTimeout = 5 * time.Second // a release, including its waits for held rows
)

// drop releases lease (of tenant) and returns once it is released, its
// statement failed, or its rows stayed held past the bound (each logged;
// the lease then ends at its expiry).
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
		until := time.Now().Add(r.timeout)
		released, busy, err := r.release(tenant, jobs, until)
		if err != nil {
			if r.b.life.Err() == nil { // (else the broker is closing)
				r.b.log.Warn("release undelivered leases", "tenant", tenant, "leases", len(jobs), "error", err)
			}
			r.answer(jobs)
			continue
		}
		for _, j := range jobs {
			j.until = until
		}
		if held := r.settle(jobs, released, busy); len(held) > 0 {
			r.hold(tenant, held)
		}
	}
}

// release runs one statement for the leases of jobs, bounded by until,
// and counts it.
func (r *releaser) release(tenant string, jobs []*release, until time.Time) (released, busy map[string]bool, err error) {
	ctx, cancel := context.WithDeadline(r.b.life, until)
	defer cancel()
	leases := make([]string, len(jobs))
	for i, j := range jobs {
		leases[i] = j.lease
	}
	released, busy, err = r.b.db.ReleaseLeases(ctx, tenant, leases)
	if err != nil {
		return nil, nil, err
	}
	r.b.stats.ReleaseFlushes.Add(1)
	return released, busy, nil
}

// settle takes a statement's outcome for jobs: it notes the leases it
// released rows of, counts and answers the jobs whose leases are not
// busy (a lease counts once, when some statement released rows of it),
// and returns the others.
func (r *releaser) settle(jobs []*release, released, busy map[string]bool) (held []*release) {
	var done []*release
	for _, j := range jobs {
		j.found = j.found || released[j.lease]
		if busy[j.lease] {
			held = append(held, j)
		} else {
			done = append(done, j)
		}
	}
	r.answer(done)
	return held
}

// answer counts the distinct leases of jobs found and closes the jobs:
// counted before their callers return.
func (r *releaser) answer(jobs []*release) {
	found := map[string]bool{}
	for _, j := range jobs {
		if j.found {
			found[j.tenant+"\x00"+j.lease] = true
		}
	}
	r.b.stats.LeasesDropped.Add(int64(len(found)))
	for _, j := range jobs {
		close(j.done)
	}
}

// hold adds jobs whose leases' rows were held to the retried set.
func (r *releaser) hold(tenant string, jobs []*release) {
	r.heldMu.Lock()
	defer r.heldMu.Unlock()
	r.addHeldLocked(tenant, jobs)
	if !r.retrying {
		r.retrying = true
		go r.retry()
		return
	}
	select {
	case r.kick <- struct{}{}:
	default: // already kicked
	}
}

// retry tries the held leases again until none is left. The pause
// between rounds grows from 5 ms to 100 ms, and starts again at 5 ms when
// a lease joins the set (hold kicks it).
func (r *releaser) retry() {
	pause := 5 * time.Millisecond
	for {
		t := time.NewTimer(pause)
		select {
		case <-t.C:
			pause = min(2*pause, 100*time.Millisecond)
		case <-r.kick:
			t.Stop()
			pause = 10 * time.Millisecond
			select { // the first round for the newcomer, 5 ms on
			case <-time.After(5 * time.Millisecond):
			case <-r.b.life.Done():
			}
		case <-r.b.life.Done():
			t.Stop()
		}
		r.heldMu.Lock()
		held := r.held
		r.held = nil
		r.heldMu.Unlock()
		r.round(held)
		r.heldMu.Lock()
		if len(r.held) == 0 {
			r.retrying = false
			r.heldMu.Unlock()
			return
		}
		r.heldMu.Unlock()
	}
}

// round answers the held jobs past their bound (all of them once the
// broker closes), tries the others once more, every statement bounded by
// the earliest bound among them (a job with a later bound takes more
// rounds, none waits past its own), and puts back the ones still held.
func (r *releaser) round(held map[string][]*release) {
	now := time.Now()
	closing := r.b.life.Err() != nil
	live := map[string][]*release{}
	var first time.Time
	for tenant, jobs := range held {
		var expired []*release
		for _, j := range jobs {
			if closing || !now.Before(j.until) {
				expired = append(expired, j)
				continue
			}
			live[tenant] = append(live[tenant], j)
			if first.IsZero() || j.until.Before(first) {
				first = j.until
			}
		}
		if len(expired) > 0 {
			if !closing {
				r.b.log.Warn("release undelivered leases: their rows stayed held past the bound; they end at their expiry",
					"tenant", tenant, "leases", len(expired), "bound", r.timeout)
			}
			r.answer(expired)
		}
	}
	for tenant, jobs := range live {
		left := jobs // on an error, all of them: the bound ends them
		released, busy, err := r.release(tenant, jobs, first)
		if err == nil {
			left = r.settle(jobs, released, busy)
		} else if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			r.b.log.Debug("retry of held leases failed", "tenant", tenant, "leases", len(jobs), "error", err)
		}
		if len(left) > 0 {
			r.heldMu.Lock()
			r.addHeldLocked(tenant, left)
			r.heldMu.Unlock()
		}
	}
}

// addHeldLocked puts jobs in the retried set; heldMu is held.
func (r *releaser) addHeldLocked(tenant string, jobs []*release) {
	if r.held == nil {
		r.held = map[string][]*release{}
	}
	r.held[tenant] = append(r.held[tenant], jobs...)
}
