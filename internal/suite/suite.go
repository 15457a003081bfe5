// Package suite is the standard benchmark suite of queen-node (`queen-bench
// suite`, `make bench`): it starts a disposable PostgreSQL with production
// settings and clusters of real queen-node processes, runs the scenarios of
// the Plan through the queen-bench engine (internal/bench), and writes
// docs/BENCHMARKS.md, one JSON per run in docs/bench/ and the growth chart.
// docs/benchmarks.md ("The standard suite") describes it.
package suite

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"

	"queen-node/internal/bench"
	"queen-node/internal/nodeproc"
	"queen-node/pg"
)

// Options configure Run.
type Options struct {
	Plan    Plan
	Report  string // markdown file written at the end; "" = none
	JSONDir string // per-run JSON files; "" = none
	SVGName string // growth chart, written beside Report
	Note    string // caveat printed in the report's header
	Command string // the command line, for the report
	Logger  hclog.Logger
}

// suite is one run's state.
type suite struct {
	o      Options
	log    hclog.Logger
	rep    *Report
	bin    string // the built queen-node
	work   string // binary and node logs
	dbURL  string
	pgPID  int
	logDir string
}

// Run runs the whole suite. Every process it starts is stopped by PID
// before it returns, on failure and on ctx's end (Ctrl-C) too. A scenario
// that fails is recorded in the report and the suite goes on; the error
// is for a suite that could not run or was interrupted.
func Run(ctx context.Context, o Options) (*Report, error) {
	s := &suite{o: o, log: o.Logger}
	if s.log == nil {
		s.log = hclog.NewNullLogger()
	}
	s.rep = &Report{Started: time.Now(), Command: o.Command, Note: o.Note, Machine: readMachine(),
		Commit: gitCommit(ctx), Plan: o.Plan, Idle: map[string]*IdleCost{}, Runs: map[string]*LoadRun{}}

	if err := clearJSON(o.JSONDir); err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp("", "queen-suite-")
	if err != nil {
		return nil, fmt.Errorf("temp dir: %w", err)
	}
	s.work, s.logDir = work, filepath.Join(work, "logs")
	if err := os.MkdirAll(s.logDir, 0o755); err != nil {
		return nil, fmt.Errorf("log dir: %w", err)
	}
	keep := false
	defer func() {
		if keep {
			s.log.Warn("node logs kept", "dir", s.logDir)
			return
		}
		os.RemoveAll(work)
	}()

	s.log.Info("building queen-node")
	if s.bin, err = nodeproc.Build(ctx, "", work, os.Stderr); err != nil {
		return nil, fmt.Errorf("build queen-node (run from the repository root): %w", err)
	}

	s.log.Info("starting PostgreSQL with production settings")
	srv, err := startPostgres(ctx, s.log)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := srv.Stop(); err != nil {
			s.log.Warn("stop PostgreSQL", "error", err)
		}
	}()
	s.pgPID = srv.PID()
	if s.dbURL, err = srv.CreateDatabase(ctx, "queen_suite"); err != nil {
		return nil, fmt.Errorf("create database: %w", err)
	}
	if s.rep.PGVersion, s.rep.PGSettings, err = pg.ServerFacts(ctx, s.dbURL, settingNames()); err != nil {
		return nil, fmt.Errorf("server facts: %w", err)
	}

	steps := []struct {
		name string
		fn   func(context.Context) error
	}{
		{"raw ceilings", s.raw},
		{"throughput and latency", s.throughput},
		{"growth by nodes", s.growthByNodes},
		{"backlog over many partitions", s.backlog},
		{"hot-list on and off", s.hotlist},
		{"cross-node wake", s.wake},
	}
	for _, st := range steps {
		s.log.Info("scenario", "name", st.name)
		if err := st.fn(ctx); err != nil {
			if ctx.Err() != nil {
				return s.rep, fmt.Errorf("interrupted during %s: %w", st.name, ctx.Err())
			}
			s.fail("%s: %v", st.name, err)
		}
	}
	s.rep.Elapsed = time.Since(s.rep.Started)
	keep = len(s.rep.Failures) > 0
	return s.rep, s.write()
}

// fail records a failure for the report.
func (s *suite) fail(format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	s.log.Error("failed", "what", msg)
	s.rep.Failures = append(s.rep.Failures, msg)
}

func (s *suite) raw(ctx context.Context) error {
	p := s.rep.Plan
	s.log.Info("raw INSERT ceiling", "conns", bench.ProducersDefault, "duration", p.RawDuration)
	ins, err := bench.RawInsertCeiling(ctx, bench.CeilingOptions{URL: s.dbURL, Conns: bench.ProducersDefault, PayloadBytes: bench.PayloadDefault, Duration: p.RawDuration})
	if err != nil {
		return fmt.Errorf("raw insert: %w", err)
	}
	s.log.Info("raw claim ceiling", "workers", bench.ConsumersDefault, "rows", p.RawClaimRows)
	cl, err := bench.RawClaimCeiling(ctx, bench.CeilingOptions{URL: s.dbURL, Conns: bench.ConsumersDefault, PayloadBytes: bench.PayloadDefault,
		Duration: p.RawDuration, ClaimRows: p.RawClaimRows})
	if err != nil {
		return fmt.Errorf("raw claim: %w", err)
	}
	s.rep.Raw = &Raw{Insert: ins, Claim: cl}
	s.log.Info("raw ceilings", "insert_rows_s", int(ins.PerSec), "claim_rows_s", int(cl.PerSec))
	return nil
}

