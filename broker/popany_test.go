package broker_test

import (
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"queen-node/broker"
	"queen-node/internal/nodetest"
	"queen-node/node"
)

// popAny pops through GET /api/v1/pop with the given query (without the
// leading '?') and authorization ("" = none); it returns the status, the
// messages and the whole body (nil on 204).
func popAny(t *testing.T, n *nodetest.Node, authorization, query string) (int, []msg, msg) {
	t.Helper()
	r := n.DoAuth(t, authorization, "GET", "/api/v1/pop?"+query, nil)
	switch r.Status {
	case 204:
		if len(r.Body) != 0 {
			t.Fatalf("204 with a body: %q", r.Body)
		}
		return r.Status, nil, nil
	case 200:
	default:
		return r.Status, nil, r.Obj(t)
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
	return r.Status, out, body
}

// served checks a 200 namespace/task pop served queue with n messages, on
// the response and on every message.
func served(t *testing.T, status int, ms []msg, body msg, queue string, n int) {
	t.Helper()
	if status != 200 || len(ms) != n || body["queue"] != queue {
		t.Fatalf("want %d messages of %s, got %d: %d %v", n, queue, status, len(ms), body)
	}
	for _, m := range ms {
		if m["queue"] != queue || m["leaseId"] != body["leaseId"] || m["leaseId"] == "" {
			t.Fatalf("message %v of a pop of %s", m, queue)
		}
	}
}

// Higher priority first, ties in name order; a message popped this way is
// acked with its leaseId like any other.
func TestPopAnyPriority(t *testing.T) {
	t.Parallel()
	n := nodetest.Start(t)
	configure(t, n, "inv-low", msg{"namespace": "billing", "priority": 1})
	configure(t, n, "inv-high", msg{"namespace": "billing", "priority": 5})
	configure(t, n, "inv-tie-b", msg{"namespace": "billing", "priority": 3})
	configure(t, n, "inv-tie-a", msg{"namespace": "billing", "priority": 3})
	configure(t, n, "other", msg{"namespace": "shipping", "priority": 9})
	for _, q := range []string{"inv-low", "inv-high", "inv-tie-b", "inv-tie-a", "other"} {
		push(t, n, q, "Default", q)
	}
	for _, want := range []string{"inv-high", "inv-tie-a", "inv-tie-b", "inv-low"} {
		st, ms, body := popAny(t, n, "", "namespace=billing&batch=10")
		served(t, st, ms, body, want, 1)
		if ms[0]["data"] != want {
			t.Fatalf("data %v from %s", ms[0]["data"], want)
		}
		res := ackAll(t, n, "", "completed", ms)
		if len(res) != 1 || res[0]["success"] != true {
			t.Fatalf("ack of %s: %v", want, res)
		}
	}
	// All acked: nothing is left in billing, and the acked messages do not
	// come back.
	if st, _, body := popAny(t, n, "", "namespace=billing&wait=false"); st != 204 {
		t.Fatalf("billing drained: %d %v", st, body)
	}
	if ms, _ := pop(t, n, "inv-high", "wait=false"); ms != nil {
		t.Fatalf("acked message came back: %v", ms)
	}
}

// task alone, namespace with task, a missing filter (400) and no match (204).
func TestPopAnyFilters(t *testing.T) {
	t.Parallel()
	n := nodetest.Start(t)
	configure(t, n, "f-a", msg{"namespace": "billing", "task": "invoice", "priority": 1})
	configure(t, n, "f-b", msg{"namespace": "billing", "task": "refund", "priority": 9})
	configure(t, n, "f-c", msg{"namespace": "ops", "task": "invoice", "priority": 5})
	for _, q := range []string{"f-a", "f-b", "f-c"} {
		push(t, n, q, "Default", q)
	}
	for _, q := range []string{"", "namespace=", "task=&namespace=", "batch=5"} {
		r := n.Do(t, "GET", "/api/v1/pop?"+q, nil)
		if r.Status != 400 || r.Obj(t)["error"] == nil {
			t.Fatalf("%q: %d %s", q, r.Status, r.Body)
		}
	}
	if st, _, body := popAny(t, n, "", "namespace=nope"); st != 204 {
		t.Fatalf("no match: %d %v", st, body)
	}
	if st, _, body := popAny(t, n, "", "namespace=billing&task=nope"); st != 204 {
		t.Fatalf("no match: %d %v", st, body)
	}
	// task=invoice matches f-c (priority 5) before f-a (1), never f-b.
	st, ms, body := popAny(t, n, "", "task=invoice")
	served(t, st, ms, body, "f-c", 1)
	st, ms, body = popAny(t, n, "", "task=invoice")
	served(t, st, ms, body, "f-a", 1)
	if st, _, body := popAny(t, n, "", "task=invoice"); st != 204 {
		t.Fatalf("task drained: %d %v", st, body)
	}
	// namespace and task: only f-b.
	st, ms, body = popAny(t, n, "", "namespace=billing&task=refund&autoAck=true")
	if st != 200 || len(ms) != 1 || body["queue"] != "f-b" || ms[0]["queue"] != "f-b" {
		t.Fatalf("namespace+task: %d %v", st, body)
	}
}

// A long-poll parked on namespace billing is woken by a push to any of its
// queues, long before its timeout or its own re-poll.
func TestPopAnyLongPollWake(t *testing.T) {
	t.Parallel()
	n := nodetest.Start(t, func(c *broker.Config) {
		c.PopBackoffMin = 20 * time.Second // the re-poll must not be what delivers
		c.PopBackoffMax = 20 * time.Second
	})
	configure(t, n, "w-a", msg{"namespace": "billing", "priority": 5})
	configure(t, n, "w-b", msg{"namespace": "billing", "priority": 1})
	configure(t, n, "w-c", msg{"namespace": "ops"})
	type result struct {
		st   int
		ms   []msg
		body msg
		at   time.Time
	}
	done := make(chan result, 1)
	go func() {
		st, ms, body := popAny(t, n, "", "namespace=billing&wait=true&timeout=20000")
		done <- result{st, ms, body, time.Now()}
	}()
	waitFor(t, 10*time.Second, "the pop to park on both billing queues", func() bool { return n.Broker.Parked() == 2 })
	push(t, n, "w-c", "Default", "ops") // not a billing queue: stays parked
	pushed := time.Now()
	push(t, n, "w-b", "Default", "late")
	select {
	case r := <-done:
		served(t, r.st, r.ms, r.body, "w-b", 1)
		if d := r.at.Sub(pushed); d > 5*time.Second {
			t.Fatalf("woken %v after the push", d)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the parked pop was not woken by the push")
	}
	if ms, _ := pop(t, n, "w-c", "wait=false"); len(ms) != 1 {
		t.Fatalf("w-c message was taken: %v", ms)
	}
}

// Another tenant's queue in the same namespace is never served.
func TestPopAnyTenantsApart(t *testing.T) {
	t.Parallel()
	const secret = "test-secret-0123456789"
	n := nodetest.StartConfig(t, func(c *node.Config) {
		c.Auth.Enabled = true
		c.Auth.Secret = secret
	})
	tok := func(tenant string) string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": tenant + "-user",
			"role": "admin", "tenant": tenant, "exp": time.Now().Add(time.Hour).Unix()}).SignedString([]byte(secret))
		if err != nil {
			t.Fatal(err)
		}
		return "Bearer " + s
	}
	acme, globex := tok("acme"), tok("globex")
	for _, tk := range []string{acme, globex} {
		r := n.DoAuth(t, tk, "POST", "/api/v1/configure", msg{"queue": "bills", "options": msg{"namespace": "billing"}})
		if r.Status != 200 {
			t.Fatalf("configure: %d %s", r.Status, r.Body)
		}
	}
	r := n.DoAuth(t, globex, "POST", "/api/v1/push", msg{"items": []msg{{"queue": "bills", "payload": "g"}}})
	if r.Status != 201 {
		t.Fatalf("push: %d %s", r.Status, r.Body)
	}
	if st, _, body := popAny(t, n, acme, "namespace=billing&wait=true&timeout=300"); st != 204 {
		t.Fatalf("acme got globex's message: %d %v", st, body)
	}
	st, ms, body := popAny(t, n, globex, "namespace=billing")
	served(t, st, ms, body, "bills", 1)
	if ms[0]["data"] != "g" {
		t.Fatalf("data %v", ms[0]["data"])
	}
}

