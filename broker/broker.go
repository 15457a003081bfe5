// Package broker is the node core: the push, pop and ack paths, the
// long-poll wake gates and the background ticks. It decides what to ask
// PostgreSQL (through package pg) and never decides visibility itself.
package broker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"queen-node/hotlist"
	"queen-node/pg"
	"queen-node/protocol"
)

// Broker is one node's core. It is safe for concurrent use.
type Broker struct {
	// first holds the (queue, group) pairs whose first pop on this node
	// is running (firstContact); its entries live as long as that pop.
	firstMu sync.Mutex
	first   map[firstKey]*firstCall

	cfg   Config
	log   hclog.Logger
	db    *pg.DB
	gates *gates
	push  *pushLanes   // nil with PushCombine off
	popc  *popCombiner // nil with PopCombine off
	rel   releaser     // lease releases of undelivered answers (release.go)
	prov  *provisioned // consumer rows known to exist, for the claim core
	// acks and leases are the CAS ack (ackcas.go); nil with AckCAS off
	acks   *ackCombiner
	leases *leaseMemory
	pre    *prefetcher // claims taken ahead on acks (prefetch.go); nil with PopPrefetch off

	hot        *hotlist.Hotlist // nil with QUEEN_HOTLIST=0: every hook is one branch on it
	wakeKick   chan struct{}    // a quiet mark happened: the wake loop runs (wake.go)
	earlyKick  chan struct{}    // hints were lost: the early loop looks (gaps.go)
	provKick   chan struct{}    // a pair was queued for a bulk provisioning (provision.go)
	mesh       atomic.Pointer[meshRef]
	hotLog     hclog.Logger
	lastReport struct {
		at    time.Time
		added int64
	}

	stats Stats
	churn churnStats   // the churn reseed's counters (churn.go)
	maint *maintenance // maintenance modes and the push buffer (maintenance.go)

	started time.Time
	// life is the background loops' lifecycle: Close cancels it and then
	// waits for every loop started with spawn (wg).
	life      context.Context
	endLife   context.CancelFunc
	closeOnce sync.Once
	wg        sync.WaitGroup
	afterMu   sync.Mutex // orders after's wg.Add before Close's Wait
}

// Stats are the node core's counters. They only grow while the process lives.
type Stats struct {
	Pushes          atomic.Int64 // push requests
	PushedItems     atomic.Int64 // messages stored (queued)
	PushFlushes     atomic.Int64 // push transactions sent to PostgreSQL (fewer than pushes when combined)
	PushDeferred    atomic.Int64 // rows a combined flush left for the next one: their partition was held by another transaction
	Duplicates      atomic.Int64 // items refused as duplicates
	Pops            atomic.Int64 // pop requests
	PopsMessages    atomic.Int64 // pops answered with messages
	PopsEmpty       atomic.Int64 // pops answered empty
	PoppedItems     atomic.Int64 // messages delivered
	PopSQLCalls     atomic.Int64 // claim-core calls
	PopFlushes      atomic.Int64 // claim transactions sent to PostgreSQL (fewer than calls when combined)
	ClaimsFast      atomic.Int64 // claim-core calls the fast claim answered (pg/claimfast.go)
	PopScans        atomic.Int64 // claim-core calls on the SQL candidate scan (no named candidates)
	RowsProvisioned atomic.Int64 // consumer rows made by the bulk provisioning (provision.go)
	Acks            atomic.Int64 // ack items
	AcksRefused     atomic.Int64 // ack items refused
	DeadLettered    atomic.Int64 // messages moved to the DLQ
	Transactions    atomic.Int64 // transaction requests
	LeasesDropped   atomic.Int64 // leases released because the client was gone
	ReleaseFlushes  atomic.Int64 // release statements that ran them (release.go)
	// Claim-core verdicts by kind (protocol.Verdicts): how many candidates
	// a pop's SQL evaluated for each one it took. Leased verdicts grow when
	// nodes probe partitions another node's consumers hold.
	ClaimTook, ClaimEmpty, ClaimLeased, ClaimBusy, ClaimRequeue atomic.Int64
	AcksCAS                                                     atomic.Int64 // ack items resolved by the CAS ack (broker/ackcas.go)
	AcksGeneral                                                 atomic.Int64 // ack items sent to queen.ack_v2
	AckCASFlushes                                               atomic.Int64 // CAS ack statements sent (fewer than acks when merged)
	// Claims taken ahead (prefetch.go): those that took messages, those a
	// pop was answered with, those released unused.
	PrefetchTaken, PrefetchServed, PrefetchReleased atomic.Int64
	// Time in and waiting for the combined flushes of each kind (flushclock.go).
	PushFlushTime, PopFlushTime, AckFlushTime flushClock
}

