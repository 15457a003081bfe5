package api_test

// Real node, real PostgreSQL: /status and /metrics as an operator sees them.
// This is the external test package because nodetest imports api; it holds
// the binary's only TestMain, so the internal api tests run under
// pgtest.Main too (they simply do not use the database).

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"queen-node/api"
	"queen-node/internal/nodetest"
	"queen-node/internal/pgtest"
	"queen-node/mesh"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type msg = map[string]any

// observedNode is a real broker behind an api.Server wired like main wires
// it: /status, /metrics and /metrics/prometheus registered with Handle.
type observedNode struct {
	*nodetest.Node // Do/DoCtx go to our server, not nodetest's
	srv            *api.Server
}

func startObservedNode(t *testing.T, withMesh bool) *observedNode {
	t.Helper()
	n := nodetest.Start(t)
	srv := api.New(n.Broker, n.Reads, api.DefaultConfig(), nil)
	ts := httptest.NewUnstartedServer(srv.Handler())
	httpAddr := ts.Listener.Addr().String()
	srv.Handle("GET /status", srv.StatusHandler(n.Broker, httpAddr))
	mh := srv.MetricsHandler(n.Broker, httpAddr)
	srv.Handle("GET /metrics", mh)
	srv.Handle("GET /metrics/prometheus", mh)
	ts.Start()
	t.Cleanup(func() {
		ts.CloseClientConnections()
		ts.Close()
	})
	if withMesh {
		mc := mesh.DefaultConfig()
		mc.Name = "status-node"
		mc.Bind, mc.Advertise = "127.0.0.1:0", ""
		mc.HTTPAddr, mc.Version = httpAddr, "dev"
		mc.Timings = mesh.FastTimings()
		m, err := mesh.New(mc, n.Broker)
		if err != nil {
			t.Fatalf("start mesh: %v", err)
		}
		n.Broker.SetMesh(m)
		t.Cleanup(m.Close)
	}
	return &observedNode{Node: &nodetest.Node{URL: ts.URL, Broker: n.Broker}, srv: srv}
}

// kind names the JSON type encoding/json decodes into.
func kind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case float64:
		return "number"
	case string:
		return "string"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return "?"
}

// wantFields checks that obj has every field with the JSON type given.
func wantFields(t *testing.T, where string, obj map[string]any, fields map[string]string) {
	t.Helper()
	for f, want := range fields {
		v, ok := obj[f]
		if !ok {
			t.Errorf("%s.%s: missing", where, f)
			continue
		}
		if got := kind(v); got != want {
			t.Errorf("%s.%s: %s %v, want %s", where, f, got, v, want)
		}
	}
}

func obj(t *testing.T, where string, v any) map[string]any {
	t.Helper()
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("%s: %s, want object", where, kind(v))
	}
	return m
}

