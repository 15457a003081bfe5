package suite

import (
	"fmt"
	"time"
)

// Plan is what one suite run measures: the scenarios of issue 10's section 2
// (docs/benchmarks.md, "The standard suite") with their sizes and lengths.
// It is pure data, built by NewPlan, so the scenario table is testable.
type Plan struct {
	Quick        bool          `json:"quick"`
	RunDuration  time.Duration `json:"run_duration_ns"` // push phase of every load run
	Drain        time.Duration `json:"drain_ns"`        // consumers' time to finish after it
	RawDuration  time.Duration `json:"raw_duration_ns"` // each raw ceiling loop
	RawClaimRows int           `json:"raw_claim_rows"`  // backlog of the raw claim loop
	// IdleWarmup lets parked consumers settle and, as important, lets the
	// backends of the previous step report their transactions: PostgreSQL
	// 15 backends flush pg_stat_database counters up to 10 s after going
	// idle, which would otherwise land in the idle window.
	IdleWarmup time.Duration `json:"idle_warmup_ns"`
	IdleWindow time.Duration `json:"idle_window_ns"` // idle cost measuring window
	// IdleSettleMax bounds the wait, before the warm-up, for a hot-list
	// ring to clear what the autoAck drain left in it (measureIdle).
	IdleSettleMax time.Duration `json:"idle_settle_max_ns"`
	LatencyShare  float64       `json:"latency_share"`    // open-loop rate as a fraction of the peak
	Workloads     []Workload    `json:"workloads"`        // scenario 1, each on every ThroughputNodes
	Nodes         []int         `json:"throughput_nodes"` // scenario 1 and 2
	BigMessages   int           `json:"big_messages"`     // pushed by workloads of >= bigPartitions
	BigDrain      time.Duration `json:"big_drain_ns"`     // their drain: pops of one or two messages are slow
	// Scenario 5: more partitions on one node than scenario 1 measures,
	// and node counts for the 100-partition workload, run by the growth
	// step with scenario 1's (NodeSeries) between one-node runs.
	GrowthPartitions []int `json:"growth_partitions"`
	GrowthNodes      []int `json:"growth_nodes"`
	// Scenario 5's backlog (issue 20): BacklogPartitions partitions on one
	// node, exactly BacklogPerPartition messages each (bench.Config.Even),
	// once all queued before the consumers start and once pushed with the
	// consumers running (mixed). Their drain is BigDrain.
	BacklogPartitions   int `json:"backlog_partitions"`
	BacklogPerPartition int `json:"backlog_per_partition"`
	// Scenario 3.
	IdleSizes     []int `json:"idle_sizes"`
	IdleConsumers int   `json:"idle_consumers"`
	ActiveSizes   []int `json:"active_sizes"` // 1% of the partitions receive the standard workload
	// Scenario 4.
	WakeDropRates []float64 `json:"wake_drop_rates"`
	WakeReseedMS  int       `json:"wake_reseed_ms"`
	WakeRate      float64   `json:"wake_rate"` // single-message pushes per second
}

// Workload is one scenario-1 shape: the standard workload (4 producers x
// batches of 100, 8 long-poll consumers popping 100 with one batch ack,
// 256-byte payloads) over Partitions, in queue mode or Groups groups.
type Workload struct {
	Partitions int `json:"partitions"`
	Groups     int `json:"groups"`
	// Messages > 0 pushes this many instead of for the run's duration.
	Messages int `json:"messages,omitempty"`
}

// bigPartitions is where workloads switch to a fixed message count
// (Plan.BigMessages): with one or two messages per pop, a duration's worth
// of pushes takes minutes to drain.
const bigPartitions = 10000

// Name is the workload's short label.
func (w Workload) Name() string {
	s := fmt.Sprintf("%s partitions", num(float64(w.Partitions)))
	if w.Groups > 0 {
		s += fmt.Sprintf(", %d groups", w.Groups)
	} else {
		s += ", queue mode"
	}
	if w.Messages > 0 {
		s += fmt.Sprintf(", %s messages", num(float64(w.Messages)))
	}
	return s
}

// throughputID names a scenario-1 (or growth) run and its JSON file.
func throughputID(nodes int, w Workload) string {
	id := fmt.Sprintf("thr-%dn-p%d", nodes, w.Partitions)
	if w.Groups > 0 {
		id += fmt.Sprintf("-g%d", w.Groups)
	}
	return id
}

func latencyID(nodes int) string { return fmt.Sprintf("lat-%dn", nodes) }

func idleID(hotlist bool, partitions int) string {
	return fmt.Sprintf("idle-%s-p%d", onOff(hotlist), partitions)
}

func activeID(hotlist bool, partitions int, open bool) string {
	id := fmt.Sprintf("active-%s-p%d", onOff(hotlist), partitions)
	if open {
		id += "-lat"
	}
	return id
}

