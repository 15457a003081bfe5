package broker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"queen-node/pg"
	"queen-node/protocol"
)

// pushCombiner is the push path's group commit: pushes that arrive while
// one is being written wait and then go to PostgreSQL together, as one
// flush (the fast push, or push_v4; one transaction, or two when rows
// deferred once meet a held partition: pg.PushSome). A push pays for its rows and one commit
// shared by everyone in its flush, instead of its own commit plus the wait
// for the partition row locks of the concurrent pushes it overlaps (random
// partitions overlap a lot: every push locks its partitions until commit).
// An idle node flushes a push at once: there is no timer.
//
// One flush runs at a time per combiner (a node runs one per push lane,
// pushlanes.go, each for its own partitions), bounded by combineFlushTimeout: a
// flush that fails or runs out of time (a push stuck behind a lock some
// other transaction holds) rolls back, or keeps only what its first
// transaction committed (pg.PartialPushError: the fast push wrote the free
// partitions, and the rows deferred once failed in the second), and its
// pushes with rows left are replayed one by one,
// each in its own goroutine under its own client's context, while the
// flusher moves on. So a stuck push costs the others at most that bound
// once, and one push's failure is never another's. Each push still returns
// only once its rows committed (read-your-writes), in its own input order;
// pushes of one flush are appended in arrival order, so a push that
// completed before another was sent still comes first.
//
// Flushes of different nodes overlap in partitions and would queue behind
// each other's commits. So a flush does not wait for a partition another
// transaction holds: that partition's rows stay unwritten (pg.PushSome) and
// their push goes back to the head of the queue, to be sent with the next
// flush, which waits for them. A push may thus commit in several transactions,
// each partition's rows in one and in order (docs/storage.md, "Skip-locked
// push flushes"). A client that leaves
// while its push waits is answered at once and its push is skipped if it has
// not been sent yet (its deferred rows too); rows already being written may
// still commit, as with a client that leaves during an uncombined push, and
// are then marked and hinted like any others (onCommit).
type pushCombiner struct {
	db      *pg.DB
	maxRows int // rows per flush; a larger single push flushes alone
	// maxBytes bounds a flush's payloads and names as maxRows bounds its
	// rows: large concurrent pushes merged without it could pass what one
	// PostgreSQL call takes (1 GB per parameter) and fail together.
	maxBytes int64
	flushes  *atomic.Int64 // Stats.PushFlushes
	clock    *flushClock   // Stats.PushFlushTime
	deferred *atomic.Int64 // Stats.PushDeferred
	// onCommit runs after every commit with the rows it wrote (their
	// outcomes, none deferred): the marks, hints and counters of a push.
	// Here, not in the pushing request, because rows commit whether or not
	// their client still waits (it may have left, or its rows may be
	// written in two flushes), and parked pops must learn of them either way.
	onCommit func(tenant string, rows []pg.PushRow, outs []pg.PushOutcome)

	mu      sync.Mutex
	pending map[string][]*pushReq // by tenant
	tenants []string              // tenants with pending pushes, oldest first
	running bool
}

type pushReq struct {
	ctx   context.Context
	t0    time.Time // arrival
	rows  []pg.PushRow
	bytes int64 // rowsBytes(rows)
	done  chan struct{}
	once  sync.Once
	outs  []pg.PushOutcome
	err   error

	// Set by the flusher only. left are the rows a flush deferred (indexes
	// into rows), nil before the first flush; the next flush waits for
	// their partitions. got holds the outcomes of the rows written so far.
	left []int
	got  []pg.PushOutcome
}

// sending is the rows the next flush carries for r.
func (r *pushReq) sending() []pg.PushRow {
	if r.left == nil {
		return r.rows
	}
	out := make([]pg.PushRow, len(r.left))
	for k, i := range r.left {
		out[k] = r.rows[i]
	}
	return out
}

