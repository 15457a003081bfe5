package broker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"queen-node/broker"
	"queen-node/internal/nodetest"
)

// A combined flush does not wait for a partition another transaction holds
// (another node's flush): the push's other partitions commit at once, the
// held one's rows are sent again by the next flush once the holder is gone,
// and a later push to that partition still comes after them. One push lane:
// the test is about one flight's deferrals (lanes: pushlanes_test.go).
func TestCombinerDefersHeldPartition(t *testing.T) {
	n := nodetest.Start(t, func(c *broker.Config) { c.PushCombine, c.PushLanes = true, 1 })
	b := n.Broker
	ctx := context.Background()
	const q = "held"
	item := func(part, tx string) broker.PushItem {
		return broker.PushItem{Queue: q, Partition: part, TransactionID: tx, Payload: json.RawMessage(`{}`)}
	}
	if _, err := b.Push(ctx, broker.DefaultTenant, nil, []broker.PushItem{item("a", "a0"), item("b", "b0")}); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, n.DBURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	holder, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(ctx)
	if _, err := holder.Exec(ctx, `SELECT 1 FROM queen.partitions p JOIN queen.queues qu ON qu.id = p.queue_id
		WHERE qu.name = $1 AND p.name = 'a' FOR NO KEY UPDATE OF p`, q); err != nil {
		t.Fatal(err)
	}

	type answer struct {
		res []broker.PushResult
		err error
	}
	first := make(chan answer, 1)
	go func() {
		res, err := b.Push(ctx, broker.DefaultTenant, nil, []broker.PushItem{item("a", "a1"), item("b", "b1"), item("a", "a2")})
		first <- answer{res, err}
	}()
	reader, err := pgx.Connect(ctx, n.DBURL)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close(ctx)
	count := func(tx string) int {
		var c int
		if err := reader.QueryRow(ctx, `SELECT count(*) FROM queen.messages WHERE transaction_id = $1`, tx).Scan(&c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	deadline := time.Now().Add(10 * time.Second)
	for count("b1") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("partition b's row waited behind the held partition a")
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case a := <-first:
		t.Fatalf("push answered while partition a is held: %+v %v", a.res, a.err)
	default:
	}
	// (counted just after the flush's commit, which made b1 visible)
	for b.Snapshot().Requests.PushDeferred != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("deferred rows %d, want 2", b.Snapshot().Requests.PushDeferred)
		}
		time.Sleep(5 * time.Millisecond)
	}
	second := make(chan answer, 1)
	go func() {
		res, err := b.Push(ctx, broker.DefaultTenant, nil, []broker.PushItem{item("a", "a3")})
		second <- answer{res, err}
	}()
	// the second push waits in the queue, behind the first's deferred rows
	for !slices.Contains(b.PendingPushTxIDs(), "a3") {
		if time.Now().After(deadline) {
			t.Fatal("the second push never queued")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	for _, ch := range []chan answer{first, second} {
		a := <-ch
		if a.err != nil {
			t.Fatal(a.err)
		}
		for _, r := range a.res {
			if r.Status != "queued" {
				t.Fatalf("answer %+v", r)
			}
		}
	}
	rs, err := reader.Query(ctx, `SELECT m.off || ':' || m.transaction_id FROM queen.messages m
		JOIN queen.partitions p ON p.id = m.partition_id WHERE p.name = 'a' ORDER BY m.off`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rs, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "[1:a0 2:a1 3:a2 4:a3]" {
		t.Fatalf("partition a: %v", got)
	}
	// A push's wait for its flush is counted once, not again for the
	// flush that takes its deferred rest (broker/flushclock.go).
	if w := b.Snapshot().Requests.PushFlushTime.Waited; w != 3 {
		t.Fatalf("push waits counted %d, want 3 (the deferred rest not again)", w)
	}
}

// Three nodes' combiners push to the same partitions at once, each producer
// waiting for its push before the next, so flushes overlap and defer rows.
// Every message is stored exactly once, every push is answered queued, and
// each producer's messages keep their order within every partition.
func TestPushFlushesOfSeveralNodes(t *testing.T) {
	nodes := nodetest.StartCluster(t, 3, func(c *broker.Config) { c.PushCombine = true })
	ctx := context.Background()
	const producers, pushes, per, parts = 6, 30, 20, 8
	errs := make(chan error, producers)
	for p := 0; p < producers; p++ {
		go func(p int) {
			b := nodes[p%len(nodes)].Broker
			for i := 0; i < pushes; i++ {
				items := make([]broker.PushItem, per)
				for j := range items {
					items[j] = broker.PushItem{Queue: "several", Partition: fmt.Sprint("p", (i+j)%parts),
						TransactionID: fmt.Sprintf("%d-%05d", p, i*per+j), Payload: json.RawMessage(`{}`)}
				}
				res, err := b.Push(ctx, broker.DefaultTenant, nil, items)
				if err != nil {
					errs <- fmt.Errorf("producer %d push %d: %v", p, i, err)
					return
				}
				for j, r := range res {
					if r.Status != "queued" || r.TransactionID != items[j].TransactionID {
						errs <- fmt.Errorf("producer %d push %d item %d: %+v", p, i, j, r)
						return
					}
				}
			}
			errs <- nil
		}(p)
	}
	for p := 0; p < producers; p++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	conn, err := pgx.Connect(ctx, nodes[0].DBURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rs, err := conn.Query(ctx, `SELECT p.name, m.transaction_id FROM queen.messages m
		JOIN queen.partitions p ON p.id = m.partition_id ORDER BY p.name, m.off`)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	last := map[string]string{} // partition/producer -> last transaction id
	var part, tx string
	_, err = pgx.ForEachRow(rs, []any{&part, &tx}, func() error {
		if seen[tx] {
			return fmt.Errorf("%s stored twice", tx)
		}
		seen[tx] = true
		k := part + "/" + tx[:1]
		if last[k] >= tx {
			return fmt.Errorf("partition %s: %s after %s", part, tx, last[k])
		}
		last[k] = tx
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != producers*pushes*per {
		t.Fatalf("%d messages stored, want %d", len(seen), producers*pushes*per)
	}
	var deferred int64
	for _, n := range nodes {
		deferred += n.Broker.Snapshot().Requests.PushDeferred
	}
	t.Logf("rows deferred by a flush and sent with the next: %d", deferred)
	if deferred == 0 {
		// 18 overlapping producers never met: the test did not test deferral
		t.Fatal("no flush deferred a row: the nodes' flushes never overlapped")
	}
}
