package broker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"queen-node/broker"
	"queen-node/internal/nodetest"
	"queen-node/protocol"
)

func casPush(t *testing.T, b *broker.Broker, queue, part string, n int, tag string) {
	t.Helper()
	items := make([]broker.PushItem, n)
	for i := range items {
		items[i] = broker.PushItem{Queue: queue, Partition: part, TransactionID: fmt.Sprintf("%s-%d", tag, i),
			Payload: json.RawMessage(`{}`)}
	}
	if _, err := b.Push(context.Background(), broker.DefaultTenant, nil, items); err != nil {
		t.Fatal(err)
	}
}

func casAckAll(res *broker.PopResult, lease string) []broker.AckItem {
	items := make([]broker.AckItem, len(res.Messages))
	for i, m := range res.Messages {
		items[i] = broker.AckItem{TransactionID: m.TransactionID, PartitionID: m.PartitionID,
			Group: res.ConsumerGroup, LeaseID: lease, Status: protocol.AckCompleted}
	}
	return items
}

// A lease that expired, its batch re-claimed by another consumer: the first
// consumer's ack of the whole batch (which this node remembers) must be
// refused as ack_v2 refuses it, not taken by the CAS; the second consumer's
// ack is the CAS's. The consumer row's batch end is the same for both
// claims, so only the lease id tells them apart.
func TestAckCASAfterExpiryReclaim(t *testing.T) {
	n := nodetest.Start(t)
	b := n.Broker
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, n.DBURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	casPush(t, b, "cas-expiry", "p", 5, "x")
	req := broker.PopRequest{Queue: "cas-expiry", Partition: "p", Batch: 5}
	first, err := b.Pop(ctx, broker.DefaultTenant, req)
	if err != nil || first == nil || len(first.Messages) != 5 {
		t.Fatalf("first pop: %+v %v", first, err)
	}
	expire := func(lease string) {
		if _, err := conn.Exec(ctx, `UPDATE queen.consumers SET lease_expires_at = clock_timestamp() - interval '1 second'
			WHERE lease_id = $1`, lease); err != nil {
			t.Fatal(err)
		}
	}
	expire(first.LeaseID)
	cas0 := b.Stats().AcksCAS.Load()
	// expired, not re-claimed yet: refused
	res, err := b.Ack(ctx, broker.DefaultTenant, casAckAll(first, first.LeaseID))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Success || r.Error != protocol.ErrInvalidLease {
			t.Fatalf("ack under an expired lease: %+v", r)
		}
	}
	second, err := b.Pop(ctx, broker.DefaultTenant, req)
	if err != nil || second == nil || len(second.Messages) != 5 {
		t.Fatalf("second pop: %+v %v", second, err)
	}
	// The first ack used up the node's memory of the first lease (one CAS
	// attempt per batch), so the stale-lease case takes a second one: its
	// lease expires, a third consumer re-claims the same batch, and the
	// second consumer's ack comes with its remembered, now stale, lease.
	expire(second.LeaseID)
	third, err := b.Pop(ctx, broker.DefaultTenant, req)
	if err != nil || third == nil || len(third.Messages) != 5 {
		t.Fatalf("third pop: %+v %v", third, err)
	}
	res, err = b.Ack(ctx, broker.DefaultTenant, casAckAll(second, second.LeaseID))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Success || r.Error != protocol.ErrInvalidLease {
			t.Fatalf("ack under a lease re-claimed by another consumer: %+v", r)
		}
	}
	if got := b.Stats().AcksCAS.Load() - cas0; got != 0 {
		t.Fatalf("%d items went through the CAS under dead leases", got)
	}
	res, err = b.Ack(ctx, broker.DefaultTenant, casAckAll(third, third.LeaseID))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if !r.Success || !r.LeaseReleased {
			t.Fatalf("ack under the live lease: %+v", r)
		}
	}
	if got := b.Stats().AcksCAS.Load() - cas0; got != 5 {
		t.Fatalf("%d items through the CAS, want 5", got)
	}
	var committed, last int64
	var lease *string
	if err := conn.QueryRow(ctx, `SELECT c.committed_offset, p.last_offset, c.lease_id FROM queen.consumers c
		JOIN queen.partitions p ON p.id = c.partition_id WHERE p.name = 'p'`).Scan(&committed, &last, &lease); err != nil {
		t.Fatal(err)
	}
	if committed != last || lease != nil {
		t.Fatalf("cursor %d of %d, lease %v", committed, last, lease)
	}
}

