package pg_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"queen-node/pg"
)

// TestSampleQueuesOneNodePerRound: nodes racing for a queue-sampling round
// inside its gap take it once; the round's rows carry the change since the
// queue's previous row, and an unchanged queue without backlog writes none.
func TestSampleQueuesOneNodePerRound(t *testing.T) {
	db, _ := openDB(t)
	ctx := context.Background()
	pushN(t, db, "q", "p", 3) // before the cluster's first round: the baseline

	var wg sync.WaitGroup
	var mu sync.Mutex
	took := 0
	for _, node := range []string{"a", "b", "c", "d"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, _, err := db.SampleQueues(ctx, node, time.Hour)
			if err != nil {
				t.Error(err)
			}
			if ok {
				mu.Lock()
				took++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if took != 1 {
		t.Fatalf("%d nodes took the round, want 1", took)
	}

	// Forced rounds (gap 0): the backlog keeps a row coming; pushes show as deltas.
	pushN(t, db, "q", "p", 2)
	if ok, rows, err := db.SampleQueues(ctx, "a", 0); err != nil || !ok || rows != 1 {
		t.Fatalf("second round: took %v rows %d err %v", ok, rows, err)
	}
	ops, err := db.QueueOps(ctx, "t", pgQueueFilter("q"), pgRange(), true, 100)
	if err != nil {
		t.Fatal(err)
	}
	var pushed, pending int64
	for _, o := range ops {
		pushed += o.Pushed
		pending = max(pending, o.MaxPending)
	}
	if pushed != 2 || pending != 5 {
		t.Errorf("pushed %d pending %d over the rounds, want 2 (after the baseline) and 5: %+v", pushed, pending, ops)
	}
	// A queue created since the previous round counts its whole watermark.
	pushN(t, db, "q2", "p", 4)
	if _, _, err := db.SampleQueues(ctx, "b", 0); err != nil {
		t.Fatal(err)
	}
	ops, err = db.QueueOps(ctx, "t", pgQueueFilter("q2"), pgRange(), true, 100)
	if err != nil || len(ops) != 1 || ops[0].Pushed != 4 {
		t.Errorf("new queue's first round: %+v %v, want 4 pushed", ops, err)
	}
	if ops, _ := db.QueueOps(ctx, "other", pgQueueFilter(""), pgRange(), true, 100); len(ops) != 0 {
		t.Errorf("another tenant sees %+v", ops)
	}
}

func pgQueueFilter(q string) pg.StatusFilter { return pg.StatusFilter{Queue: q} }

func pgRange() pg.Range {
	return pg.Range{From: time.Now().Add(-time.Hour), To: time.Now().Add(time.Minute), Bucket: time.Minute}
}

// A sampling round covers the queues in pages of short statements: with a
// page of 2, seven queues with a backlog still get one row each, at the
// round's one time, and a second round in the gap takes nothing. The
// round's claim commits before its first page runs: a page blocked on a
// table lock leaves the round row free (one statement over every queue
// used to hold it, and its snapshot, for the whole round), while another
// round, even forced, still waits its turn.
func TestSampleQueuesInPages(t *testing.T) {
	db, url := openDB(t)
	ctx := context.Background()
	pg.SetSampleQueuePage(t, 2)
	for i := 0; i < 7; i++ {
		pushN(t, db, fmt.Sprint("pq", i), "p", 1+i)
	}
	took, rows, err := db.SampleQueues(ctx, "a", time.Hour)
	if err != nil || !took || rows != 7 {
		t.Fatalf("round: took %v rows %d err %v, want 7 rows", took, rows, err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n, times int
	var pending int64
	if err := conn.QueryRow(ctx, `SELECT count(*), count(DISTINCT sampled_at), sum(pending) FROM queen.queue_samples`).Scan(&n, &times, &pending); err != nil {
		t.Fatal(err)
	}
	if n != 7 || times != 1 || pending != 28 {
		t.Fatalf("%d samples at %d times with %d pending, want 7 at one time with 28", n, times, pending)
	}
	if took, _, err := db.SampleQueues(ctx, "b", time.Hour); err != nil || took {
		t.Fatalf("a second round inside the gap: took %v err %v", took, err)
	}
	// The round row is free while a forced round's pages run: block the
	// first page on a table lock, then take the round row without waiting.
	blocker, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Rollback(ctx)
	if _, err := blocker.Exec(ctx, `LOCK TABLE queen.queue_samples IN EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, _, err := db.SampleQueues(ctx, "c", 0)
		done <- err
	}()
	watch, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close(ctx)
	deadline := time.Now().Add(10 * time.Second)
	for {
		var waiting bool
		if err := watch.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock'
			AND query LIKE 'WITH f AS%' AND datname = current_database())`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the round's first page never waited on the table lock")
		}
		time.Sleep(10 * time.Millisecond)
	}
	tx, err := watch.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var one int
	err = tx.QueryRow(ctx, `SELECT 1 FROM queen.stats_rounds WHERE name = 'queues' FOR UPDATE NOWAIT`).Scan(&one)
	tx.Rollback(ctx)
	if err != nil {
		t.Fatalf("the round row is held while the round's pages run: %v", err)
	}
	// Yet rounds stay one at a time, even a forced one...
	if took, _, err := db.SampleQueues(ctx, "d", 0); err != nil || took {
		t.Fatalf("a round beside a running one: took %v err %v", took, err)
	}
	// ...and what keeps them so holds back no pruning: no session but the
	// blocker sits in an open transaction.
	var open int
	if err := watch.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
		AND state LIKE 'idle in transaction%' AND pid <> $1`, conn.PgConn().PID()).Scan(&open); err != nil {
		t.Fatal(err)
	}
	if open != 0 {
		t.Fatalf("%d sessions idle in a transaction while the round's page waits", open)
	}
	if err := blocker.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
