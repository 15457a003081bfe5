package broker

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"queen-node/pg"
	"queen-node/protocol"
)

// The CAS ack (docs/storage.md, "CAS ack"): an ack that names, for a
// (partition, group), exactly the batch this node served under a lease, all
// completed, is one compare-and-set of the consumer row (pg.AckCAS) instead
// of a queen.ack_v2 call, and the CAS of concurrent acks share one statement
// and one commit (ackCombiner). What does not qualify, and what the CAS did
// not match, goes through ack_v2 as before, so every answer is ack_v2's.

// casPlan is the CAS part of one ack request.
type casPlan struct {
	pairs   []pg.CASPair
	batches []*servedBatch
	items   [][]int // per pair, the request's item indices
}

// planCAS picks the (partition, group) pairs of the request that qualify:
// all their items completed (or success, or no status), carrying one lease
// id this node served that pair under, naming each served message once.
func (b *Broker) planCAS(tenant string, items []AckItem) casPlan {
	type key struct{ pid, group string }
	type acc struct {
		lease string
		ok    bool
		idx   []int
	}
	var keys []key
	byKey := map[key]*acc{}
	for i, it := range items {
		k := key{canonicalPID(it.PartitionID), it.Group}
		if k.group == "" {
			k.group = QueueMode // as ack_v2 reads it
		}
		a := byKey[k]
		if a == nil {
			a = &acc{lease: it.LeaseID, ok: true}
			byKey[k] = a
			keys = append(keys, k)
		}
		a.idx = append(a.idx, i)
		if it.LeaseID == "" || it.LeaseID != a.lease || !completedStatus(string(it.Status)) {
			a.ok = false
		}
	}
	var p casPlan
	for _, k := range keys {
		a := byKey[k]
		if !a.ok || k.pid == "" {
			continue
		}
		txids := make([]string, len(a.idx))
		for j, i := range a.idx {
			txids[j] = items[i].TransactionID
		}
		slices.Sort(txids)
		sb := b.leases.take(tenant, a.lease, k.pid, k.group, txids)
		if sb == nil {
			continue
		}
		p.pairs = append(p.pairs, pg.CASPair{Tenant: tenant, PartitionID: k.pid, Group: k.group,
			LeaseID: a.lease, First: sb.first, End: sb.end, N: len(sb.txids)})
		p.batches = append(p.batches, sb)
		p.items = append(p.items, a.idx)
	}
	return p
}

// canonicalPID spells a partition id as ackRows sends it; "" when it is not
// a uuid (such an item is never the CAS's).
func canonicalPID(s string) string {
	u, err := uuid.Parse(s)
	if err != nil {
		return ""
	}
	return u.String()
}

// completedStatus tells whether ack_v2 reads s as completed: its
// COALESCE(NULLIF(lower(s), ”), 'completed') in ('completed', 'success').
// ASCII folding only: lower() of a non-ASCII letter is never an ASCII one
// of these words, and anything doubtful just takes the general path.
func completedStatus(s string) bool {
	if s == "" {
		return true
	}
	if len(s) != len(protocol.AckCompleted) && len(s) != len(protocol.AckSuccess) {
		return false
	}
	buf := make([]byte, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		buf[i] = c
	}
	l := string(buf)
	return l == string(protocol.AckCompleted) || l == string(protocol.AckSuccess)
}

