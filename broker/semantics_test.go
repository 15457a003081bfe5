package broker_test

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"queen-node/broker"
	"queen-node/internal/nodetest"
)

func testPushPopAckRoundTrip(t *testing.T, mode nodetest.Option) {
	n := nodetest.Start(t, mode)
	res := push(t, n, "orders", "Default", msg{"n": 1}, "two", nil, []any{1.50, 2})
	for i, r := range res {
		if r["status"] != "queued" || r["transactionId"] != r["transaction_id"] || r["message_id"] == nil || r["index"] != float64(i) {
			t.Fatalf("push result %d: %v", i, r)
		}
	}
	ms, body := pop(t, n, "orders", "batch=10")
	if len(ms) != 4 {
		t.Fatalf("want 4 messages, got %d", len(ms))
	}
	if got := payloads(ms); !reflect.DeepEqual(got, []any{msg{"n": 1.0}, "two", nil, []any{1.5, 2.0}}) {
		t.Fatalf("payloads %v", got)
	}
	for _, m := range ms {
		for _, f := range []string{"id", "transactionId", "partitionId", "leaseId", "queue", "partition", "createdAt", "consumerGroup"} {
			if s, _ := m[f].(string); s == "" {
				t.Fatalf("message field %s missing: %v", f, m)
			}
		}
		if m["leaseId"] != body["leaseId"] || m["consumerGroup"] != "__QUEUE_MODE__" {
			t.Fatalf("lease/group mismatch: %v vs %v", m, body)
		}
	}
	if body["success"] != true || body["partition"] != "Default" || body["partitionsClaimed"] != 1.0 {
		t.Fatalf("pop body %v", body)
	}
	for i, r := range ackAll(t, n, "", "completed", ms) {
		if r["success"] != true {
			t.Fatalf("ack %d: %v", i, r)
		}
	}
	if ms, _ := pop(t, n, "orders", "batch=10"); ms != nil {
		t.Fatalf("acked messages redelivered: %v", ms)
	}
}

func testPushDuplicates(t *testing.T, mode nodetest.Option) {
	n := nodetest.Start(t, mode)
	first := pushItems(t, n, []msg{{"queue": "q", "partition": "p1", "payload": 1, "transactionId": "dup"}})[0]
	res := pushItems(t, n, []msg{
		{"queue": "q", "partition": "p1", "payload": 2, "transactionId": "dup"},   // pre-existing
		{"queue": "q", "partition": "p2", "payload": 3, "transactionId": "dup"},   // other partition: new
		{"queue": "q", "partition": "p2", "payload": 4, "transactionId": "dup"},   // intra-batch duplicate
		{"queue": "q", "partition": "p1", "payload": 5, "transactionId": "fresh"}, // new
	})
	want := []string{"duplicate", "queued", "duplicate", "queued"}
	for i, r := range res {
		if r["status"] != want[i] {
			t.Fatalf("item %d: status %v, want %s", i, r["status"], want[i])
		}
	}
	if res[0]["message_id"] != first["message_id"] || res[2]["message_id"] != res[1]["message_id"] {
		t.Fatalf("duplicates must report the existing message id: %v / %v", first, res)
	}
}

func testConcurrentPushSameKeyQueuesOnce(t *testing.T, mode nodetest.Option) {
	n := nodetest.Start(t, mode)
	var wg sync.WaitGroup
	results := make([]msg, 8)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = pushItems(t, n, []msg{{"queue": "race", "partition": "Default", "payload": i, "transactionId": "same"}})[0]
		}()
	}
	wg.Wait()
	queued := 0
	var winner any
	for _, r := range results {
		if r["status"] == "queued" {
			queued++
			winner = r["message_id"]
		}
	}
	if queued != 1 {
		t.Fatalf("want exactly one queued, got %d: %v", queued, results)
	}
	for _, r := range results {
		if r["message_id"] != winner {
			t.Fatalf("duplicate reports %v, winner %v", r["message_id"], winner)
		}
	}
}

func testOrderWithinPartition(t *testing.T, mode nodetest.Option) {
	n := nodetest.Start(t, mode)
	want := 0
	for req := 0; req < 10; req++ {
		ps := make([]any, 10)
		for i := range ps {
			ps[i] = req*10 + i
		}
		push(t, n, "ordered", "p", ps...)
	}
	for want < 100 {
		ms, _ := pop(t, n, "ordered", "batch=7")
		for _, m := range ms {
			if m["data"] != float64(want) {
				t.Fatalf("got %v, want %d", m["data"], want)
			}
			want++
		}
		ackAll(t, n, "", "completed", ms)
	}
}

