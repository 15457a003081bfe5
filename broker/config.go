package broker

import (
	"time"

	"queen-node/hotlist"
)

// Defaults of Config, exported so the command line and the docs quote one
// source. The hot-list's own tuning (shards, window batch, reseed interval)
// defaults to package hotlist's values.
const (
	DefaultTenant         = "default"
	DefaultPoolMaxConns   = 32
	DefaultPopBackoffMin  = 25 * time.Millisecond
	DefaultPopBackoffMax  = 1000 * time.Millisecond
	DefaultMaxPopBatch    = 10000
	DefaultMaxPushRows    = 10000    // rows of one combined push flush (broker/combine.go) and of one replayed push (maintenance.go)
	DefaultMaxPushBytes   = 10 << 20 // a push request's body (api.DefaultMaxBodyBytes; docs/api.md, "Input bounds") and a replayed push's records (maintenance.go)
	DefaultPushCombine    = true
	DefaultPushLanes      = 2  // group-commit flights, each its own partitions (broker/pushlanes.go)
	MaxPushLanes          = 16 // each lane holds a pooled connection while it flushes
	DefaultPopCombine     = true
	DefaultAckCAS         = true
	DefaultPopPrefetch    = true
	DefaultBulkProvision  = true
	DefaultMaxPopBytes    = 16 << 20 // a pop response's payload bytes, about (docs/operations.md, "Limits")
	DefaultHotlistEnabled = true
	DefaultHotlistIdle    = 300 * time.Second // the idle sweep is the broker's loop (broker/hot.go)
	DefaultLogTopN        = 10
	DefaultReleaseAgain   = time.Second
)

// Config is the node core's configuration. Use DefaultConfig and change what
// you need; New validates it.
type Config struct {
	PG            PGConfig      // the database: URL and pool size
	NodeName      string        // recorded as lease owner; default: host name (set by the caller)
	PopBackoffMin time.Duration // first re-poll delay of a parked long-poll, default 25 ms
	PopBackoffMax time.Duration // re-poll delay cap of a parked long-poll, default 1 s
	// ReleaseAgain is how long after a forwarded pop without an answer its
	// lease is released a second time (ReleaseForwarded), default 1 s. The
	// first release may run before the owner's claim commits: the owner
	// notices that the forwarding node closed the connection only when its
	// server reads the close, and a claim that commits before that is
	// answered into a closed connection.
	ReleaseAgain time.Duration
	// MaxPopBytes bounds one pop response (QUEEN_POP_MAX_BYTES), default
	// 16 MiB: messages past it are neither returned nor leased, but the
	// first message of a response is always returned, whatever its size.
	MaxPopBytes int64
	// PushCombine (QUEEN_PUSH_COMBINE, default on) merges pushes that wait
	// for the one being written into one transaction: group commit
	// (broker/combine.go). Off, every push is its own transaction.
	PushCombine bool
	// PushLanes (QUEEN_PUSH_LANES, default 2) is how many group commits
	// run side by side with PushCombine on, each for its own share of the
	// partitions (broker/pushlanes.go); 1 to MaxPushLanes (0 = the default),
	// and at most a quarter of PG.MaxConns, one at least (a smaller pool
	// runs fewer).
	PushLanes int
	// PopCombine (QUEEN_POP_COMBINE, default on) merges claims that wait
	// for the ones being run into one transaction (broker/popcombine.go).
	// Off, every claim is its own call.
	PopCombine bool
	// AckCAS (QUEEN_ACK_CAS, default on): an ack naming exactly a batch this node served
	// under a lease is one compare-and-set of the cursor, merged with
	// concurrent ones (broker/ackcas.go); off, every ack calls ack_v2.
	AckCAS bool
	// PopPrefetch (QUEEN_POP_PREFETCH, default on): a CAS ack of a lease
	// this node handed to its own client also takes that pop's next
	// claim, in the ack's flight, for the client's next pop to find
	// answered (broker/prefetch.go); for a peer's forwarded pops, when
	// the peer asks (AckPeer). Needs PopCombine, AckCAS and the hot-list;
	// off, every pop waits for a flight of its own.
	PopPrefetch bool
	// BulkProvision (QUEEN_BULK_PROVISION, default on): a claim that meets
	// partitions without the group's consumer row has the group's rows of
	// the whole queue made in pages (broker/provision.go); off, each claim
	// makes the rows of its own candidates only.
	BulkProvision bool

	Hotlist             HotlistConfig // the candidate rings; off = the SQL candidate scan
	LogTopNQueues       int           // QUEEN_LOG_TOPN_QUEUES, default 10
	DefaultSubscription string        // server-wide default subscription mode: "" (= all), "new"

	Maintenance MaintenanceConfig // push buffer and switch refresh (maintenance.go), default DefaultMaintenanceConfig()

	// Churn: reseed every ring at once after a membership change or a
	// freeze (churn.go), default DefaultChurnConfig(); zero = off.
	Churn ChurnConfig
}

// PGConfig is the broker's PostgreSQL pool.
type PGConfig struct {
	URL      string // QUEEN_PG_URL; "" = pgx/libpq PG* environment variables
	MaxConns int32  // QUEEN_PG_MAX_CONNS, default 32
	// ConnectFailed, when set, hears each failed connect while New retries
	// (the node's /health shows the latest); nil: only the log hears it.
	ConnectFailed func(err error)
}

// HotlistConfig is the hot-list's own configuration (package hotlist, its
// defaults included) plus what the broker does with it.
type HotlistConfig struct {
	Enabled   bool          // QUEEN_HOTLIST, default true
	IdleSweep time.Duration // QUEEN_HOTLIST_IDLE_SWEEP_MS, default 300 s; 0 disables (the sweep loop is the broker's)
	// WakeTick is the least time between two wakes of the queues that local
	// pushes marked quietly, default 5 ms (broker/wake.go); an idle node
	// wakes at once. Tests lengthen it; there is no setting.
	WakeTick time.Duration
	// Shards (QUEEN_HOTLIST_SHARDS), ReseedInterval (QUEEN_HOTLIST_RESEED_MS),
	// WindowBatch (QUEEN_HOTLIST_WINDOW_BATCH), TracePrefix
	// (QUEEN_HOTLIST_TRACE) and the rest, with hotlist.DefaultConfig's values.
	hotlist.Config
}

// DefaultConfig returns a Config with every default filled in.
func DefaultConfig() Config {
	return Config{
		PG:            PGConfig{MaxConns: DefaultPoolMaxConns},
		PopBackoffMin: DefaultPopBackoffMin,
		PopBackoffMax: DefaultPopBackoffMax,
		ReleaseAgain:  DefaultReleaseAgain,
		MaxPopBytes:   DefaultMaxPopBytes,
		PushCombine:   DefaultPushCombine,
		PushLanes:     DefaultPushLanes,
		PopCombine:    DefaultPopCombine,
		AckCAS:        DefaultAckCAS,
		PopPrefetch:   DefaultPopPrefetch,
		BulkProvision: DefaultBulkProvision,
		Hotlist: HotlistConfig{Enabled: DefaultHotlistEnabled, IdleSweep: DefaultHotlistIdle,
			Config: hotlist.DefaultConfig()},
		LogTopNQueues: DefaultLogTopN,
		Maintenance:   DefaultMaintenanceConfig(),
		Churn:         DefaultChurnConfig(),
	}
}