// cluster starts n nodes and notes their settings for the report.
func (s *suite) cluster(ctx context.Context, n int, env map[string]string, tag, purpose string) (*cluster, error) {
	c, err := startCluster(ctx, s.log, s.bin, s.dbURL, s.logDir, n, env, tag)
	if err != nil {
		return nil, err
	}
	s.rep.Clusters = append(s.rep.Clusters, ClusterNote{Tag: purpose, Nodes: n, Env: c.EnvLine()})
	return c, nil
}

// baseConfig is the standard workload against the cluster.
func (s *suite) baseConfig(c *cluster) bench.Config {
	cfg := bench.DefaultConfig("")
	cfg.Nodes = c.URLs()
	cfg.Duration = s.rep.Plan.RunDuration
	cfg.Drain = s.rep.Plan.Drain
	return cfg
}

// load runs the queen-bench engine once and records the run. Failing
// checks are recorded as failures, not returned: the suite goes on.
func (s *suite) load(ctx context.Context, id string, c *cluster, cfg bench.Config) (*LoadRun, error) {
	if cfg.Queue == "" {
		cfg.Queue = "suite-" + id + "-" + time.Now().UTC().Format("150405")
	}
	cfg.PGPID = s.pgPID
	run := &LoadRun{ID: id, Nodes: len(c.nodes), Env: c.EnvLine(), Config: cfg, Command: commandLine(cfg)}
	sql0, err0 := clusterMetric(ctx, c.URLs(), metricPopSQL)
	s.log.Info("run", "id", id, "nodes", len(c.nodes), "partitions", cfg.Partitions, "groups", cfg.Groups, "rate", cfg.Rate)
	res, err := bench.Run(ctx, cfg, nil)
	if err != nil {
		run.Err = err.Error()
		s.rep.addRun(run)
		return run, fmt.Errorf("run %s: %w", id, err)
	}
	if ctx.Err() != nil { // interrupted: the figures mean nothing
		return run, ctx.Err()
	}
	run.Result = res
	if sql1, err1 := clusterMetric(ctx, c.URLs(), metricPopSQL); err0 == nil && err1 == nil {
		run.PopSQLCalls = sql1 - sql0
	}
	s.rep.addRun(run)
	f, _ := s.rep.figures(id)
	s.log.Info("done", "id", id, "delivered_s", int(f.delivered), "p50_ms", f.p50, "p99_ms", f.p99, "pg_us_msg", int(f.pgUs), "ok", res.OK)
	if !res.OK {
		s.fail("run %s: %s", id, verdict(f))
	}
	return run, s.writeRunJSON(run)
}

// runJSON is a run's file, in the shape of `queen-bench --json` so that
// `queen-bench compare` reads it, plus the suite's own fields.
type runJSON struct {
	Version int           `json:"version"`
	Command string        `json:"command"`
	Config  bench.Config  `json:"config"`
	Raw     *rawJSON      `json:"raw,omitempty"`
	Result  *bench.Result `json:"result"`
	Suite   suiteJSON     `json:"suite"`
}

type rawJSON struct {
	Insert         bench.CeilingResult `json:"insert"`
	Claim          bench.CeilingResult `json:"claim"`
	PushOfInsert   float64             `json:"push_of_insert"`
	DeliverOfClaim float64             `json:"deliver_of_claim"`
}

type suiteJSON struct {
	ID          string  `json:"id"`
	Nodes       int     `json:"nodes"`
	Env         string  `json:"env"`
	PopSQLCalls float64 `json:"pop_sql_calls"`
	Commit      string  `json:"commit"`
}

func (s *suite) writeRunJSON(run *LoadRun) error {
	if s.o.JSONDir == "" || run.Result == nil {
		return nil
	}
	out := runJSON{Version: 1, Command: run.Command, Config: run.Config, Result: run.Result,
		Suite: suiteJSON{ID: run.ID, Nodes: run.Nodes, Env: run.Env, PopSQLCalls: run.PopSQLCalls, Commit: s.rep.Commit}}
	if raw := s.rep.Raw; raw != nil {
		f, _ := s.rep.figures(run.ID)
		out.Raw = &rawJSON{Insert: raw.Insert, Claim: raw.Claim, PushOfInsert: f.pushOfIns, DeliverOfClaim: f.delivOfClaim}
	}
	return writeJSON(filepath.Join(s.o.JSONDir, run.ID+".json"), out)
}

// clearJSON removes the previous run's JSON files, so the directory holds
// the run the report shows and nothing older (a quick run has fewer runs).
func clearJSON(dir string) error {
	if dir == "" {
		return nil
	}
	old, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return fmt.Errorf("list %s: %w", dir, err)
	}
	for _, f := range old {
		if err := os.Remove(f); err != nil {
			return fmt.Errorf("remove old %s: %w", f, err)
		}
	}
	return nil
}

func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("mkdir for %s: %w", path, err)
	}
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// write writes the report, the chart and the suite's summary JSON.
func (s *suite) write() error {
	var errs []error
	if s.o.Report != "" && s.o.SVGName != "" {
		path := filepath.Join(filepath.Dir(s.o.Report), s.o.SVGName)
		if err := os.WriteFile(path, []byte(GrowthSVG(growthPanels(s.rep))), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("write %s: %w", path, err))
		} else {
			s.rep.SVG = s.o.SVGName
		}
	}
	if s.o.JSONDir != "" {
		errs = append(errs, writeJSON(filepath.Join(s.o.JSONDir, "suite.json"), s.rep))
		for id, ic := range s.rep.Idle {
			errs = append(errs, writeJSON(filepath.Join(s.o.JSONDir, id+".json"), map[string]any{"version": 1, "result": ic}))
		}
	}
	if s.o.Report != "" {
		if err := os.WriteFile(s.o.Report, []byte(Render(s.rep)), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("write %s: %w", s.o.Report, err))
		}
	}
	return errors.Join(errs...)
}