func testOneLeasePerPartitionAndGroup(t *testing.T, mode nodetest.Option) {
	n := nodetest.Start(t, mode)
	push(t, n, "lq", "p", 1, 2, 3)
	ms, _ := pop(t, n, "lq", "batch=1")
	if len(ms) != 1 {
		t.Fatalf("want 1, got %d", len(ms))
	}
	if again, _ := pop(t, n, "lq", "batch=1"); again != nil {
		t.Fatalf("second pop of the same group got %v while the partition is leased", again)
	}
	r := n.Do(t, "GET", "/api/v1/pop/queue/lq/partition/p?batch=1", nil)
	if r.Status != 204 {
		t.Fatalf("partition pop of a leased partition: %d %s", r.Status, r.Body)
	}
	// another group is independent
	if other, _ := pop(t, n, "lq", "batch=3&consumerGroup=g2"); len(other) != 3 {
		t.Fatalf("group g2 wants 3, got %d", len(other))
	}
	// releasing the lease by acking makes the rest available
	ackAll(t, n, "", "completed", ms)
	if rest, _ := pop(t, n, "lq", "batch=5"); len(rest) != 2 || rest[0]["data"] != 2.0 {
		t.Fatalf("after ack want [2 3], got %v", payloads(rest))
	}
}

func testLeaseExpiryRedelivers(t *testing.T, mode nodetest.Option) {
	n := nodetest.Start(t, mode)
	configure(t, n, "exp", msg{"leaseTime": 1})
	push(t, n, "exp", "Default", "x")
	first, _ := pop(t, n, "exp", "batch=1")
	start := time.Now()
	again := popUntil(t, n, "exp", "batch=1", 5*time.Second)
	if again[0]["transactionId"] != first[0]["transactionId"] {
		t.Fatalf("redelivered %v, want %v", again[0], first[0])
	}
	if time.Since(start) < 500*time.Millisecond {
		t.Fatalf("redelivered before the lease expired")
	}
	if again[0]["leaseId"] == first[0]["leaseId"] {
		t.Fatalf("redelivery must carry a new lease")
	}
	// the old lease can no longer ack
	r := ackAll(t, n, "", "completed", first)
	if r[0]["success"] != false || r[0]["error"] != "Invalid or expired lease" {
		t.Fatalf("ack with expired lease: %v", r[0])
	}
}

func testRetriesThenDeadLetter(t *testing.T, mode nodetest.Option) {
	n := nodetest.Start(t, mode)
	configure(t, n, "dlq", msg{"retryLimit": 2})
	push(t, n, "dlq", "Default", msg{"test": "dlq"})
	deliveries := 0
	for {
		ms, _ := pop(t, n, "dlq", "batch=1&consumerGroup=g")
		if ms == nil {
			break
		}
		deliveries++
		if deliveries > 5 {
			t.Fatal("never dead-lettered")
		}
		res := ackAll(t, n, "g", "failed", ms)
		if res[0]["success"] != true {
			t.Fatalf("failed ack refused: %v", res[0])
		}
		if dlq := res[0]["dlq"] == true; dlq != (deliveries == 3) {
			t.Fatalf("delivery %d: dlq=%v", deliveries, res[0]["dlq"])
		}
	}
	if deliveries != 3 {
		t.Fatalf("retryLimit 2: want 3 deliveries, got %d", deliveries)
	}
	r := n.Do(t, "GET", "/api/v1/dlq?queue=dlq&consumerGroup=g&limit=10", nil).Obj(t)
	if r["total"] != 1.0 {
		t.Fatalf("dlq total: %v", r)
	}
	e := r["messages"].([]any)[0].(map[string]any)
	if e["errorMessage"] != "failed on purpose" || !reflect.DeepEqual(e["data"], msg{"test": "dlq"}) || e["retryCount"] != 2.0 {
		t.Fatalf("dlq entry: %v", e)
	}
	// other groups are unaffected
	if ms, _ := pop(t, n, "dlq", "batch=1&consumerGroup=other"); len(ms) != 1 {
		t.Fatal("another group must still see the dead-lettered message")
	}
}

