package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"queen-node/api"
	"queen-node/broker"
	"queen-node/hotlist"
	"queen-node/internal/nodetest"
	"queen-node/internal/pgtest"
	"queen-node/mesh"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// liveNode starts a real broker (real PostgreSQL) behind the API server
// with /status registered as main registers it, plus a lone mesh so the
// membership table has a row.
func liveNode(t *testing.T) string {
	t.Helper()
	n := nodetest.Start(t)
	srv := api.New(n.Broker, n.Reads, api.DefaultConfig(), nil)
	ts := httptest.NewUnstartedServer(srv.Handler())
	addr := ts.Listener.Addr().String()
	srv.Handle("GET /status", srv.StatusHandler(n.Broker, addr))
	ts.Start()
	t.Cleanup(ts.Close)

	mc := mesh.DefaultConfig()
	mc.Name, mc.Bind, mc.HTTPAddr, mc.Version = "live-node", "127.0.0.1:0", addr, "dev"
	mc.Timings = mesh.FastTimings()
	m, err := mesh.New(mc, n.Broker)
	if err != nil {
		t.Fatalf("start mesh: %v", err)
	}
	n.Broker.SetMesh(m)
	t.Cleanup(m.Close)

	// Give the ring table a row: provision, register, push.
	for range 2 {
		get(t, ts.URL+"/api/v1/pop/queue/orders?wait=false")
	}
	body := `{"items":[{"queue":"orders","partition":"p1","payload":1},{"queue":"orders","partition":"p2","payload":2}]}`
	resp, err := http.Post(ts.URL+"/api/v1/push", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return ts.URL
}

func get(t *testing.T, url string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}

func runStatus(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = statusMain(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestStatusLiveNode(t *testing.T) {
	url := liveNode(t)
	code, out, errOut := runStatus(t, "--addr", url)
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	t.Logf("output:\n%s", out)
	for _, want := range []string{
		"node TestStatusLiveNode", "HOTLIST", "RINGS (busiest first)", "TENANT", "orders",
		"MEMBERS (1 known", "live-node", "alive (self)", "HINTS", "COALESCER", "200000",
		"PG POOL", "REQUESTS",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if !regexp.MustCompile(`(?m)^  push +1 +2 +duplicates 0$`).MatchString(out) {
		t.Errorf("push row does not show 1 request with 2 messages")
	}
	// Aligned: the ring table's header and row start their QUEUE column at
	// the same offset.
	var header, row string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "TENANT") {
			header = l
		}
		if strings.Contains(l, "orders") {
			row = l
		}
	}
	if i, j := strings.Index(header, "QUEUE"), strings.Index(row, "orders"); i < 0 || i != j {
		t.Errorf("ring table not aligned:\n%s\n%s", header, row)
	}

	// Single-dash flags work too; --json is the raw document.
	code, out, _ = runStatus(t, "-addr", strings.TrimPrefix(url, "http://"), "-json")
	if code != 0 {
		t.Fatalf("-json exit %d", code)
	}
	var doc map[string]any
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("--json output is not JSON: %v\n%s", err, out)
	}
	if doc["node"].(map[string]any)["name"] != "TestStatusLiveNode" {
		t.Errorf("--json node %v", doc["node"])
	}
}

func TestStatusUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now

	for _, extra := range [][]string{nil, {"--cluster"}, {"--json"}} {
		code, out, errOut := runStatus(t, append([]string{"--addr", "http://" + addr}, extra...)...)
		if code != 1 {
			t.Errorf("%v: exit %d, want 1", extra, code)
		}
		if out != "" {
			t.Errorf("%v: stdout %q, want nothing", extra, out)
		}
		prefix := "queen-node status: cannot reach http://" + addr + "/status: "
		if !strings.HasPrefix(errOut, prefix) || strings.Count(errOut, "\n") != 1 || !strings.HasSuffix(errOut, "\n") {
			t.Errorf("%v: stderr %q, want one line starting %q", extra, errOut, prefix)
		}
	}
}

