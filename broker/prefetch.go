package broker

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"

	"queen-node/hotlist"
	"queen-node/pg"
	"queen-node/protocol"
)

// Claims taken ahead (docs/api.md, "Claims taken ahead"). A
// consumer's cycle is a pop and then an ack, and each waited for a claim
// flight of its own: two flights in a row per claim, which bounds how
// often a partition is visited, and so how long a message waits for it
// (issue 20, goal 1). A consumer acks and then pops again at once, with
// the same parameters. So when a CAS ack arrives for a lease this node
// handed out to one of its own clients, the node also queues a claim with
// that pop's parameters, before the ack, so that both usually go in the
// same flight and commit together; its answer waits in a line of the
// (queue, group, parameters). The next pop with those parameters takes the
// oldest answer of the line (waiting for it while its flight runs)
// instead of a flight of its own.
//
// A claim taken ahead is an ordinary claim under a lease of its own: the
// node hands it out whole, as the claim core answered it, or releases its
// lease (prefetchTTL after it was answered; at Close; when its queue is
// deleted or sought, or its group deleted, on this node), so no message
// is lost or delivered twice, and each partition keeps its order. A
// client sees only a lease that began when the claim was made: usually a
// few milliseconds before its pop, at most its flight plus prefetchTTL.
// A node that dies with answers in a line leaves their leases to
// expire, as it does with the claims of its flight.
//
// Each line has a score: a pop served a claim from it, or one that found
// it empty, raises it; an answer released unused lowers it by more; a line
// whose score is not positive takes nothing ahead. So consumers that do
// not pop again soon after an ack cost a claim and a release now and
// then, not every cycle.
//
// A pop forwarded by a peer names the lease its forwarding node chose
// (api/forward.go) and cannot be given another: the peer asks, with the
// forwarded ack, for the next claim under a lease it picks (PeerClaim,
// api/ahead.go), which waits in a line of its own. Wildcard leased pops
// only: a named partition or autoAck is never taken ahead.
type prefetcher struct {
	b   *Broker
	ttl time.Duration

	// wg holds the claims whose flight has not answered: Close waits for
	// them before the broker's life (which releases need) ends.
	wg sync.WaitGroup

	mu     sync.Mutex
	lines  map[prefetchKey]*prefetchLine
	total  int  // entries in all lines
	closed bool // Close began: answers are released as they come
	// releasing: the peer leases whose claim is being released; a pop
	// forwarded under one waits for the release before it claims under
	// the same lease, so the two never hold partitions under one id at
	// once.
	releasing map[string]chan struct{}
	// used, usedOld: the peer leases a pop came under with nothing taken
	// ahead, the last prefetchUsedAge and the one before: one is never
	// taken ahead after (an ack that arrives after its client's next
	// pop, a forwarded ack retried late), since its pop claims under it.
	used, usedOld map[string]struct{}
	usedSince     time.Time
}

// prefetchKey is what a claim taken ahead must share with the pop that
// takes it: everything of pg.PopArgs but the candidates and the lease.
type prefetchKey struct {
	tenant, queue, group       string
	batch, maxParts, leaseSecs int
	// subMode only: the subscription is recorded at the group's first
	// claim of a partition, and a claim is taken ahead only on partitions
	// whose consumer row exists, so subscriptionFrom (a time, often
	// "now") would only split one client's pops into lines of one.
	subMode  protocol.SubMode
	maxBytes int64
	// peerLease is set on the line of a claim taken ahead for a peer
	// (PeerClaim): that claim's lease, chosen by the peer; its other
	// fields are then zero, and the entry holds the pop's key.
	peerLease string
}

// PeerClaim asks, with an ack forwarded by a peer, for the next claim of
// the acked lease's pop under a lease the peer chose (docs/api.md,
// "Claims taken ahead"): the peer's client's next pop comes forwarded
// under NextLease, and finds it answered.
type PeerClaim struct {
	AckedLease, NextLease string
}

type prefetchLine struct {
	entries []*prefetchEntry // oldest first
	score   int
}

