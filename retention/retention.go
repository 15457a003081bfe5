// Package retention is the background job that deletes messages the queue
// options say are no longer needed (docs/api.md, "Retention"): completed
// messages once past the dedup window (always; this keeps queen.messages
// bounded) or completedRetentionSeconds, and with retentionEnabled pending
// ones past retentionSeconds; pending ones past maxWaitTimeSeconds.
//
// One node at a time runs a pass (a lease row in PostgreSQL, pg/retention.go),
// every Config.Interval. A pass walks the partitions in id order and
// deletes in small batches of one partition's offsets, each its own short
// transaction, so pushes and pops keep their latency (docs/operations.md,
// "Retention", has the measurement).
package retention

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"queen-node/pg"
)

// Defaults of Config.
const (
	DefaultInterval      = 5 * time.Minute // QUEEN_RETENTION_INTERVAL_MS=300000, Queen's RETENTION_INTERVAL
	DefaultBatch         = 1000            // QUEEN_RETENTION_BATCH
	DefaultPartitionPage = 500
)

// Config tunes the job.
type Config struct {
	// Interval between passes; default 5 minutes. 0 turns the job off on
	// this node (another node may still run it).
	Interval time.Duration
	// Batch is the most messages one delete statement looks at (and so
	// deletes); default 1000. Smaller holds fewer row locks for less time;
	// larger deletes faster.
	Batch int
	// PartitionPage is how many partitions one plan query reads; default 500.
	PartitionPage int
	// BatchPause is a pause between two delete batches, to leave PostgreSQL
	// to the hot path on a saturated server; default 0 (none).
	BatchPause time.Duration
	// Node names this node in the lease row while it runs a pass
	// (queen.singletons.node), for operators; set by package node.
	Node string
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{Interval: DefaultInterval, Batch: DefaultBatch, PartitionPage: DefaultPartitionPage}
}

// Validate checks the fields Run relies on.
func (c Config) Validate() error {
	var errs []error
	if c.Interval < 0 {
		errs = append(errs, fmt.Errorf("interval %v: want 0 (off) or more", c.Interval))
	}
	if c.Batch < 1 || c.Batch > 100000 {
		errs = append(errs, fmt.Errorf("batch %d: want 1 to 100000", c.Batch))
	}
	if c.PartitionPage < 1 || c.PartitionPage > 100000 {
		errs = append(errs, fmt.Errorf("partition page %d: want 1 to 100000", c.PartitionPage))
	}
	if c.BatchPause < 0 {
		errs = append(errs, fmt.Errorf("batch pause %v: want 0 or more", c.BatchPause))
	}
	return errors.Join(errs...)
}

// Stats are the job's counters on this node since it started (reported by
// /status and /metrics, api/table.go).
type Stats struct {
	Enabled          bool    // Interval > 0
	Runs             int64   // passes this node ran (it held the lock)
	Skipped          int64   // passes skipped because another node held the lock
	Errors           int64   // passes that ended with an error
	DeletedCompleted int64   // completed messages deleted
	DeletedPending   int64   // pending messages deleted (retentionSeconds, maxWaitTimeSeconds)
	LastRunSeconds   float64 // duration of the last pass this node ran
	LastDeleted      int64   // messages the last pass deleted
}

// Pass is what one pass did.
type Pass struct {
	Ran        bool // false: another node held the lock
	Partitions int  // partitions looked at
	Batches    int  // delete statements run
	Completed  int64
	Pending    int64
	Duration   time.Duration
}

// Job is the retention job of one node.
type Job struct {
	db  *pg.DB
	cfg Config
	log hclog.Logger

	runs, skipped, errs, delCompleted, delPending, lastDeleted atomic.Int64
	lastRunNanos                                               atomic.Int64

	// locked, when set (tests), is called once a pass holds the lock.
	locked func()

	stopOnce sync.Once
	cancel   context.CancelFunc
	done     chan struct{}
}

// New returns a job; Start runs it. logger may be nil.
func New(db *pg.DB, cfg Config, logger hclog.Logger) (*Job, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("retention config: %w", err)
	}
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	return &Job{db: db, cfg: cfg, log: logger}, nil
}

