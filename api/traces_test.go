package api_test

// Traces through a real node with JWT on (docs/api.md, "Traces").

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"queen-node/internal/nodetest"
	"queen-node/node"
)

const jwtSecret = "analytics-test-secret-0123456789"

// authNode starts a node with HS256 authentication on; edit may change more.
func authNode(t *testing.T, edit func(*node.Config)) *nodetest.Node {
	t.Helper()
	return nodetest.StartConfig(t, func(c *node.Config) {
		c.Auth.Enabled = true
		c.Auth.Secret = jwtSecret
		if edit != nil {
			edit(c)
		}
	})
}

// bearer is an Authorization header for tenant with role.
func bearer(t *testing.T, tenant, role string) string {
	t.Helper()
	c := jwt.MapClaims{"sub": tenant + "-" + role, "role": role, "tenant": tenant, "exp": time.Now().Add(time.Hour).Unix()}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString([]byte(jwtSecret))
	if err != nil {
		t.Fatal(err)
	}
	return "Bearer " + s
}

func want(t *testing.T, r nodetest.Response, status int) {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status %d, want %d: %s", r.Status, status, r.Body)
	}
}

// pushOne pushes one message and returns its partition id.
func pushOne(t *testing.T, n *nodetest.Node, tok, queue, tx string) string {
	t.Helper()
	r := n.DoAuth(t, tok, "POST", "/api/v1/push",
		fmt.Sprintf(`{"items":[{"queue":%q,"transactionId":%q,"payload":{"tx":%q}}]}`, queue, tx, tx))
	want(t, r, 201)
	pid, _ := r.Arr(t)[0]["partitionId"].(string)
	if pid == "" {
		t.Fatalf("push answered no partitionId: %s", r.Body)
	}
	return pid
}

