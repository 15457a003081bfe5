package broker_test

import (
	"context"
	"fmt"
	"math/rand"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"queen-node/internal/nodetest"
)

// Issue scenario: push 3, pop batch=3, ack message 3 completed and message 1
// failed in one batch. Message 1 (failed) and message 2 (never acked) must
// come back; message 3 must not.
func TestAckLaterCompletedDoesNotDropFailed(t *testing.T) {
	for _, single := range []bool{false, true} {
		t.Run(fmt.Sprint("single=", single), func(t *testing.T) {
			n := nodetest.Start(t)
			q := "ackorder"
			push(t, n, q, "Default", "m1", "m2", "m3")
			ms, _ := pop(t, n, q, "batch=3")
			if len(ms) != 3 {
				t.Fatalf("popped %d", len(ms))
			}
			items := []ackItem{{pos: 2, status: "completed", lease: ms[2]["leaseId"].(string)},
				{pos: 0, status: "failed", lease: ms[0]["leaseId"].(string)}}
			ids := func(it ackItem) (string, string) {
				return ms[it.pos]["transactionId"].(string), ms[it.pos]["partitionId"].(string)
			}
			var got []ackWant
			if single {
				for _, it := range items {
					got = append(got, sendAcks(t, n, "", []ackItem{it}, ids, true)...)
				}
			} else {
				got = sendAcks(t, n, "", items, ids, false)
			}
			for i, g := range got {
				if !g.success {
					t.Fatalf("ack %d: %+v", i, g)
				}
			}
			again, _ := pop(t, n, q, "batch=10")
			if fmt.Sprint(payloads(again)) != "[m1 m2]" {
				t.Fatalf("after a failed m1 and a completed m3, the next pop got %v, want [m1 m2]", payloads(again))
			}
			// Completing the redelivered pair closes the gap: the cursor
			// passes m3 too, and the queue is empty.
			for _, r := range ackAll(t, n, "", "completed", again) {
				if r["success"] != true || r["leaseReleased"] != true {
					t.Fatalf("%v", r)
				}
			}
			if rest, _ := pop(t, n, q, "batch=10"); rest != nil {
				t.Fatalf("queue should be empty, got %v", payloads(rest))
			}
		})
	}
}

// Remembered acks past a gap: an autoAck pop skips them and its cursor
// passes them; a seek forgets them.
func TestAckGapWithAutoAckAndSeek(t *testing.T) {
	n := nodetest.Start(t)
	q := "ackgap"
	push(t, n, q, "Default", "m1", "m2", "m3", "m4")
	gap := func(group string) {
		ms, _ := pop(t, n, q, "batch=4&consumerGroup="+group)
		items := []ackItem{{pos: 0, status: "failed", lease: ms[0]["leaseId"].(string)},
			{pos: 2, status: "completed", lease: ms[2]["leaseId"].(string)},
			{pos: 3, status: "completed", lease: ms[3]["leaseId"].(string)}}
		sendAcks(t, n, group, items, func(it ackItem) (string, string) {
			return ms[it.pos]["transactionId"].(string), ms[it.pos]["partitionId"].(string)
		}, false)
	}
	gap("auto")
	ms, _ := pop(t, n, q, "batch=10&autoAck=true&consumerGroup=auto")
	if fmt.Sprint(payloads(ms)) != "[m1 m2]" {
		t.Fatalf("autoAck pop after the gap: %v", payloads(ms))
	}
	if rest, _ := pop(t, n, q, "batch=10&consumerGroup=auto"); rest != nil {
		t.Fatalf("the autoAck pop must pass the remembered acks, got %v", payloads(rest))
	}

	gap("seek")
	r := n.Do(t, "POST", "/api/v1/consumer-groups/seek/queues/"+q+"/seek", msg{"timestamp": "2000-01-01T00:00:00Z"})
	if r.Status != 200 {
		t.Fatalf("seek: %d %s", r.Status, r.Body)
	}
	ms, _ = pop(t, n, q, "batch=10&consumerGroup=seek")
	if fmt.Sprint(payloads(ms)) != "[m1 m2 m3 m4]" {
		t.Fatalf("after a seek to the start: %v", payloads(ms))
	}
}

// A completed ack repeated with the same lease after it committed (a client
// retrying after a lost answer) succeeds, for a single ack and a batch.
func TestAckRetriedCompletedSucceeds(t *testing.T) {
	n := nodetest.Start(t)
	q := "ackretry"
	push(t, n, q, "Default", "a", "b")
	ms, _ := pop(t, n, q, "batch=2")
	first := ackAll(t, n, "", "completed", ms)
	if first[0]["success"] != true || first[1]["leaseReleased"] != true {
		t.Fatalf("%v", first)
	}
	for _, r := range ackAll(t, n, "", "completed", ms) {
		if r["success"] != true || r["error"] != nil {
			t.Fatalf("a repeated completed ack must succeed: %v", r)
		}
	}
	one := n.Do(t, "POST", "/api/v1/ack", msg{"transactionId": ms[0]["transactionId"],
		"partitionId": ms[0]["partitionId"], "leaseId": ms[0]["leaseId"], "status": "completed"}).Arr(t)
	if one[0]["success"] != true {
		t.Fatalf("a repeated single completed ack must succeed: %v", one)
	}
	// A failed ack for the released lease still says so (docs/api.md).
	if r := ackAll(t, n, "", "failed", ms[:1]); r[0]["error"] != "Invalid or expired lease" {
		t.Fatalf("%v", r)
	}
}