// Start runs a pass every Interval until Stop. With Interval 0 it does
// nothing.
func (j *Job) Start() {
	if j.cfg.Interval <= 0 {
		j.log.Info("retention job off on this node (interval 0)")
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	j.cancel, j.done = cancel, make(chan struct{})
	go j.loop(ctx)
}

// Stop ends the loop and waits for a pass in progress to stop (it stops
// between two batches; the lock is released).
func (j *Job) Stop() {
	j.stopOnce.Do(func() {
		if j.cancel != nil {
			j.cancel()
			<-j.done
		}
	})
}

func (j *Job) loop(ctx context.Context) {
	defer close(j.done)
	t := time.NewTicker(j.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		p, err := j.RunOnce(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, pg.ErrRetentionLeaseLost):
			// Another node took the lease (this one was frozen past it): a handover.
			j.log.Info("retention pass stopped: another node took the lease over", "deleted_completed", p.Completed, "deleted_pending", p.Pending)
		case err != nil:
			j.log.Warn("retention pass failed", "error", err, "deleted_completed", p.Completed, "deleted_pending", p.Pending)
		case !p.Ran:
			j.log.Debug("retention pass skipped: another node holds the lock")
		case p.Completed+p.Pending > 0:
			j.log.Info("retention pass", "deleted_completed", p.Completed, "deleted_pending", p.Pending,
				"partitions", p.Partitions, "batches", p.Batches, "duration", p.Duration)
		default:
			j.log.Debug("retention pass: nothing to delete", "partitions", p.Partitions, "duration", p.Duration)
		}
	}
}

// RunOnce runs one pass now, unless another node holds the lock (Pass.Ran
// false). The counters include its work even when it fails half way.
func (j *Job) RunOnce(ctx context.Context) (Pass, error) {
	var p Pass
	s, ok, err := j.db.TryRetentionLock(ctx, j.cfg.Node)
	if err != nil {
		j.errs.Add(1)
		return p, err
	}
	if !ok {
		j.skipped.Add(1)
		return p, nil
	}
	defer s.Release()
	p.Ran = true
	if j.locked != nil {
		j.locked()
	}
	start := time.Now()
	err = j.pass(ctx, s, &p)
	p.Duration = time.Since(start)
	j.runs.Add(1)
	j.lastRunNanos.Store(int64(p.Duration))
	j.lastDeleted.Store(p.Completed + p.Pending)
	if err != nil && !errors.Is(err, pg.ErrRetentionLeaseLost) {
		j.errs.Add(1)
	}
	return p, err
}

func (j *Job) pass(ctx context.Context, s *pg.RetentionSession, p *Pass) error {
	after := ""
	for {
		parts, err := s.RetentionPartitions(ctx, after, j.cfg.PartitionPage)
		if err != nil {
			return err
		}
		for i := range parts {
			part := &parts[i]
			p.Partitions++
			if err := j.partition(ctx, s, part, p); err != nil {
				return err
			}
		}
		if len(parts) < j.cfg.PartitionPage {
			return nil
		}
		after = parts[len(parts)-1].ID
	}
}

// partition deletes what the rules select in one partition, batch after
// batch from its oldest message, until a batch meets a message too young
// for every rule or the range ends.
func (j *Job) partition(ctx context.Context, s *pg.RetentionSession, part *pg.RetentionPartition, p *Pass) error {
	// Cheap skips from the plan alone: no message, or the oldest one is too
	// young for every rule, or nothing can be past the upper bound.
	if !part.HasMessages || !part.FirstCreated.Before(part.Youngest()) || part.FirstOff > part.Upper() {
		return j.advance(ctx, s, part, 0)
	}
	after := part.FirstOff - 1
	var pending int64
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		b, err := s.RetentionDelete(ctx, part, after, j.cfg.Batch)
		if err != nil {
			return err
		}
		p.Batches++
		p.Completed += b.Completed
		p.Pending += b.Pending
		pending += b.Pending
		j.delCompleted.Add(b.Completed)
		j.delPending.Add(b.Pending)
		after = b.LastOff
		if b.Young || b.Examined < j.cfg.Batch {
			break
		}
		if j.cfg.BatchPause > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(j.cfg.BatchPause):
			}
		}
	}
	return j.advance(ctx, s, part, pending)
}

// advance moves the partition's cursors over deleted offsets
// (pg.RetentionAdvance). Completed deletions are behind every cursor
// already; pending ones leave holes the cursors must pass. A group under
// a live lease is skipped by the pass that deleted, so later passes try
// again whenever some cursor is behind the watermark, not only when they
// deleted something themselves: the statement then touches only the
// cursors followed by a hole.
func (j *Job) advance(ctx context.Context, s *pg.RetentionSession, part *pg.RetentionPartition, pending int64) error {
	if pending == 0 && !(part.HasFloor && part.Floor < part.LastOffset) {
		return nil
	}
	if _, err := s.RetentionAdvance(ctx, part, part.LastOffset); err != nil {
		return err
	}
	return nil
}

// Stats returns the counters without touching the database.
func (j *Job) Stats() Stats {
	return Stats{
		Enabled:          j.cfg.Interval > 0,
		Runs:             j.runs.Load(),
		Skipped:          j.skipped.Load(),
		Errors:           j.errs.Load(),
		DeletedCompleted: j.delCompleted.Load(),
		DeletedPending:   j.delPending.Load(),
		LastRunSeconds:   time.Duration(j.lastRunNanos.Load()).Seconds(),
		LastDeleted:      j.lastDeleted.Load(),
	}
}