// prefetchEntry is one claim taken ahead. done closes when its flight
// answered; res is then its answer, nil when it took nothing.
type prefetchEntry struct {
	key   prefetchKey // the pop's
	line  prefetchKey // its line's: key, or the peer's lease alone
	lease string
	done  chan struct{}
	res   *PopResult
	taken bool // a pop took it, or it was released (under prefetcher.mu)
	// orphan: taken, but its taker left (or its queue was deleted or
	// sought) before its flight answered; settle releases it.
	orphan bool
}

// Bounds of the lines.
const (
	prefetchTTL       = 250 * time.Millisecond // an answer not taken by then is released
	prefetchPerLine   = 64                     // entries per line
	prefetchMaxTotal  = 4096                   // entries over all lines
	prefetchMaxLines  = 4096                   // lines kept (each a few words)
	prefetchScoreMax  = 8
	prefetchScoreHit  = 1                // a pop took an answer, or found none
	prefetchScoreLost = 8                // an answer released unused
	prefetchClaimWait = 10 * time.Second // a claim's flight, and a failed flight's claim alone
	// A peer's pop is recorded this long (twice, at most): longer than a
	// forwarded ack can take (forward's timeout) plus a claim's wait.
	prefetchUsedAge = 30 * time.Second
	prefetchMaxUsed = 200_000
)

// Prefetching tells whether this node takes claims ahead
// (QUEEN_POP_PREFETCH with what it needs on); api asks owners to take
// its forwarded pops' claims ahead only then.
func (b *Broker) Prefetching() bool { return b.pre != nil }

func newPrefetcher(b *Broker) *prefetcher {
	return &prefetcher{b: b, ttl: prefetchTTL, lines: map[prefetchKey]*prefetchLine{}}
}

// prefetchKeyOf is the line of a pop with args; false when the pop takes
// no part (autoAck, a named partition). A forwarded pop (its lease the
// peer's) takes part as a peer's.
func prefetchKeyOf(args pg.PopArgs) (prefetchKey, bool) {
	if args.AutoAck || args.Names != nil {
		return prefetchKey{}, false
	}
	return prefetchKey{tenant: args.Tenant, queue: args.Queue, group: args.Group, batch: args.Budget,
		maxParts: args.MaxParts, leaseSecs: args.LeaseSeconds, subMode: args.SubMode, maxBytes: args.MaxBytes}, true
}

// args are the claim arguments of a pop of this line, under a fresh lease.
func (k prefetchKey) args(owner string) pg.PopArgs {
	return pg.PopArgs{Tenant: k.tenant, Queue: k.queue, Group: k.group,
		ScanLimit: clamp(k.maxParts*8, 16, 256), Budget: k.batch, MaxParts: k.maxParts,
		LeaseSeconds: k.leaseSecs, Owner: owner, SubMode: k.subMode, MaxBytes: k.maxBytes,
		LeaseID: uuid.NewString()}
}

// start takes a claim ahead for key's line (for a peer under lease, in
// a line of its own) when the line wants one and its ring has candidates
// whose consumer rows are known (so the claim can join the flight). It
// queues the claim and returns; called before the ack that prompted it
// is queued.
func (p *prefetcher) start(key prefetchKey, lease string) {
	b := p.b
	line := key
	if lease != "" {
		line = prefetchKey{peerLease: lease}
	}
	if !p.wanted(line) {
		return
	}
	if _, paused := b.popGate(); paused {
		return
	}
	qk := queueKey(key.tenant, key.queue)
	ring := b.hot.Lookup(qk, key.group)
	if ring == nil || ring.Cold() {
		return
	}
	now := time.Now()
	cands := b.hot.Take(ring, clamp(key.maxParts*4, 4, 256), now)
	if cands == nil {
		return
	}
	args := key.args(b.cfg.NodeName)
	if lease != "" {
		args.LeaseID = lease
	}
	args.Names = candNames(cands)
	args.Unprov = b.prov.unprov(args)
	if args.Unprov == nil || len(args.Unprov) > 0 {
		b.hot.Abandon(ring, cands, now) // a pop of its own provisions them
		return
	}
	e := p.add(key, line, args.LeaseID)
	if e == nil {
		b.hot.Abandon(ring, cands, now)
		return
	}
	// Not the broker's life: Close waits for this claim (wg) and releases
	// it while releases still run.
	ctx, cancel := context.WithTimeout(context.Background(), prefetchClaimWait)
	b.stats.PopSQLCalls.Add(1)
	// Quiet: the ack that follows starts the flight (ackCombiner.submit
	// kicks it), so the flight takes both; a flight that started now could
	// take the claim without the ack.
	j := b.popc.enqueueQuiet(ctx, args)
	go func() {
		defer p.wg.Done()
		defer cancel()
		p.finish(e, j, ring, cands)
	}()
}

