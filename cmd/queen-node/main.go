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
	"os"
	"os/signal"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"syscall"

	"github.com/hashicorp/go-hclog"

	"queen-node/node"
)

// version is set at build time: -ldflags "-X main.version=1.2.3" (make
// build stamps `git describe`). Without it, a `go build` inside the
// repository still records the commit, which version() reports.
var version = "dev"

func init() { version = stampedVersion(version, debug.ReadBuildInfo) }

// stampedVersion is v, or for "dev" the commit go build recorded:
// dev+<12 hex digits>, with -dirty for uncommitted changes.
func stampedVersion(v string, info func() (*debug.BuildInfo, bool)) string {
	if v != "dev" {
		return v
	}
	bi, ok := info()
	if !ok {
		return v
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	if rev == "" {
		return v
	}
	return "dev+" + rev[:min(12, len(rev))] + dirty
}

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
	if pct, ok := gcPercent(os.Getenv); ok {
		debug.SetGCPercent(pct)
	}
	// The target the runtime runs with, whatever set it (an invalid GOGC
	// silently means 100), which /metrics also exports as go_gc_gogc_percent
	// and go_gc_gomemlimit_bytes.
	gogc, memLimit := gcSettings()
	logger.Info("garbage collector target", "gogc_percent", gogc, "memory_limit_bytes", memLimit,
		"GOGC", os.Getenv("GOGC"), "GOMEMLIMIT", os.Getenv("GOMEMLIMIT"))
	if err := runNode(cfg, logger); err != nil {
		logger.Error("node failed", "error", err)
		return exitFailure
	}
	return 0
}

// defaultGCPercent is the node's GOGC unless the GOGC environment variable
// says otherwise. A node's live heap is small (about 5 MB under the
// standard benchmark), so Go's default of 100 collects every few megabytes
// allocated: 400 cut the node's CPU per message by 7-35% at full load.
// It lets the heap grow to five times the live data between collections
// (about 50 MB of RSS instead of 32 under that load); GOMEMLIMIT bounds it
// where memory is tight (docs/operations.md, "Memory and the garbage
// collector"; the A/B is in docs/benchmarks.md, "The node's garbage
// collector").
const defaultGCPercent = 400

// gcPercent is the GC target the node sets: defaultGCPercent when GOGC is
// unset or empty (ok true); an operator's GOGC, which the runtime already
// read before main (an invalid value there means Go's 100), stands (ok
// false).
func gcPercent(getenv func(string) string) (int, bool) {
	if getenv("GOGC") != "" {
		return 0, false
	}
	return defaultGCPercent, true
}

// gcSettings reads the collector's live target (-1 for off) and memory
// limit from runtime/metrics.
func gcSettings() (gogc int64, memLimit uint64) {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}, {Name: "/gc/gomemlimit:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() == metrics.KindUint64 {
		gogc = int64(s[0].Value.Uint64())
	}
	if s[1].Value.Kind() == metrics.KindUint64 {
		memLimit = s[1].Value.Uint64()
	}
	return gogc, memLimit
}

// runNode starts the node (package node wires pg, broker, api and mesh)
// and blocks until a signal or a fatal server error, then stops it in
// order: leave the mesh, stop accepting, drain in-flight requests, close
// the broker.
func runNode(cfg Config, logger hclog.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	// ctx bounds startup: a signal while PostgreSQL is still unreachable
	// aborts the connect retries.
	n, err := node.Start(ctx, cfg.Node, logger)
	if err != nil {
		return err
	}

	select {
	case err := <-n.Err():
		shutdownCtx, cancel := context.WithTimeout(context.Background(), cfg.Node.ShutdownGrace)
		defer cancel()
		_ = n.Stop(shutdownCtx)
		return fmt.Errorf("http server: %w", err)
	case <-ctx.Done():
	}
	stop() // a second signal kills the process the default way
	logger.Info("shutting down", "grace", cfg.Node.ShutdownGrace)
	shutdownCtx, cancel := context.WithTimeout(context.Background(), cfg.Node.ShutdownGrace)
	defer cancel()
	_ = n.Stop(shutdownCtx) // a drain past the grace is logged by Stop; the node is stopped either way
	logger.Info("stopped")
	return nil
}
