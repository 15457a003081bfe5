package pg_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"queen-node/pg"
	"queen-node/protocol"
)

// The retention floor race (docs/api.md, "Retention"): a pass plans a
// partition's floor, then a new group's first pop provisions its cursor
// before every message and serves them, in one transaction still open when
// the delete batch runs. The batch must wait for that transaction and read
// the floor again: nothing the pop served is deleted, and the group's acks
// of it succeed. Before the fix the batch deleted all five messages under
// the pop.
func TestRetentionDoesNotDeleteUnderAFirstPop(t *testing.T) {
	db, url := openDB(t)
	ctx := context.Background()
	pushN(t, db, "rq", "p", 5)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// group "old" has consumed everything, and the dedup window is over
	old, err := db.Pop(ctx, pg.PopArgs{Tenant: "t", Queue: "rq", Group: "old", Names: []string{"p"}, Budget: 10, MaxParts: 1,
		AutoAck: true, Owner: "o", SubMode: protocol.SubAll})
	if err != nil || len(old.Messages) != 5 {
		t.Fatalf("old group's pop: %v %+v", err, old)
	}
	if _, err := conn.Exec(ctx, `UPDATE queen.queues SET dedup_window_seconds = 0`); err != nil {
		t.Fatal(err)
	}

	s, ok, err := db.TryRetentionLock(ctx, "n")
	if err != nil || !ok {
		t.Fatalf("retention lease: %v %v", ok, err)
	}
	defer s.Release()
	parts, err := s.RetentionPartitions(ctx, "", 10)
	if err != nil || len(parts) != 1 {
		t.Fatalf("plan: %v %+v", err, parts)
	}
	plan := parts[0]
	if !plan.Completes() || plan.Floor != 5 {
		t.Fatalf("plan: %+v, want a completed floor of 5", plan)
	}

	// group "new" pops for the first time, in a transaction left open
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lease := uuid.NewString()
	first, err := pg.PopTx(ctx, tx, pg.PopArgs{Tenant: "t", Queue: "rq", Group: "new", Names: []string{"p"}, Budget: 10,
		MaxParts: 1, LeaseID: lease, Owner: "o", SubMode: protocol.SubAll})
	if err != nil || len(first.Messages) != 5 {
		t.Fatalf("new group's first pop: %v %+v", err, first)
	}

	type result struct {
		b   pg.RetentionBatch
		err error
	}
	done := make(chan result, 1)
	go func() {
		b, err := s.RetentionDelete(ctx, &plan, plan.FirstOff-1, 100)
		done <- result{b, err}
	}()
	// The batch waits for the pop's transaction (a lock wait), or it has
	// already deleted: either shows within the deadline.
	watch, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close(ctx)
	deadline := time.Now().Add(10 * time.Second)
	for {
		var waiting bool
		if err := watch.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%FOR UPDATE%' AND datname = current_database())`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		select {
		case r := <-done:
			t.Fatalf("the delete batch did not wait for the first pop: %+v %v", r.b, r.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the delete batch neither waited nor finished")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.b.Completed != 0 {
		t.Fatalf("the batch deleted %d completed messages the first pop had served", r.b.Completed)
	}
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM queen.messages`).Scan(&n); err != nil || n != 5 {
		t.Fatalf("%d messages left, %v", n, err)
	}
	acks := make([]pg.AckRow, len(first.Messages))
	for i, m := range first.Messages {
		acks[i] = pg.AckRow{Group: "new", PartitionID: m.PartitionID, TxID: m.TxID, Status: "completed", LeaseID: lease}
	}
	outs, err := db.Ack(ctx, "t", acks)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range outs {
		if !o.Success {
			t.Fatalf("ack of a served message: %+v", o)
		}
	}
}

// A completed batch whose partition row stays locked past the bound ends
// the partition's turn in this pass, deleting nothing and failing nothing.
func TestRetentionSkipsAPartitionLockedTooLong(t *testing.T) {
	db, url := openDB(t)
	ctx := context.Background()
	pushN(t, db, "rl", "p", 3)
	if out, err := db.Pop(ctx, pg.PopArgs{Tenant: "t", Queue: "rl", Group: "g", Names: []string{"p"}, Budget: 10, MaxParts: 1,
		AutoAck: true, Owner: "o", SubMode: protocol.SubAll}); err != nil || len(out.Messages) != 3 {
		t.Fatalf("pop: %v %+v", err, out)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `UPDATE queen.queues SET dedup_window_seconds = 0`); err != nil {
		t.Fatal(err)
	}
	s, ok, err := db.TryRetentionLock(ctx, "n")
	if err != nil || !ok {
		t.Fatalf("retention lease: %v %v", ok, err)
	}
	defer s.Release()
	parts, err := s.RetentionPartitions(ctx, "", 10)
	if err != nil || len(parts) != 1 || !parts[0].Completes() {
		t.Fatalf("plan: %v %+v", err, parts)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM queen.partitions FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	b, err := s.RetentionDelete(ctx, &parts[0], parts[0].FirstOff-1, 100)
	if err != nil || !b.Young || b.Completed != 0 || b.Examined != 0 {
		t.Fatalf("batch under a held lock: %+v %v", b, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	b, err = s.RetentionDelete(ctx, &parts[0], parts[0].FirstOff-1, 100)
	if err != nil || b.Completed != 3 {
		t.Fatalf("batch once the lock is gone: %+v %v", b, err)
	}
}
