// Package node is the composition root of queen-node: it assembles one
// broker node from its packages (pg through broker, reads, api, mesh) and takes it
// apart again in order. cmd/queen-node maps QUEEN_* settings onto Config and
// calls Start; in-process tests (internal/nodetest) do the same.
package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/hashicorp/go-hclog"

	"queen-node/api"
	"queen-node/auth"
	"queen-node/broker"
	"queen-node/dashboard"
	"queen-node/forward"
	"queen-node/mesh"
	"queen-node/reads"
	"queen-node/retention"
	"queen-node/stats"
)

// Node is one running node: the broker, the HTTP API on its listener, and
// the mesh when enabled.
type Node struct {
	cfg      Config
	log      hclog.Logger
	addr     string
	broker   *broker.Broker
	reads    *reads.Service
	api      *api.Server
	http     *http.Server
	mesh     *mesh.Mesh         // nil with the mesh off
	fwd      *forward.Forwarder // nil with the mesh or forwarding off
	sampler  *stats.Sampler
	pprof    *http.Server
	serveErr chan error

	retention *retention.Job // runs with Interval > 0 (node/config.go)
}

// Start validates cfg and starts a node: it listens first (a taken port
// fails fast, before any database wait and before the mesh hears of it),
// connects the broker (retrying a database that is not up until ctx ends,
// with /health answering 503 and the reason meanwhile; a server that
// refuses the role, password or database stops it at once), serves the API
// with /status and /metrics, then joins the mesh. ctx bounds startup only.
// logger may be nil.
func Start(ctx context.Context, cfg Config, logger hclog.Logger) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("node config: %w", err)
	}
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	var authn *auth.Authenticator
	if cfg.Auth.Enabled {
		a, err := auth.New(cfg.Auth)
		if err != nil {
			return nil, fmt.Errorf("node config: Auth: %w", err)
		}
		authn = a
	} else if !isLoopback(cfg.HTTPAddr) {
		logger.Warn("AUTHENTICATION IS OFF on a non-loopback HTTP address: anyone who can reach it can read, write and delete every queue; set JWT_ENABLED=true or listen on 127.0.0.1", "http_addr", cfg.HTTPAddr)
	}
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", cfg.HTTPAddr, err)
	}
	// The API serves from here on, on the bound port with its connection
	// limits: while the broker connects (and retries a database that is
	// not up) the gate answers /health with 503 and the reason, and every
	// other request with 503, instead of leaving the port mute.
	acfg := cfg.API
	acfg.Version = cfg.Version
	if cfg.Mesh.Enabled {
		// Peers forward to this node as a queue's owner whatever its
		// own forwarding settings, from the moment they see it.
		acfg.ForwardMark = forward.Mark(cfg.Mesh.Config.Secret)
	}
	if authn != nil {
		acfg.Auth = authn.Authenticate
	}
	late, lateR := &lateBroker{}, &lateReads{}
	srv := api.New(late, lateR, acfg, logger.Named("api"))
	gate := newStartGate(srv.Handler(), cfg.Version)
	// Header, body and idle timeouts and the connection cap (api/conn.go);
	// no ReadTimeout/WriteTimeout: long-polls legitimately hold a request
	// for up to the pop timeout.
	httpSrv := srv.HTTPServer()
	httpSrv.Handler = gate
	// Parked long-polls answer 204 as soon as shutdown starts instead of
	// holding the grace period for their whole timeout.
	httpSrv.RegisterOnShutdown(srv.Drain)
	serveErr := make(chan error, 1)
	go func() { serveErr <- httpSrv.Serve(srv.Listener(ln)) }()

	bcfg := cfg.Broker
	bcfg.PG.ConnectFailed = gate.setReason
	b, err := broker.New(ctx, bcfg, logger.Named("broker"))
	if err != nil {
		gate.fail()
		_ = httpSrv.Close() // and the listener
		return nil, fmt.Errorf("start broker: %w", err)
	}
	late.Broker = b
	// The reads share the broker's pool and tell it of the admin writes
	// that wake parked pops (reads.Waker).
	rd := reads.New(b.Store(), cfg.Broker.NodeName, b, logger.Named("reads"))
	lateR.Reads = rd

	rcfg := cfg.Retention
	rcfg.Node = cfg.Broker.NodeName
	ret, err := retention.New(b.Store(), rcfg, logger.Named("retention"))
	if err != nil {
		gate.fail()
		_ = httpSrv.Close()
		b.Close()
		return nil, err
	}
	srv.SetRetentionSource(ret.Stats)
	// The same address peers learn from membership metadata, so /status
	// and `queen-node status --cluster` agree on where each node is.
	addr := ln.Addr().String()
	// With authentication on, /metrics needs read-only and /status admin
	// (it names every tenant's queues and groups: an operator's view);
	// JWT_SKIP_PATHS (by default /metrics and /metrics/prometheus) makes
	// them public.
	srv.HandleAccess("GET /status", api.AccessAdmin, srv.StatusHandler(b, addr))
	metricsHandler := srv.MetricsHandler(b, addr)
	srv.HandleAccess("GET /metrics", api.AccessReadOnly, metricsHandler)
	srv.HandleAccess("GET /metrics/prometheus", api.AccessReadOnly, metricsHandler) // the path some Queen dashboards scrape
	// The dashboard (docs/operations.md, "Dashboard"): static files, public;
	// its data calls carry the token. "GET /{$}" (exactly "/"), not "GET /",
	// which would swallow every unknown GET and hide the API's JSON 404.
	srv.Handle("GET /{$}", dashboard.Handler())
	srv.Handle("GET /assets/", dashboard.Handler())

	n := &Node{cfg: cfg, log: logger, addr: addr, broker: b, reads: rd, api: srv, http: httpSrv, serveErr: serveErr, retention: ret}
	n.sampler = stats.New(cfg.Stats, b, logger.Named("stats"))
	n.sampler.Start()
	gate.open()

	if cfg.PprofAddr != "" {
		n.pprof = startPprof(cfg.PprofAddr, logger.Named("pprof"))
	}

	if cfg.Mesh.Enabled {
		mc := cfg.Mesh.Config
		mc.Name, mc.HTTPAddr, mc.Version = cfg.Broker.NodeName, addr, cfg.Version
		mc.Logger = logger.Named("mesh")
		m, err := mesh.New(mc, b)
		if err != nil {
			n.abort()
			return nil, fmt.Errorf("start mesh: %w", err)
		}
		b.SetMesh(m)
		n.mesh = m
		switch {
		case !cfg.Forward.Enabled && !cfg.Forward.Consume:
		case len(mc.Secret) == 0:
			// A forwarded push hands the client's data and token to the
			// address a member advertises; on an open mesh anyone who
			// reaches the mesh port can advertise one (docs/api.md, "Push
			// ownership").
			logger.Warn("queue ownership is off: the mesh is open (QUEEN_MESH_SECRET is not set), and requests are only forwarded to authenticated members; every push, pop and ack is served where it arrives")
		default:
			fc := cfg.Forward
			if acfg.MaxBodyBytes > 0 {
				fc.MaxBodyBytes = acfg.MaxBodyBytes // the peers' limit: every node of a cluster has the same settings
			}
			fc.IdleConnTimeout = forwardIdle(acfg.IdleTimeout, fc.IdleConnTimeout)
			fc.Mark = acfg.ForwardMark // peers serve only requests that carry it as forwarded
			n.fwd = forward.New(fc, m.Owners, logger.Named("forward"))
			srv.SetPushForwarder(n.fwd)
		}
	}
	// Started last: a failed start has nothing of it to stop.
	ret.Start()
	logger.Info("queen-node started",
		"node", cfg.Broker.NodeName,
		"http_addr", addr,
		"version", cfg.Version,
		"hotlist", onOff(cfg.Broker.Hotlist.Enabled),
		"mesh", onOff(cfg.Mesh.Enabled),
		"push_forward", onOff(n.fwd != nil && cfg.Forward.Enabled),
		"consume_forward", onOff(n.fwd != nil && cfg.Forward.Consume),
		"auth", onOff(cfg.Auth.Enabled),
		"retention_interval", cfg.Retention.Interval,
	)
	return n, nil
}

