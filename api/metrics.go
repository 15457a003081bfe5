package api

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Label values of the route label for requests no registered pattern matched.
const (
	routeUnmatched = "unmatched" // 404, 405 and path-cleaning redirects
	routePreflight = "OPTIONS"   // CORS preflights, answered before routing
)

// Pop outcomes of queen_pop_duration_seconds.
const (
	popMessages = "messages" // 200 with a batch
	popEmpty    = "empty"    // 204 of a wait=false pop
	popTimeout  = "timeout"  // 204 of a long-poll (timed out, or ended by a drain)
	popCanceled = "canceled" // the client left before the answer
	popError    = "error"    // any other 4xx/5xx
)

// Latency buckets. Requests span sub-millisecond status reads to multi-second
// batch pushes; pops add long-polls of up to minutes, so their buckets reach
// further. Few buckets keep the series count (routes × codes × buckets) low.
var (
	requestBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}
	popBuckets     = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}
)

// commonCodes are the status codes whose observers are cached per route;
// others go through HistogramVec.WithLabelValues (a hash lookup and a small
// allocation), which is fine for rare codes.
var commonCodes = [...]int{200, 201, 204, 400, 401, 403, 404, 405, 409, 413, 500, 503}

// metrics is the HTTP layer's own instrumentation, on a registry that
// belongs to the Server rather than the process-global default: two servers
// in one test binary must not collide, and /metrics shows exactly what this
// node registered.
type metrics struct {
	reg      *prometheus.Registry
	reqDur   *prometheus.HistogramVec
	popDur   [5]prometheus.Observer // indexed by popOutcomeIndex
	inflight atomic.Int64           // requests being served, parked long-polls included

	// routes maps a ServeMux pattern to its cached observers. It is copied
	// on write (routes are registered at start, read on every request), so
	// the hot path takes no lock.
	mu     sync.Mutex
	routes atomic.Pointer[map[string]*routeObs]

	sourceOnce  sync.Once
	handlerOnce sync.Once
	handler     http.Handler
}

// routeObs caches the histogram children of one route, created on first use
// so a route never hit exports no empty series.
type routeObs struct {
	route string
	pop   bool // a pop route: also feeds queen_pop_duration_seconds
	codes [len(commonCodes)]atomic.Pointer[observer]
}

type observer struct{ prometheus.Observer }

var popOutcomes = [...]string{popMessages, popEmpty, popTimeout, popCanceled, popError}

func newMetrics() *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.reqDur = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "queen_http_request_duration_seconds",
		Help:    "HTTP request latency by route pattern and status code; long-polls included.",
		Buckets: requestBuckets,
	}, []string{"route", "code"})
	popDur := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "queen_pop_duration_seconds",
		Help:    "Pop latency by outcome: messages, empty (wait=false), timeout (long-poll ended empty), canceled (client left), error.",
		Buckets: popBuckets,
	}, []string{"outcome"})
	for i, o := range popOutcomes {
		m.popDur[i] = popDur.WithLabelValues(o)
	}
	empty := map[string]*routeObs{}
	m.routes.Store(&empty)
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.reqDur, popDur,
	)
	return m
}

