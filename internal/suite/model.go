package suite

import (
	"time"

	"queen-node/internal/bench"
	"queen-node/pg"
)

// Report is everything one suite run measured; Render turns it into
// docs/BENCHMARKS.md.
type Report struct {
	Started    time.Time            `json:"started"`
	Elapsed    time.Duration        `json:"elapsed_ns"`
	Command    string               `json:"command"`
	Note       string               `json:"note,omitempty"` // the run's caveat, printed in the header
	Commit     string               `json:"commit"`
	Machine    Machine              `json:"machine"`
	PGVersion  string               `json:"pg_version"`
	PGSettings []pg.ServerSetting   `json:"pg_settings"`
	Plan       Plan                 `json:"plan"`
	Raw        *Raw                 `json:"raw,omitempty"`
	Runs       map[string]*LoadRun  `json:"-"`    // by ID; each has its own JSON file
	Order      []string             `json:"runs"` // run IDs in the order they ran
	Idle       map[string]*IdleCost `json:"idle"`
	Clusters   []ClusterNote        `json:"clusters"`
	SVG        string               `json:"svg,omitempty"` // file name of the growth chart, beside the report
	Failures   []string             `json:"failures,omitempty"`
}

// addRun records a run (replacing one of the same ID).
func (r *Report) addRun(run *LoadRun) {
	if r.Runs == nil {
		r.Runs = map[string]*LoadRun{}
	}
	if _, ok := r.Runs[run.ID]; !ok {
		r.Order = append(r.Order, run.ID)
	}
	r.Runs[run.ID] = run
}

// RunIDs are the recorded runs in the order they ran.
func (r *Report) RunIDs() []string { return r.Order }

// Raw are the two PostgreSQL ceilings of the run (internal/bench/ceiling.go).
type Raw struct {
	Insert bench.CeilingResult `json:"insert"`
	Claim  bench.CeilingResult `json:"claim"`
}

// LoadRun is one queen-bench engine run.
type LoadRun struct {
	ID      string        `json:"id"`
	Nodes   int           `json:"nodes"`
	Env     string        `json:"env"`     // the cluster's QUEEN_* settings
	Command string        `json:"command"` // the equivalent queen-bench command line
	Config  bench.Config  `json:"config"`
	Result  *bench.Result `json:"result,omitempty"`
	// PopSQLCalls is the growth of queen_pop_sql_calls_total over the run,
	// summed over the nodes.
	PopSQLCalls float64 `json:"pop_sql_calls"`
	Err         string  `json:"error,omitempty"`
}

// IdleCost is scenario 3's idle figure: parked consumers, nothing pending.
type IdleCost struct {
	ID          string  `json:"id"`
	Partitions  int     `json:"partitions"`
	Hotlist     bool    `json:"hotlist"`
	Consumers   int     `json:"consumers"`
	Seconds     float64 `json:"seconds"`
	XactPerSec  float64 `json:"pg_xact_per_s"`
	PGCores     float64 `json:"pg_cores"`
	NodeCores   float64 `json:"node_cores"`
	PopSQLPerS  float64 `json:"pop_sql_calls_per_s"`
	PopsPerSec  float64 `json:"pops_answered_per_s"` // long-polls that ended (timeout or error)
	PopErrors   int64   `json:"pop_errors"`
	PopulateSec float64 `json:"populate_s"` // time to create and drain the partitions
	// Hot-list on only: how long the parked consumers took to clear the
	// ring of the partitions the autoAck drain left ready (each one empty
	// probe, docs/hotlist.md), and the pop SQL calls that took. Measured
	// before the warm-up, so the window shows the steady idle cost.
	SettleSec    float64 `json:"settle_s,omitempty"`
	SettlePopSQL float64 `json:"settle_pop_sql_calls,omitempty"`
	Err          string  `json:"error,omitempty"`
}

// ClusterNote records the settings of one set of nodes the suite started.
type ClusterNote struct {
	Tag   string `json:"tag"`
	Nodes int    `json:"nodes"`
	Env   string `json:"env"`
}

// figures are the numbers of a Run the tables show.
type figures struct {
	ok                      bool
	pushed, delivered       float64
	p50, p99, max           float64
	pushP99                 float64
	pgUs, nodeUs, benchUs   float64
	msgsPerPop              float64
	serverErrors            int64
	lost, dup, outOfOrder   int64
	sqlPerPop               float64
	pushOfIns, delivOfClaim float64
}

// growthOneNode is the one-node point of the growth by nodes: the mean of
// the growth step's one-node runs that were measured (ok only if each
// passed its check), not scenario 1's run, made minutes before the step.
func (r *Report) growthOneNode() (figures, bool) {
	var sum figures
	n := 0
	sum.ok = true
	for k := 0; k <= len(r.Plan.growthPoints()); k++ {
		f, ok := r.figures(growthAroundID(k))
		if !ok {
			continue
		}
		sum.delivered += f.delivered
		sum.pgUs += f.pgUs
		sum.nodeUs += f.nodeUs
		sum.msgsPerPop += f.msgsPerPop
		sum.ok = sum.ok && f.ok
		sum.lost, sum.dup, sum.outOfOrder = sum.lost+f.lost, sum.dup+f.dup, sum.outOfOrder+f.outOfOrder
		sum.serverErrors += f.serverErrors
		n++
	}
	if n == 0 {
		return figures{}, false
	}
	d := float64(n)
	sum.delivered, sum.pgUs, sum.nodeUs, sum.msgsPerPop = sum.delivered/d, sum.pgUs/d, sum.nodeUs/d, sum.msgsPerPop/d
	return sum, true
}

func (r *Report) figures(id string) (figures, bool) {
	run := r.Runs[id]
	if run == nil || run.Result == nil {
		return figures{}, false
	}
	res := run.Result
	f := figures{
		ok: res.OK, pushed: res.PushedPerSec, delivered: res.DeliveredPerSec,
		p50: res.Latency.P50, p99: res.Latency.P99, max: res.Latency.Max, pushP99: res.PushLatency.P99,
		msgsPerPop: res.MsgsPerPop, serverErrors: res.ServerErrors,
	}
	f.lost, f.dup, f.outOfOrder = res.Check.Lost, res.Check.Duplicates, res.Check.OutOfOrder
	for _, c := range res.CPU {
		switch {
		case c.Name == "postgresql":
			f.pgUs = c.UsPerMsg
		case c.Name == "queen-bench":
			f.benchUs = c.UsPerMsg
		default:
			f.nodeUs += c.UsPerMsg
		}
	}
	if res.Pops > 0 {
		f.sqlPerPop = run.PopSQLCalls / float64(res.Pops)
	}
	if r.Raw != nil {
		if r.Raw.Insert.PerSec > 0 {
			f.pushOfIns = f.pushed / r.Raw.Insert.PerSec
		}
		if r.Raw.Claim.PerSec > 0 {
			f.delivOfClaim = f.delivered / r.Raw.Claim.PerSec
		}
	}
	return f, true
}
