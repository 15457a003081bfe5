package broker_test

// Tests of the broker through its Go API, without HTTP: what the api
// package relies on (result order, statuses, lease and retry rules, the
// long-poll wake) pinned at the layer that implements it.

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"queen-node/broker"
	"queen-node/internal/pgtest"
	"queen-node/reads"
)

// newBroker starts a broker on a fresh database, closed with the test.
func newBroker(t *testing.T, hot bool) *broker.Broker {
	t.Helper()
	cfg := broker.DefaultConfig()
	cfg.PG.URL = pgtest.NewDatabase(t)
	cfg.NodeName = "goapi"
	cfg.Maintenance.BufferDir = t.TempDir() // not the shared default under the OS temp dir
	cfg.Hotlist.Enabled = hot
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := broker.New(ctx, cfg, hclog.NewNullLogger())
	if err != nil {
		t.Fatalf("broker.New: %v", err)
	}
	t.Cleanup(b.Close)
	return b
}

func goItems(queue, partition string, txids ...string) []broker.PushItem {
	items := make([]broker.PushItem, len(txids))
	for i, tx := range txids {
		items[i] = broker.PushItem{Queue: queue, Partition: partition, TransactionID: tx,
			Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))}
	}
	return items
}

func TestGoAPIPushPopAck(t *testing.T) {
	for _, hot := range []bool{true, false} {
		t.Run(fmt.Sprintf("hotlist=%v", hot), func(t *testing.T) {
			b := newBroker(t, hot)
			ctx := context.Background()
			items := append(goItems("q", "p1", "a", "b", "c"), goItems("q", "p2", "d")...)
			res, err := b.Push(ctx, "t", nil, items)
			if err != nil {
				t.Fatal(err)
			}
			for i, r := range res {
				if r.Index != i || r.Status != "queued" || r.MessageID == "" || r.PartitionID == "" {
					t.Fatalf("push result %d: %+v", i, r)
				}
			}
			// The same transaction id in the same partition is a duplicate
			// carrying the original message id.
			dup, err := b.Push(ctx, "t", nil, goItems("q", "p1", "b"))
			if err != nil {
				t.Fatal(err)
			}
			if dup[0].Status != "duplicate" || dup[0].MessageID != res[1].MessageID {
				t.Fatalf("duplicate: %+v, original %+v", dup[0], res[1])
			}

			// Another tenant sees nothing of it.
			if pr, err := b.Pop(ctx, "other", broker.PopRequest{Queue: "q", Batch: 10}); err != nil || pr != nil {
				t.Fatalf("other tenant pop: %+v, %v", pr, err)
			}

			// A partition pop serves its messages in order, under one lease.
			pr, err := b.Pop(ctx, "t", broker.PopRequest{Queue: "q", Partition: "p1", Batch: 10})
			if err != nil || pr == nil {
				t.Fatalf("pop p1: %+v, %v", pr, err)
			}
			if len(pr.Messages) != 3 || pr.LeaseID == "" || pr.Partition != "p1" {
				t.Fatalf("pop p1: %+v", pr)
			}
			for i, m := range pr.Messages {
				if m.TransactionID != []string{"a", "b", "c"}[i] || m.LeaseID != pr.LeaseID || m.ConsumerGroup != broker.QueueMode {
					t.Fatalf("message %d: %+v", i, m)
				}
			}
			// While the lease lives, the partition gives nothing more.
			if again, err := b.Pop(ctx, "t", broker.PopRequest{Queue: "q", Partition: "p1", Batch: 10}); err != nil || again != nil {
				t.Fatalf("pop under a live lease: %+v, %v", again, err)
			}

			acks := make([]broker.AckItem, len(pr.Messages))
			for i, m := range pr.Messages {
				acks[i] = broker.AckItem{TransactionID: m.TransactionID, PartitionID: m.PartitionID, LeaseID: pr.LeaseID}
			}
			ar, err := b.Ack(ctx, "t", acks)
			if err != nil {
				t.Fatal(err)
			}
			for i, r := range ar {
				if r.Index != i || !r.Success || r.QueueName != "q" || r.PartitionName != "p1" || !r.LeaseReleased {
					t.Fatalf("ack result %d: %+v", i, r)
				}
			}
			// A retried completed ack (its answer lost) succeeds again.
			if again, err := b.Ack(ctx, "t", acks[:1]); err != nil || !again[0].Success {
				t.Fatalf("repeated ack: %+v, %v", again, err)
			}

			// The wildcard pop finds the other partition; then nothing is left.
			pr, err = b.Pop(ctx, "t", broker.PopRequest{Queue: "q", Batch: 10, AutoAck: true})
			if err != nil || pr == nil || len(pr.Messages) != 1 || pr.Messages[0].TransactionID != "d" || pr.LeaseID != "" {
				t.Fatalf("wildcard autoAck pop: %+v, %v", pr, err)
			}
			if pr, err := b.Pop(ctx, "t", broker.PopRequest{Queue: "q", Batch: 10}); err != nil || pr != nil {
				t.Fatalf("pop of a drained queue: %+v, %v", pr, err)
			}
		})
	}
}

