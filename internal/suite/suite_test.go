package suite

import (
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"queen-node/internal/bench"
	"queen-node/pg"
)

func TestPlanScenarioTable(t *testing.T) {
	full, quick := NewPlan(false, 0), NewPlan(true, 0)
	if full.RunDuration != 15*time.Second || quick.RunDuration != 5*time.Second {
		t.Fatalf("run durations %s / %s", full.RunDuration, quick.RunDuration)
	}
	if got := NewPlan(true, 7*time.Second).RunDuration; got != 7*time.Second {
		t.Fatalf("override: %s", got)
	}
	if got := full.PartitionSeries(); !equal(got, []int{100, 1000, 10000, 100000}) {
		t.Fatalf("full partition series %v", got)
	}
	if got := full.NodeSeries(); !equal(got, []int{1, 2, 3, 4, 5}) {
		t.Fatalf("full node series %v", got)
	}
	if got := quick.NodeSeries(); !equal(got, []int{1, 3, 5}) {
		t.Fatalf("quick node series %v", got)
	}
	if !equal(full.IdleSizes, []int{1000, 10000, 100000}) || full.IdleConsumers != 100 {
		t.Fatalf("idle sizes %v x %d", full.IdleSizes, full.IdleConsumers)
	}
	for _, w := range full.growthWorkloads() {
		if (w.Partitions >= bigPartitions) != (w.Messages == full.BigMessages) {
			t.Errorf("workload %+v: fixed message count only from %d partitions", w, bigPartitions)
		}
	}
	// Every run has its own JSON file: IDs must not collide.
	seen := map[string]bool{}
	add := func(id string) {
		if seen[id] {
			t.Errorf("duplicate run id %s", id)
		}
		seen[id] = true
	}
	for _, n := range full.Nodes {
		for _, w := range full.Workloads {
			add(throughputID(n, w))
		}
		add(latencyID(n))
	}
	for _, on := range []bool{true, false} {
		for _, n := range full.IdleSizes {
			add(idleID(on, n))
		}
		for _, n := range full.ActiveSizes {
			add(activeID(on, n, false))
			add(activeID(on, n, true))
		}
	}
	for _, d := range full.WakeDropRates {
		add(wakeID(d))
	}
	add(growthAroundID(0))
	for k, n := range full.growthPoints() {
		add(growthNodesID(n))
		add(growthAroundID(k + 1))
	}
	for _, wl := range full.backlogWorkloads() {
		add(wl.ID())
		if wl.Partitions != 10000 || wl.PerPartition < 50 {
			t.Errorf("backlog run %+v: issue 20 asks for 10,000 partitions with at least 50 messages each", wl)
		}
	}
	if got := full.backlogWorkloads(); len(got) != 2 || !got[0].Queued || got[1].Queued {
		t.Fatalf("backlog runs %+v: want queued, then mixed", got)
	}
	if got := quick.growthPoints(); !equal(got, []int{3, 5}) {
		t.Fatalf("quick growth points %v", got)
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// fakeRun is a passing run with the given rate and CPU.
func fakeRun(id string, nodes int, delivered, pgUs float64) *LoadRun {
	cfg := bench.DefaultConfig("http://127.0.0.1:1")
	cfg.Queue = "q-" + id
	res := &bench.Result{PushedPerSec: delivered, DeliveredPerSec: delivered, Delivered: 1000, OK: true, Pops: 100,
		Latency: bench.LatencySummary{P50: 12.5, P99: 48, Max: 130}, MsgsPerPop: 10,
		CPU: []bench.CPUUse{{Name: "postgresql", UsPerMsg: pgUs}, {Name: "node a", UsPerMsg: 10}, {Name: "node b", UsPerMsg: 5}}}
	res.Check.OK = true
	return &LoadRun{ID: id, Nodes: nodes, Config: cfg, Result: res, PopSQLCalls: 50, Command: commandLine(cfg)}
}

func fakeReport() *Report {
	p := NewPlan(true, 0)
	r := &Report{Started: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), Elapsed: 3 * time.Minute, Command: "queen-bench suite --quick",
		Note: "noisy", Commit: "abc123", Machine: Machine{CPUs: 2, CPUModel: "Xeon", MemoryMB: 2048, Kernel: "6.1"},
		PGVersion: "PostgreSQL 15", PGSettings: []pg.ServerSetting{{Name: "fsync", Value: "on"}}, Plan: p,
		Raw:  &Raw{Insert: bench.CeilingResult{PerSec: 100000, Conns: 4}, Claim: bench.CeilingResult{PerSec: 200000, Conns: 8}},
		Idle: map[string]*IdleCost{}, SVG: "bench-growth.svg"}
	for _, n := range p.NodeSeries() {
		r.addRun(fakeRun(throughputID(n, Workload{Partitions: 100}), n, 10000*float64(n), 20))
		if n > 1 {
			r.addRun(fakeRun(growthNodesID(n), n, 10000*float64(n), 20))
		}
	}
	// the one-node runs around the growth points (quick: 3 and 5 nodes);
	// the last could not run
	r.addRun(fakeRun(growthAroundID(0), 1, 12000, 16))
	r.addRun(fakeRun(growthAroundID(1), 1, 12000, 24))
	r.addRun(&LoadRun{ID: growthAroundID(2), Nodes: 1, Err: "boom"})
	r.addRun(fakeRun(throughputID(1, Workload{Partitions: 1000}), 1, 5000, 40))
	r.Idle[idleID(true, 1000)] = &IdleCost{ID: idleID(true, 1000), XactPerSec: 0.5, PopSQLPerS: 0,
		SettleSec: 2.5, SettlePopSQL: 1000}
	r.Idle[idleID(false, 1000)] = &IdleCost{ID: idleID(false, 1000), XactPerSec: 120, PopSQLPerS: 99}
	queued := fakeRun(BacklogWorkload{Partitions: p.BacklogPartitions, Queued: true}.ID(), 1, 8000, 60)
	queued.Result.DrainSeconds, queued.Result.DrainedPerSec = 4.25, 23529
	r.addRun(queued)
	r.addRun(&LoadRun{ID: BacklogWorkload{Partitions: p.BacklogPartitions}.ID(), Nodes: 1, Err: "bang"})
	fail := fakeRun(wakeID(1), 3, 20, 0)
	fail.Result.OK, fail.Result.Check.OK, fail.Result.Check.Lost = false, false, 3
	r.addRun(fail)
	return r
}

func TestRenderReport(t *testing.T) {
	md := Render(fakeReport())
	for _, want := range []string{
		"> **This run:** noisy",
		"| commit | `abc123` |",
		"| `fsync` | on |",
		"**100,000 rows/s**",
		// 1 node: 10,000 delivered; 0.10 of INSERT, 0.05 of claim.
		"| `thr-1n-p100` | 100 partitions, queue mode | 1 | 10,000 | **10,000** | 0.10 | 0.05 | 10.0 | 12.5 / 48.0 / 130 | 20 | 15 | pass |",
		"| 100 partitions, queue mode | 10,000 | 30,000 | 3.00 |", // 3 nodes vs 1
		"| 1,000 | **0.500** | 120 |", // idle, on vs off
		"before the warm-up: 1,000 partitions in 2.5 s (1,000 pop SQL calls).",
		"**FAIL**: 3 lost",
		"| 5 | 50,000 | 4.17 |", // growth by nodes, against the one-node runs' mean
		"| 1 | 12,000 | 1.00 | 20 | 15 | 10.0 | mean of the step's one-node runs | - | - | pass |",
		"| 3 | 30,000 | 2.50 | 20 | 15 | 10.0 | 12,000, 16, 10.0 / 12,000, 24, 10.0 | **1.00** | **1.00** | pass |", // against the runs around it
		"| 5 | 50,000 | 4.17 | 20 | 15 | 10.0 | 12,000, 24, 10.0 / not measured: boom | **0.83** | **1.00** | pass |",
		"2,000 partitions with a backlog", "exactly\n50 messages per partition (`--even`), 100,000 in all",
		"| `backlog-1n-p2000` queued, then drained | 8,000 | **8,000** | **23,529** | 4.2 | 10.0 | 12.5 / 48.0 | 60 | 15 | pass |",
		"| `mixed-1n-p2000` mixed: pushed while consumed | not measured: bang |",
		"![delivered/s",
		"    # thr-1n-p100\n    queen-bench --nodes http://127.0.0.1:1",
		"not measured",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q", want)
		}
	}
}

