// Package stats is the background sampler behind the status and analytics
// reads (docs/api.md, "Status and analytics"; docs/operations.md,
// "Samples"). Every Interval each node writes one row of its own figures:
// the deltas of the broker's request counters, parked long-polls (in total
// and per queue), pool use, and the process's CPU time and memory. Every
// QueueInterval one node of the cluster (whichever takes the round first)
// writes one row per queue from the partition watermarks and consumer
// cursors, and trims samples older than Keep in bounded batches.
package stats

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"queen-node/broker"
)

// Defaults of Config.
const (
	DefaultInterval        = 10 * time.Second
	DefaultQueueInterval   = time.Minute
	DefaultKeep            = 7 * 24 * time.Hour
	DefaultTrimBatch       = 5000
	DefaultTrimRounds      = 20
	DefaultMaxParkedQueues = 1000
)

// Config tunes the sampler. Zero fields take their defaults in New, except
// Interval: 0 (or less) turns the sampler off.
type Config struct {
	Interval        time.Duration // QUEEN_STATS_INTERVAL_MS: node samples; default 10 s; 0 = sampler off
	QueueInterval   time.Duration // QUEEN_STATS_QUEUE_INTERVAL_MS: queue-sampling rounds, cluster-wide; default 1 min (never below Interval)
	Keep            time.Duration // QUEEN_STATS_KEEP_HOURS: samples older than this are deleted; default 7 days
	TrimBatch       int           // rows per trim statement; default 5000
	TrimRounds      int           // trim statements per table per round (the rest waits for the next round); default 20
	MaxParkedQueues int           // per-queue parked counts written per node sample, busiest first; default 1000
}

// DefaultConfig returns a Config with every default filled in.
func DefaultConfig() Config {
	return Config{
		Interval:        DefaultInterval,
		QueueInterval:   DefaultQueueInterval,
		Keep:            DefaultKeep,
		TrimBatch:       DefaultTrimBatch,
		TrimRounds:      DefaultTrimRounds,
		MaxParkedQueues: DefaultMaxParkedQueues,
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.QueueInterval <= 0 {
		c.QueueInterval = d.QueueInterval
	}
	c.QueueInterval = max(c.QueueInterval, c.Interval)
	if c.Keep <= 0 {
		c.Keep = d.Keep
	}
	if c.TrimBatch <= 0 {
		c.TrimBatch = d.TrimBatch
	}
	if c.TrimRounds <= 0 {
		c.TrimRounds = d.TrimRounds
	}
	if c.MaxParkedQueues <= 0 {
		c.MaxParkedQueues = d.MaxParkedQueues
	}
	return c
}

// Source is what the sampler reads and writes through; *broker.Broker is one.
type Source interface {
	NodeName() string
	Snapshot() broker.Snapshot
	ParkedQueues(limit int) []broker.ParkedSample
	WriteNodeSample(ctx context.Context, s broker.NodeSample, parked []broker.ParkedSample) error
	SampleQueues(ctx context.Context, minGap time.Duration) (took bool, rows int64, err error)
	TrimSamples(ctx context.Context, before time.Time, batch, rounds int) (int64, error)
}

// Sampler writes the samples until Close.
type Sampler struct {
	cfg Config
	src Source
	log hclog.Logger

	mu        sync.Mutex // one sample at a time (the loop and SampleNow)
	prev      broker.Counters
	prevMesh  meshCounts
	prevCPU   cpuTimes
	prevAt    time.Time
	lastRound time.Time

	started bool
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
}

// New returns a sampler; Start runs it. The counters seen now are the
// baseline of the first sample.
func New(cfg Config, src Source, log hclog.Logger) *Sampler {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	s := &Sampler{cfg: cfg.withDefaults(), src: src, log: log, stop: make(chan struct{}), done: make(chan struct{})}
	snap := src.Snapshot()
	s.prev, s.prevMesh, s.prevCPU, s.prevAt = snap.Requests, meshOf(snap), readCPU(), time.Now()
	return s
}

// meshCounts are the mesh and hot-list counters a node sample stores as
// deltas: the ones /status shows under mesh and hotlist (api/table.go).
type meshCounts struct {
	framesSent, framesReceived, hintsSent, hintsReceived int64
	dropped, gaps, reseeds                               int64
}

func meshOf(s broker.Snapshot) meshCounts {
	m := s.Mesh
	return meshCounts{
		framesSent: int64(m.FramesSent), framesReceived: int64(m.FramesReceived),
		hintsSent: int64(m.HintsSent), hintsReceived: int64(m.HintsReceived),
		// Every way a hint is lost on the sending side: chaos drops, full
		// send queues or unreachable peers, a full coalescing set.
		dropped: int64(m.FramesDropped + m.QueueDropped + m.CoalescerDropped),
		gaps:    int64(m.GapsSeen), reseeds: s.Hotlist.Reseeds,
	}
}

// Start runs the sampling loop in the background; with Interval 0 it does
// nothing. Call it once.
func (s *Sampler) Start() {
	if s.cfg.Interval <= 0 {
		return
	}
	s.started = true
	go s.loop()
}

// Close stops the loop and waits for a sample in progress.
func (s *Sampler) Close() {
	s.once.Do(func() { close(s.stop) })
	if s.started {
		<-s.done
	}
}

func (s *Sampler) loop() {
	defer close(s.done)
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-s.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		// A sample must not outlive its interval by much: a stuck database
		// would otherwise pile the ticks up behind it.
		sctx, scancel := context.WithTimeout(ctx, s.cfg.Interval)
		err := s.sample(sctx, false)
		scancel()
		if err != nil && ctx.Err() == nil {
			s.log.Warn("sample failed", "error", err)
		}
	}
}

