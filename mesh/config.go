package mesh

import (
	"time"

	"github.com/hashicorp/go-hclog"

	"queen-node/coalesce"
)

// Defaults of Config, quoted by the command line and the docs.
const (
	DefaultBind          = "0.0.0.0:7946"
	DefaultFlushInterval = 20 * time.Millisecond
	DefaultHintCap       = coalesce.DefaultCap // QUEEN_MESH_HINT_CAP: the coalescing set defines the bound
	DefaultMaxFlushHints = 50000               // hints drained per flush: bounded work per tick
	DefaultPeerQueue     = 256                 // frames queued per peer before new ones are dropped
	DefaultDialTimeout   = 2 * time.Second
	DefaultWriteTimeout  = 5 * time.Second
	DefaultMaxInbound    = 256 // concurrent inbound hint streams, every address together

	DefaultHintFrameTimeout = 5 * time.Second // QUEEN_MESH_HINT_FRAME_TIMEOUT_MS
	DefaultHintIdleTimeout  = 2 * time.Minute // QUEEN_MESH_HINT_IDLE_TIMEOUT_MS

	// DefaultHeartbeatInterval (QUEEN_MESH_HEARTBEAT_MS): an open stream
	// that wrote nothing for this long sends a heartbeat with its last
	// number, so a lost last frame is learned within about one interval.
	// 250 ms keeps that well under the 1 s cross-node goal for a few dozen
	// bytes a second per peer.
	DefaultHeartbeatInterval = 250 * time.Millisecond

	// DefaultConfirmInterval (QUEEN_MESH_CONFIRM_MS) and
	// DefaultConfirmWindow (QUEEN_MESH_CONFIRM_WINDOW_MS): for a second
	// after a hints frame, a stream silent for a flush interval plus 10 ms
	// sends a heartbeat, then one every 10 ms while it stays silent, so the
	// loss of a last frame (the single message a parked long-poll waits
	// for) is learned within tens of milliseconds even when most heartbeats
	// are lost too: at a drop rate of 0.9, about 97 tries make missing all
	// of them a 1-in-27,000 event. A busy stream's frames do the same job
	// and send no heartbeat; an idle stream is back to one per
	// DefaultHeartbeatInterval (docs/mesh.md, "Loss detection").
	DefaultConfirmInterval = 10 * time.Millisecond
	DefaultConfirmWindow   = time.Second

	// StreamIdleBeats: an inbound hint stream that delivered no frame for
	// this many heartbeat intervals (1 s by default) is idle, and gives its
	// slot to the next stream that needs one (docs/mesh.md, "Hint port
	// limits"). An open stream writes at least every 1.5 intervals (a
	// heartbeat is skipped when a frame left less than half an interval
	// earlier), so a live sender is never idle this long; the rest is margin
	// for scheduling and a dropped heartbeat or two.
	StreamIdleBeats = 4
	// SlotHoldBeats: a live inbound stream keeps its member's slot against
	// a newer stream naming the same member (and no better vouched for) for
	// this many heartbeat intervals (5 s by default), so a process forging a
	// member's name can cut that member's live stream at most once per hold
	// (docs/mesh.md, "Hint port limits").
	SlotHoldBeats = 20
)

// Timings are memberlist's gossip and failure-detection cadences.
type Timings struct {
	GossipInterval   time.Duration // how often to gossip, LAN default 200 ms
	ProbeInterval    time.Duration // failure probe cadence, LAN default 1 s
	ProbeTimeout     time.Duration // probe round trip allowance, LAN default 500 ms
	SuspicionMult    int           // suspect for SuspicionMult * log(N+1) * ProbeInterval, LAN default 4
	PushPullInterval time.Duration // full state sync cadence, LAN default 30 s
}

// LANTimings are memberlist's DefaultLANConfig cadences.
func LANTimings() Timings {
	return Timings{GossipInterval: 200 * time.Millisecond, ProbeInterval: time.Second,
		ProbeTimeout: 500 * time.Millisecond, SuspicionMult: 4, PushPullInterval: 30 * time.Second}
}

