// Command pgtemp runs a command against a disposable PostgreSQL server.
//
//	go run ./cmd/pgtemp [-keep] -- CMD ARGS...
//	go run ./cmd/pgtemp -print
//
// The first form starts a server, runs CMD with QUEEN_TEST_PG_URL and
// QUEEN_PG_URL (the server's "postgres" database) plus PGHOST, PGPORT and
// PGUSER set, stops the server afterwards and exits with CMD's exit code.
// The second prints the URL and keeps the server up until Ctrl-C.
// With -keep the data directory is kept after the server stops.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/hashicorp/go-hclog"

	"queen-node/internal/pgtemp"
)

func main() {
	os.Exit(run())
}

func run() int {
	keep := flag.Bool("keep", false, "keep the data directory after stopping the server")
	printURL := flag.Bool("print", false, "print the server URL and wait for Ctrl-C instead of running a command")
	port := flag.Int("port", 0, "TCP port on 127.0.0.1 (0 = pick a free one)")
	binDir := flag.String("bindir", "", "directory with initdb and postgres (default: search)")
	level := flag.String("log-level", "info", "log level: trace, debug, info, warn, error")
	var sets settingFlag
	flag.Var(&sets, "set", "server setting key=value over the test defaults (repeatable), e.g. -set fsync=on -set shared_preload_libraries=pg_stat_statements")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(),
			"usage: pgtemp [flags] -- CMD ARGS...\n       pgtemp [flags] -print\n\nflags:\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	log := hclog.New(&hclog.LoggerOptions{Name: "pgtemp", Level: hclog.LevelFromString(*level), Output: os.Stderr})

	args := flag.Args()
	if *printURL == (len(args) > 0) {
		flag.Usage()
		return 2
	}

	// Catch signals before starting anything so Ctrl-C during startup still
	// stops the server.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)

	opts := pgtemp.DefaultOptions()
	opts.Port, opts.BinDir, opts.Logger = *port, *binDir, log
	opts.Settings = sets.m
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Abort a slow startup on a signal; afterwards runWith owns sigs.
	caught := make(chan os.Signal, 1)
	go func() {
		select {
		case sig := <-sigs:
			caught <- sig
			cancel()
		case <-ctx.Done():
		}
		close(caught)
	}()
	srv, err := pgtemp.Start(ctx, opts)
	cancel()
	if sig, ok := <-caught; ok {
		log.Info("interrupted during startup", "signal", sig)
		if srv != nil {
			_ = srv.Stop()
		}
		return 128 + int(sig.(syscall.Signal))
	}
	if err != nil {
		// One log line; the server log tail that pgtemp appends follows raw.
		first, details, _ := strings.Cut(err.Error(), "\n")
		log.Error("cannot start PostgreSQL", "error", first)
		if details != "" {
			fmt.Fprintln(os.Stderr, details)
		}
		return 1
	}
	code := runWith(srv, args, sigs, log)

	if *keep {
		err = srv.StopKeepData()
		log.Info("server stopped, data kept", "dir", srv.Dir())
	} else {
		err = srv.Stop()
	}
	if err != nil {
		log.Error("cannot stop PostgreSQL", "error", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// runWith prints the URL and waits for a signal (no args), or runs the
// command and returns its exit code.
func runWith(srv *pgtemp.Server, args []string, sigs chan os.Signal, log hclog.Logger) int {
	url := srv.URL("postgres")
	if len(args) == 0 {
		fmt.Println(url)
		log.Info("PostgreSQL running; press Ctrl-C to stop", "url", url, "dir", srv.Dir())
		<-sigs
		return 0
	}

	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(),
		"QUEEN_TEST_PG_URL="+url,
		"QUEEN_PG_URL="+url,
		"PGHOST=127.0.0.1",
		"PGPORT="+strconv.Itoa(srv.Port()),
		"PGUSER=postgres",
	)
	if err := cmd.Start(); err != nil {
		log.Error("cannot run command", "command", args[0], "error", err)
		return 127
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for {
		select {
		case sig := <-sigs:
			// On a terminal the child got SIGINT already (same process
			// group); forwarding matters for signals sent to us alone.
			_ = cmd.Process.Signal(sig)
		case err := <-done:
			var exitErr *exec.ExitError
			switch {
			case err == nil:
				return 0
			case errors.As(err, &exitErr):
				if ws, ok := exitErr.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
					return 128 + int(ws.Signal())
				}
				return exitErr.ExitCode()
			default:
				log.Error("command failed", "command", args[0], "error", err)
				return 1
			}
		}
	}
}

// settingFlag collects repeated -set key=value flags.
type settingFlag struct{ m map[string]string }

func (f *settingFlag) String() string { return fmt.Sprint(f.m) }

func (f *settingFlag) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("want key=value, got %q", v)
	}
	if f.m == nil {
		f.m = map[string]string{}
	}
	f.m[k] = val
	return nil
}
