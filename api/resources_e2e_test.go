package api_test

// Real node, real PostgreSQL: the resource, message and consumer-group
// endpoints (docs/api.md, "Resources, messages and consumer groups").

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"queen-node/broker"
	"queen-node/internal/nodetest"
	"queen-node/node"
)

// rc is a small client for these tests: one node, one Authorization value.
type rc struct {
	t    *testing.T
	n    *nodetest.Node
	auth string
}

func (c rc) do(method, path string, body any) nodetest.Response {
	c.t.Helper()
	return c.n.DoAuth(c.t, c.auth, method, path, body)
}

// ok sends a request that must answer want, and returns its body.
func (c rc) ok(want int, method, path string, body any) nodetest.Response {
	c.t.Helper()
	r := c.do(method, path, body)
	if r.Status != want {
		c.t.Fatalf("%s %s: status %d, want %d; body %s", method, path, r.Status, want, r.Body)
	}
	return r
}

// push stores payloads {"i": n} under the given transaction ids in one
// partition and returns the partition id.
func (c rc) push(queue, partition string, txids ...string) string {
	c.t.Helper()
	items := make([]msg, len(txids))
	for i, tx := range txids {
		items[i] = msg{"queue": queue, "partition": partition, "transactionId": tx, "payload": msg{"tx": tx}}
	}
	var res []msg
	c.ok(201, "POST", "/api/v1/push", msg{"items": items}).JSON(c.t, &res)
	for _, it := range res {
		if it["status"] != "queued" {
			c.t.Fatalf("push %v: %v", txids, res)
		}
	}
	return res[0]["partitionId"].(string)
}

// pop pops up to batch messages of one partition for the group (leased) and
// returns their transaction ids and lease id; none is a 204.
func (c rc) pop(queue, partition, group string, batch int) (txids []string, lease string) {
	c.t.Helper()
	path := fmt.Sprintf("/api/v1/pop/queue/%s/partition/%s?wait=false&batch=%d", queue, partition, batch)
	if group != "" {
		path += "&consumerGroup=" + url.QueryEscape(group)
	}
	r := c.do("GET", path, nil)
	if r.Status == 204 {
		return nil, ""
	}
	if r.Status != 200 {
		c.t.Fatalf("pop %s: %d %s", path, r.Status, r.Body)
	}
	for _, m := range r.Obj(c.t)["messages"].([]any) {
		mm := m.(msg)
		txids = append(txids, mm["transactionId"].(string))
		lease = mm["leaseId"].(string)
	}
	return txids, lease
}

// ack acks the transaction ids completed under lease, one batch; it returns
// each item's error ("" = success).
func (c rc) ack(pid, lease string, txids ...string) []string {
	c.t.Helper()
	acks := make([]msg, len(txids))
	for i, tx := range txids {
		acks[i] = msg{"transactionId": tx, "partitionId": pid, "status": "completed", "leaseId": lease}
	}
	var res []msg
	c.ok(200, "POST", "/api/v1/ack/batch", msg{"acknowledgments": acks}).JSON(c.t, &res)
	errs := make([]string, len(res))
	for i, it := range res {
		if it["success"] != true {
			errs[i], _ = it["error"].(string)
			if errs[i] == "" {
				errs[i] = "failed"
			}
		}
	}
	return errs
}

func num(t *testing.T, m msg, path ...string) float64 {
	t.Helper()
	var v any = m
	for _, k := range path {
		o, ok := v.(msg)
		if !ok {
			t.Fatalf("%v: no object at %q in %v", path, k, m)
		}
		v = o[k]
	}
	f, ok := v.(float64)
	if !ok {
		t.Fatalf("%v = %v (%T), want a number", path, v, v)
	}
	return f
}

func wantCounts(t *testing.T, what string, got any, total, pending, processing, completed float64) {
	t.Helper()
	m := got.(msg)
	for k, want := range map[string]float64{"total": total, "pending": pending, "processing": processing, "completed": completed} {
		if m[k] != want {
			t.Fatalf("%s: %s = %v, want %v (counts %v)", what, k, m[k], want, m)
		}
	}
}