func TestStatusHasEveryDesignField(t *testing.T) {
	n := startObservedNode(t, true)
	// A ring with work, so top_rings carries an entry to type-check. The
	// first pop provisions the group in PostgreSQL, the second registers
	// the ring; the push then marks it.
	for range 2 {
		n.Do(t, "GET", "/api/v1/pop/queue/typed?wait=false&consumerGroup=g", nil)
	}
	n.Do(t, "POST", "/api/v1/push", msg{"items": []msg{{"queue": "typed", "partition": "p1", "payload": 1}}})

	r := n.Do(t, "GET", "/status", nil)
	if r.Status != http.StatusOK {
		t.Fatalf("GET /status: %d %s", r.Status, r.Body)
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	if !bytes.Contains(r.Body, []byte("\n  \"node\"")) {
		t.Errorf("status is not indented for curl:\n%s", r.Body)
	}
	doc := r.Obj(t)
	wantFields(t, "status", doc, map[string]string{"node": "object", "hotlist": "object", "mesh": "object", "pg": "object", "requests": "object"})

	wantFields(t, "node", obj(t, "node", doc["node"]), map[string]string{
		"name": "string", "version": "string", "uptime_s": "number", "http_addr": "string"})

	hot := obj(t, "hotlist", doc["hotlist"])
	wantFields(t, "hotlist", hot, map[string]string{
		"enabled": "boolean", "rings": "number", "queues": "number", "ready": "number", "wheel": "number",
		"inflight": "number", "marks_local": "number", "marks_remote": "number", "reseeds": "number",
		"reseed_added": "number", "swept": "number", "top_rings": "array"})
	rings := hot["top_rings"].([]any)
	if len(rings) == 0 {
		t.Fatalf("top_rings empty after a push to a provisioned ring: %v", hot)
	}
	wantFields(t, "top_rings[0]", obj(t, "top_rings[0]", rings[0]), map[string]string{
		"tenant": "string", "queue": "string", "group": "string", "ready": "number", "wheel": "number"})

	ms := obj(t, "mesh", doc["mesh"])
	wantFields(t, "mesh", ms, map[string]string{
		"enabled": "boolean", "members": "array", "frames_sent": "number", "frames_received": "number",
		"hints_sent": "number", "hints_received": "number", "frames_dropped": "number",
		"frames_rejected": "number", "coalescer": "object"})
	wantFields(t, "mesh.coalescer", obj(t, "coalescer", ms["coalescer"]), map[string]string{
		"size": "number", "cap": "number", "dropped": "number"})
	members := ms["members"].([]any)
	if len(members) != 1 {
		t.Fatalf("a lone mesh node knows %d members, want itself: %v", len(members), members)
	}
	self := obj(t, "members[0]", members[0])
	wantFields(t, "members[0]", self, map[string]string{"name": "string", "addr": "string", "http_addr": "string", "state": "string"})
	if self["state"] != "alive" || self["name"] != "status-node" {
		t.Errorf("self member %v, want alive status-node", self)
	}

	wantFields(t, "pg", obj(t, "pg", doc["pg"]), map[string]string{
		"max_conns": "number", "total_conns": "number", "idle_conns": "number", "acquired_conns": "number"})
	wantFields(t, "requests", obj(t, "requests", doc["requests"]), map[string]string{
		"parked_long_polls": "number", "http_in_flight": "number", "pushes": "number", "pops": "number", "acks": "number"})
}

func TestStatusCountersMove(t *testing.T) {
	n := startObservedNode(t, false)
	requests := func() (map[string]any, map[string]any) {
		doc := n.Do(t, "GET", "/status", nil).Obj(t)
		return obj(t, "hotlist", doc["hotlist"]), obj(t, "requests", doc["requests"])
	}
	// First contact provisions the (queue, group) ring; marks land in it.
	n.Do(t, "GET", "/api/v1/pop/queue/moving?wait=false", nil)
	hot0, req0 := requests()

	r := n.Do(t, "POST", "/api/v1/push", msg{"items": []msg{
		{"queue": "moving", "partition": "a", "payload": 1},
		{"queue": "moving", "partition": "b", "payload": 2}}})
	if r.Status != http.StatusCreated && r.Status != http.StatusOK {
		t.Fatalf("push: %d %s", r.Status, r.Body)
	}
	var popped []map[string]any
	for deadline := time.Now().Add(10 * time.Second); len(popped) < 2 && time.Now().Before(deadline); {
		pr := n.Do(t, "GET", "/api/v1/pop/queue/moving?wait=true&timeout=1000&batch=10", nil)
		if pr.Status == http.StatusOK {
			for _, m := range pr.Obj(t)["messages"].([]any) {
				popped = append(popped, m.(map[string]any))
			}
		}
	}
	if len(popped) != 2 {
		t.Fatalf("popped %d messages, want 2", len(popped))
	}
	for _, m := range popped {
		ar := n.Do(t, "POST", "/api/v1/ack", msg{"transactionId": m["transactionId"], "partitionId": m["partitionId"], "leaseId": m["leaseId"]})
		if ar.Status != http.StatusOK {
			t.Fatalf("ack: %d %s", ar.Status, ar.Body)
		}
	}

	hot1, req1 := requests()
	grew := func(where, f string, before, after map[string]any, by float64) {
		t.Helper()
		if d := after[f].(float64) - before[f].(float64); d < by {
			t.Errorf("%s.%s grew by %v, want at least %v (before %v, after %v)", where, f, d, by, before[f], after[f])
		}
	}
	grew("hotlist", "marks_local", hot0, hot1, 2) // one mark per pushed partition
	grew("requests", "pushes", req0, req1, 1)
	grew("requests", "pushed_messages", req0, req1, 2)
	grew("requests", "pops", req0, req1, 1)
	grew("requests", "popped_messages", req0, req1, 2)
	grew("requests", "acks", req0, req1, 2)
}

// scrape fetches a metrics path and parses it with the Prometheus text parser.
func scrape(t *testing.T, n *observedNode, path string) map[string]*dto.MetricFamily {
	t.Helper()
	r := n.Do(t, "GET", path, nil)
	if r.Status != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, r.Status, r.Body)
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("GET %s: Content-Type %q, want the text exposition", path, ct)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(r.Body))
	if err != nil {
		t.Fatalf("GET %s: not Prometheus text: %v\n%s", path, err, r.Body)
	}
	return fams
}

