package api

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"queen-node/broker"
)

// fakeStatus records what the handler asked for and returns a canned document.
type fakeStatus struct {
	mu                        sync.Mutex
	version, httpAddr, tenant string
	calls                     int
}

func (f *fakeStatus) Status(version, httpAddr, tenant string) broker.Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.version, f.httpAddr, f.tenant = version, httpAddr, tenant
	f.calls++
	return broker.Status{
		Node:     broker.NodeStatus{Name: "n1", Version: version, HTTPAddr: httpAddr, Tenant: tenant, UptimeS: 12.5},
		Hotlist:  broker.HotlistStatus{Enabled: true, Rings: 2, TopRings: []broker.RingStat{{Tenant: tenant, Queue: "q", Group: "g", Ready: 3}}},
		Requests: broker.RequestsStatus{Pushes: 7},
	}
}

func TestStatusHandler(t *testing.T) {
	tb := setup(t)
	src := &fakeStatus{}
	tb.srv.Handle("GET /status", tb.srv.StatusHandler(src, "10.0.0.1:6632"))

	r := tb.do("GET", "/status", "")
	if r.status != http.StatusOK {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	checkJSONHeaders(t, r)
	if cc := r.header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("Cache-Control %q, want no-store", cc)
	}
	if src.version != "v-test" || src.tenant != "t1" || src.httpAddr != "10.0.0.1:6632" {
		t.Errorf("Status asked with version %q tenant %q addr %q", src.version, src.tenant, src.httpAddr)
	}
	if !strings.HasPrefix(string(r.body), "{\n  \"node\": {\n    \"name\": \"n1\"") {
		t.Errorf("not indented with two spaces:\n%s", r.body)
	}
	var st broker.Status
	if err := json.Unmarshal(r.body, &st); err != nil {
		t.Fatal(err)
	}
	if st.Requests.Pushes != 7 || st.Hotlist.TopRings[0].Ready != 3 || st.Requests.InFlight != 0 {
		t.Errorf("round trip lost data: %+v", st)
	}
	tb.noBrokerCalls() // the status read never goes through the API broker calls (no SQL)
}

func TestMetricsHandlerOnceAndScrapesStatus(t *testing.T) {
	src := &fakeStatus{}
	srv := New(&fakeBroker{}, DefaultConfig(), nil)
	// A second call (the /metrics/prometheus alias) must not register the
	// collector twice: MustRegister would panic.
	h1 := srv.MetricsHandler(src, "a:1")
	_ = srv.MetricsHandler(src, "a:1")
	rec := httptest.NewRecorder()
	h1.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{
		`queen_build_info{version="dev"} 1`,
		"queen_pushes_total 7",
		"queen_hotlist_rings 2",
		`queen_mesh_members{state="suspect"} 0`,
		"# TYPE queen_hotlist_marks_total counter",
		"go_goroutines",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if src.calls != 1 {
		t.Errorf("a scrape read the status %d times, want 1", src.calls)
	}
}