func testRetryLimitZeroDeadLettersFirstFailure(t *testing.T, mode nodetest.Option) {
	n := nodetest.Start(t, mode)
	configure(t, n, "z", msg{"retryLimit": 0})
	push(t, n, "z", "Default", 1)
	ms, _ := pop(t, n, "z", "batch=1")
	if res := ackAll(t, n, "", "failed", ms); res[0]["dlq"] != true {
		t.Fatalf("want dlq, got %v", res[0])
	}
	if again, _ := pop(t, n, "z", "batch=1"); again != nil {
		t.Fatalf("dead-lettered message redelivered")
	}
}

func testBatchFailureCountsOneRetry(t *testing.T, mode nodetest.Option) {
	n := nodetest.Start(t, mode)
	configure(t, n, "bf", msg{"retryLimit": 1})
	push(t, n, "bf", "Default", 1, 2, 3, 4, 5)
	ms, _ := pop(t, n, "bf", "batch=10")
	res := ackAll(t, n, "", "failed", ms)
	for _, r := range res {
		if r["success"] != true || r["dlq"] != false {
			t.Fatalf("first failed batch is one retry: %v", res)
		}
	}
	ms2, _ := pop(t, n, "bf", "batch=10")
	if len(ms2) != 5 || ms2[0]["retryCount"] != 1.0 {
		t.Fatalf("want all 5 redelivered with retryCount 1, got %d: %v", len(ms2), ms2)
	}
	for _, r := range ackAll(t, n, "", "failed", ms2) {
		if r["dlq"] != true {
			t.Fatalf("second failure must dead-letter every item: %v", r)
		}
	}
	if again, _ := pop(t, n, "bf", "batch=10"); again != nil {
		t.Fatal("nothing should remain")
	}
	// the counter reset: a new message gets its retry again
	push(t, n, "bf", "Default", 6)
	ms3, _ := pop(t, n, "bf", "batch=1")
	if r := ackAll(t, n, "", "failed", ms3); r[0]["dlq"] != false {
		t.Fatalf("retry counter was not reset after the DLQ move: %v", r[0])
	}
}

func testSubscriptionNewFixedAtFirstPop(t *testing.T, mode nodetest.Option) {
	n := nodetest.Start(t, mode)
	push(t, n, "sub", "Default", "old1", "old2")
	for _, q := range []string{"subscriptionMode=new", "subscriptionFrom=now"} {
		t.Run(q, func(t *testing.T) {
			group := "g-" + q[:15]
			done := make(chan []msg)
			go func() {
				ms, _ := pop(t, n, "sub", "batch=10&wait=true&timeout=5000&consumerGroup="+group+"&"+q)
				done <- ms
			}()
			time.Sleep(500 * time.Millisecond) // the scenario of the Go client tests: push later
			push(t, n, "sub", "Default", "new1", "new2")
			ms := <-done
			if got := payloads(ms); !reflect.DeepEqual(got, []any{"new1", "new2"}) {
				t.Fatalf("want exactly the 2 new messages, got %v", got)
			}
		})
	}
	// mode all (or from_beginning, or absent) sees history
	if ms, _ := pop(t, n, "sub", "batch=10&consumerGroup=all&subscriptionMode=from_beginning"); len(ms) < 2 || ms[0]["data"] != "old1" {
		t.Fatalf("mode all must start at the beginning: %v", payloads(ms))
	}
}

func testSubscriptionFromTimestamp(t *testing.T, mode nodetest.Option) {
	n := nodetest.Start(t, mode)
	push(t, n, "ts", "Default", "before")
	time.Sleep(20 * time.Millisecond)
	cut := time.Now().UTC().Format(time.RFC3339Nano)
	time.Sleep(20 * time.Millisecond)
	push(t, n, "ts", "Default", "after")
	push(t, n, "ts", "later-partition", "after2")
	ms, _ := pop(t, n, "ts", "batch=10&partitions=5&consumerGroup=g&subscriptionFrom="+cut)
	got := map[any]bool{}
	for _, m := range ms {
		got[m["data"]] = true
	}
	if got["before"] || !got["after"] || !got["after2"] {
		t.Fatalf("subscriptionFrom: got %v", payloads(ms))
	}
}