// record takes the outcomes of sending() and reports whether rows remain
// (deferred). Once none do, the push is answered.
func (r *pushReq) record(outs []pg.PushOutcome) bool {
	if r.got == nil {
		r.got = make([]pg.PushOutcome, len(r.rows))
	}
	var left []int
	for k, o := range outs {
		i := k
		if r.left != nil {
			i = r.left[k]
		}
		if o.Status == protocol.PushDeferred {
			left = append(left, i)
			continue
		}
		o.Idx = i
		r.got[i] = o
	}
	if len(left) > 0 {
		r.left = left
		return true
	}
	r.finish(r.got, nil)
	return false
}

func (r *pushReq) finish(outs []pg.PushOutcome, err error) {
	r.once.Do(func() {
		r.outs, r.err = outs, err
		close(r.done)
	})
}

// combineFlushTimeout bounds one flush, which runs under no single client's
// context (the others of the flush still want their rows). Past it the
// flush's pushes go their own way (see pushCombiner).
const combineFlushTimeout = 2 * time.Second

func newPushCombiner(db *pg.DB, maxRows int, maxBytes int64, flushes, deferred *atomic.Int64, clock *flushClock,
	onCommit func(tenant string, rows []pg.PushRow, outs []pg.PushOutcome)) *pushCombiner {
	return &pushCombiner{db: db, maxRows: maxRows, maxBytes: maxBytes, flushes: flushes, deferred: deferred,
		clock: clock, onCommit: onCommit, pending: map[string][]*pushReq{}}
}

// push queues rows and waits until the flush that carries them ends.
func (c *pushCombiner) push(ctx context.Context, tenant string, rows []pg.PushRow) ([]pg.PushOutcome, error) {
	return c.enqueue(ctx, tenant, rows).await(ctx)
}

// enqueue queues rows, starting the flight if it is idle; await waits for
// them. Apart so that pushLanes can queue a push's parts in every lane
// before it waits for any.
func (c *pushCombiner) enqueue(ctx context.Context, tenant string, rows []pg.PushRow) *pushReq {
	r := &pushReq{ctx: ctx, rows: rows, bytes: rowsBytes(rows), done: make(chan struct{}), t0: time.Now()}
	c.mu.Lock()
	if len(c.pending[tenant]) == 0 {
		c.tenants = append(c.tenants, tenant)
	}
	c.pending[tenant] = append(c.pending[tenant], r)
	if !c.running {
		c.running = true
		go c.run()
	}
	c.mu.Unlock()
	return r
}

func (r *pushReq) await(ctx context.Context) ([]pg.PushOutcome, error) {
	select {
	case <-r.done:
		return r.outs, r.err
	case <-ctx.Done():
		// flush skips it if it was not sent yet
		r.finish(nil, ctx.Err())
		<-r.done
		return r.outs, r.err
	}
}

// run flushes until nothing is pending, one tenant's batch at a time,
// tenants in turn.
func (c *pushCombiner) run() {
	for {
		c.mu.Lock()
		if len(c.tenants) == 0 {
			c.running = false
			c.mu.Unlock()
			return
		}
		tenant := c.tenants[0]
		c.tenants = c.tenants[1:]
		queue := c.pending[tenant]
		n := takeFlush(queue, c.maxRows, c.maxBytes)
		batch := queue[:n:n]
		if n == len(queue) {
			delete(c.pending, tenant)
		} else {
			c.pending[tenant] = queue[n:]
			c.tenants = append(c.tenants, tenant)
		}
		c.mu.Unlock()
		c.flush(tenant, batch)
	}
}

// takeFlush is how many of the queued pushes the next flush carries: in
// order, while they fit maxRows rows and maxBytes bytes; the first always
// (it was bounded as a request).
func takeFlush(queue []*pushReq, maxRows int, maxBytes int64) int {
	n, rows, size := 0, 0, int64(0)
	for n < len(queue) {
		r := queue[n]
		if n > 0 && (rows+len(r.rows) > maxRows || size+r.bytes > maxBytes) {
			break
		}
		rows += len(r.rows)
		size += r.bytes
		n++
	}
	return n
}

// rowsBytes is what rows weigh in a flush: payloads and names.
func rowsBytes(rows []pg.PushRow) int64 {
	var n int64
	for i := range rows {
		r := &rows[i]
		n += int64(len(r.Payload) + len(r.Queue) + len(r.Partition) + len(r.TxID) + len(r.ID))
		if r.Sub != nil {
			n += int64(len(*r.Sub))
		}
	}
	return n
}