// TestGoAPIFailedAckRetriesThenDeadLetters: a failed ack under the live
// lease redelivers with a higher retry count until the queue's retryLimit,
// then dead-letters the message and the cursor passes it.
func TestGoAPIFailedAckRetriesThenDeadLetters(t *testing.T) {
	b := newBroker(t, true)
	ctx := context.Background()
	opts := broker.DefaultQueueOptions()
	opts.RetryLimit = 2
	if _, err := b.Configure(ctx, "t", broker.ConfigureRequest{Queue: "r", Options: opts}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Push(ctx, "t", nil, goItems("r", "p", "x", "y")); err != nil {
		t.Fatal(err)
	}
	for attempt := 0; attempt <= opts.RetryLimit; attempt++ {
		pr, err := b.Pop(ctx, "t", broker.PopRequest{Queue: "r", Partition: "p", Batch: 1})
		if err != nil || pr == nil {
			t.Fatalf("attempt %d: pop %+v, %v", attempt, pr, err)
		}
		m := pr.Messages[0]
		if m.TransactionID != "x" || m.RetryCount != attempt {
			t.Fatalf("attempt %d: got %s with retryCount %d", attempt, m.TransactionID, m.RetryCount)
		}
		ar, err := b.Ack(ctx, "t", []broker.AckItem{{TransactionID: "x", PartitionID: m.PartitionID,
			Status: "failed", LeaseID: pr.LeaseID, Error: "boom"}})
		if err != nil || !ar[0].Success {
			t.Fatalf("attempt %d: ack %+v, %v", attempt, ar, err)
		}
		if wantDLQ := attempt == opts.RetryLimit; ar[0].DLQ != wantDLQ {
			t.Fatalf("attempt %d: dlq %v, want %v", attempt, ar[0].DLQ, wantDLQ)
		}
	}
	// Dead-lettered, so resolved: the next message comes next.
	pr, err := b.Pop(ctx, "t", broker.PopRequest{Queue: "r", Partition: "p", Batch: 10})
	if err != nil || pr == nil || len(pr.Messages) != 1 || pr.Messages[0].TransactionID != "y" {
		t.Fatalf("after the DLQ: %+v, %v", pr, err)
	}
	page, err := reads.New(b.Store(), "n", b, nil).ListDLQ(ctx, "t", reads.DLQQuery{Queue: "r", Limit: 10})
	if err != nil || page.Total != 1 || len(page.Entries) != 1 || page.Truncated {
		t.Fatalf("dlq: %+v, %v", page, err)
	}
	if e := page.Entries[0]; e.TransactionID != "x" || e.ErrorMessage != "boom" || e.RetryCount != opts.RetryLimit {
		t.Fatalf("dlq entry: %+v", e)
	}
}

// TestGoAPILongPollWakes: a parked pop returns the message a push brings,
// long before its timeout, on both pop paths.
func TestGoAPILongPollWakes(t *testing.T) {
	for _, hot := range []bool{true, false} {
		t.Run(fmt.Sprintf("hotlist=%v", hot), func(t *testing.T) {
			b := newBroker(t, hot)
			ctx := context.Background()
			// First contact registers the group, so the parked pop below
			// takes the path a running consumer takes.
			if pr, err := b.Pop(ctx, "t", broker.PopRequest{Queue: "w", Batch: 1}); err != nil || pr != nil {
				t.Fatalf("first pop: %+v, %v", pr, err)
			}
			type popped struct {
				res *broker.PopResult
				err error
				at  time.Time
			}
			done := make(chan popped, 1)
			go func() {
				res, err := b.Pop(ctx, "t", broker.PopRequest{Queue: "w", Batch: 5, Wait: true, Timeout: 20 * time.Second})
				done <- popped{res, err, time.Now()}
			}()
			// Push once the pop is parked (polled, not slept).
			deadline := time.Now().Add(10 * time.Second)
			for b.Parked() == 0 {
				if time.Now().After(deadline) {
					t.Fatal("the pop never parked")
				}
				time.Sleep(5 * time.Millisecond)
			}
			pushed := time.Now()
			if _, err := b.Push(ctx, "t", nil, goItems("w", "p", "m1")); err != nil {
				t.Fatal(err)
			}
			select {
			case p := <-done:
				if p.err != nil || p.res == nil || p.res.Messages[0].TransactionID != "m1" {
					t.Fatalf("woken pop: %+v, %v", p.res, p.err)
				}
				if waited := p.at.Sub(pushed); waited > 5*time.Second {
					t.Fatalf("the pop returned %v after the push: not woken by it", waited)
				}
			case <-time.After(15 * time.Second):
				t.Fatal("the parked pop did not return after the push")
			}
		})
	}
}

// TestGoAPICanceledPopLeavesNothingLeased: a pop whose context ends while
// it is parked returns the context's error and leases nothing.
func TestGoAPICanceledPopLeavesNothingLeased(t *testing.T) {
	b := newBroker(t, true)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := b.Pop(ctx, "t", broker.PopRequest{Queue: "c", Batch: 1, Wait: true, Timeout: time.Minute})
		errc <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for b.Parked() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the pop never parked")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("a canceled pop returned no error")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a canceled pop did not return")
	}
	bg := context.Background()
	if _, err := b.Push(bg, "t", nil, goItems("c", "p", "z")); err != nil {
		t.Fatal(err)
	}
	pr, err := b.Pop(bg, "t", broker.PopRequest{Queue: "c", Batch: 1})
	if err != nil || pr == nil || pr.Messages[0].TransactionID != "z" {
		t.Fatalf("pop after the cancel: %+v, %v", pr, err)
	}
}