// wanted tells whether line should take a claim ahead now: a cheap look
// before candidates are checked out; add decides.
func (p *prefetcher) wanted(line prefetchKey) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.admitsLocked(line)
}

// admitsLocked tells whether line may take one more claim ahead: within
// the bounds, its score positive; a peer's lease (line.peerLease) at most
// once, and never once a pop came under it or while its claim is being
// released.
func (p *prefetcher) admitsLocked(line prefetchKey) bool {
	if p.closed || p.total >= prefetchMaxTotal {
		return false
	}
	lease := line.peerLease
	if lease != "" && (p.releasing[lease] != nil || p.wasUsedLocked(lease)) {
		return false
	}
	l := p.lines[line]
	if l == nil {
		return len(p.lines) < prefetchMaxLines || p.sweepLocked()
	}
	if lease != "" {
		return false // (a line of one, taken already)
	}
	return l.score > 0 && len(l.entries) < prefetchPerLine
}

// sweepLocked drops the lines without entries, those whose score is
// spent last (dropped, such a line would start again at 1); true when
// there is room.
func (p *prefetcher) sweepLocked() bool {
	for k, l := range p.lines {
		if len(l.entries) == 0 && l.score > 0 {
			delete(p.lines, k)
		}
	}
	if len(p.lines) >= prefetchMaxLines {
		for k, l := range p.lines {
			if len(l.entries) == 0 {
				delete(p.lines, k)
			}
		}
	}
	return len(p.lines) < prefetchMaxLines
}

// add appends an entry for a pop of key to line; nil when admitsLocked
// says no (things may have changed since wanted looked).
func (p *prefetcher) add(key, line prefetchKey, lease string) *prefetchEntry {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.admitsLocked(line) {
		return nil
	}
	l := p.lines[line]
	if l == nil {
		l = &prefetchLine{score: 1}
		p.lines[line] = l
	}
	e := &prefetchEntry{key: key, line: line, lease: lease, done: make(chan struct{})}
	l.entries = append(l.entries, e)
	p.total++
	p.wg.Add(1) // (under mu, before closed can be set: Close's Wait sees it)
	return e
}

// finish waits for the claim's flight, checks the candidates back in and
// settles the entry.
func (p *prefetcher) finish(e *prefetchEntry, j *popJob, ring *hotlist.Ring, cands []hotlist.Candidate) {
	b := p.b
	var res *PopResult
	defer func() { p.settle(e, res) }()
	// Waited for whatever it takes: the job's own context (ctx) bounds it,
	// and a claim that ran out of it was released by id (claimAlone)
	// before it is answered, so nothing can end a later claim under the
	// same lease (a peer's) after this entry settled.
	out, err := b.popc.wait(context.Background(), j)
	if err != nil {
		b.hot.Abandon(ring, cands, time.Now())
		return
	}
	b.claimed(j.args, out)
	if b.checkIn(ring, cands, j.args, out) {
		b.gates.notify(ring.Key())
	}
	if len(out.Messages) > 0 {
		res = b.buildPopResult(j.args, out)
		b.stats.PrefetchTaken.Add(1)
	}
}

// settle records the entry's answer. An answer nobody takes within the
// TTL is released; an empty one leaves its line at once.
func (p *prefetcher) settle(e *prefetchEntry, res *PopResult) {
	p.mu.Lock()
	e.res = res
	close(e.done)
	if e.taken {
		orphan := e.orphan
		p.mu.Unlock()
		switch {
		case orphan && res != nil:
			p.release(e)
		case orphan:
			p.released(e) // nothing to release
		}
		return
	}
	if res == nil || p.closed {
		p.removeLocked(e)
		e.taken = true
		if res != nil {
			p.releasingLocked(e)
		}
		p.mu.Unlock()
		if res != nil {
			p.release(e)
		}
		return
	}
	p.mu.Unlock()
	p.b.after(p.ttl, func() { p.expire(e) })
}

