package suite

import (
	"context"

	"fmt"
	"queen-node/internal/bench"
	"strconv"
	"time"
)

// throughput runs scenarios 1 and 2 on 1 and 3 nodes.
func (s *suite) throughput(ctx context.Context) error {
	for _, n := range s.rep.Plan.Nodes {
		if err := s.throughputOn(ctx, n); err != nil {
			return err
		}
	}
	return nil
}

// growthByNodes runs scenario 5's node points: the standard workload on 1
// node, then on each count n > 1 followed by 1 node again (1, 2, 1, 3, 1, 4,
// 1, 5, 1), each on a fresh cluster. This machine's speed drifts by up to
// 2-3x over minutes, and the suite's one database grows with every run,
// which slows later runs; a point compared with the mean of the one-node
// runs just before and after it cancels a drift that is steady over the
// three, as an A/B pair run in both orders does.
func (s *suite) growthByNodes(ctx context.Context) error {
	runOn := func(n int, id string) error {
		c, err := s.cluster(ctx, n, nil, id, "scenario 5, "+id)
		if err != nil {
			err = fmt.Errorf("run %s: %w", id, err)
		} else {
			_, err = s.load(ctx, id, c, s.baseConfig(c)) // says "run <id>: ..."
			c.stop()
		}
		if err != nil && ctx.Err() == nil {
			// one point lost: the others still run, and its row says so
			s.fail("%v", err)
			return nil
		}
		return err
	}
	if err := runOn(1, growthAroundID(0)); err != nil {
		return err
	}
	for k, n := range s.rep.Plan.growthPoints() {
		if err := runOn(n, growthNodesID(n)); err != nil {
			return err
		}
		if err := runOn(1, growthAroundID(k+1)); err != nil {
			return err
		}
	}
	return nil
}

// backlog runs scenario 5's backlog: one node, Plan.BacklogPartitions
// partitions with exactly Plan.BacklogPerPartition messages each, first
// queued before the consumers start, then pushed while they consume, each
// into a fresh queue.
func (s *suite) backlog(ctx context.Context) error {
	p := s.rep.Plan
	wls := p.backlogWorkloads()
	if len(wls) == 0 {
		return nil
	}
	c, err := s.cluster(ctx, 1, nil, "backlog", "scenario 5, backlog")
	if err != nil {
		return err
	}
	defer c.stop()
	for _, wl := range wls {
		cfg := s.baseConfig(c)
		cfg.Partitions, cfg.Messages, cfg.Even = wl.Partitions, wl.Partitions*wl.PerPartition, true
		cfg.Backlog = wl.Queued
		cfg.Drain = max(cfg.Drain, p.BigDrain)
		if _, err := s.load(ctx, wl.ID(), c, cfg); err != nil {
			return err
		}
	}
	return nil
}

func (s *suite) throughputOn(ctx context.Context, n int) error {
	p := s.rep.Plan
	purpose := "scenarios 1, 2"
	if n == 1 { // its runs are also scenario 5's points by partitions
		purpose = "scenarios 1, 2, 5"
	}
	c, err := s.cluster(ctx, n, nil, fmt.Sprintf("%dn", n), purpose)
	if err != nil {
		return err
	}
	defer c.stop()
	workloads := append([]Workload{}, p.Workloads...)
	if n == 1 {
		for _, wl := range p.growthWorkloads() {
			if contains(workloadPartitions(p.Workloads), wl.Partitions) {
				continue
			}
			workloads = append(workloads, wl)
		}
	}
	for _, wl := range workloads {
		cfg := s.baseConfig(c)
		cfg.Partitions, cfg.Groups, cfg.Messages = wl.Partitions, wl.Groups, wl.Messages
		if wl.Messages > 0 {
			cfg.Drain = max(cfg.Drain, p.BigDrain)
		}
		if _, err := s.load(ctx, throughputID(n, wl), c, cfg); err != nil {
			return err
		}
	}
	peak, ok := s.rep.figures(throughputID(n, Workload{Partitions: 100}))
	if !ok || peak.delivered <= 0 {
		return fmt.Errorf("latency on %d node(s): no peak measured", n)
	}
	cfg := s.baseConfig(c)
	cfg.Rate = float64(int(peak.delivered * p.LatencyShare))
	_, err = s.load(ctx, latencyID(n), c, cfg)
	return err
}

// idleQueue is the queue of scenario 3 with n partitions.
func idleQueue(n int) string { return "suite-idle-p" + strconv.Itoa(n) }

// hotlist runs scenario 3 on one node with the hot-list and one without,
// on the same queues: first idle cost and closed-loop throughput per mode,
// then the open-loop latency runs at half of the slower mode's throughput,
// so both modes get the same load and both can sustain it.
func (s *suite) hotlist(ctx context.Context) error {
	for _, on := range []bool{true, false} {
		if err := s.withHotlistNode(ctx, on, "closed", "idle, 1% active closed loop", func(c *cluster) error {
			return s.hotlistClosed(ctx, c, on)
		}); err != nil {
			return err
		}
	}
	for _, on := range []bool{true, false} {
		if err := s.withHotlistNode(ctx, on, "open", "1% active open loop", func(c *cluster) error {
			return s.hotlistOpen(ctx, c, on)
		}); err != nil {
			return err
		}
	}
	return nil
}

