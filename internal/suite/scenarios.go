package suite

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// throughput runs scenarios 1 and 2 on 1 and 3 nodes, and the growth
// points of scenario 5 that scenario 1 does not measure.
func (s *suite) throughput(ctx context.Context) error {
	p := s.rep.Plan
	for _, n := range p.Nodes {
		if err := s.throughputOn(ctx, n); err != nil {
			return err
		}
	}
	for _, n := range p.GrowthNodes {
		if contains(p.Nodes, n) {
			continue
		}
		c, err := s.cluster(ctx, n, nil, fmt.Sprintf("%dn", n), "scenario 5")
		if err != nil {
			return err
		}
		_, err = s.load(ctx, throughputID(n, Workload{Partitions: 100}), c, s.baseConfig(c))
		c.stop()
		if err != nil {
			return err
		}
	}
	return nil
}

func (s *suite) throughputOn(ctx context.Context, n int) error {
	p := s.rep.Plan
	purpose := "scenarios 1, 2, 5"
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

// hotlist runs scenario 3: one node with the hot-list, then one without,
// on the same queues.
func (s *suite) hotlist(ctx context.Context) error {
	p := s.rep.Plan
	for _, on := range []bool{true, false} {
		env := map[string]string{}
		if !on {
			env["QUEEN_HOTLIST"] = "0"
		}
		c, err := s.cluster(ctx, 1, env, "hot-"+onOff(on), "scenario 3, hot-list "+onOff(on))
		if err != nil {
			return err
		}
		err = s.hotlistOn(ctx, c, on)
		c.stop()
		if err != nil {
			return err
		}
	}
	_ = p
	return nil
}

func (s *suite) hotlistOn(ctx context.Context, c *cluster, on bool) error {
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
	peak, _ := s.rep.figures(throughputID(1, Workload{Partitions: 100}))
	for _, n := range p.ActiveSizes {
		cfg := s.baseConfig(c)
		cfg.Queue, cfg.Partitions = idleQueue(n), max(1, n/100)
		cfg.TxnPrefix = activeID(on, n, false) + "-"
		if _, err := s.load(ctx, activeID(on, n, false), c, cfg); err != nil {
			return err
		}
		if peak.delivered <= 0 {
			continue
		}
		cfg.Rate = float64(int(peak.delivered * p.LatencyShare))
		cfg.TxnPrefix = activeID(on, n, true) + "-"
		if _, err := s.load(ctx, activeID(on, n, true), c, cfg); err != nil {
			return err
		}
	}
	return nil
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