// ackWithCAS answers an ack request: the qualifying pairs by CAS (merged
// with concurrent requests), everything else, and every pair the CAS did
// not match, in one ack_v2 call. Outcomes come in input order, as ack_v2's.
func (b *Broker) ackWithCAS(ctx context.Context, tenant string, items []AckItem, peers []PeerClaim) ([]pg.AckOutcome, bool, error) {
	plan := b.planCAS(tenant, items)
	if len(plan.pairs) == 0 {
		return nil, false, nil
	}
	if b.pre != nil {
		// Queued before the ack, to share its flight (prefetch.go).
		var started []*prefetchKey // one per lease: the batches of a lease share it
		for i, sb := range plan.batches {
			if sb.next == nil || slices.Contains(started, sb.next) || len(started) >= prefetchPerLine {
				continue
			}
			lease := ""
			if sb.nextPeer {
				// A peer's pop: only under the lease the peer asks for.
				k := slices.IndexFunc(peers, func(c PeerClaim) bool { return c.AckedLease == plan.pairs[i].LeaseID })
				if k < 0 || peers[k].NextLease == "" {
					continue
				}
				lease = peers[k].NextLease
			}
			started = append(started, sb.next)
			b.pre.start(*sb.next, lease)
		}
	}
	res, err := b.acks.submit(ctx, plan.pairs)
	if err != nil {
		if ctx.Err() != nil {
			return nil, true, ctx.Err()
		}
		res = make([]pg.CASResult, len(plan.pairs)) // nothing written: all general
	}
	outs := make([]pg.AckOutcome, len(items))
	done := make([]bool, len(items))
	var cas int64
	for j, r := range res {
		if !r.OK {
			continue
		}
		for _, i := range plan.items[j] {
			p := plan.pairs[j]
			// What ack_v2 answers for each completed item of a batch it
			// resolves whole under the live lease, its summary applied.
			outs[i] = pg.AckOutcome{Idx: i, Success: true, Queue: r.Queue, Partition: r.Partition,
				Released: true, Pending: r.Pending, PartitionID: p.PartitionID, Group: p.Group}
			done[i] = true
			cas++
		}
	}
	b.stats.AcksCAS.Add(cas)
	if ctx.Err() != nil {
		// The client left while its flush ran: what committed still wakes
		// pops, the rest is not sent.
		b.afterAck(tenant, casOnly(outs, done))
		return nil, true, ctx.Err()
	}
	var rest []int
	for i := range items {
		if !done[i] {
			rest = append(rest, i)
		}
	}
	if len(rest) > 0 {
		sub := make([]AckItem, len(rest))
		for j, i := range rest {
			sub[j] = items[i]
		}
		gen, err := b.ackGeneral(ctx, tenant, sub)
		if err != nil {
			// The CAS part committed; a retried request is told success for
			// those (docs/api.md, "Acks", rule 5), as after a lost answer.
			b.afterAck(tenant, casOnly(outs, done))
			return nil, true, err
		}
		for j, i := range rest {
			o := gen[j]
			o.Idx = i
			outs[i] = o
		}
	}
	return outs, true, nil
}

func casOnly(outs []pg.AckOutcome, done []bool) []pg.AckOutcome {
	var r []pg.AckOutcome
	for i, o := range outs {
		if done[i] {
			r = append(r, o)
		}
	}
	return r
}

// ackCombiner merges the CAS pairs of concurrent ack requests into one
// pg.AckCAS statement per flush, like pushCombiner does for pushes: a
// request that arrives while a flush runs (flushesInFlight) waits and goes
// with the next one; an idle node flushes at once (no timer). The
// statement skips rows another transaction holds (their pairs take the
// general path), so one flush at a time is not held up by a row lock. A
// request is answered only once the flush carrying it committed; one whose client left
// before its pairs were sent is skipped. A flush that fails wrote nothing:
// its requests take the general path under their own contexts. With the
// pop combiner on, the flush is the claims' flight's (joint): the acks go
// in the claims' transaction when claims wait too, alone otherwise.
type ackCombiner struct {
	db       *pg.DB
	maxPairs int
	flushes  *atomic.Int64 // Stats.AckCASFlushes
	clock    *flushClock   // Stats.AckFlushTime

	// joint, when set, is the pop combiner whose flight carries these
	// acks (one transaction for a node's claims and CAS acks); without it
	// (QUEEN_POP_COMBINE=0) the acks have a flight of their own.
	joint *popCombiner

	mu       sync.Mutex
	pending  []*casReq
	inflight int
}

// flushesInFlight: a node runs one claim flush at a time, which carries
// its CAS acks too (popcombine.go), alone or in a cluster. (Until
// 2026-12-03 the CAS acks had a flight of their own. Pushes run a flight
// per push lane, pushlanes.go: they split by partition, claims cannot.)
// More flights only split the same requests into more, smaller
// transactions: PostgreSQL shares the cores with the push flights and the
// node itself, and consumers answered sooner claim more often and
// smaller, each transaction a fixed cost (docs/benchmarks.md, "twelfth
// session": one node, 0.89-0.95x PostgreSQL CPU per message with one
// flight; "fourteenth session": 3 or 8 flights, 1.4-2.6x the commits and
// 66-87 against 47 us per message). In a cluster each node running its
// own second flight also multiplied the transactions by the nodes ("fifth
// session").
const flushesInFlight = 1

// maxCASPairs bounds the (partition, group) pairs of one CAS flush; a
// larger request flushes alone.
const maxCASPairs = 10000

type casReq struct {
	ctx   context.Context
	t0    time.Time // arrival
	pairs []pg.CASPair
	sent  bool // taken by a flush (under ackCombiner.mu)
	done  chan struct{}
	once  sync.Once
	res   []pg.CASResult
	err   error
}