// removeLocked takes e out of its line.
func (p *prefetcher) removeLocked(e *prefetchEntry) {
	l := p.lines[e.line]
	if l == nil {
		return
	}
	for i, x := range l.entries {
		if x == e {
			l.entries = append(l.entries[:i], l.entries[i+1:]...)
			p.total--
			if len(l.entries) == 0 && e.line.peerLease != "" {
				delete(p.lines, e.line) // a peer's line of one
			}
			return
		}
	}
}

// usedLocked records that a pop came under a peer lease.
func (p *prefetcher) usedLocked(lease string) {
	now := time.Now()
	if p.used == nil || now.Sub(p.usedSince) > prefetchUsedAge {
		p.usedOld, p.used, p.usedSince = p.used, map[string]struct{}{}, now
	}
	if len(p.used) < prefetchMaxUsed {
		p.used[lease] = struct{}{}
	}
}

// wasUsedLocked tells whether a pop came under a peer lease lately; when
// the record is full, any lease counts as used (nothing is taken ahead
// for peers until it turns over).
func (p *prefetcher) wasUsedLocked(lease string) bool {
	if len(p.used) >= prefetchMaxUsed {
		return true
	}
	_, a := p.used[lease]
	_, b := p.usedOld[lease]
	return a || b
}

// releasingLocked records that e's claim is about to be released, for a
// pop forwarded under its peer lease to wait for (take).
func (p *prefetcher) releasingLocked(e *prefetchEntry) {
	if e.line.peerLease == "" {
		return
	}
	if p.releasing == nil {
		p.releasing = map[string]chan struct{}{}
	}
	if _, ok := p.releasing[e.lease]; !ok {
		p.releasing[e.lease] = make(chan struct{})
	}
}

// released ends what releasingLocked began.
func (p *prefetcher) released(e *prefetchEntry) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ch, ok := p.releasing[e.lease]; ok {
		close(ch)
		delete(p.releasing, e.lease)
	}
}

// expire releases e's answer if no pop took it.
func (p *prefetcher) expire(e *prefetchEntry) {
	p.mu.Lock()
	if e.taken {
		p.mu.Unlock()
		return
	}
	e.taken = true
	p.removeLocked(e)
	p.releasingLocked(e)
	if l := p.lines[e.line]; l != nil {
		l.score -= prefetchScoreLost
	}
	p.mu.Unlock()
	p.release(e)
}

// release hands an unused answer's partitions back: its lease ends in
// PostgreSQL, then its partitions are ready again in the ring (they were
// checked in as claimed) and the queue's parked pops wake.
//
// The release names the claim's partitions, not only its lease id: a
// peer's lease id may be claimed under again (by a pop forwarded under
// it, at this node or at a new owner), and a release by id alone would
// end that claim too.
func (p *prefetcher) release(e *prefetchEntry) {
	b := p.b
	defer p.released(e)
	var pids []string
	for _, m := range e.res.Messages {
		if !slices.Contains(pids, m.PartitionID) {
			pids = append(pids, m.PartitionID)
		}
	}
	ctx, cancel := context.WithTimeout(b.life, releaseTimeout)
	_, err := b.db.ReleaseClaim(ctx, e.key.group, e.lease, pids)
	cancel()
	if err != nil {
		if b.life.Err() == nil {
			b.log.Warn("release of a claim taken ahead failed; its partitions wait for the lease to expire",
				"queue", e.key.queue, "group", e.key.group, "error", err)
		}
		return
	}
	b.stats.PrefetchReleased.Add(1)
	qk := queueKey(e.key.tenant, e.key.queue)
	now := time.Now()
	for _, pid := range pids {
		b.hot.AckRelease(qk, e.key.group, pid, true, now)
	}
	b.gates.notify(qk)
}