// Many consumers ack batches in random order with mixed statuses, some
// requests repeated, while producers push: every message ends completed or
// dead-lettered, none completed is delivered again, no request fails.
func TestAckRandomOrderUnderLoad(t *testing.T) {
	n := nodetest.Start(t)
	q := "ackload"
	configure(t, n, q, msg{"retryLimit": 2})
	const producers, perProducer, consumers, parts = 2, 600, 4, 6
	total := producers * perProducer

	var mu sync.Mutex
	completedAt := map[string]time.Time{} // txid -> when its completed ack answered
	failedAcked := map[string]bool{}
	dlq := map[string]bool{}
	var refused atomic.Int64 // items answered success:false (a released lease)
	var resolved atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var firstErr error
	var errOnce sync.Once
	fail := func(err error) { errOnce.Do(func() { firstErr = err; cancel() }) }

	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(p)))
			for i := 0; i < perProducer; i += 20 {
				items := make([]msg, 20)
				for j := range items {
					items[j] = msg{"queue": q, "partition": fmt.Sprint("p", rng.Intn(parts)),
						"transactionId": fmt.Sprintf("P%d-%d", p, i+j), "payload": i + j}
				}
				r := n.DoCtx(ctx, t, "POST", "/api/v1/push", msg{"items": items})
				if r.Status != 201 {
					fail(fmt.Errorf("push: %d %s", r.Status, r.Body))
					return
				}
			}
		}(p)
	}
	for c := 0; c < consumers; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(100 + c)))
			for resolved.Load() < int64(total) {
				if ctx.Err() != nil {
					fail(fmt.Errorf("consumer %d: %d of %d resolved before the deadline", c, resolved.Load(), total))
					return
				}
				start := time.Now()
				r := n.DoCtx(ctx, t, "GET", "/api/v1/pop/queue/"+q+"?batch=10&wait=true&timeout=200", nil)
				if r.Status == 204 {
					continue
				}
				if r.Status != 200 {
					if ctx.Err() != nil {
						fail(fmt.Errorf("%d of %d messages resolved before the deadline", resolved.Load(), total))
					}
					fail(fmt.Errorf("pop: %d %s", r.Status, r.Body))
					return
				}
				var ms []msg
				for _, m := range r.Obj(t)["messages"].([]any) {
					ms = append(ms, m.(map[string]any))
				}
				mu.Lock()
				for _, m := range ms {
					tx := m["transactionId"].(string)
					if at, ok := completedAt[tx]; ok && at.Before(start) {
						mu.Unlock()
						fail(fmt.Errorf("%s delivered again by a pop that started after its completed ack", tx))
						return
					}
				}
				mu.Unlock()
				items := make([]ackItem, len(ms))
				for i := range ms {
					items[i] = ackItem{pos: i, status: "completed", lease: ms[i]["leaseId"].(string)}
					if rng.Intn(10) == 0 {
						items[i].status = "failed"
					}
				}
				rng.Shuffle(len(items), func(i, j int) { items[i], items[j] = items[j], items[i] })
				if rng.Intn(5) == 0 {
					items = append(items, items[rng.Intn(len(items))]) // a repeated item
				}
				ids := func(it ackItem) (string, string) {
					return ms[it.pos]["transactionId"].(string), ms[it.pos]["partitionId"].(string)
				}
				var reqs [][]ackItem
				if rng.Intn(2) == 0 {
					reqs = [][]ackItem{items}
				} else {
					cut := rng.Intn(len(items) + 1)
					reqs = [][]ackItem{items[:cut], items[cut:]}
				}
				for _, req := range reqs {
					got := sendAcks(t, n, "", req, ids, false)
					mu.Lock()
					for i, g := range got {
						tx, _ := ids(req[i])
						if g.success && req[i].status == "failed" {
							failedAcked[tx] = true
						}
						switch {
						case !g.success:
							refused.Add(1)
						case g.dlq:
							if !dlq[tx] {
								dlq[tx] = true
								resolved.Add(1)
							}
						case req[i].status == "completed":
							if _, ok := completedAt[tx]; !ok {
								completedAt[tx] = time.Now()
								resolved.Add(1)
							}
						}
					}
					mu.Unlock()
				}
			}
		}(c)
	}
	wg.Wait()
	if firstErr != nil {
		t.Fatal(firstErr)
	}
	if len(completedAt)+len(dlq) != total {
		t.Fatalf("%d completed + %d dead-lettered of %d", len(completedAt), len(dlq), total)
	}
	for tx := range dlq {
		if !failedAcked[tx] {
			t.Fatalf("%s dead-lettered without a failed ack", tx)
		}
		if _, ok := completedAt[tx]; ok {
			t.Fatalf("%s both completed and dead-lettered", tx)
		}
	}
	t.Logf("%d messages: %d completed, %d dead-lettered, %d failed acks, %d items refused (released lease)",
		total, len(completedAt), len(dlq), len(failedAcked), refused.Load())
}