// A claim that skipped a message acked earlier past a gap, a prefix of the
// batch acked (the cursor passes the skipped one, so nothing is remembered
// past it), then the acked first message deleted as retention deletes
// completed messages: a repeated ack of the whole batch must tell "Message
// not found" for it, as ack_v2 does. The served messages still present
// plus the skipped one make as many as were served, so only the condition
// that nothing of the batch was resolved yet (committed_offset < first)
// keeps the CAS off.
func TestAckCASResolvedPrefixDeleted(t *testing.T) {
	n := nodetest.Start(t)
	b := n.Broker
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, n.DBURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	casPush(t, b, "cas-prefix", "p", 4, "y") // offsets 1..4: y-0..y-3
	var pid string
	if err := conn.QueryRow(ctx, `SELECT id::text FROM queen.partitions WHERE name = 'p'`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	// y-1 acked without a lease, past the unresolved y-0: remembered
	res, err := b.Ack(ctx, broker.DefaultTenant, []broker.AckItem{{TransactionID: "y-1", PartitionID: pid}})
	if err != nil || !res[0].Success {
		t.Fatalf("ack y-1: %+v %v", res, err)
	}
	pop, err := b.Pop(ctx, broker.DefaultTenant, broker.PopRequest{Queue: "cas-prefix", Partition: "p", Batch: 10})
	if err != nil || pop == nil || len(pop.Messages) != 3 {
		t.Fatalf("pop: %+v %v", pop, err)
	}
	// y-0 acked alone: the cursor passes y-0 and y-1
	res, err = b.Ack(ctx, broker.DefaultTenant, casAckAll(pop, pop.LeaseID)[:1])
	if err != nil || !res[0].Success {
		t.Fatalf("ack y-0: %+v %v", res, err)
	}
	if _, err := conn.Exec(ctx, `DELETE FROM queen.messages WHERE transaction_id = 'y-0'`); err != nil {
		t.Fatal(err)
	}
	res, err = b.Ack(ctx, broker.DefaultTenant, casAckAll(pop, pop.LeaseID))
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Success || res[0].Error != protocol.ErrMessageNotFound {
		t.Fatalf("ack of a deleted message: %+v", res[0])
	}
	for _, r := range res[1:] {
		if !r.Success || !r.LeaseReleased {
			t.Fatalf("ack: %+v", r)
		}
	}
}

// Many consumers on two broker instances sharing the database pop
// overlapping partitions and ack whole batches at once (some in two
// requests, a part then the rest, which takes the general path): every
// message is delivered exactly once, every ack succeeds and releases its
// lease, and the cursors end at the watermarks.
func TestAckCASConcurrent(t *testing.T) {
	n1 := nodetest.Start(t)
	n2 := nodetest.StartOn(t, n1.DBURL)
	ctx := context.Background()
	const parts, per, consumers = 6, 150, 8
	queue := "cas-conc"
	configure(t, n1, queue, msg{"leaseTime": 600})
	for p := 0; p < parts; p++ {
		casPush(t, n1.Broker, queue, fmt.Sprint("p", p), per, fmt.Sprint("c", p))
	}
	var mu sync.Mutex
	delivered := map[string]int{}
	total := 0
	errs := make(chan error, consumers)
	deadline := time.Now().Add(60 * time.Second)
	var wg sync.WaitGroup
	for c := 0; c < consumers; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			b := []*broker.Broker{n1.Broker, n2.Broker}[c%2]
			for i := 0; ; i++ {
				mu.Lock()
				done := total >= parts*per
				mu.Unlock()
				if done {
					return
				}
				if time.Now().After(deadline) {
					errs <- fmt.Errorf("consumer %d: deadline with messages left", c)
					return
				}
				req := broker.PopRequest{Queue: queue, Batch: 5 + (c+i)%20, Partitions: 1 + i%2}
				if i%3 == 0 {
					req.Partition = fmt.Sprint("p", (c+i)%parts) // overlapping named pops too
					req.Partitions = 0
				}
				res, err := b.Pop(ctx, broker.DefaultTenant, req)
				if err != nil {
					errs <- fmt.Errorf("consumer %d: pop: %v", c, err)
					return
				}
				if res == nil {
					continue
				}
				mu.Lock()
				for _, m := range res.Messages {
					delivered[m.TransactionID]++
				}
				mu.Unlock()
				items := casAckAll(res, res.LeaseID)
				reqs := [][]broker.AckItem{items}
				if i%4 == 1 && len(items) > 1 {
					reqs = [][]broker.AckItem{items[:len(items)/2], items[len(items)/2:]}
				}
				for _, r := range reqs {
					out, err := b.Ack(ctx, broker.DefaultTenant, r)
					if err != nil {
						errs <- fmt.Errorf("consumer %d: ack: %v", c, err)
						return
					}
					for _, o := range out {
						if !o.Success {
							errs <- fmt.Errorf("consumer %d: ack refused: %+v", c, o)
							return
						}
					}
				}
				mu.Lock()
				total += len(items)
				mu.Unlock()
			}
		}(c)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(delivered) != parts*per {
		t.Fatalf("%d distinct messages delivered, want %d", len(delivered), parts*per)
	}
	for tx, k := range delivered {
		if k != 1 {
			t.Fatalf("%s delivered %d times", tx, k)
		}
	}
	conn, err := pgx.Connect(ctx, n1.DBURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var behind string
	if err := conn.QueryRow(ctx, `SELECT COALESCE(string_agg(p.name || ' ' || COALESCE(c.committed_offset::text, 'no cursor')
			|| '/' || p.last_offset || ' ' || COALESCE(c.lease_id, ''), ', '), '')
		FROM queen.partitions p
		LEFT JOIN queen.consumers c ON c.partition_id = p.id
		WHERE p.last_offset > 0 AND (c.committed_offset IS DISTINCT FROM p.last_offset OR c.lease_id IS NOT NULL)`).Scan(&behind); err != nil {
		t.Fatal(err)
	}
	if behind != "" {
		t.Fatalf("cursors short of their watermark or still leased: %s", behind)
	}
	var cas, gen, flushes int64
	for _, nd := range []*nodetest.Node{n1, n2} {
		cas += nd.Broker.Stats().AcksCAS.Load()
		gen += nd.Broker.Stats().AcksGeneral.Load()
		flushes += nd.Broker.Stats().AckCASFlushes.Load()
	}
	t.Logf("%d items by CAS in %d flushes, %d by ack_v2", cas, flushes, gen)
	if cas == 0 || gen == 0 {
		t.Fatalf("both paths must run: %d CAS, %d general", cas, gen)
	}
}

// While the node's CAS flush is in flight (held up here by a table lock),
// more acks wait and then go together in one flush, and one whose client
// left meanwhile is skipped: its batch stays leased.
func TestAckCASMerges(t *testing.T) {
	n := nodetest.Start(t)
	b := n.Broker
	ctx := context.Background()
	const parts = 8
	queue := "cas-merge"
	configure(t, n, queue, msg{"leaseTime": 600})
	pops := make([]*broker.PopResult, parts)
	for p := range pops {
		part := fmt.Sprint("p", p)
		casPush(t, b, queue, part, 5, part)
		res, err := b.Pop(ctx, broker.DefaultTenant, broker.PopRequest{Queue: queue, Partition: part, Batch: 5})
		if err != nil || res == nil || len(res.Messages) != 5 {
			t.Fatalf("pop %s: %+v %v", part, res, err)
		}
		pops[p] = res
	}
	conn, err := pgx.Connect(ctx, n.DBURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	// A row lock no longer holds a flush up (TestAckCASSkipsAHeldRow): a
	// table lock does.
	if _, err := tx.Exec(ctx, `LOCK TABLE queen.partitions IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	flushes0, cas0 := b.Stats().AckCASFlushes.Load(), b.Stats().AcksCAS.Load()
	type answer struct {
		p   int
		res []broker.AckResult
		err error
	}
	answers := make(chan answer, parts)
	ack := func(ctx context.Context, p int) {
		res, err := b.Ack(ctx, broker.DefaultTenant, casAckAll(pops[p], pops[p].LeaseID))
		answers <- answer{p, res, err}
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(time.Millisecond) // polling, not synchronisation
		}
	}
	go ack(ctx, 0)
	waitFor("the first flush", func() bool { return b.Stats().AckCASFlushes.Load()-flushes0 == 1 })
	gone, cancel := context.WithCancel(ctx)
	defer cancel()
	go ack(gone, 2)
	for p := 1; p < parts; p++ {
		if p != 2 {
			go ack(ctx, p)
		}
	}
	waitFor("seven waiting acks", func() bool { return broker.AckCASPending(b) == parts-1 })
	if got := b.Stats().AckCASFlushes.Load() - flushes0; got != 1 {
		t.Fatalf("%d flushes in flight, want 1", got)
	}
	cancel()
	a := <-answers
	if a.p != 2 || a.err == nil {
		t.Fatalf("the first answer is %+v, want the cancelled ack's error", a)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < parts-1; i++ {
		a := <-answers
		if a.err != nil {
			t.Fatalf("ack %d: %v", a.p, a.err)
		}
		for _, r := range a.res {
			if !r.Success || !r.LeaseReleased {
				t.Fatalf("ack %d: %+v", a.p, r)
			}
		}
	}
	if got := b.Stats().AckCASFlushes.Load() - flushes0; got != 2 {
		t.Fatalf("%d flushes, want 2 (one held up, then the six waiting ones together)", got)
	}
	if got := b.Stats().AcksCAS.Load() - cas0; got != (parts-1)*5 {
		t.Fatalf("%d items by CAS, want %d", got, (parts-1)*5)
	}
	var lease *string
	if err := conn.QueryRow(ctx, `SELECT c.lease_id FROM queen.consumers c JOIN queen.partitions p ON p.id = c.partition_id
		WHERE p.name = 'p2'`).Scan(&lease); err != nil {
		t.Fatal(err)
	}
	if lease == nil || *lease != pops[2].LeaseID {
		t.Fatalf("the cancelled ack's batch: lease %v, want still %s", lease, pops[2].LeaseID)
	}
}

// A consumer row another transaction holds does not hold up the CAS: the
// statement skips it, and its pair takes the general path, which waits for
// it alone. One request acks two batches, p0's row held: p1's batch must be
// resolved while p0's row is still held (waiting for the lock, the flush
// would resolve neither until its bound, and the general path, one
// transaction, neither until the lock ends), then p0's once it is free.
func TestAckCASSkipsAHeldRow(t *testing.T) {
	n := nodetest.Start(t)
	b := n.Broker
	ctx := context.Background()
	queue := "cas-held"
	configure(t, n, queue, msg{"leaseTime": 600})
	var items []broker.AckItem
	for p := 0; p < 2; p++ {
		part := fmt.Sprint("p", p)
		casPush(t, b, queue, part, 5, part)
		res, err := b.Pop(ctx, broker.DefaultTenant, broker.PopRequest{Queue: queue, Partition: part, Batch: 5})
		if err != nil || res == nil || len(res.Messages) != 5 {
			t.Fatalf("pop %s: %+v %v", part, res, err)
		}
		items = append(items, casAckAll(res, res.LeaseID)...)
	}
	conn, err := pgx.Connect(ctx, n.DBURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	look, err := pgx.Connect(ctx, n.DBURL)
	if err != nil {
		t.Fatal(err)
	}
	defer look.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM queen.consumers c JOIN queen.partitions p ON p.id = c.partition_id
		JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1 AND p.name = 'p0' FOR UPDATE OF c`, queue); err != nil {
		t.Fatal(err)
	}
	cas0, gen0 := b.Stats().AcksCAS.Load(), b.Stats().AcksGeneral.Load()
	type answer struct {
		res []broker.AckResult
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := b.Ack(ctx, broker.DefaultTenant, items)
		done <- answer{res, err}
	}()
	resolved := func(part string) bool {
		var lease *string
		if err := look.QueryRow(ctx, `SELECT c.lease_id FROM queen.consumers c JOIN queen.partitions p ON p.id = c.partition_id
			JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1 AND p.name = $2`, queue, part).Scan(&lease); err != nil {
			t.Fatal(err)
		}
		return lease == nil
	}
	for deadline := time.Now().Add(10 * time.Second); !resolved("p1"); {
		if time.Now().After(deadline) {
			t.Fatal("p1's batch was not resolved while p0's row was held")
		}
		time.Sleep(time.Millisecond) // polling, not synchronisation
	}
	select {
	case a := <-done:
		t.Fatalf("the ack was answered while p0's row was held: %+v %v", a.res, a.err)
	default:
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	a := <-done
	if a.err != nil {
		t.Fatal(a.err)
	}
	for _, r := range a.res {
		if !r.Success || !r.LeaseReleased {
			t.Fatalf("ack: %+v", r)
		}
	}
	if !resolved("p0") {
		t.Fatal("p0's batch still leased")
	}
	if cas, gen := b.Stats().AcksCAS.Load()-cas0, b.Stats().AcksGeneral.Load()-gen0; cas != 5 || gen != 5 {
		t.Fatalf("%d items by CAS and %d by the general path, want 5 and 5", cas, gen)
	}
}
