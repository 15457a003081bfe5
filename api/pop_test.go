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

func TestPopEmptyIs204(t *testing.T) {
	tb := setup(t)
	for _, fn := range []func(context.Context, broker.PopRequest) (*broker.PopResult, error){
		nil,
		func(context.Context, broker.PopRequest) (*broker.PopResult, error) { return &broker.PopResult{}, nil },
	} {
		tb.fb.popFn = fn
		r := tb.do("GET", "/api/v1/pop/queue/q", "")
		if r.status != http.StatusNoContent || len(r.body) != 0 {
			t.Fatalf("%d %q", r.status, r.body)
		}
		checkCORS(t, r.header)
	}
}

func TestPopResponseShape(t *testing.T) {
	tb := setup(t)
	created := time.Date(2026, 5, 6, 10, 1, 42, 123456789, time.FixedZone("x", 3600))
	trace, sub := "3f1c0000-0000-7000-8000-000000000000", "alice"
	tb.fb.popFn = func(context.Context, broker.PopRequest) (*broker.PopResult, error) {
		return &broker.PopResult{Queue: "orders", Partition: "Default", PartitionID: "pid", LeaseID: "lid",
			ConsumerGroup: broker.QueueMode, PartitionsClaimed: 1, Messages: []broker.Message{
				{ID: "m1", TransactionID: "t1", TraceID: &trace, Data: json.RawMessage(`{"n":1.0,"s":"<&>"}`),
					CreatedAt: created, Queue: "orders", Partition: "Default", PartitionID: "pid", LeaseID: "lid",
					ConsumerGroup: broker.QueueMode, ProducerSub: &sub, RetryCount: 2},
				{ID: "m2", TransactionID: "t2", Data: json.RawMessage(`null`), CreatedAt: created,
					Queue: "orders", Partition: "Default", PartitionID: "pid", LeaseID: "lid", ConsumerGroup: broker.QueueMode},
			}}, nil
	}
	r := tb.do("GET", "/api/v1/pop/queue/orders?batch=2", "")
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	checkJSONHeaders(t, r)
	m := r.object(t)
	if keys(m) != "consumerGroup,leaseId,messages,partition,partitionId,partitionsClaimed,queue,success" ||
		m["success"] != true || m["leaseId"] != "lid" || m["partitionsClaimed"] != json.Number("1") {
		t.Fatalf("top: %s", r.body)
	}
	msgs := m["messages"].([]any)
	m1, m2 := msgs[0].(map[string]any), msgs[1].(map[string]any)
	if keys(m1) != "consumerGroup,createdAt,data,id,leaseId,partition,partitionId,producerSub,queue,retryCount,traceId,transactionId" {
		t.Fatalf("message keys %s", keys(m1))
	}
	if m1["createdAt"] != "2026-05-06T09:01:42.123456Z" || m1["traceId"] != trace || m1["producerSub"] != "alice" ||
		m1["partitionId"] != "pid" || m1["leaseId"] != "lid" || m1["queue"] != "orders" || m1["retryCount"] != json.Number("2") {
		t.Fatalf("m1 %v", m1)
	}
	if m2["traceId"] != nil || m2["producerSub"] != nil || m2["data"] != nil {
		t.Fatalf("m2 %v", m2)
	}
	// Payloads come back byte-for-byte (no HTML escaping, numbers untouched).
	if !strings.Contains(string(r.body), `"data":{"n":1.0,"s":"<&>"}`) {
		t.Fatalf("payload altered: %s", r.body)
	}
}

