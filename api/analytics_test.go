package api_test

// Status and analytics reads through a real node with JWT on, the samples
// forced with SampleNow (docs/api.md, "Status and analytics").

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"queen-node/internal/nodetest"
	"queen-node/node"
)

// sampleNow forces a node sample and a queue-sampling round.
func sampleNow(t *testing.T, n *nodetest.Node) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.Node.Sampler().SampleNow(ctx); err != nil {
		t.Fatalf("sample: %v", err)
	}
}

// execSQL runs statements on the node's database (what retention would do).
func execSQL(t *testing.T, n *nodetest.Node, sql string, args ...any) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, n.DBURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// sumSeries sums key over every point of every queue's timeSeries.
func sumSeries(t *testing.T, queues []any, queue, key string) float64 {
	t.Helper()
	var sum float64
	for _, q := range queues {
		qm := q.(map[string]any)
		if qm["queue"] != queue {
			continue
		}
		for _, p := range qm["timeSeries"].([]any) {
			sum += p.(map[string]any)[key].(float64)
		}
	}
	return sum
}

func TestStatusAndAnalytics(t *testing.T) {
	n := authNode(t, nil)
	rw, ro, admin := bearer(t, "acme", "read-write"), bearer(t, "acme", "read-only"), bearer(t, "acme", "admin")
	otherRO, otherAdmin := bearer(t, "globex", "read-only"), bearer(t, "globex", "admin")
	get := func(tok, path string) map[string]any {
		t.Helper()
		r := n.DoAuth(t, tok, "GET", path, nil)
		want(t, r, 200)
		return r.Obj(t)
	}

	want(t, n.DoAuth(t, rw, "POST", "/api/v1/configure",
		`{"queue":"orders","namespace":"shop","task":"billing","options":{"leaseTime":60}}`), 200)
	sampleNow(t, n) // the queue's baseline: nothing pushed yet

	items := []string{}
	for i := range 5 {
		items = append(items, fmt.Sprintf(`{"queue":"orders","transactionId":"d%d","payload":{"i":%d}}`, i, i))
	}
	for i := range 2 {
		items = append(items, fmt.Sprintf(`{"queue":"orders","partition":"p2","transactionId":"p%d","payload":{"i":%d}}`, i, i))
	}
	want(t, n.DoAuth(t, rw, "POST", "/api/v1/push", `{"items":[`+strings.Join(items, ",")+`]}`), 201)
	r := n.DoAuth(t, rw, "GET", "/api/v1/pop/queue/orders/partition/Default?batch=3&wait=false", nil)
	want(t, r, 200)
	var popped struct {
		Messages []struct {
			TransactionID string `json:"transactionId"`
			PartitionID   string `json:"partitionId"`
			LeaseID       string `json:"leaseId"`
		} `json:"messages"`
	}
	r.JSON(t, &popped)
	if len(popped.Messages) != 3 {
		t.Fatalf("popped %s", r.Body)
	}
	acks := []string{}
	for _, m := range popped.Messages {
		acks = append(acks, fmt.Sprintf(`{"transactionId":%q,"partitionId":%q,"leaseId":%q,"status":"completed"}`,
			m.TransactionID, m.PartitionID, m.LeaseID))
	}
	want(t, n.DoAuth(t, rw, "POST", "/api/v1/ack/batch", `{"acknowledgments":[`+strings.Join(acks, ",")+`]}`), 200)
	defaultPID := popped.Messages[0].PartitionID

	// A long-poll parked on another queue of the tenant while the node samples.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		req, _ := http.NewRequestWithContext(ctx, "GET", n.URL+"/api/v1/pop/queue/idle?wait=true&timeout=20000", nil)
		req.Header.Set("Authorization", rw)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for n.Broker.Parked() < 1 {
		if time.Now().After(deadline) {
			t.Fatal("the long-poll never parked")
		}
		time.Sleep(5 * time.Millisecond)
	}
	sampleNow(t, n)
	cancel()
	<-done

	// Roles: no token → 401; a token without a role → 403; read-only
	// reads tenant figures and the system-wide ones (which name no queue
	// or tenant), as the contract's section 3 says.
	norole := bearer(t, "acme", "")
	for _, p := range []string{"/api/v1/status", "/api/v1/status/queues", "/api/v1/analytics/queue-ops", "/api/v1/analytics/system-metrics"} {
		want(t, n.DoAuth(t, "", "GET", p, nil), 401)
		want(t, n.DoAuth(t, norole, "GET", p, nil), 403)
	}
	for _, p := range []string{"/api/v1/analytics/system-metrics", "/api/v1/analytics/worker-metrics", "/api/v1/analytics/postgres-stats"} {
		want(t, n.DoAuth(t, ro, "GET", p, nil), 200)
	}

	// Overview.
	o := get(ro, "/api/v1/status")
	msgs := o["messages"].(map[string]any)
	if msgs["total"] != 7.0 || msgs["pending"] != 4.0 || msgs["completed"] != 3.0 || msgs["processing"] != 0.0 {
		t.Errorf("status messages %v", msgs)
	}
	var ingested, processed float64
	for _, p := range o["throughput"].([]any) {
		ingested += p.(map[string]any)["ingested"].(float64)
		processed += p.(map[string]any)["processed"].(float64)
	}
	if ingested != 7 || processed != 3 {
		t.Errorf("throughput ingested %v processed %v, want 7 and 3: %v", ingested, processed, o["throughput"])
	}
	qs := o["queues"].([]any)
	if len(qs) != 1 || qs[0].(map[string]any)["name"] != "orders" || qs[0].(map[string]any)["partitions"] != 2.0 ||
		qs[0].(map[string]any)["totalConsumed"] != 3.0 {
		t.Errorf("status queues %v", qs)
	}
	if o["bucketMinutes"] != 1.0 || o["timeRange"] == nil || o["leases"] == nil || o["deadLetterQueue"] == nil {
		t.Errorf("status shape %v", o)
	}
	o = get(otherRO, "/api/v1/status")
	if o["messages"].(map[string]any)["total"] != 0.0 || len(o["queues"].([]any)) != 0 || len(o["throughput"].([]any)) != 0 {
		t.Errorf("globex sees acme's figures: %v", o)
	}

	// Queue list and detail.
	o = get(ro, "/api/v1/status/queues?namespace=shop")
	ql := o["queues"].([]any)
	if len(ql) != 1 {
		t.Fatalf("status/queues %v", o)
	}
	found := false
	for _, q := range ql {
		qm := q.(map[string]any)
		if qm["name"] == "orders" {
			found = true
			if m := qm["messages"].(map[string]any); m["total"] != 7.0 || m["pending"] != 4.0 || qm["partitions"] != 2.0 {
				t.Errorf("status/queues orders %v", qm)
			}
		}
	}
	if !found {
		t.Errorf("status/queues lacks orders: %v", o)
	}
	if o := get(ro, "/api/v1/status/queues?namespace=other"); len(o["queues"].([]any)) != 0 {
		t.Errorf("namespace filter: %v", o)
	}
	if o := get(otherRO, "/api/v1/status/queues"); len(o["queues"].([]any)) != 0 {
		t.Errorf("globex status/queues: %v", o)
	}
	o = get(ro, "/api/v1/status/queues/orders?includePartitions=true")
	if q := o["queue"].(map[string]any); q["namespace"] != "shop" || q["config"].(map[string]any)["leaseTime"] != 60.0 {
		t.Errorf("queue detail %v", q)
	}
	if tm := o["totals"].(map[string]any)["messages"].(map[string]any); tm["total"] != 7.0 || tm["pending"] != 4.0 {
		t.Errorf("queue totals %v", tm)
	}
	if parts := o["partitions"].([]any); len(parts) != 2 || parts[0].(map[string]any)["name"] != "Default" ||
		parts[0].(map[string]any)["messages"].(map[string]any)["completed"] != 3.0 {
		t.Errorf("queue partitions %v", parts)
	}
	if o := get(ro, "/api/v1/status/queues/orders"); o["partitions"] != nil {
		t.Errorf("partitions without includePartitions: %v", o)
	}
	want(t, n.DoAuth(t, otherRO, "GET", "/api/v1/status/queues/orders", nil), 404)

	// Messages, newest first, with their queue-mode state.
	r = n.DoAuth(t, ro, "GET", "/api/v1/status/queues/orders/messages", nil)
	want(t, r, 200)
	list := r.Arr(t)
	states := map[string]int{}
	for _, m := range list {
		states[m["status"].(string)]++
	}
	if len(list) != 7 || states["completed"] != 3 || states["pending"] != 4 || list[0]["queuePath"] == nil {
		t.Errorf("queue messages %v (states %v)", list, states)
	}
	if r := n.DoAuth(t, ro, "GET", "/api/v1/status/queues/orders/messages?limit=2&offset=1", nil); len(r.Arr(t)) != 2 {
		t.Errorf("messages page: %s", r.Body)
	}
	want(t, n.DoAuth(t, otherRO, "GET", "/api/v1/status/queues/orders/messages", nil), 404)

	// Time series.
	o = get(ro, "/api/v1/status/analytics?interval=minute")
	var pushed float64
	for _, p := range o["dataPoints"].([]any) {
		pushed += p.(map[string]any)["messages"].(float64)
	}
	if pushed != 7 || o["interval"] != "minute" || len(o["dataPoints"].([]any)) < 60 {
		t.Errorf("status/analytics pushed %v: %v", pushed, o)
	}
	o = get(ro, "/api/v1/analytics/queue-ops")
	if q := o["queues"].([]any); sumSeries(t, q, "orders", "pushed") != 7 || sumSeries(t, q, "orders", "consumed") != 3 {
		t.Errorf("queue-ops %v", o)
	}
	if o := get(otherRO, "/api/v1/analytics/queue-ops"); len(o["queues"].([]any)) != 0 {
		t.Errorf("globex queue-ops %v", o)
	}
	r = n.DoAuth(t, ro, "GET", "/api/v1/analytics/queue-lag?queue=orders", nil)
	want(t, r, 200)
	if lag := r.Arr(t); len(lag) == 0 || lag[0]["queue"] != "orders" || lag[0]["pending"] != 4.0 || lag[0]["lagSeconds"].(float64) < 0 {
		t.Errorf("queue-lag %s", r.Body)
	}
	o = get(ro, "/api/v1/analytics/queue-parked-replicas")
	if q := o["queues"].([]any); sumSeries(t, q, "idle", "parked") < 1 || sumSeries(t, q, "idle", "replicas") < 1 {
		t.Errorf("parked replicas %v", o)
	}
	if o := get(otherRO, "/api/v1/analytics/queue-parked-replicas"); len(o["queues"].([]any)) != 0 {
		t.Errorf("globex parked %v", o)
	}

	// Retention analytics count what left the log: delete the consumed
	// prefix as retention would, and sample.
	execSQL(t, n, `DELETE FROM queen.messages WHERE partition_id = $1 AND off <= 2`, defaultPID)
	sampleNow(t, n)
	o = get(ro, "/api/v1/analytics/retention")
	if o["totalDeleted"] != 2.0 || len(o["queues"].([]any)) != 1 {
		t.Errorf("retention %v", o)
	}
	if o := get(otherRO, "/api/v1/analytics/retention"); o["totalDeleted"] != 0.0 {
		t.Errorf("globex retention %v", o)
	}

	// System-wide reads: admin of any tenant (they name no queue).
	for _, tok := range []string{admin, otherAdmin} {
		o = get(tok, "/api/v1/analytics/system-metrics")
		reps := o["replicas"].([]any)
		if len(reps) != 1 || o["replicaCount"] != 1.0 {
			t.Fatalf("system-metrics %v", o)
		}
		pt := reps[0].(map[string]any)["timeSeries"].([]any)[0].(map[string]any)
		m := pt["metrics"].(map[string]any)
		if m["cpu"].(map[string]any)["percent"].(map[string]any)["max"] == nil ||
			m["memory"].(map[string]any)["rss_bytes"].(map[string]any)["last"] == nil ||
			m["database"].(map[string]any)["pool_max"].(map[string]any)["last"] != 16.0 {
			t.Errorf("system-metrics point %v", pt)
		}
	}
	o = get(admin, "/api/v1/analytics/worker-metrics")
	var pushedItems, pushes float64
	for _, p := range o["totals"].([]any) {
		pushedItems += p.(map[string]any)["pushedMessages"].(float64)
		pushes += p.(map[string]any)["pushes"].(float64)
	}
	if pushedItems != 7 || pushes != 1 || len(o["workers"].([]any)) != 1 {
		t.Errorf("worker-metrics pushes %v items %v: %v", pushes, pushedItems, o)
	}
	o = get(admin, "/api/v1/analytics/postgres-stats")
	sizes := fmt.Sprint(o["tableSizes"])
	if o["databaseCache"] == nil || !strings.Contains(sizes, "queue_samples") || !strings.Contains(sizes, "messages") {
		t.Errorf("postgres-stats %v", o)
	}

	// Bad windows are 400s.
	for _, q := range []string{
		"interval=second",
		"interval=10s&from=" + url.QueryEscape(time.Now().Add(-5*time.Hour).Format(time.RFC3339)), // 1800 buckets
		"from=2026-01-02T00:00:00Z&to=2026-01-01T00:00:00Z",
		"from=nope",
		"interval=minute&from=" + url.QueryEscape(time.Now().Add(-20*24*time.Hour).Format(time.RFC3339)),
		"from=2020-01-01T00:00:00Z",
	} {
		r := n.DoAuth(t, ro, "GET", "/api/v1/analytics/queue-ops?"+q, nil)
		if r.Status != 400 || !strings.Contains(string(r.Body), `"error"`) {
			t.Errorf("%s: %d %s, want a 400", q, r.Status, r.Body)
		}
	}
	want(t, n.DoAuth(t, ro, "GET", "/api/v1/status/queues/orders/messages?offset=10001", nil), 400)
}

