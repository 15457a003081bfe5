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

	"queen-node/broker"
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

	collectorOnce sync.Once
	handlerOnce   sync.Once
	handler       http.Handler
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
	inflight := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "queen_http_requests_in_flight",
		Help: "HTTP requests being served, parked long-polls included.",
	}, func() float64 { return float64(m.inflight.Load()) })
	empty := map[string]*routeObs{}
	m.routes.Store(&empty)
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.reqDur, popDur, inflight,
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

// StatusSource produces the node's status document; *broker.Broker is one.
type StatusSource interface {
	Status(version, httpAddr, tenant string) broker.Status
}

// MetricsHandler returns the Prometheus handler of this server's registry
// (GET /metrics and its alias /metrics/prometheus). The first call registers
// a collector that reads src's status document at scrape time, so the
// exported counters are the components' own, never a second bookkeeping.
// httpAddr is what the status document reports as the node's HTTP address.
func (s *Server) MetricsHandler(src StatusSource, httpAddr string) http.Handler {
	m := s.metrics
	m.collectorOnce.Do(func() {
		m.reg.MustRegister(&statusCollector{src: src, version: s.cfg.Version, httpAddr: httpAddr, tenant: s.cfg.Tenant})
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

// statusCollector turns the status document into metrics at scrape time.
// One Status call per scrape: no SQL, no lock a hot path holds for long.
type statusCollector struct {
	src                       StatusSource
	version, httpAddr, tenant string
}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

var (
	dBuildInfo = desc("queen_build_info", "Always 1; the version label names the running build.", "version")
	dUptime    = desc("queen_uptime_seconds", "Seconds since the node started.")

	dHotEnabled    = desc("queen_hotlist_enabled", "1 when the hot-list is on, 0 for the SQL candidate scan.")
	dHotRings      = desc("queen_hotlist_rings", "Candidate rings, one per (tenant, queue, group).")
	dHotQueues     = desc("queen_hotlist_queues", "Queues with at least one ring.")
	dHotReady      = desc("queen_hotlist_ready_entries", "Partitions marked ready across all rings.")
	dHotWheel      = desc("queen_hotlist_wheel_entries", "Partitions parked on the timer wheel (deferred or leased) until their revisit time.")
	dHotInflight   = desc("queen_hotlist_inflight_entries", "Partitions checked out by pops in progress.")
	dHotMarks      = desc("queen_hotlist_marks_total", "Partition marks by source: local push, remote (peer hint), commit (transaction commit or DLQ move).", "source")
	dHotReseeds    = desc("queen_hotlist_reseeds_total", "Reseed floor passes over rings.")
	dHotReseedAdd  = desc("queen_hotlist_reseed_added_total", "Entries a reseed found in PostgreSQL that were missing from the ring (lost hints healed).")
	dHotReclaimed  = desc("queen_hotlist_reclaimed_total", "Inflight entries stranded by a dropped pop and reclaimed by a reseed.")
	dHotSwept      = desc("queen_hotlist_swept_total", "Queues dropped by the idle sweep.")
	dHotUnconf     = desc("queen_hotlist_unconfirmed_entries", "Ring entries that only peers' hints vouch for (not yet confirmed by a push, a reseed or a claim).")
	dHotPruned     = desc("queen_hotlist_pruned_total", "Unconfirmed entries a complete reseed dropped in bulk (fake or stale hints).")
	dMeshEnabled   = desc("queen_mesh_enabled", "1 when membership and hints are on.")
	dMeshMembers   = desc("queen_mesh_members", "Members this node knows, itself included, by state.", "state")
	dMeshLivePeers = desc("queen_mesh_live_peers", "Alive members other than this node (hint recipients).")
	dFramesSent    = desc("queen_mesh_frames_sent_total", "Hint frames sent to peers.")
	dFramesRecv    = desc("queen_mesh_frames_received_total", "Hint frames received and accepted.")
	dHintsSent     = desc("queen_mesh_hints_sent_total", "Dirty-partition hints sent (summed over peers).")
	dHintsRecv     = desc("queen_mesh_hints_received_total", "Dirty-partition hints received.")
	dFramesDropped = desc("queen_mesh_frames_dropped_total", "Outgoing frames dropped on purpose (QUEEN_MESH_DROP_RATE chaos).")
	dFramesReject  = desc("queen_mesh_frames_rejected_total", "Received frames refused: malformed or unauthenticated (secret mismatch).")
	dFramesQDrop   = desc("queen_mesh_frames_queue_dropped_total", "Outgoing frames dropped because a peer's send queue was full or it was unreachable.")
	dCoalSize      = desc("queen_mesh_coalescer_size", "Hints waiting in the coalescing set.")
	dCoalCap       = desc("queen_mesh_coalescer_capacity", "Bound of the coalescing set (QUEEN_MESH_HINT_CAP).")
	dCoalDropped   = desc("queen_mesh_coalescer_dropped_total", "Hints dropped because the coalescing set was full.")
	dInStreams     = desc("queen_mesh_inbound_streams", "Inbound hint streams open now.")
	dInRefused     = desc("queen_mesh_inbound_refused_total", "Inbound hint streams refused, by reason: limit (per-address or total streams), not_member.", "reason")
	dInEvicted     = desc("queen_mesh_inbound_evicted_total", "Inbound hint streams that had not delivered a frame, closed to make room for a new one from the same address.")
	dInTimedOut    = desc("queen_mesh_inbound_timed_out_total", "Inbound hint streams closed because a read deadline passed.")
	dGossipErrors  = desc("queen_mesh_gossip_errors_total", "Error lines memberlist logged: garbage, undecodable or unauthenticated gossip packets and streams, failed probes or state exchanges.")
	dHintsLimited  = desc("queen_mesh_hints_rate_limited_total", "Received hints dropped because their peer exceeded its rate (QUEEN_MESH_HINT_RATE).")

	dPGMax      = desc("queen_pg_pool_max_conns", "Maximum connections of the PostgreSQL pool.")
	dPGTotal    = desc("queen_pg_pool_total_conns", "Connections currently open.")
	dPGIdle     = desc("queen_pg_pool_idle_conns", "Open connections not in use.")
	dPGAcquired = desc("queen_pg_pool_acquired_conns", "Connections in use; equal to max_conns means the pool is saturated.")
	dPGAcquires = desc("queen_pg_pool_acquires_total", "Successful connection acquisitions.")
	dPGEmptyAcq = desc("queen_pg_pool_empty_acquires_total", "Acquisitions that had to wait or dial because no idle connection was available.")
	dPGNewConns = desc("queen_pg_pool_new_conns_total", "Connections opened.")
	dPGRetries  = desc("queen_pg_retries_total", "Calls run again after a deadlock, serialization failure or concurrent-delete foreign-key violation.")

	dParked       = desc("queen_parked_long_polls", "Long-poll pops parked on a wake gate.")
	dPushes       = desc("queen_pushes_total", "Push requests.")
	dPushedMsgs   = desc("queen_pushed_messages_total", "Messages stored by pushes.")
	dPushFlushes  = desc("queen_push_flushes_total", "Push transactions sent to PostgreSQL; fewer than pushes when concurrent pushes are combined (QUEEN_PUSH_COMBINE).")
	dDuplicates   = desc("queen_push_duplicates_total", "Pushed messages refused as duplicates.")
	dPopsStarted  = desc("queen_pops_started_total", "Pops begun, whatever their end (outcomes are in queen_pops_total).")
	dPops         = desc("queen_pops_total", "Finished pops by outcome: messages or empty (timed-out long-polls included).", "outcome")
	dPoppedMsgs   = desc("queen_popped_messages_total", "Messages delivered by pops.")
	dPopSQL       = desc("queen_pop_sql_calls_total", "SQL calls made by pops (hot-list efficiency: low per pop is good).")
	dAcks         = desc("queen_acks_total", "Acknowledged items.")
	dAcksRefused  = desc("queen_acks_refused_total", "Acknowledged items refused (e.g. unknown or expired lease).")
	dDeadLettered = desc("queen_dead_lettered_total", "Messages moved to the dead-letter queue.")
	dTransactions = desc("queen_transactions_total", "Transaction requests.")
	dLeasesDrop   = desc("queen_leases_released_undelivered_total", "Leases released because the pop's answer never reached its client.")
)

var allDescs = []*prometheus.Desc{
	dBuildInfo, dUptime,
	dHotEnabled, dHotRings, dHotQueues, dHotReady, dHotWheel, dHotInflight, dHotMarks, dHotReseeds,
	dHotReseedAdd, dHotReclaimed, dHotSwept, dHotUnconf, dHotPruned,
	dMeshEnabled, dMeshMembers, dMeshLivePeers, dFramesSent, dFramesRecv, dHintsSent, dHintsRecv,
	dFramesDropped, dFramesReject, dFramesQDrop, dCoalSize, dCoalCap, dCoalDropped,
	dInStreams, dInRefused, dInEvicted, dInTimedOut, dHintsLimited, dGossipErrors,
	dPGMax, dPGTotal, dPGIdle, dPGAcquired, dPGAcquires, dPGEmptyAcq, dPGNewConns, dPGRetries,
	dParked, dPushes, dPushedMsgs, dPushFlushes, dDuplicates, dPopsStarted, dPops, dPoppedMsgs, dPopSQL, dAcks,
	dAcksRefused, dDeadLettered, dTransactions, dLeasesDrop,
}

// memberStates are always exported, zeros included, so a query like
// queen_mesh_members{state="dead"} > 0 never hits a missing series.
var memberStates = [...]string{"alive", "suspect", "dead", "left"}

func (c *statusCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allDescs {
		ch <- d
	}
}

func (c *statusCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.src.Status(c.version, c.httpAddr, c.tenant)
	gauge := func(d *prometheus.Desc, v float64, lv ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, lv...)
	}
	counter := func(d *prometheus.Desc, v float64, lv ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, lv...)
	}
	b2f := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}

	gauge(dBuildInfo, 1, st.Node.Version)
	gauge(dUptime, st.Node.UptimeS)

	h := st.Hotlist
	gauge(dHotEnabled, b2f(h.Enabled))
	gauge(dHotRings, float64(h.Rings))
	gauge(dHotQueues, float64(h.Queues))
	gauge(dHotReady, float64(h.Ready))
	gauge(dHotWheel, float64(h.Wheel))
	gauge(dHotInflight, float64(h.Inflight))
	counter(dHotMarks, float64(h.MarksLocal), "local")
	counter(dHotMarks, float64(h.MarksRemote), "remote")
	counter(dHotMarks, float64(h.MarksCommit), "commit")
	counter(dHotReseeds, float64(h.Reseeds))
	counter(dHotReseedAdd, float64(h.ReseedAdded))
	counter(dHotReclaimed, float64(h.Reclaimed))
	counter(dHotSwept, float64(h.Swept))
	gauge(dHotUnconf, float64(h.Unconfirmed))
	counter(dHotPruned, float64(h.Pruned))

	ms := st.Mesh
	gauge(dMeshEnabled, b2f(ms.Enabled))
	var byState [len(memberStates)]int
	for _, mem := range ms.Members {
		for i, s := range memberStates {
			if mem.State == s {
				byState[i]++
			}
		}
	}
	for i, s := range memberStates {
		gauge(dMeshMembers, float64(byState[i]), s)
	}
	gauge(dMeshLivePeers, float64(ms.LivePeers))
	counter(dFramesSent, float64(ms.FramesSent))
	counter(dFramesRecv, float64(ms.FramesReceived))
	counter(dHintsSent, float64(ms.HintsSent))
	counter(dHintsRecv, float64(ms.HintsReceived))
	counter(dFramesDropped, float64(ms.FramesDropped))
	counter(dFramesReject, float64(ms.FramesRejected))
	counter(dFramesQDrop, float64(ms.QueueDropped))
	gauge(dCoalSize, float64(ms.Coalescer.Size))
	gauge(dCoalCap, float64(ms.Coalescer.Cap))
	counter(dCoalDropped, float64(ms.Coalescer.Dropped))
	gauge(dInStreams, float64(ms.InboundStreams))
	counter(dInRefused, float64(ms.InboundRefused), "limit")
	counter(dInEvicted, float64(ms.InboundEvicted))
	counter(dInRefused, float64(ms.InboundNotMember), "not_member")
	counter(dInTimedOut, float64(ms.InboundTimedOut))
	counter(dHintsLimited, float64(ms.HintsRateLimited))
	counter(dGossipErrors, float64(ms.GossipErrors))

	p := st.PG
	gauge(dPGMax, float64(p.MaxConns))
	gauge(dPGTotal, float64(p.TotalConns))
	gauge(dPGIdle, float64(p.IdleConns))
	gauge(dPGAcquired, float64(p.AcquiredConns))
	counter(dPGAcquires, float64(p.AcquireCount))
	counter(dPGEmptyAcq, float64(p.EmptyAcquire))
	counter(dPGNewConns, float64(p.NewConns))
	counter(dPGRetries, float64(p.Retries))

	q := st.Requests
	gauge(dParked, float64(q.Parked))
	counter(dPushes, float64(q.Pushes))
	counter(dPushedMsgs, float64(q.PushedItems))
	counter(dPushFlushes, float64(q.PushFlushes))
	counter(dDuplicates, float64(q.Duplicates))
	counter(dPopsStarted, float64(q.Pops))
	counter(dPops, float64(q.PopsMessages), "messages")
	counter(dPops, float64(q.PopsEmpty), "empty")
	counter(dPoppedMsgs, float64(q.PoppedItems))
	counter(dPopSQL, float64(q.PopSQLCalls))
	counter(dAcks, float64(q.Acks))
	counter(dAcksRefused, float64(q.AcksFailed))
	counter(dDeadLettered, float64(q.DeadLettered))
	counter(dTransactions, float64(q.Transactions))
	counter(dLeasesDrop, float64(q.LeasesDropped))
}