func testDelayedProcessing(t *testing.T, mode nodetest.Option) {
	n := nodetest.Start(t, mode)
	configure(t, n, "delayed", msg{"delayedProcessing": 1})
	pushed := time.Now()
	push(t, n, "delayed", "Default", "later")
	if ms, _ := pop(t, n, "delayed", "batch=1"); ms != nil {
		t.Fatal("a delayed message was visible at once")
	}
	ms := popUntil(t, n, "delayed", "batch=1", 5*time.Second)
	if time.Since(pushed) < time.Second {
		t.Fatalf("visible after %v, before the 1 s delay", time.Since(pushed))
	}
	if ms[0]["data"] != "later" {
		t.Fatalf("got %v", ms)
	}
}

func testWindowBuffer(t *testing.T, mode nodetest.Option) {
	n := nodetest.Start(t, mode)
	configure(t, n, "win", msg{"windowBuffer": 1})
	push(t, n, "win", "Default", 1, 2)
	pushedLast := time.Now()
	push(t, n, "win", "Default", 3)
	if ms, _ := pop(t, n, "win", "batch=4"); ms != nil {
		t.Fatal("served before the window elapsed")
	}
	ms := popUntil(t, n, "win", "batch=4", 5*time.Second)
	if time.Since(pushedLast) < time.Second || len(ms) != 3 {
		t.Fatalf("want all 3 after the window, got %d after %v", len(ms), time.Since(pushedLast))
	}
}

func testReadYourWrites(t *testing.T, mode nodetest.Option) {
	n := nodetest.Start(t, mode)
	for i := 0; i < 30; i++ {
		push(t, n, "ryw", "Default", i)
		ms, _ := pop(t, n, "ryw", "batch=1&wait=false")
		if len(ms) != 1 || ms[0]["data"] != float64(i) {
			t.Fatalf("iteration %d: pushed message not visible at once: %v", i, ms)
		}
		ackAll(t, n, "", "completed", ms)
	}
}

func testLongPollWakesOnPush(t *testing.T, mode nodetest.Option) {
	n := nodetest.Start(t, mode)
	push(t, n, "lp-other", "Default", 0) // provision something unrelated
	done := make(chan time.Time)
	go func() {
		ms, _ := pop(t, n, "lp", "batch=1&wait=true&timeout=10000")
		if len(ms) != 1 {
			t.Errorf("long-poll got %v", ms)
		}
		done <- time.Now()
	}()
	time.Sleep(300 * time.Millisecond)
	pushedAt := time.Now()
	push(t, n, "lp", "Default", "wake")
	select {
	case got := <-done:
		// generous: the figure is reported by benchmarks, not asserted tightly
		if d := got.Sub(pushedAt); d > 2*time.Second {
			t.Fatalf("woken after %v", d)
		}
	case <-time.After(8 * time.Second):
		t.Fatal("long-poll not woken by a push")
	}
}

func testLongPollTimesOutWith204(t *testing.T, mode nodetest.Option) {
	n := nodetest.Start(t, mode)
	start := time.Now()
	r := n.Do(t, "GET", "/api/v1/pop/queue/idle?wait=true&timeout=600", nil)
	if r.Status != 204 || len(r.Body) != 0 {
		t.Fatalf("want 204 without body, got %d %q", r.Status, r.Body)
	}
	if d := time.Since(start); d < 550*time.Millisecond || d > 5*time.Second {
		t.Fatalf("answered after %v for a 600 ms timeout", d)
	}
}

func testLongPollClientGoneTakesNoLease(t *testing.T, mode nodetest.Option) {
	n := nodetest.Start(t, mode)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		n.DoCtx(ctx, t, "GET", "/api/v1/pop/queue/gone?wait=true&timeout=10000", nil)
	}()
	time.Sleep(200 * time.Millisecond)
	cancel()
	<-done
	deadline := time.Now().Add(5 * time.Second)
	for n.Broker.Parked() > 0 {
		if time.Now().After(deadline) {
			t.Fatal("parked pop not released after the client left")
		}
		time.Sleep(20 * time.Millisecond)
	}
	push(t, n, "gone", "Default", "m")
	if ms, _ := pop(t, n, "gone", "batch=1"); len(ms) != 1 {
		t.Fatal("a message was leased to a closed connection")
	}
}