// TestResourceAndGroupReads: one queue with three partitions, one group
// halfway through a leased batch; every read endpoint reports it.
func TestResourceAndGroupReads(t *testing.T) {
	c := rc{t: t, n: nodetest.Start(t)}
	c.ok(200, "POST", "/api/v1/configure", msg{"queue": "orders", "namespace": "shop", "task": "billing"})
	p1 := c.push("orders", "p1", "a1", "a2", "a3", "a4", "a5")
	c.push("orders", "p2", "b1", "b2", "b3")
	got, lease := c.pop("orders", "p1", "", 2)
	if !slices.Equal(got, []string{"a1", "a2"}) {
		t.Fatalf("pop: %v", got)
	}
	if errs := c.ack(p1, lease, "a1"); errs[0] != "" {
		t.Fatalf("ack: %v", errs)
	}
	// p1: a1 completed, a2 in the lease, a3..a5 pending; p2 unread: 3 pending.

	ov := c.ok(200, "GET", "/api/v1/resources/overview", nil).Obj(t)
	if ov["queues"] != 1.0 || ov["partitions"] != 3.0 || ov["namespaces"] != 1.0 || ov["tasks"] != 1.0 {
		t.Fatalf("overview: %v", ov)
	}
	wantCounts(t, "overview", ov["messages"], 8, 6, 1, 1)

	ql := c.ok(200, "GET", "/api/v1/resources/queues?namespace=shop", nil).Obj(t)
	qs := ql["queues"].([]any)
	if len(qs) != 1 || qs[0].(msg)["name"] != "orders" || qs[0].(msg)["partitions"] != 3.0 || ql["total"] != 1.0 {
		t.Fatalf("queues: %v", ql)
	}
	wantCounts(t, "queue list", qs[0].(msg)["messages"], 8, 6, 1, 1)
	if q := c.ok(200, "GET", "/api/v1/resources/queues?namespace=other", nil).Obj(t); len(q["queues"].([]any)) != 0 {
		t.Fatalf("namespace filter: %v", q)
	}

	qd := c.ok(200, "GET", "/api/v1/resources/queues/orders", nil).Obj(t)
	parts := qd["partitions"].([]any)
	var names []string
	for _, p := range parts {
		names = append(names, p.(msg)["name"].(string))
	}
	if !slices.Equal(names, []string{"Default", "p1", "p2"}) || qd["namespace"] != "shop" {
		t.Fatalf("queue detail: %v", qd)
	}
	wantCounts(t, "p1", parts[1].(msg)["messages"], 5, 3, 1, 1)
	wantCounts(t, "p2", parts[2].(msg)["messages"], 3, 3, 0, 0)
	wantCounts(t, "totals", qd["totals"], 8, 6, 1, 1)
	groups := qd["consumerGroups"].([]any)
	if len(groups) != 1 || groups[0].(msg)["name"] != "__QUEUE_MODE__" || groups[0].(msg)["totalLag"] != 4.0 {
		t.Fatalf("queue detail groups: %v", groups)
	}
	c.ok(404, "GET", "/api/v1/resources/queues/missing", nil)

	ns := c.ok(200, "GET", "/api/v1/resources/namespaces", nil).Obj(t)["namespaces"].([]any)
	if len(ns) != 1 || ns[0].(msg)["namespace"] != "shop" || ns[0].(msg)["queues"] != 1.0 || ns[0].(msg)["partitions"] != 3.0 {
		t.Fatalf("namespaces: %v", ns)
	}
	ts := c.ok(200, "GET", "/api/v1/resources/tasks", nil).Obj(t)["tasks"].([]any)
	if len(ts) != 1 || ts[0].(msg)["task"] != "billing" {
		t.Fatalf("tasks: %v", ts)
	}

	// messages: every status, newest first within a partition
	list := func(query string) (txs, statuses []string) {
		t.Helper()
		body := c.ok(200, "GET", "/api/v1/messages?queue=orders"+query, nil).Obj(t)
		for _, m := range body["messages"].([]any) {
			txs = append(txs, m.(msg)["transactionId"].(string))
			statuses = append(statuses, m.(msg)["status"].(string))
		}
		return txs, statuses
	}
	txs, sts := list("&partition=p1")
	if !slices.Equal(txs, []string{"a5", "a4", "a3", "a2", "a1"}) ||
		!slices.Equal(sts, []string{"pending", "pending", "pending", "processing", "completed"}) {
		t.Fatalf("p1 messages: %v %v", txs, sts)
	}
	for status, want := range map[string][]string{"pending": {"a5", "a4", "a3"}, "processing": {"a2"}, "completed": {"a1"}, "dead_letter": nil} {
		if txs, _ := list("&partition=p1&status=" + status); !slices.Equal(txs, want) {
			t.Fatalf("status %s: %v, want %v", status, txs, want)
		}
	}
	all, _ := list("")
	if len(all) != 8 {
		t.Fatalf("all messages: %v", all)
	}
	var paged []string
	for off := 0; off < 10; off += 3 {
		p, _ := list(fmt.Sprintf("&limit=3&offset=%d", off))
		paged = append(paged, p...)
	}
	if !slices.Equal(paged, all) {
		t.Fatalf("pages %v != list %v", paged, all)
	}
	if txs, _ := list("&partition=p1&consumerGroup=nobody"); len(txs) != 5 {
		t.Fatalf("another group sees every message pending: %v", txs)
	}
	c.ok(404, "GET", "/api/v1/messages?queue=missing", nil)

	m := c.ok(200, "GET", "/api/v1/messages/"+p1+"/a2", nil).Obj(t)
	if m["status"] != "processing" || m["leaseExpiresAt"] == nil || m["payload"].(msg)["tx"] != "a2" || m["queuePath"] != "orders/p1" {
		t.Fatalf("message: %v", m)
	}
	if m := c.ok(200, "GET", "/api/v1/messages/"+p1+"/a1", nil).Obj(t); m["status"] != "completed" {
		t.Fatalf("a1: %v", m)
	}
	c.ok(404, "GET", "/api/v1/messages/"+p1+"/nope", nil)

	// consumer groups
	var gl []msg
	c.ok(200, "GET", "/api/v1/consumer-groups", nil).JSON(t, &gl)
	if len(gl) != 1 || gl[0]["name"] != "__QUEUE_MODE__" || gl[0]["queueName"] != "orders" || gl[0]["members"] != 1.0 ||
		gl[0]["totalLag"] != 4.0 || gl[0]["leasedPartitions"] != 1.0 {
		t.Fatalf("groups: %v", gl)
	}
	gd := c.ok(200, "GET", "/api/v1/consumer-groups/__QUEUE_MODE__", nil).Obj(t)
	cur := gd["orders"].(msg)["partitions"].([]any)
	if len(cur) != 1 || cur[0].(msg)["partition"] != "p1" || cur[0].(msg)["offsetLag"] != 4.0 || cur[0].(msg)["leaseActive"] != true ||
		cur[0].(msg)["committedOffset"] != 1.0 {
		t.Fatalf("group detail: %v", gd)
	}
	if gd := c.ok(200, "GET", "/api/v1/consumer-groups/nobody", nil).Obj(t); len(gd) != 0 {
		t.Fatalf("unknown group: %v", gd)
	}
	var lag []msg
	c.ok(200, "GET", "/api/v1/consumer-groups/lagging?minLagSeconds=0", nil).JSON(t, &lag)
	if len(lag) != 1 || lag[0]["partition_name"] != "p1" || lag[0]["offset_lag"] != 4.0 || lag[0]["oldest_unconsumed_at"] == nil {
		t.Fatalf("lagging: %v", lag)
	}
	c.ok(200, "GET", "/api/v1/consumer-groups/lagging", nil).JSON(t, &lag)
	if len(lag) != 0 {
		t.Fatalf("lagging over an hour: %v", lag)
	}

	// subscription: moves the recorded start of a named group
	if got, _ := c.pop("orders", "p2", "audit", 1); !slices.Equal(got, []string{"b1"}) {
		t.Fatalf("audit pop: %v", got)
	}
	sub := c.ok(200, "POST", "/api/v1/consumer-groups/audit/subscription", msg{"subscriptionTimestamp": "2030-01-02T03:04:05Z"}).Obj(t)
	if sub["rowsUpdated"] != 1.0 || sub["newTimestamp"] != "2030-01-02T03:04:05.000Z" {
		t.Fatalf("subscription: %v", sub)
	}
	c.ok(200, "GET", "/api/v1/consumer-groups", nil).JSON(t, &gl)
	i := slices.IndexFunc(gl, func(g msg) bool { return g["name"] == "audit" })
	if i < 0 || gl[i]["subscriptionTimestamp"] != "2030-01-02T03:04:05.000Z" {
		t.Fatalf("groups after the subscription update: %v", gl)
	}
	// a partition the group first reads after the move starts at the new
	// start: p1's messages are all older, so none is delivered
	if got, _ := c.pop("orders", "p1", "audit", 10); got != nil {
		t.Fatalf("audit on p1 after the subscription moved to 2030: %v", got)
	}

	// seek one partition to its end: the leased __QUEUE_MODE__ p1 cursor
	// passes everything and its lease ends
	sk := c.ok(200, "POST", "/api/v1/consumer-groups/__QUEUE_MODE__/queues/orders/partitions/p1/seek", nil).Obj(t)
	if sk["success"] != true || sk["partition"] != "p1" {
		t.Fatalf("seek: %v", sk)
	}
	if got, _ := c.pop("orders", "p1", "", 10); got != nil {
		t.Fatalf("pop after the seek to end: %v", got)
	}
	c.push("orders", "p1", "a6")
	if got, _ := c.pop("orders", "p1", "", 10); !slices.Equal(got, []string{"a6"}) {
		t.Fatalf("pop after the seek and a push: %v", got)
	}
	c.ok(404, "POST", "/api/v1/consumer-groups/g/queues/orders/partitions/none/seek", nil)

	if r := c.ok(200, "POST", "/api/v1/stats/refresh", nil).Obj(t); r["success"] != true {
		t.Fatalf("stats refresh: %v", r)
	}
}

