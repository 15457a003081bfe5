// Package api serves the Queen MQ HTTP API on top of a Broker; docs/api.md
// says how queen-node implements it.
//
// It owns everything HTTP: routing, CORS, body limits, request parsing and
// validation, and the exact response shapes the Queen client libraries read.
// It holds no queue state; every accepted request becomes one call of its
// Broker (push, pop, ack and the writes on their paths) or its Reads (the
// read side).
package api

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"queen-node/broker"
	"queen-node/forward"
	"queen-node/protocol"
	"queen-node/reads"
	"queen-node/retention"
)

// Broker is the node core as the HTTP layer sees it; *broker.Broker
// implements it. ctx is the request context, so a client disconnect cancels
// the call (this is what ends a parked long-poll).
type Broker interface {
	Configure(ctx context.Context, tenant string, req broker.ConfigureRequest) (broker.ConfigureResult, error)
	DeleteQueue(ctx context.Context, tenant, queue string) (existed bool, err error)
	Push(ctx context.Context, tenant string, producerSub *string, items []broker.PushItem) ([]broker.PushResult, error)
	Pop(ctx context.Context, tenant string, req broker.PopRequest) (*broker.PopResult, error)                     // nil or no messages => 204
	PopAny(ctx context.Context, tenant, namespace, task string, req broker.PopRequest) (*broker.PopResult, error) // namespace/task pop; nil => 204
	ReleaseUndelivered(tenant string, res *broker.PopResult)                                                      // a popped answer never reached its client
	ReleaseForwarded(tenant, leaseID string, again bool)                                                          // nor did a forwarded pop's (api/forward.go)
	Ack(ctx context.Context, tenant string, items []broker.AckItem) ([]broker.AckResult, error)
	// AckPeer is Ack for a peer's forwarded acks, with the claims it asks
	// to have taken ahead (api/ahead.go); Prefetching tells whether this
	// node takes claims ahead at all.
	AckPeer(ctx context.Context, tenant string, items []broker.AckItem, peers []broker.PeerClaim) ([]broker.AckResult, error)
	Prefetching() bool
	ExtendLease(ctx context.Context, tenant, leaseID string, seconds int) (broker.LeaseResult, error)
	Transaction(ctx context.Context, tenant string, producerSub *string, ops []broker.TxOp, requiredLeases []string) (broker.TxResult, error)
	RetryDeadLetter(ctx context.Context, tenant, partitionID, txid, group string) (broker.DLQRetried, error)                     // a push: the broker's
	StreamCycle(ctx context.Context, tenant string, producerSub *string, c broker.StreamCycle) (broker.StreamCycleResult, error) // /streams/v1/cycle (streams.go)
	Health(ctx context.Context) error
	MaintenanceBroker // maintenance modes (maintenance.go)
	HotlistBroker     // GET /api/v1/status/hotlist/{queue} (hotlist.go)
}

// Reads is the read side as the HTTP layer sees it, with the admin writes
// that are not on the push, pop and ack paths; *reads.Service implements
// it, calling PostgreSQL directly. ctx is the request context.
type Reads interface {
	ResourceReads  // resources, messages and consumer groups (resources.go)
	TraceReads     // api/traces.go
	AnalyticsReads // api/analytics.go
	StreamReads    // /streams/v1 registration and state (streams.go)
	DLQReads       // the dead-letter list and drop (dlq.go)
}

// DLQReads is the dead-letter list and drop; the retry is Broker's.
type DLQReads interface {
	ListDLQ(ctx context.Context, tenant string, q reads.DLQQuery) (reads.DLQPage, error)
	DropDeadLetter(ctx context.Context, tenant, partitionID, txid, group string) (dropped int, err error)
}

