package api_test

// Real node, real PostgreSQL: the queue list's search and figures
// (docs/api.md, "Resources, messages and consumer groups").

import (
	"context"
	"fmt"
	"math"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"queen-node/internal/nodetest"
)

func queueNames(t *testing.T, body msg) []string {
	t.Helper()
	var names []string
	for _, q := range body["queues"].([]any) {
		names = append(names, q.(msg)["name"].(string))
	}
	return names
}

// TestQueueListSearch: the search is a case-insensitive substring of the
// name or the namespace, pages like the plain list with total counting the
// matches, and bad input is a 400.
func TestQueueListSearch(t *testing.T) {
	c := rc{t: t, n: nodetest.Start(t)}
	for i := range 7 {
		c.ok(200, "POST", "/api/v1/configure", msg{"queue": fmt.Sprintf("ql.s-%02d", i)})
	}
	c.ok(200, "POST", "/api/v1/configure", msg{"queue": "zz.alpha", "namespace": "QLNS"})
	c.ok(200, "POST", "/api/v1/configure", msg{"queue": "other"})

	list := func(query string) msg {
		t.Helper()
		return c.ok(200, "GET", "/api/v1/resources/queues?"+query, nil).Obj(t)
	}
	b := list("search=QL.S-&limit=3&offset=3")
	if got := queueNames(t, b); !slices.Equal(got, []string{"ql.s-03", "ql.s-04", "ql.s-05"}) || b["total"] != 7.0 ||
		num(t, b, "pagination", "total") != 7 {
		t.Fatalf("search page 2: %v, total %v", got, b["total"])
	}
	if got := queueNames(t, list("search=qlns")); !slices.Equal(got, []string{"zz.alpha"}) {
		t.Fatalf("search by namespace: %v", got)
	}
	if b := list("search=" + url.QueryEscape("%")); b["total"] != 0.0 {
		t.Fatalf("search %%: %v", queueNames(t, b))
	}
	if b := list("search="); b["total"] != 9.0 {
		t.Fatalf("empty search: total %v", b["total"])
	}
	for _, bad := range []string{strings.Repeat("a", 256), "%FF", "a%00"} {
		r := c.do("GET", "/api/v1/resources/queues?search="+bad, nil)
		if r.Status != 400 || !strings.Contains(string(r.Body), `"error"`) {
			t.Fatalf("search %.20q: %d %s", bad, r.Status, r.Body)
		}
	}
}

// TestQueueListFigures: two groups at different cursors, a dead letter and
// two queue-sampling rounds show in the queue's row of the list.
func TestQueueListFigures(t *testing.T) {
	n := nodetest.Start(t)
	c := rc{t: t, n: n}
	c.ok(200, "POST", "/api/v1/configure", msg{"queue": "ql.orders", "options": msg{"retryLimit": 0,
		"deadLetterQueue": true, "dlqAfterMaxRetries": true}})
	row := func() msg {
		t.Helper()
		qs := c.ok(200, "GET", "/api/v1/resources/queues?search=ql.orders", nil).Obj(t)["queues"].([]any)
		if len(qs) != 1 {
			t.Fatalf("list: %v", qs)
		}
		return qs[0].(msg)
	}
	if q := row(); q["oldestPendingAt"] != nil || len(q["consumerGroups"].([]any)) != 0 || q["throughput"] != nil {
		t.Fatalf("empty queue: %v", q)
	}

	pid := c.push("ql.orders", "p1", "a1", "a2", "a3", "a4", "a5")
	var created []string // the messages' creation times, by offset
	for _, m := range c.ok(200, "GET", "/api/v1/messages?queue=ql.orders&partition=p1", nil).Obj(t)["messages"].([]any) {
		created = append([]string{m.(msg)["createdAt"].(string)}, created...)
	}
	ack := func(group, status string, n int) {
		t.Helper()
		got, lease := c.pop("ql.orders", "p1", group, n)
		acks := make([]msg, len(got))
		for i, tx := range got {
			acks[i] = msg{"transactionId": tx, "partitionId": pid, "status": status, "leaseId": lease, "error": "boom"}
		}
		var res []msg
		c.ok(200, "POST", "/api/v1/ack/batch", msg{"consumerGroup": group, "acknowledgments": acks}).JSON(t, &res)
		if len(got) != n || len(res) != n || slices.ContainsFunc(res, func(r msg) bool { return r["success"] != true }) {
			t.Fatalf("%s: popped %v, acks %v", group, got, res)
		}
	}
	// g1 completes a1..a3; g2 fails a1, which retryLimit 0 dead-letters.
	ack("g1", "completed", 3)
	ack("g2", "failed", 1)

	q := row()
	a2, err := time.Parse(time.RFC3339Nano, created[1])
	if err != nil {
		t.Fatal(err)
	}
	if q["oldestPendingAt"] != a2.UTC().Truncate(time.Millisecond).Format("2006-01-02T15:04:05.000Z") || q["oldestPendingAgeSeconds"].(float64) < 0 ||
		q["oldestPendingAgeSeconds"].(float64) > 60 {
		t.Fatalf("oldest pending: %v (%v s), want %s (a2, past g2's cursor)", q["oldestPendingAt"], q["oldestPendingAgeSeconds"], created[1])
	}
	if num(t, q, "messages", "deadLetter") != 1 || num(t, q, "messages", "pending") != 4 || q["consumerGroupCount"] != 2.0 {
		t.Fatalf("counts: %v, groups %v", q["messages"], q["consumerGroupCount"])
	}
	var gs []string
	for _, g := range q["consumerGroups"].([]any) {
		g := g.(msg)
		gs = append(gs, fmt.Sprintf("%v:%v", g["name"], g["lag"]))
		if s := g["timeLagSeconds"].(float64); s <= 0 || s > 60 {
			t.Fatalf("group %v: timeLagSeconds %v", g["name"], s)
		}
	}
	if !slices.Equal(gs, []string{"g1:2", "g2:4"}) {
		t.Fatalf("groups: %v", gs)
	}

	// Throughput: the pushes between two rounds over the time between them.
	ctx := context.Background()
	if err := n.Node.Sampler().SampleNow(ctx); err != nil {
		t.Fatal(err)
	}
	c.push("ql.orders", "p1", "b1", "b2", "b3")
	if err := n.Node.Sampler().SampleNow(ctx); err != nil {
		t.Fatal(err)
	}
	tp, ok := row()["throughput"].(msg)
	if !ok {
		t.Fatalf("throughput: %v", row()["throughput"])
	}
	w, pushed := tp["windowSeconds"].(float64), tp["pushedPerSecond"].(float64)
	if w <= 0 || w > 60 || math.Abs(pushed*w-3) > 1e-6 || tp["consumedPerSecond"] != 0.0 {
		t.Fatalf("throughput: %v", tp)
	}
	if _, err := time.Parse(time.RFC3339, tp["sampledAt"].(string)); err != nil {
		t.Fatalf("sampledAt: %v", err)
	}
}