// abort tears down a node whose start failed half way, without a drain.
func (n *Node) abort() {
	_ = n.http.Close()
	n.sampler.Close()
	if n.pprof != nil {
		_ = n.pprof.Close()
	}
	n.broker.Close()
}

// Stop shuts the node down in order: leave the mesh first (peers stop
// hinting us), stop accepting and drain in-flight requests until ctx ends
// (parked long-polls answer 204 at once), then close what is left and
// finally the broker, after every handler has returned. It returns the
// drain's error when ctx ended first; the node is stopped either way.
func (n *Node) Stop(ctx context.Context) error {
	// The retention pass stops between two batches and frees its lock, so
	// another node can take over at its next interval.
	n.retention.Stop()
	if n.mesh != nil {
		n.mesh.Close()
	}
	err := n.http.Shutdown(ctx)
	if err != nil {
		n.log.Warn("in-flight requests did not finish in time; closing connections", "error", err)
		_ = n.http.Close()
		err = fmt.Errorf("drain in-flight requests: %w", err)
	}
	if n.pprof != nil {
		_ = n.pprof.Close()
	}
	if n.fwd != nil {
		n.fwd.Close()
	}
	n.sampler.Close()
	n.broker.Close()
	return err
}

// Err delivers the HTTP server's error if it fails while running (a clean
// Stop delivers http.ErrServerClosed).
func (n *Node) Err() <-chan error { return n.serveErr }

