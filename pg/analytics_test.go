package pg_test

import (
	"context"
	"sync"
	"testing"
	"time"

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