// TestPopAnyParkedCostsNoSQL: a namespace long-poll over drained queues
// re-polls on its back-off through the hot-list's quiet path, as a queue
// long-poll does: after the first round, no claim SQL while it waits.
func TestPopAnyParkedCostsNoSQL(t *testing.T) {
	t.Parallel()
	n := nodetest.Start(t, func(c *broker.Config) {
		c.PopBackoffMin = 20 * time.Millisecond
		c.PopBackoffMax = 50 * time.Millisecond
	})
	configure(t, n, "q-a", msg{"namespace": "idle"})
	configure(t, n, "q-b", msg{"namespace": "idle"})
	// The first rounds register the groups and warm the rings.
	for i := 0; i < 2; i++ {
		if st, _, _ := popAny(t, n, "", "namespace=idle&wait=true&timeout=200"); st != 204 {
			t.Fatalf("warm-up pop: %d", st)
		}
	}
	before := n.Broker.Stats().PopSQLCalls.Load()
	if st, _, _ := popAny(t, n, "", "namespace=idle&wait=true&timeout=1000"); st != 204 {
		t.Fatalf("idle pop: %d", st)
	}
	// About 20 back-off rounds over two queues: the SQL path would make ~40 claim calls.
	if d := n.Broker.Stats().PopSQLCalls.Load() - before; d > 2 {
		t.Fatalf("%d claim SQL calls during a 1 s parked namespace pop over drained queues", d)
	}
}
