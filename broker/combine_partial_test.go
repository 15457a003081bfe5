package broker

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"queen-node/pg"
	"queen-node/protocol"
)

// A combined flush whose first transaction (the fast push) commits some
// rows while its second (rows deferred once, waiting for a partition that
// stays held past the flush's bound) fails: the committed rows must be
// handed on like any commit (counted, marked, hinted) and answered, even
// when their client has left, and only the failed rows replayed. Before
// pg.PartialPushError the combiner took the error for "nothing stored" and
// replayed both pushes; the one whose client had left failed its replay,
// so its stored row was never counted or marked.
func TestPushFlushPartialFailure(t *testing.T) {
	b, url := startCombineBroker(t, false)
	ctx := context.Background()
	pushSeq(t, b, "pf", "a", 0, 1) // the node learns both partition ids
	pushSeq(t, b, "pf", "b", 0, 1)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	hold, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Rollback(ctx)
	if _, err := hold.Exec(ctx, `SELECT 1 FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
		WHERE q.name = 'pf' AND p.name = 'a' FOR NO KEY UPDATE OF p`); err != nil {
		t.Fatal(err)
	}
	row := func(part, tx, id string) pg.PushRow {
		return pg.PushRow{Queue: "pf", Partition: part, TxID: tx, ID: id, Payload: `{}`}
	}
	xctx, xcancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer xcancel()
	// X's row was deferred once: this flush must wait for partition a.
	x := &pushReq{ctx: xctx, rows: []pg.PushRow{row("a", "a1", "0190a0b0-0000-7000-8000-00000000a001")},
		done: make(chan struct{}), left: []int{0}}
	// Y's client has left, after the flusher took its push.
	yctx, ycancel := context.WithCancel(ctx)
	ycancel()
	y := &pushReq{ctx: yctx, rows: []pg.PushRow{row("b", "b1", "0190a0b0-0000-7000-8000-00000000b001")},
		done: make(chan struct{})}
	before := b.stats.PushedItems.Load()
	b.push.lanes[0].flush("t", []*pushReq{x, y}) // any lane: flush writes what it is given
	<-y.done
	<-x.done
	if y.err != nil || len(y.outs) != 1 || y.outs[0].Status != protocol.PushQueued {
		t.Fatalf("Y (stored by the first transaction): %+v, %v; want queued", y.outs, y.err)
	}
	if x.err == nil {
		t.Fatalf("X (partition held throughout): answered %+v, want an error", x.outs)
	}
	if got := b.stats.PushedItems.Load() - before; got != 1 {
		t.Fatalf("pushed_messages counted %d rows of the flush, want 1 (Y's)", got)
	}
	var b1, a1 int
	if err := conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE transaction_id = 'b1'), count(*) FILTER (WHERE transaction_id = 'a1')
		FROM queen.messages`).Scan(&b1, &a1); err != nil {
		t.Fatal(err)
	}
	if b1 != 1 || a1 != 0 {
		t.Fatalf("stored b1 %d times, a1 %d times; want 1 and 0", b1, a1)
	}
}
