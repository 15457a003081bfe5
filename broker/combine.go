package broker

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"queen-node/pg"
)

// pushCombiner is the push path's group commit: pushes that arrive while
// one is being written wait and then go to PostgreSQL together, as one
// push_v3 call in one transaction. A push pays for its rows and one commit
// shared by everyone in its flush, instead of its own commit plus the wait
// for the partition row locks of the concurrent pushes it overlaps (random
// partitions overlap a lot: every push locks its partitions until commit).
// An idle node flushes a push at once: there is no timer.
//
// One flush runs at a time per node. Each push still returns only once its
// rows committed (read-your-writes), in its own input order; pushes of one
// flush are appended in arrival order, so a push that completed before
// another was sent still comes first. A flush that fails is replayed push by
// push, so one push's failure is never another's.
type pushCombiner struct {
	db      *pg.DB
	maxRows int           // rows per flush; a larger single push flushes alone
	flushes *atomic.Int64 // Stats.PushFlushes

	mu      sync.Mutex
	pending map[string][]*pushReq // by tenant
	tenants []string              // tenants with pending pushes, oldest first
	running bool
}

type pushReq struct {
	ctx  context.Context
	rows []pg.PushRow
	done chan struct{}
	outs []pg.PushOutcome
	err  error
}

// combineFlushTimeout bounds one flush: it no longer runs under any single
// client's context, since the others of the flush still want their rows.
const combineFlushTimeout = 60 * time.Second

func newPushCombiner(db *pg.DB, maxRows int, flushes *atomic.Int64) *pushCombiner {
	return &pushCombiner{db: db, maxRows: maxRows, flushes: flushes, pending: map[string][]*pushReq{}}
}

// push queues rows and waits until the flush that carries them ends.
func (c *pushCombiner) push(ctx context.Context, tenant string, rows []pg.PushRow) ([]pg.PushOutcome, error) {
	r := &pushReq{ctx: ctx, rows: rows, done: make(chan struct{})}
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
	<-r.done
	return r.outs, r.err
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
		n, rows := 0, 0
		for n < len(queue) && (n == 0 || rows+len(queue[n].rows) <= c.maxRows) {
			rows += len(queue[n].rows)
			n++
		}
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

func (c *pushCombiner) flush(tenant string, batch []*pushReq) {
	live := batch[:0:0]
	for _, r := range batch {
		if err := r.ctx.Err(); err != nil {
			r.err = err // the client left before its rows were sent
			close(r.done)
			continue
		}
		live = append(live, r)
	}
	if len(live) == 0 {
		return
	}
	c.flushes.Add(1)
	if len(live) == 1 {
		r := live[0]
		r.outs, r.err = c.db.Push(r.ctx, tenant, r.rows)
		close(r.done)
		return
	}
	var all []pg.PushRow
	for _, r := range live {
		all = append(all, r.rows...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), combineFlushTimeout)
	outs, err := c.db.Push(ctx, tenant, all)
	cancel()
	if err != nil {
		// Nothing was stored: replay push by push, so each gets its own
		// answer (an error that belongs to one push stays with it).
		for _, r := range live {
			c.flushes.Add(1)
			r.outs, r.err = c.db.Push(r.ctx, tenant, r.rows)
			close(r.done)
		}
		return
	}
	start := 0
	for _, r := range live {
		r.outs = make([]pg.PushOutcome, len(r.rows))
		for i := range r.rows {
			o := outs[start+i]
			o.Idx = i
			r.outs[i] = o
		}
		start += len(r.rows)
		close(r.done)
	}
}