// TestSamplerTrimsOldSamples: a round deletes samples older than Keep and
// keeps the rest; a deleted queue's samples go with it.
func TestSamplerTrimsOldSamples(t *testing.T) {
	n := nodetest.StartConfig(t, func(c *node.Config) { c.Stats.Keep = time.Hour })
	for _, age := range []string{"2 hours", "3 hours", "10 minutes"} {
		execSQL(t, n, `INSERT INTO queen.node_samples SELECT now() - $1::interval, 'old', 1000,
			0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0`, age)
		execSQL(t, n, `INSERT INTO queen.parked_samples VALUES ('t', 'q', now() - $1::interval, 'old', 1)`, age)
	}
	want(t, n.Do(t, "POST", "/api/v1/push", `{"items":[{"queue":"gone","payload":1}]}`), 201)
	sampleNow(t, n)
	count := func(sql string) int {
		t.Helper()
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, n.DBURL)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		var c int
		if err := conn.QueryRow(ctx, sql).Scan(&c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	if c := count(`SELECT count(*) FROM queen.node_samples WHERE node = 'old'`); c != 1 {
		t.Errorf("old node samples left: %d, want 1", c)
	}
	if c := count(`SELECT count(*) FROM queen.parked_samples WHERE node = 'old'`); c != 1 {
		t.Errorf("old parked samples left: %d, want 1", c)
	}
	if c := count(`SELECT count(*) FROM queen.node_samples WHERE node <> 'old'`); c < 1 {
		t.Errorf("the node wrote no sample")
	}
	if c := count(`SELECT count(*) FROM queen.queue_samples`); c != 1 {
		t.Errorf("queue samples: %d, want 1", c)
	}
	want(t, n.Do(t, "DELETE", "/api/v1/resources/queues/gone", nil), 200)
	if c := count(`SELECT count(*) FROM queen.queue_samples`); c != 0 {
		t.Errorf("a deleted queue's samples stay: %d", c)
	}
}

// TestAnalyticsAcrossNodes: two nodes on one database each write their
// samples; system-metrics lists both, and long-polls parked on one queue
// on both nodes count once per node.
func TestAnalyticsAcrossNodes(t *testing.T) {
	nodes := nodetest.StartCluster(t, 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n.DoCtx(ctx, t, "GET", "/api/v1/pop/queue/shared?wait=true&timeout=20000", nil)
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for nodes[0].Broker.Parked() < 1 || nodes[1].Broker.Parked() < 1 {
		if time.Now().After(deadline) {
			t.Fatal("the long-polls never parked")
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, n := range nodes {
		sampleNow(t, n)
	}
	cancel()
	wg.Wait()

	// Day buckets: both nodes' samples share one bucket.
	r := nodes[1].Do(t, "GET", "/api/v1/analytics/queue-parked-replicas?interval=day", nil)
	want(t, r, 200)
	q := r.Obj(t)["queues"].([]any)
	if sumSeries(t, q, "shared", "parked") != 2 || sumSeries(t, q, "shared", "replicas") != 2 {
		t.Errorf("parked replicas %s, want 2 parked on 2 nodes", r.Body)
	}
	r = nodes[0].Do(t, "GET", "/api/v1/analytics/system-metrics", nil)
	want(t, r, 200)
	if o := r.Obj(t); o["replicaCount"] != 2.0 {
		t.Errorf("system-metrics replicas %v, want both nodes", o["replicaCount"])
	}

	// Hints: a push on node 0 is a hint frame to node 1; the next samples
	// carry the mesh deltas and system-metrics answers them as rates.
	want(t, nodes[0].Do(t, "POST", "/api/v1/push", map[string]any{"items": []any{
		map[string]any{"queue": "hinted", "payload": map[string]any{"n": 1}}}}), 201)
	deadline = time.Now().Add(10 * time.Second)
	for nodes[1].Mesh.Stats().HintsReceived < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("node 1 never received a hint: %+v", nodes[1].Mesh.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, n := range nodes {
		sampleNow(t, n)
	}
	r = nodes[1].Do(t, "GET", "/api/v1/analytics/system-metrics?interval=10s", nil)
	want(t, r, 200)
	o := r.Obj(t)
	if o["bucketSeconds"] != 10.0 {
		t.Errorf("bucketSeconds %v, want 10", o["bucketSeconds"])
	}
	// The largest per-sample rate of path over a node's buckets.
	peak := func(node, group, key string) float64 {
		var top float64
		for _, rep := range o["replicas"].([]any) {
			rm := rep.(map[string]any)
			if rm["hostname"] != node {
				continue
			}
			for _, pt := range rm["timeSeries"].([]any) {
				g := pt.(map[string]any)["metrics"].(map[string]any)[group].(map[string]any)
				top = max(top, g[key].(map[string]any)["max"].(float64))
			}
		}
		return top
	}
	n0, n1 := nodes[0].Broker.NodeName(), nodes[1].Broker.NodeName()
	for _, c := range []struct {
		node, group, key string
	}{
		{n0, "mesh", "frames_sent_per_s"}, {n0, "mesh", "hints_sent_per_s"}, {n0, "requests", "pushed_per_s"},
		{n1, "mesh", "frames_received_per_s"}, {n1, "mesh", "hints_received_per_s"},
	} {
		if peak(c.node, c.group, c.key) <= 0 {
			t.Errorf("%s: %s.%s never above 0: %s", c.node, c.group, c.key, r.Body)
		}
	}
	for _, key := range []string{"dropped_per_s", "gaps_per_s"} {
		if v := peak(n0, "mesh", key); v != 0 {
			t.Errorf("mesh.%s %v on a healthy mesh, want 0", key, v)
		}
	}
	if _, ok := o["replicas"].([]any)[0].(map[string]any)["timeSeries"].([]any)[0].(map[string]any)["metrics"].(map[string]any)["hotlist"].(map[string]any)["reseeds_per_s"]; !ok {
		t.Errorf("no hotlist.reseeds_per_s: %s", r.Body)
	}
}