// TestDeleteMessageKeepsCursors deletes a pending message, one in the middle
// of a leased batch and the last unresolved one of a leased batch: pops
// skip the hole, acks of the rest resolve the batch, and the lease ends
// with it.
func TestDeleteMessageKeepsCursors(t *testing.T) {
	c := rc{t: t, n: nodetest.Start(t)}
	del := func(pid, tx string, want int) {
		t.Helper()
		c.ok(want, "DELETE", "/api/v1/messages/"+pid+"/"+tx, nil)
	}
	lagOf := func(partition string) float64 {
		t.Helper()
		gd := c.ok(200, "GET", "/api/v1/consumer-groups/__QUEUE_MODE__", nil).Obj(t)
		for _, p := range gd["q"].(msg)["partitions"].([]any) {
			if p.(msg)["partition"] == partition {
				return p.(msg)["offsetLag"].(float64)
			}
		}
		t.Fatalf("no cursor on %s: %v", partition, gd)
		return 0
	}

	// a pending message, before any group read the partition
	pa := c.push("q", "a", "a1", "a2", "a3", "a4", "a5")
	del(pa, "a3", 200)
	del(pa, "a3", 404)
	got, lease := c.pop("q", "a", "", 10)
	if !slices.Equal(got, []string{"a1", "a2", "a4", "a5"}) {
		t.Fatalf("pop after deleting a pending message: %v", got)
	}
	if errs := c.ack(pa, lease, got...); slices.ContainsFunc(errs, func(e string) bool { return e != "" }) {
		t.Fatalf("acks: %v", errs)
	}
	if got, _ := c.pop("q", "a", "", 10); got != nil {
		t.Fatalf("redelivered: %v", got)
	}
	if lag := lagOf("a"); lag != 0 {
		t.Fatalf("cursor on a did not pass the hole: lag %v", lag)
	}

	// a pending message behind the cursor of a group that read up to it
	c.push("q", "a", "a6", "a7")
	del(pa, "a6", 200)
	if got, _ := c.pop("q", "a", "", 10); !slices.Equal(got, []string{"a7"}) {
		t.Fatalf("pop after deleting the next message: %v", got)
	}

	// one in the middle of a leased batch
	pb := c.push("q", "b", "b1", "b2", "b3", "b4", "b5")
	got, lease = c.pop("q", "b", "", 5)
	if len(got) != 5 {
		t.Fatalf("pop b: %v", got)
	}
	del(pb, "b3", 200)
	if m := c.ok(200, "GET", "/api/v1/messages?queue=q&partition=b&status=processing", nil).Obj(t); len(m["messages"].([]any)) != 4 {
		t.Fatalf("processing after the delete: %v", m)
	}
	errs := c.ack(pb, lease, "b1", "b2", "b3", "b4", "b5")
	if !slices.Equal(errs, []string{"", "", "Message not found", "", ""}) {
		t.Fatalf("acks of a batch with a deleted message: %v", errs)
	}
	c.push("q", "b", "b6")
	if got, _ := c.pop("q", "b", "", 10); !slices.Equal(got, []string{"b6"}) {
		t.Fatalf("the lease did not end with its batch: %v", got)
	}

	// the last unresolved message of a leased batch: the delete ends the lease
	pc := c.push("q", "c", "c1", "c2", "c3")
	got, lease = c.pop("q", "c", "", 3)
	if len(got) != 3 {
		t.Fatalf("pop c: %v", got)
	}
	if errs := c.ack(pc, lease, "c1", "c2"); slices.ContainsFunc(errs, func(e string) bool { return e != "" }) {
		t.Fatalf("acks: %v", errs)
	}
	c.push("q", "c", "c4")
	if got, _ := c.pop("q", "c", "", 10); got != nil {
		t.Fatalf("c is still leased, yet a pop got %v", got)
	}
	del(pc, "c3", 200)
	if got, _ := c.pop("q", "c", "", 10); !slices.Equal(got, []string{"c4"}) {
		t.Fatalf("after deleting the last unresolved message of the lease: %v", got)
	}

	// a completed message: nothing to move
	if r := c.ok(200, "DELETE", "/api/v1/messages/"+pc+"/c1", nil).Obj(t); r["cursorsMoved"] != 0.0 {
		t.Fatalf("delete of a completed message: %v", r)
	}
	// a named group that had not read the partition yet still reads the rest
	if got, _ := c.pop("q", "c", "late", 10); !slices.Equal(got, []string{"c2", "c4"}) {
		t.Fatalf("a late group: %v", got)
	}
}

