package api_test

import (
	"testing"
	"time"

	"queen-node/internal/nodetest"
)

// TestStreamCycleDuringPushMaintenance: a stream cycle with sink
// pushes is a transaction of acks and pushes, so push maintenance must
// refuse it like POST /api/v1/transaction with a push (503, nothing
// applied): stored directly it would overtake the pushes buffered before
// it and write to the database under maintenance (docs/api.md,
// "Maintenance modes"). Once the buffer is replayed the same cycle runs,
// and the sink holds the buffered message first.
func TestStreamCycleDuringPushMaintenance(t *testing.T) {
	n := nodetest.Start(t)
	t.Cleanup(func() { n.Do(t, "POST", "/api/v1/system/maintenance", msg{"enabled": false}) })
	streamPush(t, n, "rvm.src", "p", 1, 1)
	_, out := register(t, n, "", msg{"name": "rvm", "source_queue": "rvm.src", "sink_queue": "rvm.out", "config_hash": "h"})
	qid := out["query_id"].(string)
	const g = "streams.rvm"
	batch := streamPop(t, n, "rvm.src", g, 10)
	if len(batch) != 1 {
		t.Fatalf("pop: %d", len(batch))
	}

	if r := n.Do(t, "POST", "/api/v1/system/maintenance", msg{"enabled": true}); r.Status != 200 {
		t.Fatalf("maintenance on: %d %s", r.Status, r.Body)
	}
	r := n.Do(t, "POST", "/api/v1/push", msg{"items": []msg{{"queue": "rvm.out", "payload": msg{"k": "buffered"}}}})
	if r.Status != 201 || r.Arr(t)[0]["status"] != "buffered" {
		t.Fatalf("push during maintenance: %d %s", r.Status, r.Body)
	}
	body := func() msg {
		return msg{"query_id": qid, "partition_id": batch[0].PartitionID, "consumer_group": g,
			"ack":       msg{"transactionId": batch[0].TransactionID, "leaseId": batch[0].LeaseID, "status": "completed", "count": 1},
			"state_ops": []msg{{"type": "upsert", "key": "k", "value": msg{"n": 1}}}, "release_lease": true,
			"push_items": []msg{{"queue": "rvm.out", "payload": msg{"k": "cycle"}}}}
	}
	if st, out := cycle(t, n, "", body()); st != 503 {
		t.Fatalf("cycle with sink pushes during push maintenance: %d %v, want 503", st, out)
	}
	if _, rows := stateGet(t, n, "", msg{"query_id": qid, "partition_id": batch[0].PartitionID}); len(rows) != 0 {
		t.Fatalf("refused cycle wrote state: %v", rows)
	}

	if r := n.Do(t, "POST", "/api/v1/system/maintenance", msg{"enabled": false}); r.Status != 200 {
		t.Fatalf("maintenance off: %d %s", r.Status, r.Body)
	}
	deadline := time.Now().Add(15 * time.Second)
	for n.Broker.BufferStats().Pending > 0 {
		if time.Now().After(deadline) {
			t.Fatal("buffer not replayed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st, out := cycle(t, n, "", body()); st != 200 || out["success"] != true {
		t.Fatalf("cycle after the replay: %d %v", st, out)
	}
	r = n.Do(t, "GET", "/api/v1/pop/queue/rvm.out?batch=10&wait=false&autoAck=true&consumerGroup=check", nil)
	var got struct {
		Messages []struct {
			Data map[string]any `json:"data"`
		}
	}
	r.JSON(t, &got)
	if len(got.Messages) != 2 || got.Messages[0].Data["k"] != "buffered" || got.Messages[1].Data["k"] != "cycle" {
		t.Fatalf("sink: %s", r.Body)
	}
}