func TestPopParameters(t *testing.T) {
	cases := []struct {
		query string
		check func(t *testing.T, p broker.PopRequest)
	}{
		{"", func(t *testing.T, p broker.PopRequest) {
			want := broker.PopRequest{Queue: "q", Group: broker.QueueMode, Batch: 1, Partitions: 1}
			if p != want {
				t.Fatalf("defaults %+v", p)
			}
		}},
		{"?batch=abc&partitions=x&timeout=y&wait=true&leaseSeconds=z", func(t *testing.T, p broker.PopRequest) {
			if p.Batch != 1 || p.Partitions != 1 || p.Timeout != 30*time.Second || !p.Wait || p.LeaseSeconds != 0 {
				t.Fatalf("garbage falls back to defaults: %+v", p)
			}
		}},
		{"?batch=0&partitions=-3", func(t *testing.T, p broker.PopRequest) {
			if p.Batch != 1 || p.Partitions != 1 {
				t.Fatalf("%+v", p)
			}
		}},
		{"?batch=999999999&partitions=5", func(t *testing.T, p broker.PopRequest) {
			if p.Batch != broker.DefaultMaxPopBatch || p.Partitions != 5 {
				t.Fatalf("%+v", p)
			}
		}},
		{"?wait=false&timeout=5000", func(t *testing.T, p broker.PopRequest) {
			if p.Wait || p.Timeout != 0 {
				t.Fatalf("timeout must be ignored without wait: %+v", p)
			}
		}},
		{"?wait=1&timeout=1500", func(t *testing.T, p broker.PopRequest) {
			if !p.Wait || p.Timeout != 1500*time.Millisecond {
				t.Fatalf("%+v", p)
			}
		}},
		{"?wait=yes&autoAck=TRUE", func(t *testing.T, p broker.PopRequest) {
			if p.Wait || p.AutoAck {
				t.Fatalf("only true/1 are true: %+v", p)
			}
		}},
		{"?wait=true&timeout=99999999999999999999", func(t *testing.T, p broker.PopRequest) {
			if p.Timeout != 30*time.Second {
				t.Fatalf("unparseable (overflow) → default: %v", p.Timeout)
			}
		}},
		{"?wait=true&timeout=9000000000000", func(t *testing.T, p broker.PopRequest) {
			if p.Timeout != 10*time.Minute {
				t.Fatalf("clamped: %v", p.Timeout)
			}
		}},
		{"?consumerGroup=g%2F1&autoAck=1&subscriptionMode=from_beginning&leaseSeconds=42", func(t *testing.T, p broker.PopRequest) {
			if p.Group != "g/1" || !p.AutoAck || p.SubscriptionMode != "from_beginning" || p.LeaseSeconds != 42 {
				t.Fatalf("%+v", p)
			}
		}},
		{"?subscriptionFrom=now", func(t *testing.T, p broker.PopRequest) {
			if p.SubscriptionFrom != nil || p.SubscriptionMode != "new" {
				t.Fatalf("%+v", p)
			}
		}},
		{"?subscriptionFrom=2026-05-06T12:00:00%2B02:00", func(t *testing.T, p broker.PopRequest) {
			if p.SubscriptionFrom == nil || p.SubscriptionFrom.Format(time.RFC3339Nano) != "2026-05-06T10:00:00Z" {
				t.Fatalf("%v", p.SubscriptionFrom)
			}
		}},
		{"?subscriptionFrom=2026-05-06T12:00:00+02:00", func(t *testing.T, p broker.PopRequest) { // unencoded '+'
			if p.SubscriptionFrom == nil || p.SubscriptionFrom.Format(time.RFC3339Nano) != "2026-05-06T10:00:00Z" {
				t.Fatalf("%v", p.SubscriptionFrom)
			}
		}},
		{"?subscriptionFrom=2026-05-06T10:01:42.123Z", func(t *testing.T, p broker.PopRequest) {
			if p.SubscriptionFrom == nil || p.SubscriptionFrom.Format(time.RFC3339Nano) != "2026-05-06T10:01:42.123Z" {
				t.Fatalf("%v", p.SubscriptionFrom)
			}
		}},
	}
	for _, c := range cases {
		tb := setup(t)
		if r := tb.do("GET", "/api/v1/pop/queue/q"+c.query, ""); r.status != 204 {
			t.Fatalf("%s: %d %s", c.query, r.status, r.body)
		}
		c.check(t, tb.fb.popReq)
	}
}

func TestPopPercentDecodedNames(t *testing.T) {
	tb := setup(t)
	tb.do("GET", "/api/v1/pop/queue/a%2Fb/partition/p%20%2F1", "")
	if p := tb.fb.popReq; p.Queue != "a/b" || p.Partition != "p /1" {
		t.Fatalf("%+v", p)
	}
	tb.do("GET", "/api/v1/pop/queue/plain", "")
	if p := tb.fb.popReq; p.Queue != "plain" || p.Partition != "" {
		t.Fatalf("wildcard: %+v", p)
	}
}

func TestPopValidation(t *testing.T) {
	long := strings.Repeat("x", broker.MaxNameBytes+1)
	for _, path := range []string{
		"/api/v1/pop/queue/" + long,
		"/api/v1/pop/queue/q/partition/" + long,
		"/api/v1/pop/queue/q?consumerGroup=" + long,
		"/api/v1/pop/queue/q?subscriptionFrom=yesterday",
		"/api/v1/pop/queue/q?subscriptionFrom=2026-05-06",
		"/api/v1/pop/queue/q?subscriptionFrom=2026-05-06T10:00:00",
	} {
		tb := setup(t)
		tb.do("GET", path, "").wantError(t, http.StatusBadRequest, "")
		tb.noBrokerCalls()
	}
}

func TestPopClientDisconnectCancels(t *testing.T) {
	tb := setup(t)
	canceled := make(chan struct{})
	tb.fb.popFn = func(ctx context.Context, _ broker.PopRequest) (*broker.PopResult, error) {
		<-ctx.Done()
		close(canceled)
		return nil, ctx.Err()
	}
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", tb.url+"/api/v1/pop/queue/q?wait=true&timeout=60000", nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
	}()
	time.Sleep(100 * time.Millisecond)
	cancel()
	select {
	case <-canceled:
	case <-time.After(5 * time.Second):
		t.Fatal("broker pop context was not canceled by the client disconnect")
	}
	<-done
}

func TestPopDrainAnswers204(t *testing.T) {
	tb := setup(t)
	tb.fb.popFn = func(ctx context.Context, _ broker.PopRequest) (*broker.PopResult, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	go func() {
		time.Sleep(100 * time.Millisecond)
		tb.srv.Drain()
	}()
	if r := tb.do("GET", "/api/v1/pop/queue/q?wait=true", ""); r.status != 204 {
		t.Fatalf("%d %s", r.status, r.body)
	}
}

func TestPopReleasesLeaseOfDepartedClient(t *testing.T) {
	tb := setup(t)
	tb.fb.released = make(chan string, 1)
	tb.fb.popFn = func(ctx context.Context, _ broker.PopRequest) (*broker.PopResult, error) {
		<-ctx.Done() // the claim "succeeds" just as the client leaves
		return &broker.PopResult{LeaseID: "lid", Messages: []broker.Message{{ID: "m", LeaseID: "lid"}}}, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", tb.url+"/api/v1/pop/queue/q?wait=true", nil)
	go func() {
		time.Sleep(100 * time.Millisecond)
		cancel()
	}()
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
	select {
	case id := <-tb.fb.released:
		if id != "lid" {
			t.Fatalf("released %q", id)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("lease of an undelivered pop was not released")
	}
}