// startJWT starts a node with HS256 JWT auth under key, and returns it with
// a maker of "Bearer ..." headers for a tenant and role.
func startJWT(t *testing.T, key string) (*nodetest.Node, func(tenant, role string) string) {
	t.Helper()
	n := nodetest.StartConfig(t, func(c *node.Config) {
		c.Auth.Enabled = true
		c.Auth.Secret = key
	})
	return n, func(tenant, role string) string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": tenant + "-user", "role": role,
			"tenant": tenant, "exp": time.Now().Add(time.Hour).Unix()}).SignedString([]byte(key))
		if err != nil {
			t.Fatal(err)
		}
		return "Bearer " + s
	}
}

// TestReadsTenantsAndRoles: with JWT on, each endpoint class answers 401
// without a token, 403 below its role and 200 with it; and one tenant
// never sees, seeks or deletes another's queues, messages or groups.
func TestReadsTenantsAndRoles(t *testing.T) {
	n, tok := startJWT(t, "reads-secret-0123456789")
	acme := rc{t: t, n: n, auth: tok("acme", "admin")}
	globex := rc{t: t, n: n, auth: tok("globex", "admin")}

	pid := acme.push("acme-only", "p", "x1", "x2")
	if got, _ := acme.pop("acme-only", "p", "g", 1); len(got) != 1 {
		t.Fatalf("acme pop: %v", got)
	}
	globex.push("shared-name", "p", "y1")
	acme.push("shared-name", "p", "z1", "z2", "z3")

	msgPath := "/api/v1/messages/" + pid + "/x2"
	classes := []struct {
		method, path string
		body         any
		role         string // lowest role that may
		below        string // a role one below it ("" = none)
	}{
		{"GET", "/api/v1/resources/overview", nil, "read-only", ""},
		{"GET", "/api/v1/resources/queues/acme-only", nil, "read-only", ""},
		{"GET", "/api/v1/messages?queue=acme-only", nil, "read-only", ""},
		{"GET", "/api/v1/consumer-groups/lagging?minLagSeconds=0", nil, "read-only", ""},
		{"POST", "/api/v1/consumer-groups/g/subscription", msg{"subscriptionTimestamp": "2020-01-01T00:00:00Z"}, "read-write", "read-only"},
		{"POST", "/api/v1/consumer-groups/g/queues/acme-only/partitions/p/seek", nil, "read-write", "read-only"},
		{"POST", "/api/v1/stats/refresh", nil, "admin", "read-write"},
		{"DELETE", msgPath, nil, "admin", "read-write"},
	}
	for _, cl := range classes {
		anon := rc{t: t, n: n}
		anon.ok(401, cl.method, cl.path, cl.body)
		if cl.below != "" {
			rc{t: t, n: n, auth: tok("acme", cl.below)}.ok(403, cl.method, cl.path, cl.body)
		}
		rc{t: t, n: n, auth: tok("acme", cl.role)}.ok(200, cl.method, cl.path, cl.body)
	}
	// x2 is gone for acme now; x1 stays, and globex can touch neither
	acme.ok(404, "GET", msgPath, nil)
	x1 := "/api/v1/messages/" + pid + "/x1"
	globex.ok(404, "GET", x1, nil)
	globex.ok(404, "DELETE", x1, nil)
	acme.ok(200, "GET", x1, nil)

	globex.ok(404, "GET", "/api/v1/resources/queues/acme-only", nil)
	globex.ok(404, "GET", "/api/v1/messages?queue=acme-only", nil)
	globex.ok(404, "POST", "/api/v1/consumer-groups/g/queues/acme-only/partitions/p/seek", nil)
	if r := globex.ok(200, "POST", "/api/v1/consumer-groups/g/subscription", msg{"subscriptionTimestamp": "2031-01-01T00:00:00Z"}).Obj(t); r["rowsUpdated"] != 0.0 {
		t.Fatalf("globex moved acme's subscription: %v", r)
	}
	if gd := globex.ok(200, "GET", "/api/v1/consumer-groups/g", nil).Obj(t); len(gd) != 0 {
		t.Fatalf("globex sees acme's group: %v", gd)
	}
	var gl []msg
	globex.ok(200, "GET", "/api/v1/consumer-groups", nil).JSON(t, &gl)
	if len(gl) != 0 {
		t.Fatalf("globex's group list: %v", gl)
	}
	ov := globex.ok(200, "GET", "/api/v1/resources/overview", nil).Obj(t)
	if ov["queues"] != 1.0 || num(t, ov, "messages", "total") != 1 {
		t.Fatalf("globex overview counts acme's queues: %v", ov)
	}
	ql := globex.ok(200, "GET", "/api/v1/resources/queues", nil).Obj(t)["queues"].([]any)
	if len(ql) != 1 || ql[0].(msg)["name"] != "shared-name" || num(t, ql[0].(msg), "messages", "total") != 1 {
		t.Fatalf("globex queue list: %v", ql)
	}
	body := globex.ok(200, "GET", "/api/v1/messages?queue=shared-name", nil).Obj(t)
	var txs []string
	for _, m := range body["messages"].([]any) {
		txs = append(txs, m.(msg)["transactionId"].(string))
	}
	if strings.Join(txs, ",") != "y1" {
		t.Fatalf("globex's messages of the shared queue name: %v", txs)
	}
	// acme's group g kept its 2020 start (set by acme above), not globex's 2031
	acme.ok(200, "GET", "/api/v1/consumer-groups", nil).JSON(t, &gl)
	i := slices.IndexFunc(gl, func(g msg) bool { return g["name"] == "g" })
	if i < 0 || gl[i]["subscriptionTimestamp"] != "2020-01-01T00:00:00.000Z" {
		t.Fatalf("acme's groups: %v", gl)
	}
}