func testLeaseExtend(t *testing.T, mode nodetest.Option) {
	n := nodetest.Start(t, mode)
	configure(t, n, "ext", msg{"leaseTime": 2})
	push(t, n, "ext", "Default", 1)
	ms, _ := pop(t, n, "ext", "batch=1")
	r := n.Do(t, "POST", "/api/v1/lease/"+ms[0]["leaseId"].(string)+"/extend", msg{}).Obj(t)
	if r["success"] != true || r["leaseId"] != ms[0]["leaseId"] {
		t.Fatalf("extend: %v", r)
	}
	exp, err := time.Parse(time.RFC3339, r["newExpiresAt"].(string))
	if err != nil || time.Until(exp) < 50*time.Second {
		t.Fatalf("newExpiresAt %v (%v): want about now+60s", r["newExpiresAt"], err)
	}
	r = n.Do(t, "POST", "/api/v1/lease/nope/extend", msg{"seconds": 5}).Obj(t)
	if r["success"] != false || r["error"] != "Lease not found" {
		t.Fatalf("unknown lease: %v", r)
	}
}

func testTransactionCommitsAndRollsBack(t *testing.T, mode nodetest.Option) {
	n := nodetest.Start(t, mode)
	configure(t, n, "src", msg{"leaseTime": 1})
	push(t, n, "src", "Default", "a", "b")
	ms, _ := pop(t, n, "src", "batch=1")
	m := ms[0]
	ok := n.Do(t, "POST", "/api/v1/transaction", msg{
		"operations": []msg{
			{"type": "ack", "transactionId": m["transactionId"], "partitionId": m["partitionId"], "status": "completed"},
			{"type": "push", "items": []msg{{"queue": "dst", "payload": msg{"from": "a"}}}},
		},
		"requiredLeases": []any{m["leaseId"]},
	})
	if ok.Status != 200 || ok.Obj(t)["success"] != true {
		t.Fatalf("transaction: %d %s", ok.Status, ok.Body)
	}
	if got, _ := pop(t, n, "dst", "batch=5"); len(got) != 1 {
		t.Fatalf("pushed item not visible after commit: %v", got)
	}
	// rollback: push + valid ack + ack of a missing message => nothing applied
	ms, _ = pop(t, n, "src", "batch=1")
	m = ms[0]
	bad := n.Do(t, "POST", "/api/v1/transaction", msg{
		"operations": []msg{
			{"type": "push", "items": []msg{{"queue": "dst2", "payload": 1}}},
			{"type": "ack", "transactionId": m["transactionId"], "partitionId": m["partitionId"]},
			{"type": "ack", "transactionId": "missing", "partitionId": m["partitionId"]},
		},
	})
	body := bad.Obj(t)
	if bad.Status != 200 || body["success"] != false || body["error"] == nil {
		t.Fatalf("failed transaction must be 200 success:false: %d %s", bad.Status, bad.Body)
	}
	if got, _ := pop(t, n, "dst2", "batch=5"); got != nil {
		t.Fatal("a rolled-back push is visible")
	}
	again := popUntil(t, n, "src", "batch=1", 5*time.Second)
	if again[0]["transactionId"] != m["transactionId"] {
		t.Fatal("the rolled-back ack was applied")
	}
	// requiredLeases that are not live fail the transaction up front
	r := n.Do(t, "POST", "/api/v1/transaction", msg{
		"operations":     []msg{{"type": "push", "items": []msg{{"queue": "dst3", "payload": 1}}}},
		"requiredLeases": []string{"not-a-lease"},
	}).Obj(t)
	if r["success"] != false || r["error"] != "Invalid or expired lease" {
		t.Fatalf("required lease check: %v", r)
	}
}