func (c *pushCombiner) flush(tenant string, batch []*pushReq) {
	live := batch[:0:0]
	for _, r := range batch {
		select {
		case <-r.done: // its client left before its rows were sent
		default:
			live = append(live, r)
		}
	}
	if len(live) == 0 {
		return
	}
	defer func() {
		// A panic must neither kill the node (no HTTP handler recovers
		// this goroutine) nor leave pushes waiting forever.
		if p := recover(); p != nil {
			for _, r := range live {
				r.finish(nil, fmt.Errorf("push: internal error: %v", p))
			}
		}
	}()
	var all []pg.PushRow
	var wait []bool
	sent := make([]int, len(live)) // rows each push sends
	t0 := time.Now()
	for k, r := range live {
		if r.left == nil { // its first flush; a deferred rest's wait is not counted again
			c.clock.waitedSince(r.t0, t0)
		}
		rows := r.sending()
		sent[k] = len(rows)
		all = append(all, rows...)
		for range rows {
			wait = append(wait, r.left != nil) // deferred once: wait now
		}
	}
	c.flushes.Add(1)
	outs, err := func() ([]pg.PushOutcome, error) {
		defer c.clock.ran(t0)
		ctx, cancel := context.WithTimeout(context.Background(), combineFlushTimeout)
		defer cancel()
		return c.db.PushSome(ctx, tenant, all, wait)
	}()
	if err != nil {
		// Nothing of this flush was stored, or (a PartialPushError) what
		// was is known: it is handed on and recorded like any commit.
		// Each push with rows left sends them again on its own, under its
		// client's context, and gets its own answer.
		replay := live
		var partial *pg.PartialPushError
		if errors.As(err, &partial) {
			c.committed(tenant, all, partial.Outs)
			replay = live[:0:0]
			start := 0
			for k, r := range live {
				if r.record(partial.Outs[start : start+sent[k]]) {
					replay = append(replay, r)
				}
				start += sent[k]
			}
		}
		for _, r := range replay {
			c.flushes.Add(1)
			go func(r *pushReq) {
				defer func() {
					if p := recover(); p != nil {
						r.finish(nil, fmt.Errorf("push: internal error: %v", p))
					}
				}()
				rows := r.sending()
				outs, err := c.db.Push(r.ctx, tenant, rows)
				if err != nil {
					r.finish(nil, err)
					return
				}
				c.committed(tenant, rows, outs)
				if r.record(outs) { // Push waits for every partition: never
					r.finish(nil, fmt.Errorf("push: rows deferred by a push that waits"))
				}
			}(r)
		}
		return
	}
	c.committed(tenant, all, outs)
	start := 0
	var again []*pushReq
	for k, r := range live {
		if r.record(outs[start : start+sent[k]]) {
			again = append(again, r)
			c.deferred.Add(int64(len(r.left)))
		}
		start += sent[k]
	}
	if len(again) > 0 {
		c.requeue(tenant, again)
	}
}

// committed hands the rows a commit wrote to onCommit, without the
// deferred ones.
func (c *pushCombiner) committed(tenant string, rows []pg.PushRow, outs []pg.PushOutcome) {
	if c.onCommit == nil {
		return
	}
	kept, keptOuts := rows[:0:0], outs[:0:0]
	for i, o := range outs {
		if o.Status != protocol.PushDeferred {
			kept, keptOuts = append(kept, rows[i]), append(keptOuts, o)
		}
	}
	if len(kept) > 0 {
		c.onCommit(tenant, kept, keptOuts)
	}
}

// requeue puts pushes with deferred rows back at the head of tenant's
// queue, ahead of later pushes, so a partition's rows keep their order.
func (c *pushCombiner) requeue(tenant string, reqs []*pushReq) {
	c.mu.Lock()
	defer c.mu.Unlock()
	queue := c.pending[tenant]
	if len(queue) == 0 {
		c.tenants = append([]string{tenant}, c.tenants...)
	}
	c.pending[tenant] = append(reqs, queue...)
}
