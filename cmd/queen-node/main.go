// Command queen-node is one broker node of a PostgreSQL-backed Queen MQ
// cluster: it serves the Queen HTTP API on top of package broker.
//
//	queen-node [serve] [flags]   run the node (default)
//	queen-node status [flags]    inspect a running node or its cluster
//	queen-node version           print the version
//
// Every flag has a QUEEN_* environment variable; see -h.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"queen-node/api"
	"queen-node/broker"
	"queen-node/mesh"
)

// version is set at build time: -ldflags "-X main.version=1.2.3".
var version = "dev"

// shutdownGrace is how long in-flight requests get after SIGINT/SIGTERM.
const shutdownGrace = 10 * time.Second

// Exit codes: 2 = bad usage or configuration, 1 = runtime failure.
const (
	exitFailure = 1
	exitUsage   = 2
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	cmd := "serve"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		return serve(args)
	case "status":
		return statusCmd(args, os.Stdout, os.Stderr)
	case "version":
		fmt.Println("queen-node", version)
		return 0
	case "help":
		printUsage(os.Stdout)
		return 0
	default:
		fmt.Fprintf(os.Stderr, "queen-node: unknown command %q: want serve, status or version\n", cmd)
		return exitUsage
	}
}

func serve(args []string) int {
	cfg, err := loadConfig(args, os.Getenv)
	if errors.Is(err, flag.ErrHelp) {
		printUsage(os.Stderr)
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "queen-node: %v\n", err)
		return exitUsage
	}

	logger := hclog.New(&hclog.LoggerOptions{
		Name:       "queen-node",
		Level:      cfg.LogLevel,
		JSONFormat: cfg.LogJSON,
		Output:     os.Stderr,
	})
	if err := runNode(cfg, logger); err != nil {
		logger.Error("node failed", "error", err)
		return exitFailure
	}
	return 0
}

// runNode starts the broker and the HTTP server and blocks until a signal
// or a fatal server error, then shuts down in order: stop accepting, drain
// in-flight requests, close the broker.
func runNode(cfg Config, logger hclog.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	// Listen before connecting so a taken port fails fast, not after a
	// database wait.
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.HTTPAddr, err)
	}
	defer ln.Close()

	// ctx bounds startup: a signal while PostgreSQL is still unreachable
	// aborts the connect retries.
	b, err := broker.New(ctx, cfg.Broker, logger.Named("broker"))
	if err != nil {
		return fmt.Errorf("start broker: %w", err)
	}
	defer b.Close()

	acfg := api.DefaultConfig()
	acfg.Tenant = cfg.Tenant
	acfg.Version = version
	acfg.ReadHeaderTimeout, acfg.BodyTimeout = cfg.HTTP.ReadHeaderTimeout, cfg.HTTP.BodyTimeout
	acfg.IdleTimeout, acfg.MaxConns = cfg.HTTP.IdleTimeout, cfg.HTTP.MaxConns
	acfg.WriteTimeout = cfg.HTTP.WriteTimeout
	srv := api.New(b, acfg, logger.Named("api"))
	// The same address peers learn from membership metadata, so /status
	// and `queen-node status --cluster` agree on where each node is.
	httpAddr := ln.Addr().String()
	srv.Handle("GET /status", srv.StatusHandler(b, httpAddr))
	metricsHandler := srv.MetricsHandler(b, httpAddr)
	srv.Handle("GET /metrics", metricsHandler)
	srv.Handle("GET /metrics/prometheus", metricsHandler) // the path some Queen dashboards scrape

	// Header, body and idle timeouts and the connection cap (api/conn.go);
	// no ReadTimeout/WriteTimeout: long-polls legitimately hold a request
	// for up to the pop timeout.
	httpSrv := srv.HTTPServer()
	// Parked long-polls answer 204 as soon as shutdown starts instead of
	// holding the grace period for their whole timeout.
	httpSrv.RegisterOnShutdown(srv.Drain)

	serveErr := make(chan error, 1)
	go func() { serveErr <- httpSrv.Serve(srv.Listener(ln)) }()

	if cfg.PprofAddr != "" {
		pp := startPprof(cfg.PprofAddr, logger.Named("pprof"))
		defer pp.Close()
	}

	var m *mesh.Mesh
	if cfg.Mesh.Enabled {
		mc := mesh.DefaultConfig()
		mc.Name = cfg.Broker.NodeName
		mc.Bind, mc.Advertise, mc.Join, mc.Secret = cfg.Mesh.Bind, cfg.Mesh.Advertise, cfg.Mesh.Join, cfg.Mesh.Secret
		mc.FlushInterval, mc.HintCap, mc.DropRate = cfg.Mesh.FlushInterval, cfg.Mesh.HintCap, cfg.Mesh.DropRate
		mc.HTTPAddr, mc.Version, mc.HintPort = httpAddr, version, cfg.Mesh.HintPort
		mc.HintFrameTimeout, mc.HintIdleTimeout = cfg.Mesh.HintFrameTimeout, cfg.Mesh.HintIdleTimeout
		mc.HintRate = cfg.Mesh.HintRate
		mc.Timings.GossipInterval = time.Duration(cfg.Mesh.GossipMS) * time.Millisecond
		mc.Timings.ProbeInterval = time.Duration(cfg.Mesh.ProbeMS) * time.Millisecond
		mc.Timings.ProbeTimeout = mc.Timings.ProbeInterval / 2
		mc.Logger = logger.Named("mesh")
		if m, err = mesh.New(mc, b); err != nil {
			return fmt.Errorf("start mesh: %w", err)
		}
		b.SetMesh(m)
		// Leave the cluster first on shutdown, so peers stop hinting us.
		defer m.Close()
	}
	logger.Info("queen-node started",
		"node", cfg.Broker.NodeName,
		"http_addr", ln.Addr().String(),
		"version", version,
		"hotlist", onOff(cfg.Broker.Hotlist),
		"mesh", onOff(cfg.Mesh.Enabled),
	)

	select {
	case err := <-serveErr:
		return fmt.Errorf("http server: %w", err)
	case <-ctx.Done():
	}
	stop() // a second signal kills the process the default way
	logger.Info("shutting down", "grace", shutdownGrace)
	if m != nil {
		m.Close()
	}

	shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := httpSrv.Shutdown(shutdownCtx); err != nil {
		logger.Warn("in-flight requests did not finish in time; closing connections", "error", err)
		_ = httpSrv.Close()
	}
	// b.Close runs via defer, after every handler has returned.
	logger.Info("stopped")
	return nil
}

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
