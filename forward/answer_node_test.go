package forward_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"queen-node/forward"
	"queen-node/internal/nodetest"
	"queen-node/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type msg = map[string]any

// The push and ack answers a real node writes take the one-pass readers'
// path and read as encoding/json reads them. answer_test.go checks the
// readers against copies of the api's answer shapes; this catches a shape
// that changed in api and not in those copies: queued and duplicate
// pushes (one with a trace id), and acks that succeed, release the lease
// and fail. (A failed push item, which a node writes only when a queue
// is deleted during the push, is in answer_test.go's copies.)
func TestRealAnswersTakeTheFastPath(t *testing.T) {
	n := nodetest.Start(t)
	items := func(txs ...string) msg {
		var out []msg
		for i, tx := range txs {
			it := msg{"queue": "fa", "partition": "p", "transactionId": tx, "payload": msg{"i": i}}
			if i == 0 {
				it["traceId"] = "0190a0b4-5f2c-7c3e-8a4b-1f2e3d4c5b6a"
			}
			out = append(out, it)
		}
		return msg{"items": out}
	}
	var answers [][]byte
	for _, body := range []msg{items("a", "b"), items("a", "c")} { // "a" again: duplicate
		r := n.Do(t, "POST", "/api/v1/push", body)
		if r.Status != 201 {
			t.Fatalf("push: %d %s", r.Status, r.Body)
		}
		answers = append(answers, r.Body)
	}
	statuses := map[string]bool{}
	for _, a := range answers {
		fast, ok := forward.FastPeerResults(a, 2)
		var slow []forward.PeerResult
		if err := json.Unmarshal(a, &slow); err != nil || !ok || !reflect.DeepEqual(fast, slow) {
			t.Fatalf("push answer %s: one pass ok=%v, json err=%v,\n%+v\n%+v", a, ok, err, fast, slow)
		}
		for i, r := range fast {
			statuses[string(r.Status)] = true
			// What the non-owner passes on must be there: a field the
			// api renamed would read as empty in both readers.
			if r.Index == nil || *r.Index != i || r.TransactionID == "" || r.QueueName != "fa" || r.PartitionID == nil ||
				r.Status == "queued" && r.MessageID == nil || i == 0 && r.TraceID == nil {
				t.Fatalf("push answer %s: result %d read as %+v", a, i, r)
			}
		}
	}
	if !statuses["queued"] || !statuses["duplicate"] {
		t.Fatalf("statuses seen %v: want queued and duplicate at least", statuses)
	}

	r := n.Do(t, "GET", "/api/v1/pop/queue/fa/partition/p?batch=10&wait=false", nil)
	var pop struct {
		Messages []msg `json:"messages"`
	}
	r.JSON(t, &pop)
	if len(pop.Messages) != 3 {
		t.Fatalf("pop: %d messages, want 3: %s", len(pop.Messages), r.Body)
	}
	var acks []msg
	for _, m := range pop.Messages {
		acks = append(acks, msg{"transactionId": m["transactionId"], "partitionId": m["partitionId"], "leaseId": m["leaseId"], "status": "completed"})
	}
	acks = append(acks, msg{"transactionId": "nope", "partitionId": pop.Messages[0]["partitionId"], "status": "completed"})
	r = n.Do(t, "POST", "/api/v1/ack/batch", msg{"acknowledgments": acks})
	if r.Status != 200 {
		t.Fatalf("ack: %d %s", r.Status, r.Body)
	}
	fast, ok := forward.FastPeerAcks(r.Body, len(acks))
	var slow []forward.PeerAck
	if err := json.Unmarshal(r.Body, &slow); err != nil || !ok || !reflect.DeepEqual(fast, slow) {
		t.Fatalf("ack answer %s: one pass ok=%v, json err=%v,\n%+v\n%+v", r.Body, ok, err, fast, slow)
	}
	released, failed := false, false
	for i, a := range fast {
		if a.Index == nil || *a.Index != i || a.TransactionID != acks[i]["transactionId"] || a.Success && (a.QueueName != "fa" || a.PartitionName != "p") {
			t.Fatalf("ack answer %s: result %d read as %+v", r.Body, i, a)
		}
		released = released || a.LeaseReleased
		failed = failed || !a.Success && a.Error != nil
	}
	if !released || !failed {
		t.Fatalf("ack answer %s: want a released lease and a failed item", r.Body)
	}
}