func testDeleteQueueAnswersParkedPops(t *testing.T, mode nodetest.Option) {
	n := nodetest.Start(t, mode)
	push(t, n, "del", "Default", 1)
	ms, _ := pop(t, n, "del", "batch=1")
	ackAll(t, n, "", "completed", ms)
	done := make(chan int)
	go func() {
		done <- n.Do(t, "GET", "/api/v1/pop/queue/del?wait=true&timeout=20000", nil).Status
	}()
	deadline := time.Now().Add(5 * time.Second)
	for n.Broker.Parked() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	r := n.Do(t, "DELETE", "/api/v1/resources/queues/del", nil).Obj(t)
	if r["deleted"] != true || r["existed"] != true {
		t.Fatalf("delete: %v", r)
	}
	select {
	case st := <-done:
		if st != 204 {
			t.Fatalf("parked pop answered %d", st)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("parked pop not answered on delete")
	}
	r = n.Do(t, "DELETE", "/api/v1/resources/queues/never-was", nil).Obj(t)
	if r["existed"] != false {
		t.Fatalf("delete of a missing queue: %v", r)
	}
}

func testMultiPartitionPop(t *testing.T, mode nodetest.Option) {
	n := nodetest.Start(t, mode)
	for p := 0; p < 4; p++ {
		push(t, n, "mp", fmt.Sprintf("p%d", p), 1, 2, 3, 4, 5)
	}
	ms, body := pop(t, n, "mp", "batch=100")
	parts := map[any]bool{}
	for _, m := range ms {
		parts[m["partition"]] = true
	}
	if len(ms) != 5 || len(parts) != 1 || body["partitionsClaimed"] != 1.0 {
		t.Fatalf("default pop must take one partition: %d messages from %d", len(ms), len(parts))
	}
	ms, _ = pop(t, n, "mp", "batch=10&partitions=5")
	lease := ms[0]["leaseId"]
	for _, m := range ms {
		if m["leaseId"] != lease {
			t.Fatal("a multi-partition pop shares one lease id")
		}
	}
	if len(ms) != 10 {
		t.Fatalf("batch is a global cap: want 10, got %d", len(ms))
	}
	if r := n.Do(t, "POST", "/api/v1/lease/"+lease.(string)+"/extend", msg{}).Obj(t); r["success"] != true {
		t.Fatalf("extend multi-partition lease: %v", r)
	}
}

func testConsumerGroupDeleteAndSeek(t *testing.T, mode nodetest.Option) {
	n := nodetest.Start(t, mode)
	push(t, n, "cg", "Default", 1, 2, 3)
	ms, _ := pop(t, n, "cg", "batch=3&consumerGroup=g")
	ackAll(t, n, "g", "completed", ms)
	r := n.Do(t, "POST", "/api/v1/consumer-groups/g/queues/cg/seek", msg{"timestamp": "2000-01-01T00:00:00Z"}).Obj(t)
	if r["success"] != true || r["partitionsUpdated"] != 1.0 {
		t.Fatalf("seek: %v", r)
	}
	if again, _ := pop(t, n, "cg", "batch=3&consumerGroup=g"); len(again) != 3 {
		t.Fatalf("after a backwards seek want 3 again, got %d", len(again))
	}
	r = n.Do(t, "POST", "/api/v1/consumer-groups/g/queues/cg/seek", msg{"toEnd": true}).Obj(t)
	if r["success"] != true {
		t.Fatalf("seek to end: %v", r)
	}
	if again, _ := pop(t, n, "cg", "batch=3&consumerGroup=g"); again != nil {
		t.Fatal("after seek to end nothing is pending")
	}
	r = n.Do(t, "DELETE", "/api/v1/consumer-groups/g?deleteMetadata=true", nil).Obj(t)
	if r["success"] != true || r["deletedPartitions"] != 1.0 {
		t.Fatalf("delete group: %v", r)
	}
	if again, _ := pop(t, n, "cg", "batch=3&consumerGroup=g"); len(again) != 3 {
		t.Fatal("a deleted group starts over")
	}
}

func testTwoNodesShareOneDatabase(t *testing.T, mode nodetest.Option) {
	a := nodetest.Start(t, mode)
	b := nodetest.StartOn(t, a.DBURL, mode)
	push(t, a, "shared", "Default", "hello")
	ms, _ := pop(t, b, "shared", "batch=1&wait=false")
	if len(ms) != 1 || ms[0]["data"] != "hello" {
		t.Fatalf("node B must see node A's push at once: %v", ms)
	}
	if r := ackAll(t, b, "", "completed", ms); r[0]["success"] != true {
		t.Fatalf("ack on B: %v", r)
	}
	if again, _ := pop(t, a, "shared", "batch=1"); again != nil {
		t.Fatal("acked on B, redelivered on A")
	}
}

func testAckUnknownIdsAreItemErrors(t *testing.T, mode nodetest.Option) {
	n := nodetest.Start(t, mode)
	push(t, n, "unk", "Default", 1)
	r := n.Do(t, "POST", "/api/v1/ack", msg{"transactionId": "nope", "partitionId": "not-a-uuid"})
	if r.Status != 200 {
		t.Fatalf("ack with a non-UUID partition id: %d %s", r.Status, r.Body)
	}
	if a := r.Arr(t); a[0]["success"] != false || a[0]["error"] != "Message not found" {
		t.Fatalf("want Message not found, got %v", a[0])
	}
	r = n.Do(t, "POST", "/api/v1/ack", msg{"transactionId": "nope", "partitionId": "0190a0b0-0000-7000-8000-000000000000"})
	if a := r.Arr(t); a[0]["error"] != "Message not found" {
		t.Fatalf("unknown partition: %v", a[0])
	}
}

func testDeleteQueueRemovesMessages(t *testing.T, mode nodetest.Option) {
	n := nodetest.Start(t, mode)
	push(t, n, "gone-q", "Default", "old")
	n.Do(t, "DELETE", "/api/v1/resources/queues/gone-q", nil)
	push(t, n, "gone-q", "Default", "new")
	ms, _ := pop(t, n, "gone-q", "batch=10")
	if len(ms) != 1 || ms[0]["data"] != "new" {
		t.Fatalf("a re-created queue must hold only new messages: %v", payloads(ms))
	}
}

// semantics lists the rules of docs/api.md; TestSemantics runs
// each one with the hot-list on and off (QUEEN_HOTLIST=0 must behave the same).
var semantics = []struct {
	name string
	fn   func(*testing.T, nodetest.Option)
}{
	{"PushPopAckRoundTrip", testPushPopAckRoundTrip},
	{"PushDuplicates", testPushDuplicates},
	{"ConcurrentPushSameKeyQueuesOnce", testConcurrentPushSameKeyQueuesOnce},
	{"OrderWithinPartition", testOrderWithinPartition},
	{"OneLeasePerPartitionAndGroup", testOneLeasePerPartitionAndGroup},
	{"LeaseExpiryRedelivers", testLeaseExpiryRedelivers},
	{"RetriesThenDeadLetter", testRetriesThenDeadLetter},
	{"RetryLimitZeroDeadLettersFirstFailure", testRetryLimitZeroDeadLettersFirstFailure},
	{"BatchFailureCountsOneRetry", testBatchFailureCountsOneRetry},
	{"SubscriptionNewFixedAtFirstPop", testSubscriptionNewFixedAtFirstPop},
	{"SubscriptionFromTimestamp", testSubscriptionFromTimestamp},
	{"DelayedProcessing", testDelayedProcessing},
	{"WindowBuffer", testWindowBuffer},
	{"ReadYourWrites", testReadYourWrites},
	{"LongPollWakesOnPush", testLongPollWakesOnPush},
	{"LongPollTimesOutWith204", testLongPollTimesOutWith204},
	{"LongPollClientGoneTakesNoLease", testLongPollClientGoneTakesNoLease},
	{"LeaseExtend", testLeaseExtend},
	{"TransactionCommitsAndRollsBack", testTransactionCommitsAndRollsBack},
	{"DeleteQueueAnswersParkedPops", testDeleteQueueAnswersParkedPops},
	{"MultiPartitionPop", testMultiPartitionPop},
	{"ConsumerGroupDeleteAndSeek", testConsumerGroupDeleteAndSeek},
	{"TwoNodesShareOneDatabase", testTwoNodesShareOneDatabase},
	{"AckUnknownIdsAreItemErrors", testAckUnknownIdsAreItemErrors},
	{"DeleteQueueRemovesMessages", testDeleteQueueRemovesMessages},
}

func TestSemantics(t *testing.T) {
	for _, hot := range []bool{true, false} {
		mode := func(c *broker.Config) { c.Hotlist.Enabled = hot }
		t.Run(fmt.Sprintf("hotlist=%v", hot), func(t *testing.T) {
			for _, tc := range semantics {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					tc.fn(t, mode)
				})
			}
		})
	}
}

func TestLargeBatchAck(t *testing.T) {
	n := nodetest.Start(t)
	const total = 5000
	for i := 0; i < total; i += 1000 {
		ps := make([]any, 1000)
		for j := range ps {
			ps[j] = i + j
		}
		push(t, n, "big", "Default", ps...)
	}
	ms, _ := pop(t, n, "big", fmt.Sprintf("batch=%d", total))
	if len(ms) != total {
		t.Fatalf("popped %d", len(ms))
	}
	start := time.Now()
	res := ackAll(t, n, "", "completed", ms)
	for _, r := range res {
		if r["success"] != true || r["leaseReleased"] != true {
			t.Fatalf("ack: %v", r)
		}
	}
	t.Logf("acked %d in one batch in %v", total, time.Since(start))
	if again, _ := pop(t, n, "big", "batch=10"); again != nil {
		t.Fatal("acked batch redelivered")
	}
}