// TestRenderGrowthAroundFailed: a one-node run around a growth point that
// failed its check says so in its cell, not only in the failures list.
func TestRenderGrowthAroundFailed(t *testing.T) {
	r := fakeReport()
	res := r.Runs[growthAroundID(0)].Result
	res.OK, res.Check.OK, res.Check.Lost = false, false, 2
	md := Render(r)
	for _, want := range []string{
		"| 3 | 30,000 | 2.50 | 20 | 15 | 10.0 | 12,000, 16, 10.0 (**FAIL**: 2 lost) / 12,000, 24, 10.0 | **1.00** | **1.00** | pass |",
		"| 1 | 12,000 | 1.00 | 20 | 15 | 10.0 | mean of the step's one-node runs | - | - | **FAIL**: 2 lost |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q", want)
		}
	}
}

func TestGrowthSVG(t *testing.T) {
	svg := GrowthSVG(growthPanels(fakeReport()))
	if err := xml.Unmarshal([]byte(svg), new(struct{})); err != nil {
		t.Fatalf("not XML: %v", err)
	}
	// Quick plan: 100, 1,000 measured (10,000 not) and 1, 3, 5 nodes: 5 bars.
	if got := strings.Count(svg, `fill="#4a7ebb"/>`) - 1; got != 5 { // minus the legend's
		t.Fatalf("%d bars, want 5", got)
	}
	for _, want := range []string{">10,000<", ">50,000<", "20 us", "<polyline"} {
		if !strings.Contains(svg, want) {
			t.Errorf("svg lacks %q", want)
		}
	}
	if empty := GrowthSVG([]Panel{{Title: "a & b"}}); !strings.Contains(empty, "no data") || !strings.Contains(empty, "a &amp; b") {
		t.Errorf("empty panel: %s", empty)
	}
}