// New connects to PostgreSQL (retrying until ctx ends, since a database that
// is still starting is normal), applies the schema and returns a Broker.
func New(ctx context.Context, cfg Config, log hclog.Logger) (*Broker, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = hclog.NewNullLogger()
	}
	var db *pg.DB
	backoff := 250 * time.Millisecond
	for {
		var err error
		db, err = pg.Open(ctx, cfg.PG.URL, cfg.PG.MaxConns, log.Named("pg"))
		if err == nil {
			break
		}
		if ctx.Err() != nil || errors.Is(err, pg.ErrBadURL) {
			return nil, fmt.Errorf("connect to PostgreSQL: %w", err)
		}
		if errors.Is(err, pg.ErrRefused) {
			// Retrying a role, password or database the server refuses only
			// hides the fault behind "not ready" lines (docs/operations.md).
			return nil, fmt.Errorf("connect to PostgreSQL: not retrying, the server refuses this role, password or database; fix QUEEN_PG_URL or the server: %w", err)
		}
		if errors.Is(err, pg.ErrSchema) {
			// A newer schema, a failing migration or a function set this
			// node cannot run on is the same at every try
			// (docs/operations.md, "Upgrades").
			return nil, fmt.Errorf("set up the schema: not retrying: %w", err)
		}
		if cfg.PG.ConnectFailed != nil {
			cfg.PG.ConnectFailed(err)
		}
		log.Warn("PostgreSQL not ready, retrying", "error", err, "in", backoff)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("connect to PostgreSQL: %w", ctx.Err())
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
	b := &Broker{
		cfg:       cfg,
		log:       log,
		db:        db,
		gates:     newGates(),
		wakeKick:  make(chan struct{}, 1),
		earlyKick: make(chan struct{}, 1),
		provKick:  make(chan struct{}, 1),
		hotLog:    log.Named("hotlist"),
		first:     map[firstKey]*firstCall{},
		started:   time.Now(),
	}
	b.lastReport.at = time.Now()
	// Not derived from ctx: that one bounds only the start.
	b.life, b.endLife = context.WithCancel(context.Background())
	if cfg.PushCombine {
		b.push = &pushLanes{}
		for range pushLaneCount(cfg) {
			b.push.lanes = append(b.push.lanes, newPushCombiner(db, DefaultMaxPushRows, DefaultMaxPushBytes,
				&b.stats.PushFlushes, &b.stats.PushDeferred, &b.stats.PushFlushTime, b.afterCommit))
		}
	}
	b.prov = newProvisioned()
	if cfg.BulkProvision {
		b.spawn(b.provisionLoop)
	}
	b.rel.b, b.rel.timeout, b.rel.kick = b, releaseTimeout, make(chan struct{}, 1)
	if cfg.PopCombine {
		b.popc = newPopCombiner(db, b.claimAlone, b.dropLease, &b.stats.PopFlushes, &b.stats.PopFlushTime)
	}
	if cfg.AckCAS {
		b.acks = newAckCombiner(db, maxCASPairs, &b.stats.AckCASFlushes, &b.stats.AckFlushTime)
		b.leases = newLeaseMemory(defaultLeaseMemLeases, defaultLeaseMemBytes)
		if b.popc != nil {
			// one flight, one transaction, for claims and CAS acks (popcombine.go)
			b.acks.joint, b.popc.acks = b.popc, b.acks
		}
	}
	if cfg.PopPrefetch && cfg.Hotlist.Enabled && b.popc != nil && b.acks != nil {
		b.pre = newPrefetcher(b)
	}
	if cfg.Hotlist.Enabled {
		b.hot = newHotlist(cfg, func(key hotlist.Key, event string, kv ...any) {
			b.hotLog.Debug("trace "+event, append([]any{"queue", queueName(key)}, kv...)...)
		})
		b.startHotLoops()
		b.startChurnWatch()
	}
	// Last: its loops may replay buffered pushes at once.
	if err := b.startMaintenance(ctx); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

func (c *Config) validate() error {
	if c.PG.MaxConns <= 0 {
		c.PG.MaxConns = DefaultPoolMaxConns
	}
	if c.PopBackoffMin <= 0 {
		c.PopBackoffMin = DefaultPopBackoffMin
	}
	if c.PopBackoffMax < c.PopBackoffMin {
		c.PopBackoffMax = max(DefaultPopBackoffMax, c.PopBackoffMin)
	}
	if c.ReleaseAgain <= 0 {
		c.ReleaseAgain = DefaultReleaseAgain
	}
	if err := c.Churn.validate(); err != nil {
		return err
	}
	if c.PushLanes <= 0 {
		c.PushLanes = DefaultPushLanes
	}
	if c.PushLanes > MaxPushLanes {
		return fmt.Errorf("push lanes %d: want 1 to %d", c.PushLanes, MaxPushLanes)
	}
	if c.MaxPopBytes < 0 {
		return fmt.Errorf("max pop bytes %d: want 0 (no bound) or more", c.MaxPopBytes)
	}
	if _, ok := protocol.ParseSubMode(c.DefaultSubscription); !ok {
		return fmt.Errorf("default subscription mode %q: want all, new or new-only", c.DefaultSubscription)
	}
	return nil
}

// Close stops the background loops, waits for them, and closes the pool.
func (b *Broker) Close() {
	b.closeOnce.Do(func() {
		if b.pre != nil {
			b.pre.close() // while releases can still run
		}
		b.afterMu.Lock()
		b.endLife()
		b.afterMu.Unlock()
		b.wg.Wait()
		b.db.Close()
	})
}

// spawn runs loop in its own goroutine with the broker's lifecycle context:
// Close cancels ctx and waits for loop to return.
func (b *Broker) spawn(loop func(ctx context.Context)) {
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		loop(b.life)
	}()
}