// TestDeleteMessageWakesParkedPop: deleting the last unresolved message of
// a leased batch ends the lease, and a pop parked behind that lease gets the
// next message at once, not at its own re-poll (8 s at the earliest here) or the lease's
// expiry (300 s).
func TestDeleteMessageWakesParkedPop(t *testing.T) {
	c := rc{t: t, n: nodetest.Start(t, func(bc *broker.Config) {
		bc.PopBackoffMin, bc.PopBackoffMax = 8*time.Second, 20*time.Second
	})}
	pid := c.push("w", "p", "m1", "m2")
	got, lease := c.pop("w", "p", "", 2)
	if len(got) != 2 {
		t.Fatalf("pop: %v", got)
	}
	if errs := c.ack(pid, lease, "m1"); errs[0] != "" {
		t.Fatalf("ack: %v", errs)
	}
	c.push("w", "p", "m3")
	done := make(chan nodetest.Response, 1)
	go func() {
		done <- c.n.Do(t, "GET", "/api/v1/pop/queue/w/partition/p?wait=true&timeout=10000", nil)
	}()
	deadline := time.Now().Add(5 * time.Second)
	for c.n.Broker.Parked() < 1 {
		if time.Now().After(deadline) {
			t.Fatal("the pop never parked")
		}
		time.Sleep(5 * time.Millisecond)
	}
	deleted := time.Now()
	c.ok(200, "DELETE", "/api/v1/messages/"+pid+"/m2", nil)
	select {
	case r := <-done:
		if r.Status != 200 || !strings.Contains(string(r.Body), `"transactionId":"m3"`) {
			t.Fatalf("parked pop: %d %s", r.Status, r.Body)
		}
		if d := time.Since(deleted); d > 3*time.Second {
			t.Fatalf("the parked pop answered %v after the delete: not woken", d)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the parked pop never answered")
	}
}