func wakeID(drop float64) string { return fmt.Sprintf("wake-drop%g", drop) }

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// NewPlan returns the full suite (about 14 minutes with 15 s runs) or the
// quick one (about 4 minutes). run > 0 overrides the push phase length.
func NewPlan(quick bool, run time.Duration) Plan {
	p := Plan{
		Quick:         quick,
		RunDuration:   15 * time.Second,
		Drain:         60 * time.Second,
		RawDuration:   10 * time.Second,
		RawClaimRows:  300_000,
		IdleWarmup:    11 * time.Second,
		IdleWindow:    10 * time.Second,
		IdleSettleMax: 5 * time.Minute,
		LatencyShare:  0.5,
		Workloads:     []Workload{{Partitions: 100}, {Partitions: 1000}, {Partitions: 10000}, {Partitions: 100, Groups: 2}},
		BigMessages:   20000,
		BigDrain:      4 * time.Minute,
		Nodes:         []int{1, 3},
		IdleSizes:     []int{1000, 10000, 100000},
		IdleConsumers: 100,
		ActiveSizes:   []int{10000, 100000},
		WakeDropRates: []float64{0, 0.5, 1},
		WakeReseedMS:  1000,
		WakeRate:      20,
		// 100,000 partitions on one node; 2, 4, 5 nodes with scenario 1's 3.
		GrowthPartitions:    []int{100000},
		GrowthNodes:         []int{2, 4, 5},
		BacklogPartitions:   10000,
		BacklogPerPartition: 50,
	}
	if quick {
		p.RunDuration = 5 * time.Second
		p.Drain = 30 * time.Second
		p.RawDuration = 3 * time.Second
		p.RawClaimRows = 100_000
		p.BigMessages = 5000
		p.BigDrain = 2 * time.Minute
		p.IdleWindow = 4 * time.Second
		p.IdleSizes = []int{1000, 10000}
		p.ActiveSizes = []int{10000}
		p.GrowthPartitions = nil
		p.GrowthNodes = []int{5}
		p.BacklogPartitions = 2000
	}
	if run > 0 {
		p.RunDuration = run
	}
	for i := range p.Workloads {
		if p.Workloads[i].Partitions >= bigPartitions {
			p.Workloads[i].Messages = p.BigMessages
		}
	}
	return p
}

// PartitionSeries are the partition counts of the growth table, 1 node.
func (p Plan) PartitionSeries() []int {
	return workloadPartitions(p.growthWorkloads())
}

// growthWorkloads are the 1-node workloads of the partitions series:
// scenario 1's queue-mode ones, then GrowthPartitions.
func (p Plan) growthWorkloads() []Workload {
	var out []Workload
	for _, w := range p.Workloads {
		if w.Groups == 0 {
			out = append(out, w)
		}
	}
	for _, n := range p.GrowthPartitions {
		w := Workload{Partitions: n}
		if n >= bigPartitions {
			w.Messages = p.BigMessages
		}
		out = append(out, w)
	}
	return out
}

func workloadPartitions(ws []Workload) []int {
	var out []int
	for _, w := range ws {
		out = append(out, w.Partitions)
	}
	return out
}

// NodeSeries are the node counts of the growth table, 100 partitions,
// ascending.
func (p Plan) NodeSeries() []int {
	seen := map[int]bool{}
	var out []int
	for _, n := range append(append([]int{}, p.Nodes...), p.GrowthNodes...) {
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j] < out[j-1]; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// growthNodesID is the run that holds growth point nodes (100
// partitions): scenario 1's one-node run for 1, else the growth step's own
// run between two one-node runs (growthAroundID).
func growthNodesID(nodes int) string {
	if nodes <= 1 {
		return throughputID(1, Workload{Partitions: 100})
	}
	return fmt.Sprintf("grow-%dn-p100", nodes)
}

// growthAroundID is the k-th one-node run of the growth step: run k comes
// just before the k-th point of 2 or more nodes and just after the one
// before it.
func growthAroundID(k int) string { return fmt.Sprintf("grow-1n-p100-%d", k) }

// growthPoints are the node counts of the growth step, in order: the node
// series without 1.
func (p Plan) growthPoints() []int {
	var out []int
	for _, n := range p.NodeSeries() {
		if n > 1 {
			out = append(out, n)
		}
	}
	return out
}

// backlogWorkloads are the backlog step's two runs: queued first, then
// mixed.
func (p Plan) backlogWorkloads() []BacklogWorkload {
	if p.BacklogPartitions <= 0 || p.BacklogPerPartition <= 0 {
		return nil
	}
	out := make([]BacklogWorkload, 0, 2)
	for _, queued := range []bool{true, false} {
		out = append(out, BacklogWorkload{Partitions: p.BacklogPartitions, PerPartition: p.BacklogPerPartition, Queued: queued})
	}
	return out
}

// BacklogWorkload is one run of the backlog step: the standard workload's
// producers and consumers over Partitions, PerPartition messages each.
type BacklogWorkload struct {
	Partitions, PerPartition int
	// Queued: every push is answered before the consumers start
	// (bench.Config.Backlog); else the two run together.
	Queued bool
}

// ID names the run and its JSON file.
func (w BacklogWorkload) ID() string {
	kind := "mixed"
	if w.Queued {
		kind = "backlog"
	}
	return fmt.Sprintf("%s-1n-p%d", kind, w.Partitions)
}

// Name is the run's label in the report.
func (w BacklogWorkload) Name() string {
	if w.Queued {
		return "queued, then drained"
	}
	return "mixed: pushed while consumed"
}

func growthPartitionsID(partitions int) string {
	return throughputID(1, Workload{Partitions: partitions})
}