// Defaults of Config.
const (
	DefaultMaxBodyBytes       = broker.DefaultMaxPushBytes // at least 10 MiB must be accepted (docs/api.md, "Input bounds")
	DefaultMaxPushItems       = 10000
	DefaultMaxAckItems        = 10000
	DefaultMaxTxOps           = 10000
	DefaultPopTimeout         = 30 * time.Second
	DefaultMaxPopTimeout      = 10 * time.Minute
	DefaultLeaseExtendSeconds = protocol.DefaultLeaseSeconds // `seconds` defaults to 60 (docs/api.md, "Semantics")
	DefaultReadHeaderTimeout  = 10 * time.Second
	DefaultBodyTimeout        = 30 * time.Second
	DefaultIdleTimeout        = 120 * time.Second
	DefaultWriteTimeout       = 60 * time.Second
	DefaultPopMinReadRate     = 64 << 10
	DefaultMaxConns           = 4096
	DefaultMaxConnsPerAddr    = 1024     // a quarter of DefaultMaxConns: one address cannot lock the others out
	DefaultMaxReadBytes       = 16 << 20 // as a pop's QUEEN_POP_MAX_BYTES (docs/api.md, "Read answers")
)

// Config tunes the HTTP layer. Zero fields take their defaults in New.
type Config struct {
	Tenant            string        // tenant of requests whose Identity names none (clients never send one); default broker.DefaultTenant
	MaxBodyBytes      int64         // request body limit, larger → 413; default 10 MiB
	MaxPushItems      int           // items per push, and pushed items per transaction; default 10000
	MaxAckItems       int           // acknowledgments per batch ack; default 10000
	MaxTxOps          int           // operations (and requiredLeases) per transaction; default 10000
	MaxPopBatch       int           // pop `batch` is clamped to [1, MaxPopBatch]; default broker.DefaultMaxPopBatch
	DefaultPopTimeout time.Duration // long-poll `timeout` when absent or unparseable; default 30 s
	MaxPopTimeout     time.Duration // long-poll `timeout` cap; default 10 minutes
	Version           string        // reported by /health; default "dev"
	// MaxReadBytes bounds a read answer's rows (QUEEN_READ_MAX_BYTES),
	// default 16 MiB: a list stops before the row that would pass it and
	// says truncated (its first row always comes), a stream state read
	// past it is a 413 (docs/api.md, "Read answers").
	MaxReadBytes int64

	// Connection limits, applied by HTTPServer and Listener (docs/operations.md, "Limits").
	ReadHeaderTimeout time.Duration // request line and headers; default 10 s
	BodyTimeout       time.Duration // the whole request body, from the end of the headers (408 past it); default 30 s
	IdleTimeout       time.Duration // keep-alive wait for a connection's next request; default 120 s
	WriteTimeout      time.Duration // writing a response, from its first byte (a long-poll's wait is not counted); default 60 s
	PopMinReadRate    int           // bytes/s: a pop answer gets WriteTimeout plus its size at this rate; default 64 KiB/s
	MaxConns          int           // open client connections; a new one beyond gets 503 and is closed; default 4096
	MaxConnsPerAddr   int           // of those, from one source IP (IPv6: one /64); beyond, 503 as above; default 1024, at most MaxConns

	// ForwardMark is the X-Queen-Forwarded value of requests peers
	// forwarded here (forward.Mark of the mesh secret, forward/mark.go),
	// whether or not this node forwards anything itself; "" (no sealed
	// mesh): no request is taken as forwarded.
	ForwardMark string

	// Auth, when non-nil, guards every API route except /health and routes
	// added with Handle. nil = authentication off (the default).
	Auth Authenticator
}

// DefaultConfig returns a Config with every default filled in.
func DefaultConfig() Config {
	return Config{
		Tenant:            broker.DefaultTenant,
		MaxBodyBytes:      DefaultMaxBodyBytes,
		MaxPushItems:      DefaultMaxPushItems,
		MaxAckItems:       DefaultMaxAckItems,
		MaxTxOps:          DefaultMaxTxOps,
		MaxPopBatch:       broker.DefaultMaxPopBatch,
		DefaultPopTimeout: DefaultPopTimeout,
		MaxPopTimeout:     DefaultMaxPopTimeout,
		Version:           "dev",
		ReadHeaderTimeout: DefaultReadHeaderTimeout,
		BodyTimeout:       DefaultBodyTimeout,
		IdleTimeout:       DefaultIdleTimeout,
		WriteTimeout:      DefaultWriteTimeout,
		PopMinReadRate:    DefaultPopMinReadRate,
		MaxConns:          DefaultMaxConns,
		MaxConnsPerAddr:   DefaultMaxConnsPerAddr,
		MaxReadBytes:      DefaultMaxReadBytes,
	}
}