// Addr is the address the API listens on (host:port, port resolved).
func (n *Node) Addr() string { return n.addr }

// URL is the API's base URL, e.g. http://127.0.0.1:6632.
func (n *Node) URL() string { return "http://" + n.addr }

// Broker is the node's core (tests drive it directly).
func (n *Node) Broker() *broker.Broker { return n.broker }

// Reads returns the node's read side (resources, messages, analytics,
// traces, dead letters, stream state).
func (n *Node) Reads() *reads.Service { return n.reads }

// Sampler is the node's stats sampler (tests call SampleNow).
func (n *Node) Sampler() *stats.Sampler { return n.sampler }

// API is the node's HTTP server (tests route its forwards through a proxy).
func (n *Node) API() *api.Server { return n.api }

// Mesh is the node's mesh, or nil when it is off.
func (n *Node) Mesh() *mesh.Mesh { return n.mesh }

// Retention is the node's retention job (tests run passes directly).
func (n *Node) Retention() *retention.Job { return n.retention }

// Config is the configuration the node started with.
func (n *Node) Config() Config { return n.cfg }

// startPprof serves net/http/pprof on its own listener, never on the API port.
func startPprof(addr string, logger hclog.Logger) *http.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	s := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := s.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("pprof server failed", "addr", addr, "error", err)
		}
	}()
	logger.Info("pprof listening", "addr", addr)
	return s
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// isLoopback reports whether a listen address (host:port) is on a loopback
// interface only; an empty host or 0.0.0.0 listens on every interface.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Routes lists the HTTP routes the node serves with the role each needs.
func (n *Node) Routes() []api.Route { return n.api.Routes() }

// forwardIdle is how long the forwarder keeps an unused connection to a
// peer: three quarters of the API's idle timeout (the peers', as every
// node of a cluster has the same settings), so this node drops it before
// the peer closes it under a request (forward/stale.go), and at most def.
func forwardIdle(api, def time.Duration) time.Duration {
	if def <= 0 {
		def = forward.DefaultIdleConnTimeout
	}
	if api <= 0 {
		return def
	}
	return min(def, api*3/4)
}