// SampleNow writes a node sample and takes a queue-sampling round at once,
// whatever the intervals (tests, and an operator's forced refresh), unless
// another node's round is running: rounds are one at a time
// (pg.DB.SampleQueues), and then this one is skipped.
func (s *Sampler) SampleNow(ctx context.Context) error { return s.sample(ctx, true) }

func (s *Sampler) sample(ctx context.Context, force bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	snap := s.src.Snapshot()
	cpu := readCPU()
	c, p := snap.Requests, s.prev
	mc, mp := meshOf(snap), s.prevMesh
	ns := broker.NodeSample{
		At: now, Node: s.src.NodeName(), IntervalMS: int(max(now.Sub(s.prevAt).Milliseconds(), 1)),
		Pushes: c.Pushes - p.Pushes, PushedItems: c.PushedItems - p.PushedItems, Duplicates: c.Duplicates - p.Duplicates,
		Pops: c.Pops - p.Pops, PoppedItems: c.PoppedItems - p.PoppedItems, PopsEmpty: c.PopsEmpty - p.PopsEmpty,
		Acks: c.Acks - p.Acks, AcksRefused: c.AcksRefused - p.AcksRefused, DeadLettered: c.DeadLettered - p.DeadLettered,
		Transactions: c.Transactions - p.Transactions,
		CPUUserUS:    cpu.userUS - s.prevCPU.userUS, CPUSystemUS: cpu.systemUS - s.prevCPU.systemUS,
		Parked: snap.Parked, PoolMax: int(snap.PG.MaxConns), PoolTotal: int(snap.PG.TotalConns),
		PoolIdle: int(snap.PG.IdleConns), PoolAcquired: int(snap.PG.AcquiredConns),
		FramesSent: mc.framesSent - mp.framesSent, FramesReceived: mc.framesReceived - mp.framesReceived,
		HintsSent: mc.hintsSent - mp.hintsSent, HintsReceived: mc.hintsReceived - mp.hintsReceived,
		Dropped: mc.dropped - mp.dropped, Gaps: mc.gaps - mp.gaps, Reseeds: mc.reseeds - mp.reseeds,
	}
	ns.RSSBytes, ns.HeapBytes, ns.Goroutines = readMemory()
	var errs []error
	if err := s.src.WriteNodeSample(ctx, ns, s.src.ParkedQueues(s.cfg.MaxParkedQueues)); err != nil {
		// The deltas are kept for the next sample: nothing is lost but
		// this interval's resolution.
		errs = append(errs, fmt.Errorf("node sample: %w", err))
	} else {
		s.prev, s.prevMesh, s.prevCPU, s.prevAt = c, mc, cpu, now
	}

	if !force && now.Sub(s.lastRound) < s.cfg.QueueInterval {
		return errors.Join(errs...)
	}
	s.lastRound = now
	// Another node may have taken this round: 9/10 of the interval lets
	// the nodes' ticks drift without two rounds in one interval.
	gap := s.cfg.QueueInterval * 9 / 10
	if force {
		gap = 0
	}
	took, rows, err := s.src.SampleQueues(ctx, gap)
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("queue samples: %w", err))...)
	}
	if !took {
		return errors.Join(errs...)
	}
	trimmed, err := s.src.TrimSamples(ctx, now.Add(-s.cfg.Keep), s.cfg.TrimBatch, s.cfg.TrimRounds)
	if err != nil {
		errs = append(errs, fmt.Errorf("trim samples: %w", err))
	}
	s.log.Debug("queue sampling round", "queue_rows", rows, "trimmed", trimmed)
	return errors.Join(errs...)
}
