package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// pollUntil polls cond every 5 ms until it holds or within passes.
func pollUntil(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// prefetchIdle reports whether no claim taken ahead is still running.
func (p *prefetcher) idle() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.lines {
		for _, e := range l.entries {
			select {
			case <-e.done:
			default:
				return false
			}
		}
	}
	return true
}

func (p *prefetcher) waiting() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.total
}

// leasedRows counts the consumer rows holding a lease.
func leasedRows(t *testing.T, url string) int {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM queen.consumers WHERE lease_id IS NOT NULL`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// deliveredInOrder checks a pop's messages against the last number seen
// per partition (pushSeq payloads): each continues its partition exactly.
func deliveredInOrder(t *testing.T, last map[string]int, res *PopResult) {
	t.Helper()
	for _, m := range res.Messages {
		var c combMsg
		if err := json.Unmarshal(m.Data, &c); err != nil {
			t.Fatal(err)
		}
		if c.N != last[c.P]+1 {
			t.Fatalf("partition %s: message %d after %d", c.P, c.N, last[c.P])
		}
		last[c.P] = c.N
		if m.RetryCount != 0 {
			t.Fatalf("message %s/%d delivered with retry count %d", c.P, c.N, m.RetryCount)
		}
	}
}

// warmQueue pushes message 1 to each partition and pops and acks them
// all, so that the queue's ring exists and every partition's consumer row
// is known (a claim taken ahead joins the flight only then; the tests'
// brokers make no rows in bulk). The partitions' next message is 2.
func warmQueue(t *testing.T, b *Broker, queue string, parts ...string) map[string]int {
	t.Helper()
	ctx := context.Background()
	last := map[string]int{}
	for _, p := range parts {
		pushSeq(t, b, queue, p, 1, 1)
	}
	for len(last) < len(parts) {
		res, err := b.Pop(ctx, "t", PopRequest{Queue: queue, Batch: 1, Partitions: len(parts), Wait: true, Timeout: time.Second})
		if err != nil || res == nil {
			t.Fatalf("warm-up pop: %v %v", res, err)
		}
		deliveredInOrder(t, last, res)
		if err := ackServed(ctx, b, res); err != nil {
			t.Fatal(err)
		}
	}
	args := b.popArgs("t", PopRequest{Queue: queue})
	args.Names = parts
	if u := b.prov.unprov(args); u == nil || len(u) > 0 {
		t.Fatalf("partitions without a known consumer row after the warm-up: %v (nil: none known)", u)
	}
	if b.pre == nil {
		return last
	}
	pollUntil(t, 5*time.Second, "the warm-up's claims taken ahead", b.pre.idle)
	b.pre.reset()
	b.stats.PrefetchTaken.Store(0)
	b.stats.PrefetchServed.Store(0)
	b.stats.PrefetchReleased.Store(0)
	return last
}

// reset forgets the lines (tests).
func (p *prefetcher) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lines, p.total = map[prefetchKey]*prefetchLine{}, 0
}

// A CAS ack of a pop the node served to its own client takes the next
// claim of that pop's line in the ack's flight; the client's next pop is
// answered with it, without a flight of its own. Every message arrives
// once, in order.
func TestPrefetchServesTheNextPop(t *testing.T) {
	b, _ := startCombineBroker(t, true)
	b.pre.ttl = time.Hour // (a slow machine must not expire one)
	ctx := context.Background()
	parts := []string{"p0", "p1", "p2", "p3"}
	last := warmQueue(t, b, "q", parts...)
	for _, p := range parts {
		pushSeq(t, b, "q", p, 2, 20)
	}
	req := PopRequest{Queue: "q", Batch: 10, Wait: true, Timeout: time.Second}
	total, served, pops, firstServed := 0, int64(0), 0, 0
	for total < 80 {
		pops++
		before := b.stats.PopFlushes.Load()
		res, err := b.Pop(ctx, "t", req)
		if err != nil || res == nil {
			t.Fatalf("pop: %v %v", res, err)
		}
		if s := b.stats.PrefetchServed.Load(); s > served {
			served = s
			if firstServed == 0 {
				firstServed = pops
			}
			if f := b.stats.PopFlushes.Load(); f != before {
				t.Fatalf("a pop answered from a claim taken ahead ran %d flushes", f-before)
			}
		}
		deliveredInOrder(t, last, res)
		total += len(res.Messages)
		if err := ackServed(ctx, b, res); err != nil {
			t.Fatal(err)
		}
		pollUntil(t, 5*time.Second, "the claim taken ahead", b.pre.idle)
	}
	// 8 pops of 10: every pop after the first was taken ahead.
	if pops != 8 || firstServed != 2 || served != 7 {
		t.Fatalf("%d pops, the first served ahead was pop %d, %d served ahead", pops, firstServed, served)
	}
	if r := b.stats.PrefetchReleased.Load(); r != 0 {
		t.Fatalf("released %d", r)
	}
}

// A claim taken ahead that no pop takes within the TTL is released: its
// lease ends in PostgreSQL and its partition is ready again at once (not
// at the lease's expiry), its messages undelivered (retry count 0, the
// same first message), and the line takes nothing ahead until pops ask.
func TestPrefetchReleasedWhenNoPopComes(t *testing.T) {
	b, url := startCombineBroker(t, true)
	last := warmQueue(t, b, "q", "p0", "p1", "p2")
	b.pre.ttl = 20 * time.Millisecond
	ctx := context.Background()
	pushSeq(t, b, "q", "p0", 2, 5)
	pushSeq(t, b, "q", "p1", 2, 5)
	req := PopRequest{Queue: "q", Batch: 5, Wait: true, Timeout: time.Second}
	first, err := b.Pop(ctx, "t", req)
	if err != nil || first == nil {
		t.Fatalf("pop: %v %v", first, err)
	}
	if err := ackServed(ctx, b, first); err != nil {
		t.Fatal(err)
	}
	pollUntil(t, 5*time.Second, "the release", func() bool { return b.stats.PrefetchReleased.Load() == 1 })
	if n := b.stats.PrefetchTaken.Load(); n != 1 {
		t.Fatalf("taken %d", n)
	}
	pollUntil(t, 5*time.Second, "the lease to end", func() bool { return leasedRows(t, url) == 0 })
	// The released partition is served to the next pop, from its start.
	// Within 300 ms: a partition left on the wheel would wait a second
	// (hotlist LeaseParkCap) and this pop would find nothing.
	res, err := b.Pop(ctx, "t", PopRequest{Queue: "q", Batch: 5, Wait: true, Timeout: 300 * time.Millisecond})
	if err != nil || res == nil {
		t.Fatalf("pop after release: %v %v", res, err)
	}
	deliveredInOrder(t, last, res)
	if len(res.Messages) != 5 {
		t.Fatalf("got %d messages", len(res.Messages))
	}
	if b.stats.PrefetchServed.Load() != 0 {
		t.Fatal("a released claim was served")
	}
	// The line's score is spent: this ack takes nothing ahead, though p2
	// has messages.
	pushSeq(t, b, "q", "p2", 2, 5)
	if err := ackServed(ctx, b, res); err != nil {
		t.Fatal(err)
	}
	pollUntil(t, 5*time.Second, "idle", b.pre.idle)
	if n := b.stats.PrefetchTaken.Load(); n != 1 {
		t.Fatalf("%d claims taken ahead after a release, want the first only", n)
	}
}

// Pops that must not take part neither take a claim ahead nor make their
// ack take one: a forwarded pop (its lease chosen by the forwarding node),
// a named partition, autoAck.
func TestPrefetchOnlyForOwnWildcardLeasedPops(t *testing.T) {
	b, _ := startCombineBroker(t, true)
	b.pre.ttl = time.Hour
	ctx := context.Background()
	warmQueue(t, b, "q", "p0", "p1", "p2")
	for _, p := range []string{"p0", "p1", "p2"} {
		pushSeq(t, b, "q", p, 2, 30)
	}
	// Their acks take nothing ahead.
	for i, req := range []PopRequest{
		{Queue: "q", Batch: 3, LeaseID: "6f1f1c9e-0000-4000-8000-000000000001"},
		{Queue: "q", Batch: 3, Partition: "p1"},
	} {
		res, err := b.Pop(ctx, "t", req)
		if err != nil || res == nil {
			t.Fatalf("pop %d: %v %v", i, res, err)
		}
		if err := ackServed(ctx, b, res); err != nil {
			t.Fatal(err)
		}
		if n := b.pre.waiting(); n != 0 || b.stats.PrefetchTaken.Load() != 0 {
			t.Fatalf("pop %d (%+v): a claim was taken ahead", i, req)
		}
	}
	// An own wildcard pop's ack takes one; those pops, and an autoAck one,
	// with the same batch, leave it waiting.
	res, err := b.Pop(ctx, "t", PopRequest{Queue: "q", Batch: 3})
	if err != nil || res == nil {
		t.Fatalf("pop: %v %v", res, err)
	}
	if err := ackServed(ctx, b, res); err != nil {
		t.Fatal(err)
	}
	pollUntil(t, 5*time.Second, "the claim taken ahead", func() bool { return b.pre.idle() && b.stats.PrefetchTaken.Load() == 1 })
	held := ""
	b.pre.mu.Lock()
	for _, l := range b.pre.lines {
		for _, e := range l.entries {
			held = e.res.Partition
		}
	}
	b.pre.mu.Unlock()
	free := map[string]string{"p0": "p1", "p1": "p2", "p2": "p0"}[held]
	for i, req := range []PopRequest{
		{Queue: "q", Batch: 3, LeaseID: "6f1f1c9e-0000-4000-8000-000000000002"},
		{Queue: "q", Batch: 3, Partition: free},
		{Queue: "q", Batch: 3, AutoAck: true},
		{Queue: "q", Batch: 4}, // another line
	} {
		res, err := b.Pop(ctx, "t", req)
		if err != nil || res == nil {
			t.Fatalf("pop %d: %v %v", i, res, err)
		}
		if b.stats.PrefetchServed.Load() != 0 || b.pre.waiting() != 1 {
			t.Fatalf("pop %d (%+v) took the claim taken ahead", i, req)
		}
		if !req.AutoAck {
			if err := ackServed(ctx, b, res); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := b.Pop(ctx, "t", PopRequest{Queue: "q", Batch: 3}); err != nil || b.stats.PrefetchServed.Load() != 1 {
		t.Fatalf("the line's own pop: %v, served %d", err, b.stats.PrefetchServed.Load())
	}
}

// One pop asks for one claim ahead: a pop of two partitions acked one
// partition at a time takes one, not two.
func TestPrefetchOncePerPop(t *testing.T) {
	b, _ := startCombineBroker(t, true)
	ctx := context.Background()
	parts := []string{"p0", "p1", "p2", "p3", "p4", "p5", "p6", "p7"}
	warmQueue(t, b, "q", parts...)
	for _, p := range parts {
		pushSeq(t, b, "q", p, 2, 4)
	}
	res, err := b.Pop(ctx, "t", PopRequest{Queue: "q", Batch: 8, Partitions: 2})
	if err != nil || res == nil || res.PartitionsClaimed != 2 {
		t.Fatalf("pop: %+v %v", res, err)
	}
	byPart := map[string]*PopResult{}
	for _, m := range res.Messages {
		r := byPart[m.PartitionID]
		if r == nil {
			r = &PopResult{LeaseID: res.LeaseID}
			byPart[m.PartitionID] = r
		}
		r.Messages = append(r.Messages, m)
	}
	for _, r := range byPart {
		if err := ackServed(ctx, b, r); err != nil {
			t.Fatal(err)
		}
	}
	pollUntil(t, 5*time.Second, "the claim taken ahead", b.pre.idle)
	if n := b.stats.PrefetchTaken.Load(); n != 1 {
		t.Fatalf("%d claims taken ahead for one pop", n)
	}
}

// ackedWithClaimAhead warms q's p0 and p1, pushes messages 2 to 6 to each
// and pops and acks one partition's five, with claims kept an hour: the
// ack takes the other partition's claim ahead.
func ackedWithClaimAhead(t *testing.T, b *Broker) {
	t.Helper()
	warmQueue(t, b, "q", "p0", "p1")
	b.pre.ttl = time.Hour
	pushSeq(t, b, "q", "p0", 2, 5)
	pushSeq(t, b, "q", "p1", 2, 5)
	ctx := context.Background()
	res, err := b.Pop(ctx, "t", PopRequest{Queue: "q", Batch: 5})
	if err != nil || res == nil {
		t.Fatalf("pop: %v %v", res, err)
	}
	if err := ackServed(ctx, b, res); err != nil {
		t.Fatal(err)
	}
}

// Close releases the claims waiting in the lines.
func TestPrefetchReleasedOnClose(t *testing.T) {
	b, url := startCombineBroker(t, true)
	ackedWithClaimAhead(t, b)
	pollUntil(t, 5*time.Second, "the claim taken ahead", func() bool { return b.pre.idle() && b.stats.PrefetchTaken.Load() == 1 })
	if n := leasedRows(t, url); n != 1 {
		t.Fatalf("%d leased rows, want the claim taken ahead's", n)
	}
	b.Close()
	if n := leasedRows(t, url); n != 0 {
		t.Fatalf("%d leased rows after Close", n)
	}
}

// A claim taken ahead still in its flight when Close begins: Close waits
// for its answer and releases it while releases still run.
func TestPrefetchInFlightAtClose(t *testing.T) {
	b, url := startCombineBroker(t, true)
	warmQueue(t, b, "q", "p0")
	ctx := context.Background()
	pushSeq(t, b, "q", "p0", 2, 5)
	key, _ := prefetchKeyOf(b.popArgs("t", PopRequest{Queue: "q", Batch: 5}))
	e := b.pre.add(key, key, "6f1f1c9e-0000-4000-8000-0000000000c1")
	// The flight, played by the test: the claim commits, its answer is
	// not in yet when Close begins.
	args := key.args("popcombine")
	args.LeaseID = e.lease
	args.Names = []string{"p0"}
	out, err := b.claim(ctx, args)
	if err != nil || len(out.Messages) != 5 {
		t.Fatalf("claim: %v %v", out, err)
	}
	closed := make(chan struct{})
	go func() {
		b.Close()
		close(closed)
	}()
	pollUntil(t, 5*time.Second, "Close to begin", func() bool {
		b.pre.mu.Lock()
		defer b.pre.mu.Unlock()
		return b.pre.closed
	})
	select {
	case <-closed:
		t.Fatal("Close returned with a claim taken ahead still in its flight")
	default:
	}
	b.pre.settle(e, b.buildPopResult(args, out))
	b.pre.wg.Done()
	<-closed
	if n := leasedRows(t, url); n != 0 {
		t.Fatalf("%d leased rows after Close", n)
	}
}

// A queue delete, a seek and a group delete release the claims taken
// ahead before them: a pop after them never gets one.
func TestPrefetchDroppedByDeleteAndSeek(t *testing.T) {
	for _, what := range []string{"delete", "seek", "group delete"} {
		t.Run(what, func(t *testing.T) {
			b, url := startCombineBroker(t, true)
			ackedWithClaimAhead(t, b)
			ctx := context.Background()
			pollUntil(t, 5*time.Second, "the claim taken ahead", func() bool { return b.pre.idle() && b.pre.waiting() == 1 })
			switch what {
			case "delete":
				if _, err := b.DeleteQueue(ctx, "t", "q"); err != nil {
					t.Fatal(err)
				}
			case "seek":
				if err := b.AfterSeek(ctx, "t", "q", QueueMode); err != nil {
					t.Fatal(err)
				}
			default:
				b.AfterGroupDelete("t", "q", QueueMode)
			}
			if b.pre.waiting() != 0 || b.stats.PrefetchReleased.Load() != 1 {
				t.Fatalf("waiting %d, released %d", b.pre.waiting(), b.stats.PrefetchReleased.Load())
			}
			if what != "delete" {
				if n := leasedRows(t, url); n != 0 {
					t.Fatalf("%d leased rows", n)
				}
			}
			r2, err := b.Pop(ctx, "t", PopRequest{Queue: "q", Batch: 5, Wait: true, Timeout: 300 * time.Millisecond})
			if err != nil || b.stats.PrefetchServed.Load() != 0 {
				t.Fatalf("pop after: %v %v, served %d", r2, err, b.stats.PrefetchServed.Load())
			}
		})
	}
}

// A pop that takes a claim still in its flight and leaves before it is
// answered hands it back: the lease ends, nothing is lost.
func TestPrefetchTakerLeaves(t *testing.T) {
	b, url := startCombineBroker(t, true)
	warmQueue(t, b, "q", "p0", "p1")
	ctx := context.Background()
	pushSeq(t, b, "q", "p0", 2, 5)
	pushSeq(t, b, "q", "p1", 2, 5)
	res, err := b.Pop(ctx, "t", PopRequest{Queue: "q", Batch: 5})
	if err != nil || res == nil {
		t.Fatalf("pop: %v %v", res, err)
	}
	key, _ := prefetchKeyOf(b.popArgs("t", PopRequest{Queue: "q", Batch: 5}))
	// An entry whose flight has not answered yet: the pop takes it and
	// leaves; then the answer comes, with the other partition's messages.
	e := b.pre.add(key, key, "lease-left")
	if got, err := b.pre.take(canceled(), key, ""); got != nil || err == nil || b.pre.waiting() != 1 {
		t.Fatalf("a pop already gone took a claim: %v %v", got, err)
	}
	left, cancel := context.WithCancel(ctx)
	taken := make(chan error)
	go func() {
		_, err := b.pre.take(left, key, "")
		taken <- err
	}()
	pollUntil(t, 5*time.Second, "the pop to take the claim", func() bool { return b.pre.waiting() == 0 })
	cancel()
	if err := <-taken; err == nil {
		t.Fatal("take: no error after its pop left")
	}
	// Claim it for real under that lease, as the flight would have.
	args := key.args("popcombine")
	args.LeaseID = e.lease
	other := map[string]string{"p0": "p1", "p1": "p0"}[res.Partition]
	args.Names = []string{other}
	out, err := b.claim(ctx, args)
	if err != nil || len(out.Messages) != 5 {
		t.Fatalf("claim: %v %v", out, err)
	}
	if n := leasedRows(t, url); n != 2 {
		t.Fatalf("%d leased rows", n)
	}
	b.pre.settle(e, b.buildPopResult(args, out))
	b.pre.wg.Done() // (add counted it for a flight this test played)
	pollUntil(t, 5*time.Second, "the lease of the abandoned claim to end", func() bool { return leasedRows(t, url) == 1 })
	if err := ackServed(ctx, b, res); err != nil {
		t.Fatal(err)
	}
}

// Claims taken ahead against claims made at pop time, under load: the
// same producers and consumers on two databases, one broker with
// QUEEN_POP_PREFETCH on and one with it off. Both must deliver every
// message exactly once and in partition order, and the side with it on
// must have served pops from claims taken ahead.
func TestPrefetchDifferentialUnderLoad(t *testing.T) {
	on, onURL := startCombineBroker(t, true)
	off, _ := startCombineBroker(t, true)
	off.pre = nil
	for _, b := range []*Broker{on, off} {
		runPrefetchLoad(t, b)
	}
	t.Logf("on: %d pops, %d taken ahead, %d served, %d released", on.stats.Pops.Load(),
		on.stats.PrefetchTaken.Load(), on.stats.PrefetchServed.Load(), on.stats.PrefetchReleased.Load())
	if s := on.stats.PrefetchServed.Load(); s < on.stats.Pops.Load()/5 {
		t.Fatalf("%d of %d pops served from claims taken ahead", s, on.stats.Pops.Load())
	}
	// Every claim taken ahead was served or released, no lease is left.
	pollUntil(t, 5*time.Second, "every claim taken ahead served or released", func() bool {
		return on.pre.idle() && on.pre.waiting() == 0 &&
			on.stats.PrefetchTaken.Load() == on.stats.PrefetchServed.Load()+on.stats.PrefetchReleased.Load()
	})
	pollUntil(t, 5*time.Second, "no lease left", func() bool { return leasedRows(t, onURL) == 0 })
	t.Logf("on: %d pops, %d taken ahead, %d served, %d released; off: %d pops", on.stats.Pops.Load(),
		on.stats.PrefetchTaken.Load(), on.stats.PrefetchServed.Load(), on.stats.PrefetchReleased.Load(), off.stats.Pops.Load())
}

// runPrefetchLoad: after a warm-up (message 1), 4 producers push 2..perPart to 32 partitions while 8
// consumers pop (batches of 1 to 22, one with partitions=2) and ack;
// now and then a consumer vanishes mid-pop (its answer, if any, is
// released as the API does and delivered again later).
func runPrefetchLoad(t *testing.T, b *Broker) {
	t.Helper()
	const parts, perPart = 32, 41
	names := make([]string, parts)
	for p := range names {
		names[p] = fmt.Sprintf("p%d", p)
	}
	last := warmQueue(t, b, "q", names...)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	var pw sync.WaitGroup
	for p := 0; p < 4; p++ {
		pw.Add(1)
		go func(p int) {
			defer pw.Done()
			for part := p; part < parts; part += 4 {
				for n := 2; n <= perPart; n += 10 {
					pushSeq(t, b, "q", fmt.Sprintf("p%d", part), n, 10)
				}
			}
		}(p)
	}
	var (
		mu    sync.Mutex
		total = parts // the warm-up's
		fail  error
	)
	var cw sync.WaitGroup
	for c := 0; c < 8; c++ {
		cw.Add(1)
		go func(c int) {
			defer cw.Done()
			rnd := rand.New(rand.NewPCG(uint64(c), 11))
			for {
				mu.Lock()
				done := total >= parts*perPart || fail != nil
				mu.Unlock()
				if done || ctx.Err() != nil {
					return
				}
				// Each consumer its own batch size, as clients have: a
				// claim taken ahead serves a pop of the same size only.
				req := PopRequest{Queue: "q", Batch: 1 + 3*c, Wait: true, Timeout: 200 * time.Millisecond}
				if c == 7 {
					req.Partitions = 2
				}
				pctx := ctx
				if rnd.IntN(40) == 0 { // a client that vanishes mid-pop
					var pc context.CancelFunc
					pctx, pc = context.WithTimeout(ctx, time.Duration(rnd.IntN(3))*time.Millisecond)
					defer pc()
				}
				res, err := b.Pop(pctx, "t", req)
				if pctx != ctx && pctx.Err() != nil {
					if res != nil {
						b.ReleaseUndelivered("t", res) // as the API does
					}
					continue
				}
				if err != nil {
					mu.Lock()
					fail = fmt.Errorf("pop: %w", err)
					mu.Unlock()
					return
				}
				if res == nil {
					continue
				}
				mu.Lock()
				for _, m := range res.Messages {
					var cm combMsg
					if err := json.Unmarshal(m.Data, &cm); err != nil || cm.N != last[cm.P]+1 {
						fail = fmt.Errorf("partition %s: %d after %d (%v)", cm.P, cm.N, last[cm.P], err)
						break
					}
					last[cm.P] = cm.N
				}
				total += len(res.Messages)
				mu.Unlock()
				if err := ackServed(ctx, b, res); err != nil {
					mu.Lock()
					fail = err
					mu.Unlock()
					return
				}
			}
		}(c)
	}
	pw.Wait()
	cw.Wait()
	if fail != nil {
		t.Fatal(fail)
	}
	if total != parts*perPart {
		t.Fatalf("delivered %d of %d", total, parts*perPart)
	}
	for p := 0; p < parts; p++ {
		if n := last[fmt.Sprintf("p%d", p)]; n != perPart {
			t.Fatalf("p%d ends at %d", p, n)
		}
	}
}

// A pop forwarded by a peer (its lease chosen there) takes part only as
// the peer asks: its ack with a PeerClaim takes the next claim under the
// lease the peer named, and the pop forwarded under that lease is
// answered with it. A pop of other parameters under that lease gets its
// own claim after the claim taken ahead was released (so the two never
// hold partitions under one id at once), and its ack succeeds.
func TestPrefetchForAPeer(t *testing.T) {
	b, url := startCombineBroker(t, true)
	b.pre.ttl = time.Hour // (released by the test's own steps only)
	ctx := context.Background()
	parts := []string{"p0", "p1", "p2", "p3", "p4", "p5"}
	last := warmQueue(t, b, "q", parts...)
	for _, p := range parts {
		pushSeq(t, b, "q", p, 2, 10)
	}
	const l1, l2, l3, l4 = "6f1f1c9e-0000-4000-8000-0000000000a1", "6f1f1c9e-0000-4000-8000-0000000000a2",
		"6f1f1c9e-0000-4000-8000-0000000000a3", "6f1f1c9e-0000-4000-8000-0000000000a4"
	ackPeer := func(res *PopResult, peers []PeerClaim) {
		t.Helper()
		items := make([]AckItem, len(res.Messages))
		for k, m := range res.Messages {
			items[k] = AckItem{TransactionID: m.TransactionID, PartitionID: m.PartitionID, LeaseID: res.LeaseID}
		}
		out, err := b.AckPeer(ctx, "t", items, peers)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range out {
			if !a.Success {
				t.Fatalf("ack refused: %+v", a)
			}
		}
	}
	res, err := b.Pop(ctx, "t", PopRequest{Queue: "q", Batch: 5, LeaseID: l1})
	if err != nil || res == nil || res.LeaseID != l1 {
		t.Fatalf("pop: %+v %v", res, err)
	}
	deliveredInOrder(t, last, res)
	// A plain ack of a peer's pop takes nothing ahead.
	ackPeer(res, nil)
	if b.pre.waiting() != 0 {
		t.Fatal("a claim was taken ahead for a peer that did not ask")
	}
	res, err = b.Pop(ctx, "t", PopRequest{Queue: "q", Batch: 5, LeaseID: l2})
	if err != nil || res == nil {
		t.Fatalf("pop: %+v %v", res, err)
	}
	deliveredInOrder(t, last, res)
	ackPeer(res, []PeerClaim{{AckedLease: l2, NextLease: l3}})
	pollUntil(t, 5*time.Second, "the claim taken ahead", func() bool { return b.pre.idle() && b.pre.waiting() == 1 })
	// An own pop of the same line does not take the peer's claim.
	if r, err := b.Pop(ctx, "t", PopRequest{Queue: "q", Batch: 5}); err != nil || b.stats.PrefetchServed.Load() != 0 {
		t.Fatalf("own pop: %+v %v, served %d", r, err, b.stats.PrefetchServed.Load())
	} else if r != nil {
		b.ReleaseUndelivered("t", r) // (not delivered: not in last)
	}
	res, err = b.Pop(ctx, "t", PopRequest{Queue: "q", Batch: 5, LeaseID: l3})
	if err != nil || res == nil || res.LeaseID != l3 || b.stats.PrefetchServed.Load() != 1 {
		t.Fatalf("the peer's pop under the lease it asked for: %+v %v, served %d", res, err, b.stats.PrefetchServed.Load())
	}
	deliveredInOrder(t, last, res)
	ackPeer(res, []PeerClaim{{AckedLease: l3, NextLease: l4}})
	pollUntil(t, 5*time.Second, "the claim taken ahead", func() bool { return b.pre.idle() && b.pre.waiting() >= 1 })
	// Under l4, with another batch size: its own claim, after the release.
	res, err = b.Pop(ctx, "t", PopRequest{Queue: "q", Batch: 2, LeaseID: l4})
	if err != nil || res == nil || res.LeaseID != l4 || len(res.Messages) != 2 {
		t.Fatalf("pop of another line under l4: %+v %v", res, err)
	}
	if b.stats.PrefetchReleased.Load() != 1 {
		t.Fatalf("released %d", b.stats.PrefetchReleased.Load())
	}
	deliveredInOrder(t, last, res)
	// A late ack (a retry, or one overtaken by its client's next pop)
	// naming l4, under which a pop came, takes nothing ahead.
	ackPeer(res, []PeerClaim{{AckedLease: l4, NextLease: l4}})
	if b.pre.waiting() != 0 {
		t.Fatal("a claim was taken ahead under a lease a pop already came under")
	}
	pollUntil(t, 5*time.Second, "no lease left", func() bool { return leasedRows(t, url) == 0 })
}

// The release of a claim taken ahead ends its own partitions only: a
// pop forwarded under the same lease id (at a new owner, or after the
// claim was given up) keeps its claim.
func TestPrefetchReleaseEndsOnlyItsPartitions(t *testing.T) {
	b, url := startCombineBroker(t, true)
	ctx := context.Background()
	warmQueue(t, b, "q", "p0", "p1")
	pushSeq(t, b, "q", "p0", 2, 3)
	pushSeq(t, b, "q", "p1", 2, 3)
	const lease = "6f1f1c9e-0000-4000-8000-0000000000d1"
	key, _ := prefetchKeyOf(b.popArgs("t", PopRequest{Queue: "q", Batch: 5}))
	claim := func(part string) *PopResult {
		args := key.args("popcombine")
		args.LeaseID, args.Names = lease, []string{part}
		out, err := b.claim(ctx, args)
		if err != nil || len(out.Messages) != 3 {
			t.Fatalf("claim %s: %v %v", part, out, err)
		}
		return b.buildPopResult(args, out)
	}
	e := b.pre.add(key, prefetchKey{peerLease: lease}, lease)
	b.pre.settle(e, claim("p0"))
	b.pre.wg.Done()
	other := claim("p1") // another claim under the same id
	b.pre.expire(e)
	if n := leasedRows(t, url); n != 1 {
		t.Fatalf("%d leased rows after the release, want p1's", n)
	}
	if err := ackServed(ctx, b, other); err != nil {
		t.Fatalf("the other claim's ack: %v", err)
	}
}