func TestStatusNotAStatusEndpoint(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"error":"not found"}`, http.StatusNotFound)
	}))
	defer ts.Close()
	code, _, errOut := runStatus(t, "--addr", ts.URL)
	if code != 1 || !strings.Contains(errOut, "HTTP 404") || strings.Count(errOut, "\n") != 1 {
		t.Errorf("exit %d stderr %q, want 1 and one line naming HTTP 404", code, errOut)
	}
}

func TestStatusBadArguments(t *testing.T) {
	for _, args := range [][]string{
		{"--bogus"},
		{"extra"},
		{"--watch", "-1s"},
		{"--watch", "soon"},
		{"--watch", "1ms"},
		{"--addr", "ftp://host"},
		{"--addr", ""},
		{"--addr"},
	} {
		code, out, errOut := runStatus(t, args...)
		if code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
		if out != "" || !strings.HasPrefix(errOut, "queen-node status: ") || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%q: stdout %q stderr %q, want one stderr line", args, out, errOut)
		}
	}
	if code, _, _ := runStatus(t, "-h"); code != 0 {
		t.Errorf("-h: exit %d, want 0", code)
	}
}

// cannedNode serves a fixed status document.
func cannedNode(t *testing.T, st *api.Snapshot) *httptest.Server {
	t.Helper()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/status" {
			http.NotFound(w, r)
			return
		}
		doc, err := api.EncodeStatus(st)
		if err != nil {
			t.Errorf("encode canned status: %v", err)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(doc)
	}))
	t.Cleanup(ts.Close)
	return ts
}

func TestStatusCluster(t *testing.T) {
	docs := []*api.Snapshot{{}, {}, {}}
	servers := make([]*httptest.Server, 3)
	names := []string{"node-a", "node-b", "node-c"}
	for i := range docs {
		servers[i] = cannedNode(t, docs[i])
	}
	var members []mesh.Member
	for i, ts := range servers {
		members = append(members, mesh.Member{Name: names[i], Addr: "127.0.0.1:79" + string(rune('4'+i)) + "6",
			HTTPAddr: strings.TrimPrefix(ts.URL, "http://"), State: "alive", Self: i == 0})
	}
	for i, d := range docs {
		d.Name, d.Version, d.UptimeS, d.HTTPAddr = names[i], "dev", float64(60*(i+1)), members[i].HTTPAddr
		d.Hotlist = broker.HotlistSnapshot{Enabled: true, Stats: hotlist.Stats{Rings: i + 1, Ready: int64(10 * (i + 1)), MarksLocal: 100, MarksRemote: 7}}
		d.Mesh = broker.MeshSnapshot{Enabled: true, Members: members, Stats: mesh.Stats{HintsSent: 42, HintsReceived: 41, FramesRejected: uint64(i)}}
		d.PG.AcquiredConns, d.PG.MaxConns = 2, 16
	}
	servers[2].Close() // node-c does not answer

	code, out, errOut := runStatus(t, "--addr", servers[0].URL, "--cluster")
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d stderr %q", code, errOut)
	}
	t.Logf("output:\n%s", out)
	rows := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 && strings.HasPrefix(f[0], "node-") {
			rows[f[0]] = l
		}
	}
	if len(rows) != 3 {
		t.Fatalf("%d member rows, want 3:\n%s", len(rows), out)
	}
	if !strings.Contains(rows["node-b"], "2m0s") || !strings.Contains(rows["node-b"], "100/7") || !strings.Contains(rows["node-b"], "42/41") {
		t.Errorf("node-b row lacks its figures: %q", rows["node-b"])
	}
	if !strings.Contains(rows["node-c"], "unreachable: ") {
		t.Errorf("node-c row does not say unreachable: %q", rows["node-c"])
	}
	if !strings.Contains(rows["node-a"], "1m0s") {
		t.Errorf("node-a row: %q", rows["node-a"])
	}

	// --cluster --json: one entry per member, errors included.
	code, out, _ = runStatus(t, "--addr", servers[0].URL, "--cluster", "--json")
	var doc struct {
		Members []struct {
			Name   string          `json:"name"`
			Error  string          `json:"error"`
			Status json.RawMessage `json:"status"`
		} `json:"members"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || code != 0 || len(doc.Members) != 3 {
		t.Fatalf("exit %d, %v, %d members:\n%s", code, err, len(doc.Members), out)
	}
	if doc.Members[2].Error == "" || doc.Members[1].Status == nil {
		t.Errorf("json members: %+v", doc.Members)
	}
}

func TestMemberBaseURL(t *testing.T) {
	cases := []struct {
		m    mesh.Member
		want string
	}{
		{mesh.Member{HTTPAddr: "10.0.0.2:6632", Addr: "10.0.0.2:7946"}, "http://10.0.0.2:6632"},
		{mesh.Member{HTTPAddr: "[::]:6632", Addr: "10.0.0.3:7946"}, "http://10.0.0.3:6632"},
		{mesh.Member{HTTPAddr: ":6632", Addr: "10.0.0.4:7946"}, "http://10.0.0.4:6632"},
		{mesh.Member{HTTPAddr: "0.0.0.0:6632", Addr: "0.0.0.0:7946"}, "http://seed.example:6632"},
		{mesh.Member{HTTPAddr: "https://n5.example/"}, "https://n5.example"},
	}
	for _, c := range cases {
		got, err := memberBaseURL(c.m, "http://seed.example:6632")
		if err != nil || got != c.want {
			t.Errorf("%+v: %q, %v; want %q", c.m, got, err, c.want)
		}
	}
	if _, err := memberBaseURL(mesh.Member{}, "http://x"); err == nil {
		t.Error("empty http address accepted")
	}
}

func TestStatusWatchRedraws(t *testing.T) {
	st := &api.Snapshot{Snapshot: broker.Snapshot{Name: "watched"}}
	ts := cannedNode(t, st)
	ctx, cancel := context.WithTimeout(context.Background(), 350*time.Millisecond)
	defer cancel()
	var out, errb bytes.Buffer
	code := statusMain(ctx, []string{"--addr", ts.URL, "--watch", "100ms"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
	if n := strings.Count(out.String(), clearScreen); n < 2 {
		t.Errorf("%d redraws in 350 ms at 100 ms, want at least 2", n)
	}
	if !strings.Contains(out.String(), "node watched") {
		t.Errorf("watch output lacks the node: %q", out.String())
	}
}