// withDefaults fills zero (or nonsensical) fields, so New is the one place
// that decides defaults.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Tenant == "" {
		c.Tenant = d.Tenant
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = d.MaxBodyBytes
	}
	if c.MaxPushItems <= 0 {
		c.MaxPushItems = d.MaxPushItems
	}
	if c.MaxAckItems <= 0 {
		c.MaxAckItems = d.MaxAckItems
	}
	if c.MaxTxOps <= 0 {
		c.MaxTxOps = d.MaxTxOps
	}
	if c.MaxPopBatch <= 0 {
		c.MaxPopBatch = d.MaxPopBatch
	}
	if c.MaxPopTimeout <= 0 {
		c.MaxPopTimeout = d.MaxPopTimeout
	}
	if c.DefaultPopTimeout <= 0 {
		c.DefaultPopTimeout = d.DefaultPopTimeout
	}
	if c.DefaultPopTimeout > c.MaxPopTimeout {
		c.DefaultPopTimeout = c.MaxPopTimeout
	}
	if c.Version == "" {
		c.Version = d.Version
	}
	if c.ReadHeaderTimeout <= 0 {
		c.ReadHeaderTimeout = d.ReadHeaderTimeout
	}
	if c.BodyTimeout <= 0 {
		c.BodyTimeout = d.BodyTimeout
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = d.IdleTimeout
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = d.WriteTimeout
	}
	if c.PopMinReadRate <= 0 {
		c.PopMinReadRate = d.PopMinReadRate
	}
	if c.MaxConns <= 0 {
		c.MaxConns = d.MaxConns
	}
	if c.MaxConnsPerAddr <= 0 {
		c.MaxConnsPerAddr = d.MaxConnsPerAddr
	}
	c.MaxConnsPerAddr = min(c.MaxConnsPerAddr, c.MaxConns)
	if c.MaxReadBytes <= 0 {
		c.MaxReadBytes = d.MaxReadBytes
	}
	return c
}

// Access is the role a route needs when authentication is on.
type Access int

// Access levels, lowest first; a higher level includes the lower ones.
const (
	AccessPublic Access = iota // no authentication (e.g. /health)
	AccessReadOnly
	AccessReadWrite
	AccessAdmin
)

// Authenticator is the JWT seam (package auth implements it). It is called
// before every guarded route with the level that route needs. It returns the
// caller's Identity, or an error: an *AuthError (401/403) is answered with
// its status and message, anything else as 401.
type Authenticator func(r *http.Request, need Access) (Identity, error)

// Identity is who a request comes from, as the Authenticator says.
type Identity struct {
	Subject string // "" = none; stamped as producerSub on pushed messages
	Tenant  string // the request's tenant; "" = Config.Tenant
}

// caller is what a route handler knows of its request's origin: the
// producerSub to stamp (nil = none) and the tenant.
type caller struct {
	sub    *string
	tenant string
}

// AuthError is an Authenticator's refusal with the status to answer
// (401 or 403) and the message of the JSON error body.
type AuthError struct {
	Status int
	Msg    string
}

func (e *AuthError) Error() string { return e.Msg }

// Server is the HTTP front of one node.
type Server struct {
	b       Broker
	r       Reads
	cfg     Config
	log     hclog.Logger
	mux     *http.ServeMux
	handler http.Handler
	routes  []Route         // every registered route, for Routes
	metrics *metrics        // request histograms and the /metrics registry
	table   *tableCollector // Table's series on /metrics (table.go)
	conns   connStats

	retention func() retention.Stats            // the retention job's counters (retention.go); nil = zeros
	fwd       atomic.Pointer[forward.Forwarder] // push forwarding (forward.go); nil = every push is stored here
	ahead     *aheadLeases                      // claims taken ahead for forwarded pops (ahead.go)

	// drainCtx is canceled by Drain so parked long-polls answer 204 at once
	// instead of holding a graceful shutdown for their whole timeout.
	drainOnce sync.Once
	drainCtx  context.Context
	drain     context.CancelFunc
}