// Health reports whether PostgreSQL answers.
func (b *Broker) Health(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := b.db.Ping(ctx); err != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return nil
}

// Hinter is the part of the mesh the push path uses: enqueue a dirty hint
// for the peers, and tell whether there are any (so a single node pays
// nothing).
type Hinter interface {
	Enqueue(tenant, queue, partition string)
	HasPeers() bool
}

type meshRef struct{ h MeshView }

// SetMesh attaches the mesh after it started (it needs the broker as its
// receiver first).
func (b *Broker) SetMesh(m MeshView) { b.mesh.Store(&meshRef{m}) }

// HintsReceived applies a peer's dirty hints: a remote mark on every existing
// group ring of the queue, and a wake of the queue's gate (even when it has
// no ring: a partition-targeted long-poll parks without one). Never
// re-broadcast.
func (b *Broker) HintsReceived(tenant, queue string, partitions []string) {
	key := queueKey(tenant, queue)
	if b.hot == nil {
		b.gates.notify(key)
		return
	}
	parts := make([]hotlist.PartMark, len(partitions))
	for i, p := range partitions {
		parts[i] = hotlist.PartMark{Name: p, Count: 1}
	}
	if b.hot.Mark(key, parts, hotlist.SourceRemote, time.Now()) {
		b.gates.notify(key)
	}
}

// Hotlist returns the hot-list, or nil when it is off.
func (b *Broker) Hotlist() *hotlist.Hotlist { return b.hot }

// Stats returns the live counters.
func (b *Broker) Stats() *Stats { return &b.stats }

// Parked returns the number of long-polls parked right now.
func (b *Broker) Parked() int { return b.gates.parked() }

// wrap marks an unreachable database with ErrUnavailable (pg.MarkUnavailable).
func wrap(err error) error { return pg.MarkUnavailable(err) }

func queueKey(tenant, queue string) hotlist.Key { return hotlist.KeyOf(tenant, queue) }
