package api

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"queen-node/broker"
)

// histCounts gathers a histogram family and returns sample counts keyed by
// the joined label values.
func histCounts(t *testing.T, s *Server, family string) map[string]uint64 {
	t.Helper()
	fams, err := s.metrics.reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := map[string]uint64{}
	for _, f := range fams {
		if f.GetName() != family {
			continue
		}
		for _, m := range f.GetMetric() {
			out[labelKey(m)] = m.GetHistogram().GetSampleCount()
		}
	}
	return out
}

func labelKey(m *dto.Metric) string {
	k := ""
	for i, l := range m.GetLabel() {
		if i > 0 {
			k += ","
		}
		k += l.GetName() + "=" + l.GetValue()
	}
	return k
}

func TestRequestHistogramLabelsByPattern(t *testing.T) {
	tb := setup(t)
	tb.do("POST", "/api/v1/push", `{"items":[{"queue":"q1","payload":1}]}`)
	tb.do("POST", "/api/v1/push", `{"items":[{"queue":"q2","payload":1}]}`)
	tb.do("GET", "/api/v1/pop/queue/some-queue?wait=false", "")
	tb.do("GET", "/no/such/route", "")
	tb.do("OPTIONS", "/api/v1/push", "")
	tb.do("GET", "/health", "")

	got := histCounts(t, tb.srv, "queen_http_request_duration_seconds")
	want := map[string]uint64{
		"code=201,route=POST /api/v1/push":             2,
		"code=204,route=GET /api/v1/pop/queue/{queue}": 1,
		"code=404,route=unmatched":                     1,
		"code=204,route=OPTIONS":                       1,
		"code=200,route=GET /health":                   1,
	}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("%s: %d observations, want %d (all: %v)", k, got[k], n, got)
		}
	}
	if len(got) != len(want) {
		t.Errorf("series %v, want exactly %v", got, want)
	}
}

func TestPopOutcomes(t *testing.T) {
	tb := setup(t)
	var result *broker.PopResult
	var popErr error
	tb.fb.popFn = func(ctx context.Context, _ broker.PopRequest) (*broker.PopResult, error) { return result, popErr }

	tb.do("GET", "/api/v1/pop/queue/q?wait=false", "")                  // empty
	tb.do("GET", "/api/v1/pop/queue/q?batch=2&wait=true&timeout=1", "") // timeout
	tb.do("GET", "/api/v1/pop/queue/q/partition/p", "")                 // wait defaults to false: empty
	result = &broker.PopResult{Queue: "q", LeaseID: "L", Messages: []broker.Message{{ID: "m1", TransactionID: "t1", CreatedAt: time.Now()}}}
	tb.do("GET", "/api/v1/pop/queue/q?wait=true", "") // messages
	result, popErr = nil, broker.ErrUnavailable
	tb.do("GET", "/api/v1/pop/queue/q", "")          // error (503)
	tb.do("GET", "/api/v1/pop/queue/bad%20name", "") // error (400, never reaches the broker)

	got := histCounts(t, tb.srv, "queen_pop_duration_seconds")
	want := map[string]uint64{"outcome=empty": 2, "outcome=timeout": 1, "outcome=messages": 1, "outcome=error": 2, "outcome=canceled": 0}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("%s: %d, want %d (all: %v)", k, got[k], n, got)
		}
	}
}

// The metrics writer must not hide the connection's Flush: the pop handler
// releases the lease when Flush fails, which would hand every batch back.
func TestInstrumentKeepsFlush(t *testing.T) {
	tb := setup(t)
	tb.fb.released = make(chan string, 1)
	tb.fb.popFn = func(context.Context, broker.PopRequest) (*broker.PopResult, error) {
		return &broker.PopResult{Queue: "q", LeaseID: "L", Messages: []broker.Message{{ID: "m1", TransactionID: "t1", CreatedAt: time.Now()}}}, nil
	}
	if r := tb.do("GET", "/api/v1/pop/queue/q", ""); r.status != http.StatusOK {
		t.Fatalf("pop: %d %s", r.status, r.body)
	}
	select {
	case id := <-tb.fb.released:
		t.Fatalf("lease %s released after a delivered pop: Flush did not reach the connection", id)
	case <-time.After(50 * time.Millisecond):
	}
}

func TestInFlightGauge(t *testing.T) {
	tb := setup(t)
	parked, release := make(chan struct{}), make(chan struct{})
	tb.fb.popFn = func(ctx context.Context, _ broker.PopRequest) (*broker.PopResult, error) {
		close(parked)
		<-release
		return nil, nil
	}
	done := make(chan struct{})
	go func() { defer close(done); tb.do("GET", "/api/v1/pop/queue/q?wait=true", "") }()
	<-parked
	if n := tb.srv.metrics.inflight.Load(); n != 1 {
		t.Errorf("in flight during a parked pop = %d, want 1", n)
	}
	close(release)
	<-done
	if n := tb.srv.metrics.inflight.Load(); n != 0 {
		t.Errorf("in flight after = %d, want 0", n)
	}
}

func TestQueryFlag(t *testing.T) {
	cases := []struct {
		raw  string
		want bool
	}{
		{"", false}, {"wait=true", true}, {"wait=1", true}, {"wait=false", false}, {"wait", false},
		{"batch=2&wait=true", true}, {"await=true", false}, {"wait=true&wait=false", true},
		{"wait=false&wait=true", false}, {"waiting=true&x=1", false},
	}
	for _, c := range cases {
		if got := queryFlag(c.raw, "wait"); got != c.want {
			t.Errorf("queryFlag(%q) = %v, want %v", c.raw, got, c.want)
		}
	}
}

// Instrumentation adds no allocation per request once a route's series
// exist (the writer is pooled, children are cached).
func TestInstrumentAllocatesNothing(t *testing.T) {
	srv := newFakeServer(DefaultConfig())
	srv.Handle("GET /x", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	bare := srv.recoverPanics(srv.cors(http.HandlerFunc(srv.dispatch)))
	req := httptest.NewRequest("GET", "/x", nil)
	w := &discardWriter{h: http.Header{}}
	run := func(h http.Handler) float64 {
		h.ServeHTTP(w, req) // warm up: creates the series
		return testing.AllocsPerRun(200, func() { h.ServeHTTP(w, req) })
	}
	base, instrumented := run(bare), run(srv.Handler())
	if instrumented > base {
		t.Errorf("instrumented request allocates %.1f, bare %.1f", instrumented, base)
	}
}

type discardWriter struct{ h http.Header }

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (d *discardWriter) WriteHeader(int)             {}