func (r *casReq) finish(res []pg.CASResult, err error) {
	r.once.Do(func() {
		r.res, r.err = res, err
		close(r.done)
	})
}

func newAckCombiner(db *pg.DB, maxPairs int, flushes *atomic.Int64, clock *flushClock) *ackCombiner {
	return &ackCombiner{db: db, maxPairs: maxPairs, flushes: flushes, clock: clock}
}

func (c *ackCombiner) submit(ctx context.Context, pairs []pg.CASPair) ([]pg.CASResult, error) {
	r := &casReq{ctx: ctx, pairs: pairs, done: make(chan struct{}), t0: time.Now()}
	c.mu.Lock()
	c.pending = append(c.pending, r)
	if c.joint == nil && c.inflight < flushesInFlight {
		c.inflight++
		go c.run()
	}
	c.mu.Unlock()
	if c.joint != nil {
		c.joint.kick()
	}
	select {
	case <-r.done:
	case <-ctx.Done():
		// Skipped if not sent yet. Once sent, its rows may commit: wait
		// for the flush (bounded by combineFlushTimeout, or by
		// popFlushTimeout per transaction in the claims' flight), so that the
		// caller still applies the hot-list effects of what committed.
		c.mu.Lock()
		if !r.sent {
			r.finish(nil, ctx.Err())
		}
		c.mu.Unlock()
		<-r.done
	}
	return r.res, r.err
}

func (c *ackCombiner) run() {
	for {
		batch := c.take()
		if batch == nil {
			c.mu.Lock()
			if len(c.pending) == 0 {
				c.inflight--
				c.mu.Unlock()
				return
			}
			c.mu.Unlock()
			continue
		}
		c.flush(batch)
	}
}

// take removes the next flush's requests from the queue (nil when none).
func (c *ackCombiner) take() []*casReq {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.pending) == 0 {
		return nil
	}
	n, pairs := 0, 0
	for n < len(c.pending) && (n == 0 || pairs+len(c.pending[n].pairs) <= c.maxPairs) {
		pairs += len(c.pending[n].pairs)
		n++
	}
	batch := c.pending[:n:n]
	c.pending = c.pending[n:]
	for _, r := range batch {
		r.sent = true
	}
	return batch
}

func (c *ackCombiner) flush(batch []*casReq) {
	live, all, where := prepareCAS(batch)
	if len(live) == 0 {
		return
	}
	defer func() {
		// A panic must neither kill the node nor leave acks waiting.
		if p := recover(); p != nil {
			for _, r := range live {
				r.finish(nil, fmt.Errorf("ack: internal error: %v", p))
			}
		}
	}()
	c.flushes.Add(1)
	t0 := time.Now()
	for _, r := range live {
		c.clock.waitedSince(r.t0, t0)
	}
	var res []pg.CASResult
	err := func() error {
		defer c.clock.ran(t0)
		ctx, cancel := context.WithTimeout(context.Background(), combineFlushTimeout)
		defer cancel()
		return c.db.Retry(ctx, func() (err error) {
			res, err = c.db.AckCAS(ctx, all)
			return err
		})
	}()
	finishCAS(live, where, res, err)
}

// prepareCAS keeps the requests whose clients still wait and lists their
// pairs for one statement. A (partition, group) goes to the statement
// once: a second request for the same batch (a duplicate ack) takes the
// general path after this flush, which then answers as ack_v2 does for a
// repeated ack.
func prepareCAS(batch []*casReq) (live []*casReq, all []pg.CASPair, where [][2]int) {
	for _, r := range batch {
		select {
		case <-r.done: // its client left before its pairs were sent
		default:
			live = append(live, r)
		}
	}
	type key struct{ pid, group string }
	seen := map[key]bool{}
	for ri, r := range live {
		for pi, p := range r.pairs {
			k := key{p.PartitionID, p.Group}
			if seen[k] {
				continue
			}
			seen[k] = true
			all = append(all, p)
			where = append(where, [2]int{ri, pi})
		}
	}
	return live, all, where
}

// finishCAS answers each request of a flush: its pairs' results, or err
// (nothing of the flush written).
func finishCAS(live []*casReq, where [][2]int, res []pg.CASResult, err error) {
	if err != nil {
		for _, r := range live {
			r.finish(nil, fmt.Errorf("ack cas flush: %w", err))
		}
		return
	}
	mine := make([][]pg.CASResult, len(live))
	for ri, r := range live {
		mine[ri] = make([]pg.CASResult, len(r.pairs))
	}
	for j, w := range where {
		mine[w[0]][w[1]] = res[j]
	}
	for ri, r := range live {
		r.finish(mine[ri], nil)
	}
}