// withHotlistNode runs fn against a fresh node with the hot-list on or off.
func (s *suite) withHotlistNode(ctx context.Context, on bool, tag, what string, fn func(*cluster) error) error {
	env := map[string]string{}
	if !on {
		env["QUEEN_HOTLIST"] = "0"
	}
	c, err := s.cluster(ctx, 1, env, "hot-"+onOff(on)+"-"+tag, "scenario 3, hot-list "+onOff(on)+": "+what)
	if err != nil {
		return err
	}
	defer c.stop()
	return fn(c)
}

func (s *suite) hotlistClosed(ctx context.Context, c *cluster, on bool) error {
	p := s.rep.Plan
	populated := map[int]float64{}
	if on { // the queues are created once, for both modes
		for _, n := range union(p.IdleSizes, p.ActiveSizes) {
			s.log.Info("creating idle partitions", "queue", idleQueue(n), "partitions", n)
			d, err := populate(ctx, c.URLs()[0], idleQueue(n), n)
			if err != nil {
				return err
			}
			populated[n] = d.Seconds()
		}
	}
	for _, n := range p.IdleSizes {
		s.log.Info("idle cost", "partitions", n, "hotlist", on, "consumers", p.IdleConsumers)
		ic := s.measureIdle(ctx, c, idleQueue(n), n, on)
		ic.PopulateSec = populated[n]
		s.rep.Idle[ic.ID] = ic
		if ic.Err != "" {
			s.fail("idle %s: %s", ic.ID, ic.Err)
		} else {
			s.log.Info("idle", "id", ic.ID, "xact_s", ic.XactPerSec, "pg_cores", ic.PGCores, "pop_sql_s", ic.PopSQLPerS)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	for _, n := range p.ActiveSizes {
		if _, err := s.load(ctx, activeID(on, n, false), c, s.activeConfig(c, n, on, false)); err != nil {
			return err
		}
	}
	return nil
}

func (s *suite) hotlistOpen(ctx context.Context, c *cluster, on bool) error {
	p := s.rep.Plan
	for _, n := range p.ActiveSizes {
		fOn, okOn := s.rep.figures(activeID(true, n, false))
		fOff, okOff := s.rep.figures(activeID(false, n, false))
		if !okOn || !okOff {
			continue
		}
		cfg := s.activeConfig(c, n, on, true)
		cfg.Rate = float64(int(min(fOn.delivered, fOff.delivered) * p.LatencyShare))
		if cfg.Rate < 1 {
			continue
		}
		if _, err := s.load(ctx, activeID(on, n, true), c, cfg); err != nil {
			return err
		}
	}
	return nil
}

// activeConfig is the standard workload on 1% of idleQueue(n)'s partitions.
// The queue is shared by several runs: a transactionId prefix per run keeps
// the server from answering "duplicate".
func (s *suite) activeConfig(c *cluster, n int, on, open bool) bench.Config {
	cfg := s.baseConfig(c)
	cfg.Queue, cfg.Partitions = idleQueue(n), max(1, n/100)
	cfg.TxnPrefix = activeID(on, n, open) + "-"
	if n >= bigPartitions {
		// Without the hot-list every pop scans the queue's partitions:
		// the backlog of a closed-loop run drains slowly.
		cfg.Drain = max(cfg.Drain, s.rep.Plan.BigDrain)
	}
	return cfg
}

// wake runs scenario 4: a consumer parked on node 2, pushes on node 1, for
// each hint drop rate.
func (s *suite) wake(ctx context.Context) error {
	p := s.rep.Plan
	for _, d := range p.WakeDropRates {
		env := map[string]string{
			"QUEEN_MESH_DROP_RATE":    strconv.FormatFloat(d, 'g', -1, 64),
			"QUEEN_HOTLIST_RESEED_MS": strconv.Itoa(p.WakeReseedMS),
		}
		c, err := s.cluster(ctx, 3, env, fmt.Sprintf("wake-%g", d), "scenario 4")
		if err != nil {
			return err
		}
		urls := c.URLs()
		cfg := s.baseConfig(c)
		cfg.Nodes, cfg.ConsumerNodes = urls[:1], urls[1:2]
		cfg.Producers, cfg.Consumers = 1, 1
		cfg.PushBatch, cfg.Partitions = 1, 10
		cfg.Rate = p.WakeRate
		cfg.PollTimeout = 10 * time.Second
		_, err = s.load(ctx, wakeID(d), c, cfg)
		c.stop()
		if err != nil {
			return err
		}
	}
	return nil
}

func contains(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// union is a's values then b's not in a.
func union(a, b []int) []int {
	out := append([]int{}, a...)
	for _, v := range b {
		if !contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}