// FastTimings converge and detect failures in well under a second on
// loopback; for tests.
func FastTimings() Timings {
	return Timings{GossipInterval: 20 * time.Millisecond, ProbeInterval: 100 * time.Millisecond,
		ProbeTimeout: 50 * time.Millisecond, SuspicionMult: 2, PushPullInterval: 2 * time.Second}
}

// Config configures a Mesh. Use DefaultConfig and change what you need.
type Config struct {
	Name          string        // unique node name, required
	Bind          string        // memberlist host:port, default 0.0.0.0:7946
	Advertise     string        // host:port peers use; default derived from Bind (a non-loopback address when Bind is 0.0.0.0)
	HintPort      int           // TCP port of the hint listener on the advertise host; default 0 = any free port (advertised in metadata)
	Join          []string      // seeds; empty = start alone and let others join
	Secret        []byte        // 16, 24 or 32 bytes; nil = open mesh (logged as a warning)
	FlushInterval time.Duration // least time between two hint flushes, default 20 ms: an idle mesh flushes a hint at once, a busy one at most this often
	HintCap       int           // coalescing set bound, default 200,000
	DropRate      float64       // chaos: fraction of outgoing hint frames dropped on purpose, default 0

	// HintFrameTimeout bounds how long one inbound frame may take to
	// arrive once its first byte has, and how long a new inbound stream may
	// take to deliver its first frame; default 5 s (a 64 KiB frame takes
	// milliseconds on a LAN).
	HintFrameTimeout time.Duration
	// HintIdleTimeout bounds the quiet between two frames of an inbound
	// stream; default 2 min. A sender closes its own stream after half of
	// it without a frame and redials on the next one, so a healthy stream
	// is never cut: keep it the same on every node.
	HintIdleTimeout time.Duration
	// HintRate is how many received hints one peer (one source address) may
	// have applied per second, with a burst of one second's worth; the
	// excess is dropped and counted. Default 100,000 (DefaultHintRate).
	HintRate int
	// HeartbeatInterval is how long an open hint stream may stay silent
	// before it sends a heartbeat carrying its last frame number (docs/mesh.md,
	// "Loss detection"); default 250 ms. The receiver derives two slot
	// bounds from its own value (StreamIdleBeats, SlotHoldBeats: 1 s and 5 s
	// by default), so keep it the same on every node.
	HeartbeatInterval time.Duration
	// ConfirmInterval and ConfirmWindow: within ConfirmWindow after a
	// hints frame, a stream silent for ConfirmInterval sends a heartbeat;
	// defaults 10 ms and 1 s (0 takes them). A negative ConfirmInterval
	// turns this off: only HeartbeatInterval's heartbeats.
	ConfirmInterval time.Duration
	ConfirmWindow   time.Duration
	HTTPAddr        string       // advertised in metadata for `queen-node status --cluster`
	Version         string       // advertised in metadata
	Timings         Timings      // default LANTimings()
	Logger          hclog.Logger // default: discard

	network network // nil: tcpNetwork; tests set an in-memory one (network.go)
	// noFlusher: no flush loop; the test calls flush itself, so each call
	// is one step (one flush, one frame per peer) and no other goroutine
	// flushes at the same time.
	noFlusher bool
}

// DefaultConfig returns a Config with every default filled in.
func DefaultConfig() Config {
	return Config{
		Bind:          DefaultBind,
		FlushInterval: DefaultFlushInterval,
		HintCap:       DefaultHintCap,
		Timings:       LANTimings(),

		HintFrameTimeout: DefaultHintFrameTimeout,
		HintIdleTimeout:  DefaultHintIdleTimeout,
		HintRate:         DefaultHintRate,

		HeartbeatInterval: DefaultHeartbeatInterval,
		ConfirmInterval:   DefaultConfirmInterval,
		ConfirmWindow:     DefaultConfirmWindow,
		Logger:            hclog.NewNullLogger(),
	}
}

// streamIdleAfter is how long an inbound stream may go without a frame
// before it counts as idle (StreamIdleBeats).
func (c Config) streamIdleAfter() time.Duration {
	return StreamIdleBeats * c.HeartbeatInterval
}

// slotHold is how long a live stream keeps its member's slot against a
// newer stream naming the same member (SlotHoldBeats).
func (c Config) slotHold() time.Duration {
	return SlotHoldBeats * c.HeartbeatInterval
}