func TestMetricsExposition(t *testing.T) {
	n := startObservedNode(t, true)
	n.Do(t, "GET", "/api/v1/pop/queue/metered?wait=false", nil)
	if r := n.Do(t, "POST", "/api/v1/push", msg{"items": []msg{{"queue": "metered", "partition": "p", "payload": 1}}}); r.Status >= 300 {
		t.Fatalf("push: %d %s", r.Status, r.Body)
	}
	n.Do(t, "GET", "/api/v1/pop/queue/metered?wait=false", nil)
	n.Do(t, "GET", "/api/v1/pop/queue/metered?wait=true&timeout=50", nil) // drained: a timeout
	n.Do(t, "GET", "/api/v1/pop/queue/metered?wait=false", nil)           // and an empty one

	fams := scrape(t, n, "/metrics")
	want := map[string]dto.MetricType{
		"queen_build_info": dto.MetricType_GAUGE, "queen_uptime_seconds": dto.MetricType_GAUGE,
		"queen_hotlist_rings": dto.MetricType_GAUGE, "queen_hotlist_ready_entries": dto.MetricType_GAUGE,
		"queen_hotlist_marks_total": dto.MetricType_COUNTER, "queen_hotlist_reseeds_total": dto.MetricType_COUNTER,
		"queen_hotlist_reseed_added_total": dto.MetricType_COUNTER, "queen_hotlist_swept_total": dto.MetricType_COUNTER,
		"queen_mesh_members": dto.MetricType_GAUGE, "queen_mesh_frames_sent_total": dto.MetricType_COUNTER,
		"queen_mesh_frames_received_total": dto.MetricType_COUNTER, "queen_mesh_hints_sent_total": dto.MetricType_COUNTER,
		"queen_mesh_hints_received_total": dto.MetricType_COUNTER, "queen_mesh_frames_dropped_total": dto.MetricType_COUNTER,
		"queen_mesh_frames_rejected_total": dto.MetricType_COUNTER, "queen_mesh_coalescer_size": dto.MetricType_GAUGE,
		"queen_mesh_coalescer_capacity": dto.MetricType_GAUGE, "queen_mesh_coalescer_dropped_total": dto.MetricType_COUNTER,
		"queen_pg_pool_max_conns": dto.MetricType_GAUGE, "queen_pg_pool_acquired_conns": dto.MetricType_GAUGE,
		"queen_pushes_total": dto.MetricType_COUNTER, "queen_pushed_messages_total": dto.MetricType_COUNTER,
		"queen_pops_total": dto.MetricType_COUNTER, "queen_popped_messages_total": dto.MetricType_COUNTER,
		"queen_acks_total": dto.MetricType_COUNTER, "queen_dead_lettered_total": dto.MetricType_COUNTER,
		"queen_parked_long_polls": dto.MetricType_GAUGE, "queen_http_requests_in_flight": dto.MetricType_GAUGE,
		"queen_http_request_duration_seconds": dto.MetricType_HISTOGRAM, "queen_pop_duration_seconds": dto.MetricType_HISTOGRAM,
		"go_goroutines": dto.MetricType_GAUGE, "process_start_time_seconds": dto.MetricType_GAUGE,
		// issue 9: retries, hint-port limits, rate limits, pruned marks
		"queen_pg_retries_total": dto.MetricType_COUNTER, "queen_mesh_inbound_streams": dto.MetricType_GAUGE,
		"queen_mesh_inbound_evicted_total": dto.MetricType_COUNTER, "queen_mesh_inbound_timed_out_total": dto.MetricType_COUNTER,
		"queen_mesh_gossip_errors_total": dto.MetricType_COUNTER, "queen_mesh_hints_rate_limited_total": dto.MetricType_COUNTER,
		"queen_hotlist_unconfirmed_entries": dto.MetricType_GAUGE, "queen_hotlist_pruned_total": dto.MetricType_COUNTER,
	}
	for name, typ := range want {
		f, ok := fams[name]
		if !ok {
			t.Errorf("family %s missing", name)
			continue
		}
		if f.GetType() != typ {
			t.Errorf("family %s: type %v, want %v", name, f.GetType(), typ)
		}
	}

	// The push route's pattern, never the raw path, labels the histogram.
	var pushCount uint64
	for _, m := range fams["queen_http_request_duration_seconds"].GetMetric() {
		l := labels(m)
		if strings.Contains(l["route"], "metered") {
			t.Errorf("raw path leaked into the route label: %v", l)
		}
		if l["route"] == "POST /api/v1/push" {
			pushCount += m.GetHistogram().GetSampleCount()
		}
	}
	if pushCount != 1 {
		t.Errorf("push route observed %d requests, want 1", pushCount)
	}

	pops := map[string]uint64{}
	for _, m := range fams["queen_pop_duration_seconds"].GetMetric() {
		pops[labels(m)["outcome"]] = m.GetHistogram().GetSampleCount()
	}
	if pops["messages"] != 1 || pops["timeout"] != 1 || pops["empty"] != 2 {
		t.Errorf("pop outcomes %v, want messages 1, timeout 1, empty 2", pops)
	}

	marks := map[string]float64{}
	for _, m := range fams["queen_hotlist_marks_total"].GetMetric() {
		marks[labels(m)["source"]] = m.GetCounter().GetValue()
	}
	if marks["local"] < 1 {
		t.Errorf("queen_hotlist_marks_total{source=local} = %v after a push", marks["local"])
	}
	states := map[string]float64{}
	for _, m := range fams["queen_mesh_members"].GetMetric() {
		states[labels(m)["state"]] = m.GetGauge().GetValue()
	}
	if len(states) != 4 || states["alive"] != 1 {
		t.Errorf("queen_mesh_members %v, want four states with alive=1", states)
	}
	if v := fams["queen_pushes_total"].GetMetric()[0].GetCounter().GetValue(); v != 1 {
		t.Errorf("queen_pushes_total = %v, want 1", v)
	}

	// The alias serves the same registry.
	if alias := scrape(t, n, "/metrics/prometheus"); alias["queen_pushes_total"] == nil {
		t.Errorf("/metrics/prometheus lacks queen_pushes_total")
	}
}

func labels(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}
