package api

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"queen-node/broker"
	"queen-node/hotlist"
)

// fakeStatus counts the snapshots taken and returns a canned one.
type fakeStatus struct {
	mu    sync.Mutex
	calls int
}

func (f *fakeStatus) Snapshot() broker.Snapshot {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	return broker.Snapshot{
		Name:     "n1",
		Started:  time.Now().Add(-12500 * time.Millisecond),
		Hotlist:  broker.HotlistSnapshot{Enabled: true, Stats: hotlist.Stats{Rings: 2}, TopRings: []hotlist.RingStat{{Tenant: "t1", Queue: "q", Group: "g", Ready: 3}}},
		Requests: broker.Counters{Pushes: 7},
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
	if !strings.HasPrefix(string(r.body), "{\n  \"node\": {\n    \"name\": \"n1\"") {
		t.Errorf("not indented with two spaces:\n%s", r.body)
	}
	st, err := DecodeStatus(r.body)
	if err != nil {
		t.Fatal(err)
	}
	if st.Version != "v-test" || st.Tenant != "t1" || st.HTTPAddr != "10.0.0.1:6632" {
		t.Errorf("node section: version %q tenant %q addr %q", st.Version, st.Tenant, st.HTTPAddr)
	}
	if st.Requests.Pushes != 7 || st.Hotlist.TopRings[0].Ready != 3 || st.InFlight != 0 || st.UptimeS < 12 {
		t.Errorf("round trip lost data: %+v", st)
	}
	tb.noBrokerCalls() // the status read never goes through the API broker calls (no SQL)
}

func TestMetricsHandlerOnceAndScrapesStatus(t *testing.T) {
	src := &fakeStatus{}
	srv := newFakeServer(DefaultConfig())
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
