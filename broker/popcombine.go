package broker

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"queen-node/pg"
)

// popCombiner merges claims that reach the claim core while others are
// being run into one transaction (pg.DB.PopMany: one pipelined round trip,
// one commit), the pop side of the push combiner (combine.go). One flush
// runs at a time (flushesInFlight, ackcas.go); a claim that arrives while
// it runs waits for the next flush, and each flush takes every claim
// waiting (up to popMaxJobs). There is no timer: an idle node flushes at once.
//
// Only claims that need no provisioning are merged (named candidates all
// known to have their consumer row, see provisioned): the core then takes
// row locks only with SKIP LOCKED, which never wait, so two merged
// transactions cannot deadlock. A row that went missing since (a stale
// name) is still inserted by the core; should that deadlock, it is handled
// as any failure of the flush: nothing of it committed (when PopMany's
// second transaction fails, the claims of its first committed and are
// delivered; only the second's run again), each such claim's lease is
// released and it runs again alone under its own context (Broker.claimAlone: pg.DB.Retry, and
// its lease dropped if its client left). A claim is never given another's
// rows: each job is its own element of the claim set (pg/claimset.go,
// rows matched by its index), its own fast claim or its own pop_v3 call in
// the batch, and gets only its own rows back.
//
// A claim whose client leaves before its flush is sent is skipped. One
// whose client leaves after is answered at once; when its flush claimed
// messages for it, its lease is released as soon as the flush ends, as
// claimAlone does for a claim its client left during.
//
// The same flight carries the node's CAS acks (ackcas.go; acks set, with
// the ack combiner's joint pointing here): each flush takes the claims and
// the acks waiting, and sends the acks' statement first in the claims'
// transaction (pg.DB.PopManyAcks). Under load, acks and other consumers'
// claims thus share commits: the node's claim cycles cost about one
// commit where they cost two (docs/benchmarks.md, "fourteenth session").
// An ack lands before the claims of its flush, which see its partition
// released. Acks waiting with no claim go alone (ackCombiner.flush). The
// ack statement locks rows only with SKIP LOCKED, as the claims do, so
// the shared transaction waits for a row lock only where a merged claim
// already could (a stale name's insert, above). When the claims' first
// transaction fails, the acks in it were not written: they take the
// general path, as after a failed ack flush (they lose the ack flush's
// own Retry); when the second fails, they committed and are answered. An
// ack is answered when its flush ends, after a second transaction if the
// flush needed one.
type popCombiner struct {
	db      *pg.DB
	alone   func(context.Context, pg.PopArgs) (*pg.PopOutcome, error)
	drop    func(tenant, leaseID string)
	flushes *atomic.Int64 // Stats.PopFlushes
	clock   *flushClock   // Stats.PopFlushTime

	acks *ackCombiner // the CAS acks this flight carries; nil without them

	mu       sync.Mutex
	pending  []*popJob
	inflight int
	dirty    bool // acks were queued since run last looked

	idleHook func() // tests: runs when the flight found nothing, before it decides to end
}

// kick starts the flight for acks queued in c.acks. dirty tells a run
// that is about to end that acks came after it looked.
func (c *popCombiner) kick() {
	c.mu.Lock()
	c.dirty = true
	if c.inflight < flushesInFlight {
		c.inflight++
		go c.run()
	}
	c.mu.Unlock()
}

// Bounds of the pop combiner.
const (
	popMaxJobs      = 64
	popFlushTimeout = 2 * time.Second // a flush runs under no single client's context
)

// A job's life, guarded by popCombiner.mu: waiting -> sent -> done, or
// left from waiting or sent when its client goes.
const (
	jobWaiting = iota
	jobSent
	jobDone
	jobLeft
)

type popJob struct {
	ctx   context.Context
	t0    time.Time // arrival
	args  pg.PopArgs
	done  chan struct{}
	state int
	out   *pg.PopOutcome
	err   error
}

func newPopCombiner(db *pg.DB, alone func(context.Context, pg.PopArgs) (*pg.PopOutcome, error),
	drop func(tenant, leaseID string), flushes *atomic.Int64, clock *flushClock) *popCombiner {
	return &popCombiner{db: db, alone: alone, drop: drop, flushes: flushes, clock: clock}
}

// claim queues one claim and waits for the flush that carries it.
func (c *popCombiner) claim(ctx context.Context, args pg.PopArgs) (*pg.PopOutcome, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return c.wait(ctx, c.enqueue(ctx, args))
}

// enqueue queues one claim for the next flush and returns at once.
func (c *popCombiner) enqueue(ctx context.Context, args pg.PopArgs) *popJob {
	j := c.enqueueQuiet(ctx, args)
	c.kick()
	return j
}

// enqueueQuiet queues one claim for the next flush without starting one:
// the caller starts it (kick), after queueing what must go with it.
func (c *popCombiner) enqueueQuiet(ctx context.Context, args pg.PopArgs) *popJob {
	j := &popJob{ctx: ctx, args: args, done: make(chan struct{}), t0: time.Now()}
	c.mu.Lock()
	c.pending = append(c.pending, j)
	c.mu.Unlock()
	return j
}