// addRoute caches observers for a ServeMux pattern. Called while routes are
// registered; safe at any time.
func (m *metrics) addRoute(pattern string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	old := *m.routes.Load()
	if _, ok := old[pattern]; ok {
		return
	}
	next := make(map[string]*routeObs, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[pattern] = &routeObs{route: pattern, pop: strings.HasPrefix(pattern, "GET /api/v1/pop/")}
	m.routes.Store(&next)
}

func (m *metrics) lookup(pattern string) *routeObs {
	if ro := (*m.routes.Load())[pattern]; ro != nil {
		return ro
	}
	// Patterns registered behind our back (none today) still get a series;
	// their count is bounded by the mux's patterns.
	m.addRoute(pattern)
	return (*m.routes.Load())[pattern]
}

func (m *metrics) observe(ro *routeObs, code int, seconds float64) {
	for i, c := range commonCodes {
		if c != code {
			continue
		}
		o := ro.codes[i].Load()
		if o == nil {
			o = &observer{m.reqDur.WithLabelValues(ro.route, strconv.Itoa(code))}
			ro.codes[i].Store(o) // racing stores hold the same child
		}
		o.Observe(seconds)
		return
	}
	m.reqDur.WithLabelValues(ro.route, strconv.Itoa(code)).Observe(seconds)
}

// metricsWriter records the status code and lets dispatch tell the
// middleware which pattern matched. It is pooled: the hot path allocates
// nothing for instrumentation.
type metricsWriter struct {
	http.ResponseWriter
	code  int
	route string
}

func (w *metricsWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *metricsWriter) Write(p []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the real writer's Flush (the
// pop handler flushes to learn whether the batch reached the client).
func (w *metricsWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

var writerPool = sync.Pool{New: func() any { return new(metricsWriter) }}

// instrument is the outermost middleware: it counts in-flight requests and
// observes latency by route pattern (never the raw path, which carries queue
// names) and status code.
func (s *Server) instrument(next http.Handler) http.Handler {
	m := s.metrics
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		m.inflight.Add(1)
		mw := writerPool.Get().(*metricsWriter)
		mw.ResponseWriter, mw.code, mw.route = w, 0, ""
		defer func() {
			// Deferred so a panic that escapes recoverPanics (ErrAbortHandler)
			// still leaves the in-flight gauge right.
			m.inflight.Add(-1)
			code, route := mw.code, mw.route
			mw.ResponseWriter = nil
			writerPool.Put(mw)
			if code == 0 {
				code = http.StatusOK // nothing written: net/http answers 200
			}
			switch {
			case route != "":
			case r.Method == http.MethodOptions:
				route = routePreflight
			default:
				route = routeUnmatched
			}
			d := time.Since(start).Seconds()
			ro := m.lookup(route)
			m.observe(ro, code, d)
			if ro.pop {
				m.popDur[popOutcome(r, code)].Observe(d)
			}
		}()
		next.ServeHTTP(mw, r)
	})
}

// setRoute is dispatch's hook: it names the matched pattern for instrument.
func setRoute(w http.ResponseWriter, pattern string) {
	if mw, ok := w.(*metricsWriter); ok {
		mw.route = pattern
	}
}

// popOutcome classifies a finished pop by its status code; a 204 is a
// timeout for a long-poll and "empty" otherwise. The index is into popOutcomes.
func popOutcome(r *http.Request, code int) int {
	switch {
	case code == http.StatusOK:
		return 0
	case code == http.StatusNoContent && queryFlag(r.URL.RawQuery, "wait"):
		return 2
	case code == http.StatusNoContent:
		return 1
	case r.Context().Err() != nil:
		return 3
	default:
		return 4
	}
}

// queryFlag reports whether the raw query sets key to "true" or "1" (the
// pop handler's reading of booleans), without building a url.Values map.
// The first occurrence decides, as with url.Values.Get.
func queryFlag(raw, key string) bool {
	for raw != "" {
		var kv string
		kv, raw, _ = strings.Cut(raw, "&")
		k, v, _ := strings.Cut(kv, "=")
		if k == key {
			return v == "true" || v == "1"
		}
	}
	return false
}

// MetricsHandler returns the Prometheus handler of this server's registry
// (GET /metrics and its alias /metrics/prometheus). The first call names
// src as the source of the node core's figures, which the table collector
// (table.go) reads at scrape time: the exported counters are the
// components' own, never a second bookkeeping. httpAddr is what the status
// document reports as the node's HTTP address.
func (s *Server) MetricsHandler(src SnapshotSource, httpAddr string) http.Handler {
	m := s.metrics
	m.sourceOnce.Do(func() {
		s.table.src.Store(&sourceRef{src: src, httpAddr: httpAddr})
	})
	m.handlerOnce.Do(func() {
		m.handler = promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
			ErrorLog:      promLogger{s},
			ErrorHandling: promhttp.ContinueOnError, // a partial scrape beats none
		})
	})
	return m.handler
}

// Registry is the registry behind /metrics, for callers that export more.
func (s *Server) Registry() *prometheus.Registry { return s.metrics.reg }

type promLogger struct{ s *Server }

func (l promLogger) Println(v ...any) {
	l.s.log.Warn("metrics scrape", "error", strings.TrimSpace(fmtArgs(v)))
}

func fmtArgs(v []any) string {
	var b strings.Builder
	for i, x := range v {
		if i > 0 {
			b.WriteByte(' ')
		}
		if err, ok := x.(error); ok {
			b.WriteString(err.Error())
		} else if s, ok := x.(string); ok {
			b.WriteString(s)
		}
	}
	return b.String()
}
