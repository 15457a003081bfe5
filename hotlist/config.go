package hotlist

import (
	"math/rand/v2"
	"time"
)

// Defaults of Config and the fixed constants of the spec.
const (
	DefaultShards         = 8                // QUEEN_HOTLIST_SHARDS
	DefaultWindowBatch    = 100              // QUEEN_HOTLIST_WINDOW_BATCH
	DefaultReseedInterval = 30 * time.Second // QUEEN_HOTLIST_RESEED_MS
	DefaultMaxPhase       = 15 * time.Second // reseed phase lies in [0, min(15 s, interval))
	DefaultStrandedAfter  = 10 * time.Second // an INFLIGHT entry older than this is reclaimed by a reseed
	DefaultSuspectUnconf  = 1024             // unconfirmed remote-marked entries that make a ring suspect
	DefaultPruneEvery     = time.Second      // at most one early (pruning) reseed per ring per interval

	// DefaultEarlyReseedMin (QUEEN_HOTLIST_EARLY_RESEED_MS): at most one
	// early reseed (after lost hints) per ring per 200 ms, so a lossy or
	// flapping link costs a ring at most five extra keyset walks a second
	// while a lost hint still surfaces in well under a second.
	DefaultEarlyReseedMin = 200 * time.Millisecond
	// DefaultEarlyReseedRate (QUEEN_HOTLIST_EARLY_RESEED_RATE): early
	// reseeds a node runs per second over all rings (burst: one second's
	// worth), so a loss storm over thousands of rings costs PostgreSQL a
	// bounded rate; rings past it wait for the next tick.
	DefaultEarlyReseedRate = 100

	// DelayPad is added to a delayedProcessing deadline: the broker clock only
	// schedules the retry, PostgreSQL enforces the exact cut.
	DelayPad = 300 * time.Millisecond
	// LeasePad is added to a foreign lease expiry before re-probing.
	LeasePad = 300 * time.Millisecond
	// LeaseParkCap bounds any lease park, so a lost ack promote costs at most
	// one empty re-probe per second instead of a stall until lease expiry.
	LeaseParkCap = 1000 * time.Millisecond
	// RevisitMin and RevisitMax bound the revisit of an empty deferral queue.
	RevisitMin = 50 * time.Millisecond
	RevisitMax = 1000 * time.Millisecond
)

// Config configures a Hotlist. Use DefaultConfig and change what you need.
type Config struct {
	Shards         int           // sub-rings per ring, default 8
	WindowBatch    int           // windowBuffer early promotion threshold, default 100
	ReseedInterval time.Duration // per-ring reseed floor interval, default 30 s
	MaxPhase       time.Duration // upper bound of a ring's random reseed phase, default 15 s
	StrandedAfter  time.Duration // INFLIGHT age after which a reseed reclaims the entry, default 10 s
	// SuspectUnconfirmed is how many unconfirmed remote-marked entries make a
	// ring suspect: a pop then reseeds it early (BeginPrune) to drop the fake
	// ones in bulk. Default 1024: four full take batches (k = 256) of empty
	// probes cost more than one walk of the partitions that have work.
	SuspectUnconfirmed int
	PruneEvery         time.Duration                          // at most one BeginPrune reseed per ring per interval, default 1 s
	EarlyReseedMin     time.Duration                          // at most one early reseed (lost hints) per ring per interval, default 200 ms
	EarlyReseedRate    int                                    // early reseeds per second over all rings, default 100
	Jitter             func(max time.Duration) time.Duration  // random phase in [0, max); default math/rand
	TracePrefix        string                                 // queue-name prefix that emits trace breadcrumbs; "" = off
	Trace              func(key Key, event string, kv ...any) // breadcrumb sink; nil = off
}

// DefaultConfig returns a Config with every default filled in.
func DefaultConfig() Config {
	return Config{
		Shards:         DefaultShards,
		WindowBatch:    DefaultWindowBatch,
		ReseedInterval: DefaultReseedInterval,
		MaxPhase:       DefaultMaxPhase,
		StrandedAfter:  DefaultStrandedAfter,
		Jitter:         randomJitter,

		SuspectUnconfirmed: DefaultSuspectUnconf,
		PruneEvery:         DefaultPruneEvery,
		EarlyReseedMin:     DefaultEarlyReseedMin,
		EarlyReseedRate:    DefaultEarlyReseedRate,
	}
}

func randomJitter(max time.Duration) time.Duration {
	if max <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(max)))
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Shards <= 0 {
		c.Shards = d.Shards
	}
	if c.WindowBatch <= 0 {
		c.WindowBatch = d.WindowBatch
	}
	if c.ReseedInterval <= 0 {
		c.ReseedInterval = d.ReseedInterval
	}
	if c.MaxPhase <= 0 {
		c.MaxPhase = d.MaxPhase
	}
	if c.StrandedAfter <= 0 {
		c.StrandedAfter = d.StrandedAfter
	}
	if c.Jitter == nil {
		c.Jitter = d.Jitter
	}
	if c.SuspectUnconfirmed <= 0 {
		c.SuspectUnconfirmed = d.SuspectUnconfirmed
	}
	if c.PruneEvery <= 0 {
		c.PruneEvery = d.PruneEvery
	}
	if c.EarlyReseedMin <= 0 {
		c.EarlyReseedMin = d.EarlyReseedMin
	}
	if c.EarlyReseedRate <= 0 {
		c.EarlyReseedRate = d.EarlyReseedRate
	}
	return c
}

// QueueOpts are the deferral options of a queue, learned from PostgreSQL.
type QueueOpts struct {
	Delay  time.Duration // delayedProcessing
	Window time.Duration // windowBuffer
}

func (o QueueOpts) deferral() bool { return o.Delay > 0 || o.Window > 0 }