func TestTracesRecordReadAndTenants(t *testing.T) {
	n := authNode(t, nil)
	acmeRW, acmeRO, acmeAdmin := bearer(t, "acme", "read-write"), bearer(t, "acme", "read-only"), bearer(t, "acme", "admin")
	globexRW, globexRO := bearer(t, "globex", "read-write"), bearer(t, "globex", "read-only")

	pid := pushOne(t, n, acmeRW, "orders", "tx1")
	pushOne(t, n, acmeRW, "orders", "tx2")
	trace := func(tok, tx, names, event string) nodetest.Response {
		return n.DoAuth(t, tok, "POST", "/api/v1/traces", fmt.Sprintf(
			`{"transactionId":%q,"partitionId":%q,"consumerGroup":null,"traceNames":%s,"eventType":%s,"data":{"step":%q}}`,
			tx, pid, names, event, tx+event))
	}

	// Roles: none → 401, read-only → 403 on the write, read-only may read.
	want(t, trace("", "tx1", "null", "null"), 401)
	want(t, trace(acmeRO, "tx1", "null", "null"), 403)
	want(t, n.DoAuth(t, "", "GET", "/api/v1/traces/names", nil), 401)

	r := trace(acmeRW, "tx1", `["order-1","batch","order-1"]`, "null")
	want(t, r, 201)
	if o := r.Obj(t); o["success"] != true || o["traceId"] == "" {
		t.Fatalf("record answer %v", o)
	}
	want(t, trace(acmeRW, "tx1", `"order-1"`, `"error"`), 201)
	want(t, trace(acmeRW, "tx2", `["order-1"]`, `"info"`), 201)
	want(t, trace(acmeRW, "tx2", `null`, `"info"`), 201)
	// An unknown message, and another tenant's message, are 404.
	want(t, trace(acmeRW, "nope", "null", "null"), 404)
	want(t, trace(globexRW, "tx1", `["order-1"]`, "null"), 404)

	// One message's traces, oldest first, names sorted and deduplicated.
	r = n.DoAuth(t, acmeRO, "GET", "/api/v1/traces/"+pid+"/tx1", nil)
	want(t, r, 200)
	traces := r.Obj(t)["traces"].([]any)
	if len(traces) != 2 {
		t.Fatalf("tx1 traces: %s", r.Body)
	}
	first, second := traces[0].(map[string]any), traces[1].(map[string]any)
	if first["event_type"] != "info" || second["event_type"] != "error" || first["consumer_group"] != "__QUEUE_MODE__" {
		t.Errorf("tx1 traces out of order or defaults wrong: %s", r.Body)
	}
	if fmt.Sprint(first["trace_names"]) != "[batch order-1]" || first["data"].(map[string]any)["step"] != "tx1null" {
		t.Errorf("first trace %v", first)
	}
	if first["worker_id"] == "" || first["created_at"] == nil || first["id"] == nil {
		t.Errorf("first trace lacks fields: %v", first)
	}
	// Another tenant sees nothing of them.
	r = n.DoAuth(t, globexRO, "GET", "/api/v1/traces/"+pid+"/tx1", nil)
	want(t, r, 200)
	if got := r.Obj(t)["traces"].([]any); len(got) != 0 {
		t.Fatalf("globex sees acme's traces: %s", r.Body)
	}

	// By name: total from the counters, page oldest first with the message.
	r = n.DoAuth(t, acmeRO, "GET", "/api/v1/traces/by-name/order-1?limit=2", nil)
	want(t, r, 200)
	o := r.Obj(t)
	page := o["traces"].([]any)
	if o["total"] != 3.0 || len(page) != 2 {
		t.Fatalf("by-name page: %s", r.Body)
	}
	p0 := page[0].(map[string]any)
	if p0["transaction_id"] != "tx1" || p0["queue_name"] != "orders" || p0["partition_name"] != "Default" ||
		p0["partition_id"] != pid || p0["message_payload"].(map[string]any)["tx"] != "tx1" {
		t.Errorf("by-name first: %v", p0)
	}
	if pg := o["pagination"].(map[string]any); pg["limit"] != 2.0 || pg["offset"] != 0.0 {
		t.Errorf("pagination %v", pg)
	}
	r = n.DoAuth(t, acmeRO, "GET", "/api/v1/traces/by-name/order-1?limit=2&offset=2", nil)
	if page := r.Obj(t)["traces"].([]any); len(page) != 1 || page[0].(map[string]any)["transaction_id"] != "tx2" {
		t.Errorf("by-name second page: %s", r.Body)
	}
	r = n.DoAuth(t, globexRO, "GET", "/api/v1/traces/by-name/order-1", nil)
	if o := r.Obj(t); o["total"] != 0.0 || len(o["traces"].([]any)) != 0 {
		t.Errorf("globex by-name: %s", r.Body)
	}

	// Names with counts: order-1 on 3 traces of 2 messages, batch on 1.
	r = n.DoAuth(t, acmeRO, "GET", "/api/v1/traces/names", nil)
	want(t, r, 200)
	o = r.Obj(t)
	counts := map[string]string{}
	for _, e := range o["trace_names"].([]any) {
		m := e.(map[string]any)
		counts[m["trace_name"].(string)] = fmt.Sprintf("%v/%v", m["trace_count"], m["message_count"])
		if m["last_seen"] == nil {
			t.Errorf("name without last_seen: %v", m)
		}
	}
	if o["total"] != 2.0 || counts["order-1"] != "3/2" || counts["batch"] != "1/1" {
		t.Errorf("names: %s", r.Body)
	}
	r = n.DoAuth(t, globexRO, "GET", "/api/v1/traces/names", nil)
	if o := r.Obj(t); o["total"] != 0.0 || len(o["trace_names"].([]any)) != 0 {
		t.Errorf("globex names: %s", r.Body)
	}

	// Bad input is a 4xx JSON error.
	for _, c := range []struct {
		body   string
		status int
	}{
		{`{"transactionId":"tx1","partitionId":"not-a-uuid","data":{}}`, 400},
		{`{"transactionId":"tx1","partitionId":"` + pid + `"}`, 400},
		{`{"partitionId":"` + pid + `","data":{}}`, 400},
		{`{"transactionId":"tx1","partitionId":"` + pid + `","data":{},"traceNames":[1]}`, 400},
		{`{"transactionId":"tx1","partitionId":"` + pid + `","data":{},"traceNames":["` + strings.Repeat("n", 256) + `"]}`, 400},
		{`{"transactionId":"tx1","partitionId":"` + pid + `","data":{},"traceNames":[` + strings.Repeat(`"a",`, 32) + `"b"]}`, 400},
		{`{"transactionId":"tx1","partitionId":"` + pid + `","data":"` + strings.Repeat("x", 70000) + `"}`, 413},
		{`{"transactionId":"tx1","partitionId":"` + pid + `","data":"\u0000"}`, 400},
		{`[1]`, 400},
	} {
		r := n.DoAuth(t, acmeRW, "POST", "/api/v1/traces", c.body)
		if r.Status != c.status || !strings.Contains(string(r.Body), `"error"`) {
			t.Errorf("%.80s: %d %s, want %d", c.body, r.Status, r.Body, c.status)
		}
	}
	want(t, n.DoAuth(t, acmeRO, "GET", "/api/v1/traces/x/tx1", nil), 400)
	want(t, n.DoAuth(t, acmeRO, "GET", "/api/v1/traces/names?offset=100001", nil), 400)

	// Deleting the queue takes its traces and their names along.
	want(t, n.DoAuth(t, acmeAdmin, "DELETE", "/api/v1/resources/queues/orders", nil), 200)
	r = n.DoAuth(t, acmeRO, "GET", "/api/v1/traces/by-name/"+url.PathEscape("order-1"), nil)
	if o := r.Obj(t); o["total"] != 0.0 || len(o["traces"].([]any)) != 0 {
		t.Errorf("by-name after queue delete: %s", r.Body)
	}
	r = n.DoAuth(t, acmeRO, "GET", "/api/v1/traces/names", nil)
	if o := r.Obj(t); o["total"] != 0.0 {
		t.Errorf("names after queue delete: %s", r.Body)
	}
	r = n.DoAuth(t, acmeRO, "GET", "/api/v1/traces/"+pid+"/tx1", nil)
	if got := r.Obj(t)["traces"].([]any); len(got) != 0 {
		t.Errorf("message traces after queue delete: %s", r.Body)
	}
}