func TestParseMetricSum(t *testing.T) {
	body := []byte(`# HELP queen_pop_sql_calls_total SQL calls
# TYPE queen_pop_sql_calls_total counter
queen_pop_sql_calls_total{queue="a"} 3
queen_pop_sql_calls_total{queue="b"} 4.5
queen_pop_sql_calls_totalx 100
queen_pop_sql_calls_total 1
`)
	if got := parseMetricSum(body, "queen_pop_sql_calls_total"); got != 8.5 {
		t.Fatalf("sum %v, want 8.5", got)
	}
}

func TestClearJSON(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"thr-2n-p100.json", "notes.txt"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := clearJSON(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "thr-2n-p100.json")); !os.IsNotExist(err) {
		t.Errorf("old JSON still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "notes.txt")); err != nil {
		t.Errorf("other file removed: %v", err)
	}
	if err := clearJSON(""); err != nil {
		t.Errorf("no dir: %v", err)
	}
}

func TestRingsBusy(t *testing.T) {
	// The shape of GET /api/v1/status/hotlist/:queue (docs/api.md).
	view := []byte(`{"node":"n1","queue":"q","enabled":true,"registered":true,"rings":[
		{"group":"__QUEUE_MODE__","ready":3,"wheel":7,"inflight":2,"unconfirmed":0,"cold":false,"partitions":[]},
		{"group":"g","ready":0,"wheel":1,"inflight":0,"partitions":[]}],"ringsTruncated":false}`)
	n, err := ringsBusy(view)
	if err != nil || n != 5 {
		t.Fatalf("ringsBusy = %d, %v; want 5 (ready and in flight; the wheel waits)", n, err)
	}
	if n, err := ringsBusy([]byte(`{"registered":false,"rings":[]}`)); err != nil || n != 0 {
		t.Fatalf("no ring: %d, %v", n, err)
	}
	if _, err := ringsBusy([]byte(`<html>`)); err == nil {
		t.Fatal("a body that is not the view must be an error")
	}
}