// New returns a Server with every Queen route registered, serving pushes,
// pops and acks through b and the reads through r.
func New(b Broker, r Reads, cfg Config, logger hclog.Logger) *Server {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	s := &Server{b: b, r: r, cfg: cfg.withDefaults(), log: logger, mux: http.NewServeMux(), metrics: newMetrics(),
		ahead: newAheadLeases()}
	s.drainCtx, s.drain = context.WithCancel(context.Background())
	s.table = &tableCollector{s: s}
	s.metrics.reg.MustRegister(s.table)

	s.route("POST", "/api/v1/configure", AccessReadWrite, s.handleConfigure)
	s.route("DELETE", "/api/v1/resources/queues/{queue}", AccessAdmin, s.handleDeleteQueue)
	s.route("POST", "/api/v1/push", AccessReadWrite, s.handlePush)
	s.route("GET", "/api/v1/pop/queue/{queue}", AccessReadWrite, s.handlePop)
	s.route("GET", "/api/v1/pop/queue/{queue}/partition/{partition}", AccessReadWrite, s.handlePop)
	s.route("GET", "/api/v1/pop", AccessReadWrite, s.handlePopAny)
	s.route("POST", "/api/v1/ack", AccessReadWrite, s.handleAck)
	s.route("POST", "/api/v1/ack/batch", AccessReadWrite, s.handleAckBatch)
	s.route("POST", "/api/v1/lease/{leaseId}/extend", AccessReadWrite, s.handleLeaseExtend)
	s.route("POST", "/api/v1/transaction", AccessReadWrite, s.handleTransaction)
	s.route("GET", "/api/v1/dlq", AccessReadOnly, s.handleDLQ)
	s.route("POST", "/api/v1/dlq/{partitionId}/{transactionId}/retry", AccessAdmin, s.handleDLQRetry)
	s.route("DELETE", "/api/v1/dlq/{partitionId}/{transactionId}", AccessAdmin, s.handleDLQDrop)
	s.route("DELETE", "/api/v1/consumer-groups/{group}", AccessAdmin, s.handleDeleteGroup)
	s.route("DELETE", "/api/v1/consumer-groups/{group}/queues/{queue}", AccessAdmin, s.handleDeleteGroup)
	s.route("POST", "/api/v1/consumer-groups/{group}/queues/{queue}/seek", AccessReadWrite, s.handleSeek)
	s.route("GET", "/health", AccessPublic, s.handleHealth)
	s.registerMaintenance()
	s.registerReads()
	s.registerTraces()    // api/traces.go
	s.registerAnalytics() // api/analytics.go
	s.registerStreams()
	s.registerHotlist() // api/hotlist.go

	// bodyDeadline bounds the body's arrival (conn.go). instrument is next so panics (answered 500 by recoverPanics) and
	// preflights are observed too.
	s.handler = s.bodyDeadline(s.instrument(s.recoverPanics(s.cors(http.HandlerFunc(s.dispatch)))))
	return s
}

// Handler returns the root handler (CORS, panics, 404/405 as JSON, routes).
func (s *Server) Handler() http.Handler { return s.handler }

// Handle registers an extra route (e.g. "GET /status", "GET /metrics") on
// the same mux. It gets CORS and JSON 404/405 handling but no
// authentication: the routes added this way are public in the reference.
func (s *Server) Handle(pattern string, h http.Handler) {
	s.handle(pattern, AccessPublic, h)
}

func (s *Server) handle(pattern string, need Access, h http.Handler) {
	s.routes = append(s.routes, Route{Pattern: pattern, Access: need})
	s.mux.Handle(pattern, h)
	s.metrics.addRoute(pattern)
}

// HandleAccess is Handle with the Authenticator in front, at level need
// (the Authenticator's skip list can still make the path public). /status
// and /metrics use it: /status names every tenant's queues and groups.
func (s *Server) HandleAccess(pattern string, need Access, h http.Handler) {
	s.handle(pattern, need, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := s.authorize(w, r, need); ok {
			h.ServeHTTP(w, r)
		}
	}))
}

