package api

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"queen-node/broker"
)

// GET /api/v1/pop takes the pop parameters of GET /api/v1/pop/queue/:queue
// plus namespace and task, and answers in the same shape.
func TestPopAnyParameters(t *testing.T) {
	tb := setup(t)
	tb.fb.popFn = func(context.Context, broker.PopRequest) (*broker.PopResult, error) {
		return &broker.PopResult{Queue: "inv", Partition: "Default", PartitionID: "pid", LeaseID: "lid",
			ConsumerGroup: "g", PartitionsClaimed: 1, Messages: []broker.Message{{ID: "m1", TransactionID: "t1",
				Data: json.RawMessage(`1`), Queue: "inv", Partition: "Default", PartitionID: "pid", LeaseID: "lid", ConsumerGroup: "g"}}}, nil
	}
	r := tb.do("GET", "/api/v1/pop?namespace=billing&task=inv%2F1&batch=7&wait=true&timeout=1500&consumerGroup=g&autoAck=1&partitions=3&leaseSeconds=9&subscriptionFrom=now", "")
	if r.status != http.StatusOK {
		t.Fatalf("%d %s", r.status, r.body)
	}
	checkJSONHeaders(t, r)
	m := r.object(t)
	if keys(m) != "consumerGroup,leaseId,messages,partition,partitionId,partitionsClaimed,queue,success" || m["queue"] != "inv" {
		t.Fatalf("shape: %s", r.body)
	}
	if msgs := m["messages"].([]any); len(msgs) != 1 || msgs[0].(map[string]any)["queue"] != "inv" {
		t.Fatalf("messages: %s", r.body)
	}
	p := tb.fb.popReq
	want := broker.PopRequest{Group: "g", Batch: 7, Wait: true, Timeout: 1500 * time.Millisecond, AutoAck: true,
		SubscriptionMode: "new", Partitions: 3, LeaseSeconds: 9}
	if p != want || tb.fb.popNS != "billing" || tb.fb.popTask != "inv/1" {
		t.Fatalf("%+v %q %q", p, tb.fb.popNS, tb.fb.popTask)
	}
	if c := tb.fb.Calls(); len(c) != 1 || c[0] != "PopAny" {
		t.Fatalf("calls %v", c)
	}

	tb.fb.popFn = nil
	r = tb.do("GET", "/api/v1/pop?task=x", "")
	if r.status != http.StatusNoContent || len(r.body) != 0 || tb.fb.popNS != "" || tb.fb.popTask != "x" {
		t.Fatalf("%d %q %q %q", r.status, r.body, tb.fb.popNS, tb.fb.popTask)
	}
}

// Without namespace or task, or with a bad one, the answer is a 400 JSON
// error and the broker is never called.
func TestPopAnyRejects(t *testing.T) {
	for _, q := range []string{"", "?namespace=", "?namespace=&task=", "?batch=3",
		"?namespace=" + strings.Repeat("n", broker.MaxNameBytes+1), "?task=a%00b",
		"?namespace=x&subscriptionFrom=yesterday"} {
		tb := setup(t)
		r := tb.do("GET", "/api/v1/pop"+q, "")
		if r.status != http.StatusBadRequest {
			t.Fatalf("%q: %d %s", q, r.status, r.body)
		}
		checkJSONHeaders(t, r)
		if m := r.object(t); m["error"] == nil {
			t.Fatalf("%q: %s", q, r.body)
		}
		tb.noBrokerCalls()
	}
	tb := setup(t)
	if r := tb.do("POST", "/api/v1/pop?namespace=x", ""); r.status != http.StatusMethodNotAllowed {
		t.Fatalf("POST: %d", r.status)
	}
	tb.noBrokerCalls()
}