// wait waits for the flush that carries j.
func (c *popCombiner) wait(ctx context.Context, j *popJob) (*pg.PopOutcome, error) {
	args := j.args
	select {
	case <-j.done:
		return j.out, j.err
	case <-ctx.Done():
	}
	c.mu.Lock()
	state := j.state
	if state != jobDone {
		j.state = jobLeft // skipped if not sent; its lease dropped by deliver if sent
	}
	c.mu.Unlock()
	if state == jobDone && !args.AutoAck && j.out != nil && len(j.out.Messages) > 0 {
		c.drop(args.Tenant, args.LeaseID)
	}
	return nil, ctx.Err()
}

// run flushes until no claim and no ack is waiting.
func (c *popCombiner) run() {
	for {
		c.mu.Lock()
		c.dirty = false
		var batch []*popJob
		n := 0
		for n < len(c.pending) && len(batch) < popMaxJobs {
			j := c.pending[n]
			n++
			if j.state == jobWaiting {
				j.state = jobSent
				batch = append(batch, j)
			}
		}
		c.pending = c.pending[n:]
		c.mu.Unlock()
		var acks []*casReq
		if c.acks != nil {
			acks = c.acks.take()
		}
		switch {
		case len(batch) == 0 && len(acks) == 0:
			if c.idleHook != nil {
				c.idleHook()
			}
			c.mu.Lock()
			if c.dirty || len(c.pending) > 0 {
				c.mu.Unlock()
				continue
			}
			c.inflight--
			c.mu.Unlock()
			return
		case len(batch) == 0:
			c.acks.flush(acks)
		default:
			c.flush(batch, acks)
		}
	}
}

func (c *popCombiner) flush(batch []*popJob, acks []*casReq) {
	live, pairs, where := prepareCAS(acks)
	defer func() {
		// A panic must neither kill the node nor leave claims waiting.
		if p := recover(); p != nil {
			for _, j := range batch {
				c.deliver(j, nil, fmt.Errorf("pop: internal error: %v", p))
			}
			for _, r := range live {
				r.finish(nil, fmt.Errorf("ack: internal error: %v", p))
			}
		}
	}()
	jobs := make([]pg.PopArgs, len(batch))
	for i, j := range batch {
		jobs[i] = j.args
	}
	c.flushes.Add(1)
	t0 := time.Now()
	for _, j := range batch {
		c.clock.waitedSince(j.t0, t0)
	}
	if len(pairs) > 0 {
		c.acks.flushes.Add(1)
		for _, r := range live {
			c.acks.clock.waitedSince(r.t0, t0)
		}
	}
	outs, cas, err := func() ([]*pg.PopOutcome, []pg.CASResult, error) {
		defer c.clock.ran(t0)
		ctx, cancel := context.WithTimeout(context.Background(), popFlushTimeout)
		defer cancel()
		return c.db.PopManyAcks(ctx, jobs, pairs)
	}()
	if len(live) > 0 {
		if cas != nil {
			finishCAS(live, where, cas, nil)
		} else {
			finishCAS(live, where, nil, fmt.Errorf("with the claims: %w", err))
		}
	}
	for i, j := range batch {
		switch {
		case err == nil:
			c.deliver(j, outs[i], nil)
		case outs != nil && outs[i] != nil:
			// committed in PopMany's first transaction before its
			// second failed: delivered, never claimed again (an autoAck
			// claim has moved its cursor already)
			c.deliver(j, outs[i], nil)
		default:
			go c.again(j)
		}
	}
}

// again runs a claim of a failed flush alone. The flush's transaction did
// not commit, unless the failure hid the commit's outcome (a lost
// connection, the flush timeout): the claim's lease is released first so
// such rows are not held until expiry.
func (c *popCombiner) again(j *popJob) {
	defer func() {
		if p := recover(); p != nil {
			c.deliver(j, nil, fmt.Errorf("pop: internal error: %v", p))
		}
	}()
	if !j.args.AutoAck {
		c.drop(j.args.Tenant, j.args.LeaseID)
	}
	c.mu.Lock()
	left := j.state == jobLeft
	c.mu.Unlock()
	if left {
		return
	}
	out, err := c.alone(j.ctx, j.args)
	c.deliver(j, out, err)
}

// deliver hands a job its outcome, or releases the lease of a job whose
// client has left.
func (c *popCombiner) deliver(j *popJob, out *pg.PopOutcome, err error) {
	c.mu.Lock()
	if j.state == jobLeft {
		c.mu.Unlock()
		// (an error left nothing to release: a failed flush released it
		// before running the claim alone, which releases its own)
		if !j.args.AutoAck && out != nil && len(out.Messages) > 0 {
			// Not waited for: nobody needs its outcome, and this may
			// be the flush's goroutine, which other claims wait on.
			go c.drop(j.args.Tenant, j.args.LeaseID)
		}
		return
	}
	if j.state == jobDone {
		c.mu.Unlock()
		return
	}
	j.state, j.out, j.err = jobDone, out, err
	c.mu.Unlock()
	close(j.done)
}
