package broker_test

import (
	"fmt"
	"net/url"
	"testing"
	"time"

	"queen-node/internal/nodetest"
	"queen-node/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type msg = map[string]any

// push pushes one item per payload to queue/partition and returns the results.
func push(t *testing.T, n *nodetest.Node, queue, partition string, payloads ...any) []msg {
	t.Helper()
	items := make([]msg, len(payloads))
	for i, p := range payloads {
		items[i] = msg{"queue": queue, "partition": partition, "payload": p,
			"transactionId": fmt.Sprintf("tx-%d-%d", time.Now().UnixNano(), i)}
	}
	return pushItems(t, n, items)
}

func pushItems(t *testing.T, n *nodetest.Node, items []msg) []msg {
	t.Helper()
	r := n.Do(t, "POST", "/api/v1/push", msg{"items": items})
	if r.Status != 201 {
		t.Fatalf("push: status %d: %s", r.Status, r.Body)
	}
	res := r.Arr(t)
	for i, x := range res {
		if x["status"] == "failed" {
			t.Fatalf("push item %d failed: %v", i, x)
		}
	}
	return res
}

// pop pops with the given query (without leading '?') and returns the
// messages (nil on 204) and the whole body.
func pop(t *testing.T, n *nodetest.Node, queue, query string) ([]msg, msg) {
	t.Helper()
	r := n.Do(t, "GET", "/api/v1/pop/queue/"+url.PathEscape(queue)+"?"+query, nil)
	switch r.Status {
	case 204:
		if len(r.Body) != 0 {
			t.Fatalf("204 with a body: %q", r.Body)
		}
		return nil, nil
	case 200:
	default:
		t.Fatalf("pop %s?%s: status %d: %s", queue, query, r.Status, r.Body)
	}
	body := r.Obj(t)
	raw, _ := body["messages"].([]any)
	out := make([]msg, len(raw))
	for i, m := range raw {
		out[i] = m.(map[string]any)
	}
	if len(out) == 0 {
		t.Fatalf("200 without messages: %s", r.Body)
	}
	return out, body
}

// popUntil polls until a pop returns messages or the deadline passes.
func popUntil(t *testing.T, n *nodetest.Node, queue, query string, within time.Duration) []msg {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ms, _ := pop(t, n, queue, query)
		if ms != nil {
			return ms
		}
		if time.Now().After(deadline) {
			t.Fatalf("no message on %s?%s within %v", queue, query, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// drainQueue pops queue in queue mode (batches of 1,000, no wait) until it
// is empty, acks each batch completed, and hands every message to see, in
// the order popped; it returns how many it popped.
func drainQueue(t *testing.T, n *nodetest.Node, queue string, see func(m msg)) int {
	t.Helper()
	got := 0
	for {
		ms, _ := pop(t, n, queue, "batch=1000&wait=false")
		if ms == nil {
			return got
		}
		for _, m := range ms {
			got++
			see(m)
		}
		ackAll(t, n, "", "completed", ms)
	}
}

// ackAll acks messages with a status through /api/v1/ack/batch.
func ackAll(t *testing.T, n *nodetest.Node, group, status string, ms []msg) []msg {
	t.Helper()
	acks := make([]msg, len(ms))
	for i, m := range ms {
		acks[i] = msg{"transactionId": m["transactionId"], "partitionId": m["partitionId"],
			"leaseId": m["leaseId"], "status": status, "error": "failed on purpose"}
	}
	body := msg{"acknowledgments": acks}
	if group != "" {
		body["consumerGroup"] = group
	}
	r := n.Do(t, "POST", "/api/v1/ack/batch", body)
	if r.Status != 200 {
		t.Fatalf("ack batch: %d %s", r.Status, r.Body)
	}
	return r.Arr(t)
}

func configure(t *testing.T, n *nodetest.Node, queue string, options msg) {
	t.Helper()
	r := n.Do(t, "POST", "/api/v1/configure", msg{"queue": queue, "options": options})
	if r.Status != 200 {
		t.Fatalf("configure %s: %d %s", queue, r.Status, r.Body)
	}
	if r.Obj(t)["configured"] != true {
		t.Fatalf("configure: no configured:true in %s", r.Body)
	}
}

func payloads(ms []msg) []any {
	out := make([]any, len(ms))
	for i, m := range ms {
		out[i] = m["data"]
	}
	return out
}
