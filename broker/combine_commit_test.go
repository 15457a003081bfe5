package broker_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"queen-node/broker"
	"queen-node/internal/nodetest"
)

// A push whose client leaves while its held partition's rows are deferred:
// its other partition's rows committed with the first flush, and a pop
// parked on the queue must be woken for them although nobody waits for the
// push any more (the flusher marks what it commits, not the request).
func TestLeftPushStillWakesItsCommittedPartition(t *testing.T) {
	n := nodetest.Start(t, func(c *broker.Config) {
		c.PushCombine = true
		c.PushLanes = 1                      // a and b in one flush, as the test needs
		c.Hotlist.ReseedInterval = time.Hour // the floor must not be what delivers
		c.PopBackoffMin = 10 * time.Second   // nor the parked pop's own re-poll
		c.PopBackoffMax = 10 * time.Second
	})
	b := n.Broker
	ctx := context.Background()
	const q = "leftwake"
	item := func(part, tx string) broker.PushItem {
		return broker.PushItem{Queue: q, Partition: part, TransactionID: tx, Payload: json.RawMessage(`{}`)}
	}
	if _, err := b.Push(ctx, broker.DefaultTenant, nil, []broker.PushItem{item("a", "a0"), item("b", "b0")}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ { // consume a0 and b0: the ring is warm and empty
		if ms, _ := pop(t, n, q, "batch=10&consumerGroup=g&autoAck=true"); len(ms) != 1 {
			t.Fatalf("setup pop %d: %d messages", i, len(ms))
		}
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
	got := make(chan []msg, 1)
	go func() {
		ms, _ := pop(t, n, q, "batch=10&wait=true&timeout=8000&consumerGroup=g")
		got <- ms
	}()
	waitFor(t, 5*time.Second, "the pop to park", func() bool { return b.Parked() == 1 })
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := b.Push(pctx, broker.DefaultTenant, nil, []broker.PushItem{item("a", "a1"), item("b", "b1")})
		done <- err
	}()
	waitFor(t, 5*time.Second, "a1 to be deferred", func() bool { return b.Snapshot().Requests.PushDeferred > 0 })
	cancel() // the client leaves while a1 is deferred and b1 committed
	if err := <-done; err == nil {
		t.Fatal("the push answered although its client left before a1 was written")
	}
	start := time.Now()
	ms := <-got
	if len(ms) != 1 || ms[0]["transactionId"] != "b1" {
		t.Fatalf("the parked pop got %v after %v, want b1 at once", ms, time.Since(start))
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("the parked pop was woken for b1 only after %v", d)
	}
}