// take gives a pop of key's line the oldest claim taken ahead, waiting
// for its flight if it is still running. nil, nil: none, or it took
// nothing; the pop then claims for itself. A pop forwarded by a peer
// under lease takes the claim taken ahead under that lease, if any: when
// the claim was for a pop of another key (the peer's client changed its
// parameters), it is released first, since the pop claims under the
// same lease.
func (p *prefetcher) take(ctx context.Context, key prefetchKey, lease string) (*PopResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, err // (an answer is for a pop that can still take it)
	}
	line := key
	if lease != "" {
		line = prefetchKey{peerLease: lease}
	}
	p.mu.Lock()
	if lease != "" {
		p.usedLocked(lease) // never taken ahead from now on
	}
	l := p.lines[line]
	if l != nil && lease != "" && len(l.entries) == 0 {
		delete(p.lines, line) // (left empty by a drop: a line of one)
		l = nil
	}
	if l == nil {
		wait := p.releasing[lease] // (nil for "": no peer lease is "")
		p.mu.Unlock()
		if wait != nil {
			select {
			case <-wait:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return nil, nil
	}
	if len(l.entries) == 0 {
		l.score = min(l.score+prefetchScoreHit, prefetchScoreMax)
		p.mu.Unlock()
		return nil, nil
	}
	e := l.entries[0]
	l.entries = l.entries[1:]
	p.total--
	e.taken = true
	if lease != "" {
		delete(p.lines, line) // a line of one
	}
	p.mu.Unlock()
	if err := p.await(ctx, e); err != nil {
		return nil, err
	}
	if e.key != key {
		// Its lease is this pop's: released before the pop claims.
		if e.res != nil {
			p.release(e)
		}
		return nil, nil
	}
	if e.res == nil {
		return nil, nil
	}
	p.mu.Lock()
	if l := p.lines[line]; l != nil {
		l.score = min(l.score+prefetchScoreHit, prefetchScoreMax)
	}
	p.mu.Unlock()
	p.b.stats.PrefetchServed.Add(1)
	return e.res, nil
}

// await waits for the flight of e, which its caller took. When ctx ends
// first, e's answer is nobody's: released when it comes (settle), or here
// if it came meanwhile.
func (p *prefetcher) await(ctx context.Context, e *prefetchEntry) error {
	select {
	case <-e.done:
		return nil
	case <-ctx.Done():
	}
	p.mu.Lock()
	e.orphan = true
	answered := isClosed(e.done)
	p.mu.Unlock()
	if answered && e.res != nil {
		p.release(e)
	}
	return ctx.Err()
}

// close releases the answers waiting in the lines, and waits for the
// claims still in their flight, which settle releases as they come (each
// bounded by prefetchClaimWait, then its release by releaseTimeout).
// Called before the broker's life ends, which the releases need.
func (p *prefetcher) close() {
	p.mu.Lock()
	p.closed = true
	var ready []*prefetchEntry
	for _, l := range p.lines {
		pending := l.entries[:0]
		for _, e := range l.entries {
			if !isClosed(e.done) {
				pending = append(pending, e) // a pop may still take it; else settle releases it
				continue
			}
			e.taken = true
			p.total--
			if e.res != nil {
				p.releasingLocked(e)
				ready = append(ready, e)
			}
		}
		l.entries = pending
	}
	p.mu.Unlock()
	p.releaseAll(ready)
	p.wg.Wait()
}

// releaseAll releases entries, a few side by side (each is its own
// statement: at Close or on a queue delete there may be thousands, and
// the pool serves pops and pushes meanwhile).
func (p *prefetcher) releaseAll(es []*prefetchEntry) {
	var wg sync.WaitGroup
	slots := make(chan struct{}, 4)
	for _, e := range es {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer func() { <-slots; wg.Done() }()
			p.release(e)
		}()
	}
	wg.Wait()
}

// dropQueue releases the claims taken ahead for a queue (all its
// groups when group is ""): after a delete, a seek or a group delete, a
// claim made before it must not answer a pop made after it. Those still
// in their flight are released when they come.
func (p *prefetcher) dropQueue(tenant, queue, group string) {
	p.mu.Lock()
	var ready []*prefetchEntry
	for _, l := range p.lines {
		kept := l.entries[:0]
		for _, e := range l.entries {
			k := e.key
			if k.tenant != tenant || (queue != "" && k.queue != queue) || (group != "" && k.group != group) {
				kept = append(kept, e)
				continue
			}
			e.taken = true
			if isClosed(e.done) {
				if e.res != nil {
					p.releasingLocked(e)
					ready = append(ready, e)
				}
			} else {
				e.orphan = true
				p.releasingLocked(e) // settle releases it, or ends this
			}
			p.total--
		}
		l.entries = kept
	}
	p.mu.Unlock()
	p.releaseAll(ready)
}