// Route is a registered route: its ServeMux pattern ("GET /api/v1/dlq")
// and the role it needs when authentication is on.
type Route struct {
	Pattern string
	Access  Access
}

// Routes lists every registered route in registration order, so a test can
// check each one's access level against docs/api.md "Authentication".
func (s *Server) Routes() []Route { return append([]Route(nil), s.routes...) }

// Drain makes parked and future long-polls answer 204 immediately. Call it
// when a graceful shutdown starts (http.Server.RegisterOnShutdown).
func (s *Server) Drain() { s.drainOnce.Do(s.drain) }

// route registers an API handler with its method and access level.
func (s *Server) route(method, path string, need Access, h func(w http.ResponseWriter, r *http.Request, c caller)) {
	s.metrics.addRoute(method + " " + path)
	s.routes = append(s.routes, Route{Pattern: method + " " + path, Access: need})
	s.mux.HandleFunc(method+" "+path, func(w http.ResponseWriter, r *http.Request) {
		// ServeMux lets HEAD reach GET routes; a HEAD pop would lease
		// messages nobody receives.
		if r.Method != method {
			w.Header().Set("Allow", method)
			writeError(w, http.StatusMethodNotAllowed, "method not allowed")
			return
		}
		c, ok := s.authorize(w, r, need)
		if !ok {
			return
		}
		h(w, r, c)
	})
}

// authorize runs the Authenticator (when set and need is not public) and
// returns the request's caller; false means the refusal has been answered.
func (s *Server) authorize(w http.ResponseWriter, r *http.Request, need Access) (caller, bool) {
	c := caller{tenant: s.cfg.Tenant}
	if s.cfg.Auth == nil || need == AccessPublic {
		return c, true
	}
	id, err := s.cfg.Auth(r, need)
	if err != nil {
		var ae *AuthError
		if errors.As(err, &ae) {
			writeError(w, ae.Status, ae.Msg)
		} else {
			writeError(w, http.StatusUnauthorized, "Authentication required")
		}
		return c, false
	}
	if id.Subject != "" {
		c.sub = &id.Subject
	}
	if id.Tenant != "" {
		c.tenant = id.Tenant
	}
	return c, true
}

// dispatch routes through the mux but answers unknown routes and wrong
// methods with JSON errors instead of ServeMux's plain text.
func (s *Server) dispatch(w http.ResponseWriter, r *http.Request) {
	h, pattern := s.mux.Handler(r)
	if pattern != "" {
		setRoute(w, pattern) // the latency histogram's route label
		s.mux.ServeHTTP(w, r)
		return
	}
	// pattern "" is ServeMux's own 404, 405 or a path-cleaning redirect:
	// find out which by running it against a recorder.
	rec := &statusRecorder{header: http.Header{}}
	h.ServeHTTP(rec, r)
	switch rec.status {
	case http.StatusMethodNotAllowed:
		w.Header().Set("Allow", rec.header.Get("Allow"))
		writeError(w, http.StatusMethodNotAllowed, "method not allowed")
	case http.StatusNotFound, 0:
		writeError(w, http.StatusNotFound, "not found: "+r.Method+" "+r.URL.Path)
	default:
		for k, v := range rec.header {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.status)
	}
}

// statusRecorder captures the status and headers of ServeMux's fallback
// handlers; their plain-text bodies are discarded.
type statusRecorder struct {
	header http.Header
	status int
}

func (r *statusRecorder) Header() http.Header { return r.header }
func (r *statusRecorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return len(p), nil
}
func (r *statusRecorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
}

// cors adds the reference's CORS headers to every response and answers
// every OPTIONS preflight with 204.
func (s *Server) cors(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", "*")
		h.Set("Access-Control-Allow-Methods", "GET, POST, PUT, DELETE, OPTIONS")
		h.Set("Access-Control-Allow-Headers", "Content-Type, Authorization")
		if r.Method == http.MethodOptions {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// recoverPanics turns a handler panic into a logged 500 instead of a
// dropped connection. http.ErrAbortHandler keeps its meaning.
func (s *Server) recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.internalError(w, r, "handler panic", "panic", v)
		}()
		next.ServeHTTP(w, r)
	})
}
