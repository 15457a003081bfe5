package main

// `queen-bench suite` runs the standard suite (internal/suite). It lives in
// queen-bench rather than in a command of its own because it is the same
// tool driving the same engine: the suite's per-run JSON files are
// queen-bench --json files, read by `queen-bench compare`, and each run is
// reported as the queen-bench command that repeats it.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/hashicorp/go-hclog"

	"queen-node/internal/suite"
)

func suiteMain(args []string) int {
	fs := flag.NewFlagSet("queen-bench suite", flag.ContinueOnError)
	quick := fs.Bool("quick", false, "the quick suite (~4 min): 5 s runs, fewer sizes")
	dur := fs.Duration("duration", 0, "push phase of every load run (default 15s, 5s with --quick)")
	out := fs.String("out", "docs/BENCHMARKS.md", "report to write (\"\" = none)")
	jsonDir := fs.String("json-dir", "docs/bench", "directory of the per-run JSON files (\"\" = none)")
	svg := fs.String("svg", "bench-growth.svg", "growth chart file name, written beside --out")
	note := fs.String("note", "", "a caveat printed in the report's header (noisy machine, ...)")
	level := fs.String("log-level", "info", "log level: debug, info, warn, error")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: queen-bench suite [flags]\n\nRun from the repository root: it builds ./cmd/queen-node.\n\nflags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "queen-bench suite: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "suite", Level: hclog.LevelFromString(*level), Output: os.Stderr})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	rep, err := suite.Run(ctx, suite.Options{
		Plan:    suite.NewPlan(*quick, *dur),
		Report:  *out,
		JSONDir: *jsonDir,
		SVGName: *svg,
		Note:    *note,
		Command: "queen-bench " + strings.Join(append([]string{"suite"}, args...), " "),
		Logger:  log,
	})
	if err != nil {
		log.Error("suite failed", "error", err)
		return 2
	}
	log.Info("suite done", "elapsed", rep.Elapsed.Round(1e9), "report", *out, "failures", len(rep.Failures))
	if len(rep.Failures) > 0 {
		return 1
	}
	return 0
}
