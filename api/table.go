package api

import (
	"encoding/json"
	"fmt"

	"queen-node/forward"
	"queen-node/hotlist"
	"queen-node/mesh"
	"queen-node/protocol"
)

// Kind says how a row is exported on /metrics.
type Kind int

const (
	Counter   Kind = iota // only grows while the process lives
	Gauge                 // a level that goes up and down; booleans export as 0 or 1
	Info                  // a text field: a gauge of 1 whose Label carries the text (queen_build_info)
	Doc                   // /status only: text and lists, which are not numbers
	Histogram             // an object in /status (histJSON), a Prometheus histogram on /metrics
)

// Row defines one figure of the node once, for both outputs: its place in
// the GET /status document (a contract, docs/operations.md) and its
// Prometheus series. Where the two names read differently today (acks,
// pops, marks...), both are kept and the row sets them side by side.
type Row struct {
	Status string // dotted path in the /status document, e.g. "requests.acks_refused"
	Metric string // Prometheus family name; "" for Doc rows
	Label  Label  // the family's one label, if any (several rows then share a family)
	Help   string
	Kind   Kind
	Field  field // the snapshot field read for both outputs

	// Count, set instead of Field, derives a series from a /status field
	// that is not a number (members by state); Status then names that
	// field and the row adds nothing to the document.
	Count func(*Snapshot) float64

	// Own marks the HTTP layer's own figures: /metrics exports them from
	// New on, before MetricsHandler names the node core's source.
	Own bool
}

// Label is a row's label of its family; an Info row takes Value from its field.
type Label struct{ Name, Value string }

// field is one Snapshot field seen by the table: the same pointer serves
// the /status encoder, the CLI's decoder and the /metrics collector.
type field interface {
	get(s *Snapshot) any                        // the value in /status
	set(s *Snapshot, raw json.RawMessage) error // read back from a /status document
	number(s *Snapshot) float64                 // the value on /metrics
	text(s *Snapshot) string                    // the label value of an Info row
}

type numeric interface {
	~int | ~int32 | ~int64 | ~uint64 | ~float64
}

// num is a counter or gauge field.
type num[T numeric] func(*Snapshot) *T

func (f num[T]) get(s *Snapshot) any                        { return *f(s) }
func (f num[T]) set(s *Snapshot, raw json.RawMessage) error { return json.Unmarshal(raw, f(s)) }
func (f num[T]) number(s *Snapshot) float64                 { return float64(*f(s)) }
func (f num[T]) text(*Snapshot) string                      { return "" }

// flag is a boolean field, 0 or 1 on /metrics.
type flag func(*Snapshot) *bool

func (f flag) get(s *Snapshot) any                        { return *f(s) }
func (f flag) set(s *Snapshot, raw json.RawMessage) error { return json.Unmarshal(raw, f(s)) }
func (f flag) text(*Snapshot) string                      { return "" }
func (f flag) number(s *Snapshot) float64 {
	if *f(s) {
		return 1
	}
	return 0
}

// str is a text field.
type str func(*Snapshot) *string

func (f str) get(s *Snapshot) any                        { return *f(s) }
func (f str) set(s *Snapshot, raw json.RawMessage) error { return json.Unmarshal(raw, f(s)) }
func (f str) number(*Snapshot) float64                   { return 1 }
func (f str) text(s *Snapshot) string                    { return *f(s) }

// list is a list field; an absent list is [] in /status, never null.
type list[T any] func(*Snapshot) *[]T

func (f list[T]) get(s *Snapshot) any {
	if v := *f(s); v != nil {
		return v
	}
	return []T{}
}
func (f list[T]) set(s *Snapshot, raw json.RawMessage) error { return json.Unmarshal(raw, f(s)) }
func (f list[T]) number(s *Snapshot) float64                 { return float64(len(*f(s))) }
func (f list[T]) text(*Snapshot) string                      { return "" }

// rings is the top_rings list. hotlist.RingStat carries no JSON names, so
// the document's names for a ring are given here.
type rings func(*Snapshot) *[]hotlist.RingStat

type ringJSON struct {
	Tenant   string `json:"tenant"`
	Queue    string `json:"queue"`
	Group    string `json:"group"`
	Ready    int    `json:"ready"`
	Wheel    int    `json:"wheel"`
	Inflight int    `json:"inflight"`
}

func (f rings) get(s *Snapshot) any {
	in := *f(s)
	out := make([]ringJSON, len(in))
	for i, r := range in {
		out[i] = ringJSON(r)
	}
	return out
}

func (f rings) set(s *Snapshot, raw json.RawMessage) error {
	var in []ringJSON
	if err := json.Unmarshal(raw, &in); err != nil {
		return err
	}
	out := make([]hotlist.RingStat, len(in))
	for i, r := range in {
		out[i] = hotlist.RingStat(r)
	}
	*f(s) = out
	return nil
}
func (f rings) number(s *Snapshot) float64 { return float64(len(*f(s))) }
func (f rings) text(*Snapshot) string      { return "" }

// hist is a histogram field (hotlist.Histogram, in milliseconds). /status
// shows its bounds and per-bucket counts; /metrics a histogram in seconds.
type hist func(*Snapshot) *hotlist.Histogram

type histJSON struct {
	BoundsMs []int64  `json:"bounds_ms"` // upper bounds; counts has one more bucket, above the last bound
	Counts   []uint64 `json:"counts"`    // per bucket, not cumulative
	Count    uint64   `json:"count"`
	SumMs    int64    `json:"sum_ms"`
}

func (f hist) get(s *Snapshot) any {
	h := *f(s)
	counts := h.Buckets
	if len(counts) != len(hotlist.DarkBoundsMs)+1 {
		counts = make([]uint64, len(hotlist.DarkBoundsMs)+1)
	}
	return histJSON{BoundsMs: hotlist.DarkBoundsMs, Counts: counts, Count: h.Count, SumMs: h.SumMs}
}

func (f hist) set(s *Snapshot, raw json.RawMessage) error {
	var in histJSON
	if err := json.Unmarshal(raw, &in); err != nil {
		return err
	}
	*f(s) = hotlist.Histogram{Buckets: in.Counts, Count: in.Count, SumMs: in.SumMs}
	return nil
}
func (f hist) number(s *Snapshot) float64 { return float64(f(s).Count) }
func (f hist) text(*Snapshot) string      { return "" }

// prometheus returns the count, the sum in seconds and the cumulative
// buckets by upper bound in seconds.
func (f hist) prometheus(s *Snapshot) (uint64, float64, map[float64]uint64) {
	h := *f(s)
	buckets := make(map[float64]uint64, len(hotlist.DarkBoundsMs))
	var cum uint64
	for i, b := range hotlist.DarkBoundsMs {
		if i < len(h.Buckets) {
			cum += h.Buckets[i]
		}
		buckets[float64(b)/1000] = cum
	}
	return h.Count, float64(h.SumMs) / 1000, buckets
}

// Help of the families several rows share.
const (
	helpMarks      = "Partition marks by source: local push, remote (peer hint), commit (transaction commit or DLQ move)."
	helpInRef      = "Inbound hint streams refused, by reason: limit (every slot held by a live member stream), not_member, held (the named member's live stream holds its slot)."
	helpPops       = "Finished pops by outcome: messages or empty (timed-out long-polls included)."
	helpFlushBusy  = "Seconds each kind's combined flushes took, start to end: push, all push lanes together; pop, the claim flight's flushes with claims (and the CAS acks waiting with them); ack, its flushes of CAS acks alone. The rate of pop plus ack is the share of time the claim flight is busy; near 1, requests queue behind it."
	helpFlushRuns  = "Flushes counted in queen_flush_busy_seconds_total, by kind; divide the busy seconds by them for the mean flush."
	helpFlushWait  = "Seconds the requests each kind's flushes carried waited for their first flush (arrival to that flush's start): pushes (a push spread over push lanes counts in each), claims, CAS acks (kind ack, whichever flush carried them); divide by queen_flush_waits_total for the mean."
	helpFlushWaits = "Requests counted in queen_flush_wait_seconds_total, by kind."
	helpVerdicts   = "Candidates the claim core evaluated, by verdict: took (messages delivered), empty, leased (another consumer of the group holds it), busy (row locked by another transaction), requeue (not evaluated)."
	helpMembs      = "Members this node knows, itself included, by state."
	helpRetDel     = "Messages the retention job deleted on this node, by reason: completed (passed by every group, past the dedup window or completedRetentionSeconds) or pending (retentionSeconds, maxWaitTimeSeconds)."
	helpAckVia     = "Ack items by path: cas (a whole batch this node served, one compare-and-set; broker/ackcas.go) or general (queen.ack_v1)."
	helpPrefetch   = "Claims taken ahead on a CAS ack for the acking client's next pop (QUEEN_POP_PREFETCH; docs/api.md, \"Claims taken ahead\"): taken (the claim got messages), served (a pop was answered with it), released (unused, its lease ended on its partitions: no pop came in 250 ms, Close, a delete or seek, or a pop that left)."
)

// membersIn counts the members in one state.
func membersIn(state protocol.MemberState) func(*Snapshot) float64 {
	return func(s *Snapshot) float64 {
		n := 0
		for _, m := range s.Mesh.Members {
			if m.State == state {
				n++
			}
		}
		return float64(n)
	}
}

// Table is every figure of /status and /metrics, in document order. The
// route and pop latency histograms (metrics.go) and the Go runtime and
// process collectors are not figures of a snapshot and are not here.
//
// Both names of a row are contracts (docs/operations.md). Metric names
// follow Prometheus conventions (counters end in _total, units are spelled
// out), so most differ from their /status name by a suffix; rows whose
// names differ beyond that say why.
var Table = []Row{
	// node
	{Status: "node.name", Kind: Doc, Field: str(func(s *Snapshot) *string { return &s.Name })},
	{Status: "node.version", Metric: "queen_build_info", Label: Label{Name: "version"}, Kind: Info,
		Help: "Always 1; the version label names the running build.", Field: str(func(s *Snapshot) *string { return &s.Version })},
	// Prometheus spells units out.
	{Status: "node.uptime_s", Metric: "queen_uptime_seconds", Kind: Gauge,
		Help: "Seconds since the node started.", Field: num[float64](func(s *Snapshot) *float64 { return &s.UptimeS })},
	{Status: "node.http_addr", Kind: Doc, Field: str(func(s *Snapshot) *string { return &s.HTTPAddr })},
	{Status: "node.tenant", Kind: Doc, Field: str(func(s *Snapshot) *string { return &s.Tenant })},
	{Status: "node.started_at", Kind: Doc, Field: str(func(s *Snapshot) *string { return &s.StartedAt })},

	// hotlist (docs/hotlist.md)
	{Status: "hotlist.enabled", Metric: "queen_hotlist_enabled", Kind: Gauge,
		Help: "1 when the hot-list is on, 0 for the SQL candidate scan.", Field: flag(func(s *Snapshot) *bool { return &s.Hotlist.Enabled })},
	{Status: "hotlist.rings", Metric: "queen_hotlist_rings", Kind: Gauge,
		Help: "Candidate rings, one per (tenant, queue, group).", Field: num[int](func(s *Snapshot) *int { return &s.Hotlist.Rings })},
	{Status: "hotlist.queues", Metric: "queen_hotlist_queues", Kind: Gauge,
		Help: "Queues with at least one ring.", Field: num[int](func(s *Snapshot) *int { return &s.Hotlist.Queues })},
	// The metrics say _entries: they count ring entries, and a bare
	// queen_hotlist_inflight would read as requests.
	{Status: "hotlist.ready", Metric: "queen_hotlist_ready_entries", Kind: Gauge,
		Help: "Partitions marked ready across all rings.", Field: num[int64](func(s *Snapshot) *int64 { return &s.Hotlist.Ready })},
	{Status: "hotlist.wheel", Metric: "queen_hotlist_wheel_entries", Kind: Gauge,
		Help: "Partitions parked on the timer wheel (deferred or leased) until their revisit time.", Field: num[int64](func(s *Snapshot) *int64 { return &s.Hotlist.Wheel })},
	{Status: "hotlist.inflight", Metric: "queen_hotlist_inflight_entries", Kind: Gauge,
		Help: "Partitions checked out by pops in progress.", Field: num[int64](func(s *Snapshot) *int64 { return &s.Hotlist.Inflight })},
	// One family, three fields: /status splits marks by source into fields,
	// /metrics by label.
	{Status: "hotlist.marks_local", Metric: "queen_hotlist_marks_total", Label: Label{"source", "local"}, Kind: Counter,
		Help: helpMarks, Field: num[int64](func(s *Snapshot) *int64 { return &s.Hotlist.MarksLocal })},
	{Status: "hotlist.marks_remote", Metric: "queen_hotlist_marks_total", Label: Label{"source", "remote"}, Kind: Counter,
		Help: helpMarks, Field: num[int64](func(s *Snapshot) *int64 { return &s.Hotlist.MarksRemote })},
	{Status: "hotlist.marks_commit", Metric: "queen_hotlist_marks_total", Label: Label{"source", "commit"}, Kind: Counter,
		Help: helpMarks, Field: num[int64](func(s *Snapshot) *int64 { return &s.Hotlist.MarksCommit })},
	{Status: "hotlist.reseeds", Metric: "queen_hotlist_reseeds_total", Kind: Counter,
		Help: "Reseed floor passes over rings.", Field: num[int64](func(s *Snapshot) *int64 { return &s.Hotlist.Reseeds })},
	{Status: "hotlist.reseed_added", Metric: "queen_hotlist_reseed_added_total", Kind: Counter,
		Help: "Entries a reseed found in PostgreSQL that were missing from the ring (lost hints healed).", Field: num[int64](func(s *Snapshot) *int64 { return &s.Hotlist.ReseedAdded })},
	{Status: "hotlist.reclaimed", Metric: "queen_hotlist_reclaimed_total", Kind: Counter,
		Help: "Inflight entries stranded by a dropped pop and reclaimed by a reseed.", Field: num[int64](func(s *Snapshot) *int64 { return &s.Hotlist.Reclaimed })},
	{Status: "hotlist.churn_passes", Metric: "queen_hotlist_churn_passes_total", Kind: Counter,
		Help: "Passes reseeding every ring after a membership change or a freeze of the process.", Field: num[int64](func(s *Snapshot) *int64 { return &s.Hotlist.ChurnPasses })},
	{Status: "hotlist.churn_reseeds", Metric: "queen_hotlist_churn_reseeds_total", Kind: Counter,
		Help: "Rings reseeded by the churn passes.", Field: num[int64](func(s *Snapshot) *int64 { return &s.Hotlist.ChurnReseeds })},
	{Status: "hotlist.swept", Metric: "queen_hotlist_swept_total", Kind: Counter,
		Help: "Queues dropped by the idle sweep.", Field: num[int64](func(s *Snapshot) *int64 { return &s.Hotlist.Swept })},
	{Status: "hotlist.top_rings", Kind: Doc, Field: rings(func(s *Snapshot) *[]hotlist.RingStat { return &s.Hotlist.TopRings })},
	{Status: "hotlist.unconfirmed", Metric: "queen_hotlist_unconfirmed_entries", Kind: Gauge,
		Help: "Ring entries that only peers' hints vouch for (not yet confirmed by a push, a reseed or a claim).", Field: num[int64](func(s *Snapshot) *int64 { return &s.Hotlist.Unconfirmed })},
	{Status: "hotlist.pruned", Metric: "queen_hotlist_pruned_total", Kind: Counter,
		Help: "Unconfirmed entries a complete reseed dropped in bulk (fake or stale hints).", Field: num[int64](func(s *Snapshot) *int64 { return &s.Hotlist.Pruned })},

	// early reseeds after lost hints (docs/hotlist.md, "Early reseeds after lost hints")
	{Status: "hotlist.loss_signals", Metric: "queen_hotlist_loss_signals_total", Kind: Counter,
		Help: "Loss signals from peers (a gap, a reconnect without continuity, a restart, an overflow signal), each making every ring a candidate for an early reseed.", Field: num[int64](func(s *Snapshot) *int64 { return &s.Hotlist.LossSignals })},
	{Status: "hotlist.early_reseeds", Metric: "queen_hotlist_early_reseeds_total", Kind: Counter,
		Help: "Reseeds run ahead of the floor because a peer's hints were lost.", Field: num[int64](func(s *Snapshot) *int64 { return &s.Hotlist.EarlyReseeds })},
	{Status: "hotlist.early_reseeds_suppressed", Metric: "queen_hotlist_early_reseeds_suppressed_total", Kind: Counter,
		Help: "Per ring, loss signals folded into a later early reseed by the per-ring interval (QUEEN_HOTLIST_EARLY_RESEED_MS) or the node budget (QUEEN_HOTLIST_EARLY_RESEED_RATE).", Field: num[int64](func(s *Snapshot) *int64 { return &s.Hotlist.EarlySuppressed })},
	// /status in milliseconds like the other durations it shows; Prometheus
	// spells the unit out in seconds.
	{Status: "hotlist.early_reseed_dark_ms", Metric: "queen_hotlist_early_reseed_dark_seconds", Kind: Histogram,
		Help: "Partitions an early reseed found missing from their ring, by the time since their last write: the dark time saved against the reseed floor.", Field: hist(func(s *Snapshot) *hotlist.Histogram { return &s.Hotlist.DarkTime })},

	// mesh
	{Status: "mesh.enabled", Metric: "queen_mesh_enabled", Kind: Gauge,
		Help: "1 when membership and hints are on.", Field: flag(func(s *Snapshot) *bool { return &s.Mesh.Enabled })},
	{Status: "mesh.members", Kind: Doc, Field: list[mesh.Member](func(s *Snapshot) *[]mesh.Member { return &s.Mesh.Members })},
	// The members list is text in /status; /metrics counts it by state,
	// all four always (zeros included), so a query like
	// queen_mesh_members{state="dead"} > 0 never hits a missing series.
	{Status: "mesh.members", Metric: "queen_mesh_members", Label: Label{"state", string(protocol.MemberAlive)}, Kind: Gauge, Help: helpMembs, Count: membersIn(protocol.MemberAlive)},
	{Status: "mesh.members", Metric: "queen_mesh_members", Label: Label{"state", string(protocol.MemberSuspect)}, Kind: Gauge, Help: helpMembs, Count: membersIn(protocol.MemberSuspect)},
	{Status: "mesh.members", Metric: "queen_mesh_members", Label: Label{"state", string(protocol.MemberDead)}, Kind: Gauge, Help: helpMembs, Count: membersIn(protocol.MemberDead)},
	{Status: "mesh.members", Metric: "queen_mesh_members", Label: Label{"state", string(protocol.MemberLeft)}, Kind: Gauge, Help: helpMembs, Count: membersIn(protocol.MemberLeft)},
	{Status: "mesh.encrypted", Metric: "queen_mesh_encrypted", Kind: Gauge,
		Help: "1 when QUEEN_MESH_SECRET is set: membership and hints are authenticated and encrypted.", Field: flag(func(s *Snapshot) *bool { return &s.Mesh.Encrypted })},
	{Status: "mesh.live_peers", Metric: "queen_mesh_live_peers", Kind: Gauge,
		Help: "Alive members other than this node (hint recipients).", Field: num[int](func(s *Snapshot) *int { return &s.Mesh.LivePeers })},
	{Status: "mesh.frames_sent", Metric: "queen_mesh_frames_sent_total", Kind: Counter,
		Help: "Hint frames sent to peers.", Field: num[uint64](func(s *Snapshot) *uint64 { return &s.Mesh.FramesSent })},
	{Status: "mesh.frames_received", Metric: "queen_mesh_frames_received_total", Kind: Counter,
		Help: "Hint frames received and accepted.", Field: num[uint64](func(s *Snapshot) *uint64 { return &s.Mesh.FramesReceived })},
	{Status: "mesh.hints_sent", Metric: "queen_mesh_hints_sent_total", Kind: Counter,
		Help: "Dirty-partition hints sent (summed over peers).", Field: num[uint64](func(s *Snapshot) *uint64 { return &s.Mesh.HintsSent })},
	{Status: "mesh.hints_received", Metric: "queen_mesh_hints_received_total", Kind: Counter,
		Help: "Dirty-partition hints received.", Field: num[uint64](func(s *Snapshot) *uint64 { return &s.Mesh.HintsReceived })},
	{Status: "mesh.frames_dropped", Metric: "queen_mesh_frames_dropped_total", Kind: Counter,
		Help: "Outgoing frames dropped on purpose (QUEEN_MESH_DROP_RATE chaos).", Field: num[uint64](func(s *Snapshot) *uint64 { return &s.Mesh.FramesDropped })},
	{Status: "mesh.frames_rejected", Metric: "queen_mesh_frames_rejected_total", Kind: Counter,
		Help: "Received frames refused: malformed or unauthenticated (secret mismatch).", Field: num[uint64](func(s *Snapshot) *uint64 { return &s.Mesh.FramesRejected })},
	{Status: "mesh.frames_queue_dropped", Metric: "queen_mesh_frames_queue_dropped_total", Kind: Counter,
		Help: "Outgoing frames dropped because a peer's send queue was full or it was unreachable.", Field: num[uint64](func(s *Snapshot) *uint64 { return &s.Mesh.QueueDropped })},
	{Status: "mesh.coalescer.size", Metric: "queen_mesh_coalescer_size", Kind: Gauge,
		Help: "Hints waiting in the coalescing set.", Field: num[int](func(s *Snapshot) *int { return &s.Mesh.CoalescerSize })},
	// Prometheus spells the word out; /status keeps its short name.
	{Status: "mesh.coalescer.cap", Metric: "queen_mesh_coalescer_capacity", Kind: Gauge,
		Help: "Bound of the coalescing set (QUEEN_MESH_HINT_CAP).", Field: num[int](func(s *Snapshot) *int { return &s.Mesh.CoalescerCap })},
	{Status: "mesh.coalescer.dropped", Metric: "queen_mesh_coalescer_dropped_total", Kind: Counter,
		Help: "Hints dropped because the coalescing set was full.", Field: num[uint64](func(s *Snapshot) *uint64 { return &s.Mesh.CoalescerDropped })},
	// Hint port limits (docs/operations.md, "Limits").
	{Status: "mesh.inbound_streams", Metric: "queen_mesh_inbound_streams", Kind: Gauge,
		Help: "Inbound hint streams open now.", Field: num[int](func(s *Snapshot) *int { return &s.Mesh.InboundStreams })},
	// Refusals are one family by reason on /metrics, two fields in /status.
	{Status: "mesh.inbound_refused", Metric: "queen_mesh_inbound_refused_total", Label: Label{"reason", "limit"}, Kind: Counter,
		Help: helpInRef, Field: num[uint64](func(s *Snapshot) *uint64 { return &s.Mesh.InboundRefusedLimit })},
	{Status: "mesh.inbound_evicted", Metric: "queen_mesh_inbound_evicted_total", Kind: Counter,
		Help: "Inbound hint streams that had not delivered a frame, closed to make room for a new one.", Field: num[uint64](func(s *Snapshot) *uint64 { return &s.Mesh.InboundEvicted })},
	{Status: "mesh.inbound_evicted_idle", Metric: "queen_mesh_inbound_evicted_idle_total", Kind: Counter,
		Help: "Member hint streams silent for 4 heartbeat intervals (1 s by default), closed to give their slot to a newer stream.", Field: num[uint64](func(s *Snapshot) *uint64 { return &s.Mesh.InboundEvictedIdle })},
	{Status: "mesh.inbound_replaced", Metric: "queen_mesh_inbound_replaced_total", Kind: Counter,
		Help: "Live member hint streams closed for a newer stream naming the same member.", Field: num[uint64](func(s *Snapshot) *uint64 { return &s.Mesh.InboundReplaced })},
	{Status: "mesh.inbound_timed_out", Metric: "queen_mesh_inbound_timed_out_total", Kind: Counter,
		Help: "Inbound hint streams closed because a read deadline passed.", Field: num[uint64](func(s *Snapshot) *uint64 { return &s.Mesh.InboundTimedOut })},
	{Status: "mesh.inbound_refused_not_member", Metric: "queen_mesh_inbound_refused_total", Label: Label{"reason", "not_member"}, Kind: Counter,
		Help: helpInRef, Field: num[uint64](func(s *Snapshot) *uint64 { return &s.Mesh.InboundRefusedNotMember })},
	{Status: "mesh.inbound_refused_held", Metric: "queen_mesh_inbound_refused_total", Label: Label{"reason", "held"}, Kind: Counter,
		Help: helpInRef, Field: num[uint64](func(s *Snapshot) *uint64 { return &s.Mesh.InboundRefusedHeld })},
	{Status: "mesh.hints_rate_limited", Metric: "queen_mesh_hints_rate_limited_total", Kind: Counter,
		Help: "Received hints dropped because their peer exceeded its rate (QUEEN_MESH_HINT_RATE).", Field: num[uint64](func(s *Snapshot) *uint64 { return &s.Mesh.HintsRateLimited })},
	{Status: "mesh.heartbeats_sent", Metric: "queen_mesh_heartbeats_sent_total", Kind: Counter,
		Help: "Heartbeat frames sent on idle hint streams (they carry the last frame number, so a lost last frame is noticed).", Field: num[uint64](func(s *Snapshot) *uint64 { return &s.Mesh.HeartbeatsSent })},
	{Status: "mesh.heartbeats_received", Metric: "queen_mesh_heartbeats_received_total", Kind: Counter,
		Help: "Heartbeat frames received.", Field: num[uint64](func(s *Snapshot) *uint64 { return &s.Mesh.HeartbeatsReceived })},
	{Status: "mesh.gaps_seen", Metric: "queen_mesh_gaps_seen_total", Kind: Counter,
		Help: "Received frames whose numbers showed missed frames: a gap, a reconnect without continuity, or a sender restart.", Field: num[uint64](func(s *Snapshot) *uint64 { return &s.Mesh.GapsSeen })},
	{Status: "mesh.overflow_signals_sent", Metric: "queen_mesh_overflow_signals_sent_total", Kind: Counter,
		Help: "Frames that told a peer this node dropped hints for it before numbering (full send queue, unreachable peer, full coalescing set).", Field: num[uint64](func(s *Snapshot) *uint64 { return &s.Mesh.OverflowSignalsSent })},
	{Status: "mesh.overflow_signals_seen", Metric: "queen_mesh_overflow_signals_seen_total", Kind: Counter,
		Help: "Received frames whose sender reported hints it dropped for this node.", Field: num[uint64](func(s *Snapshot) *uint64 { return &s.Mesh.OverflowSignalsSeen })},
	{Status: "mesh.gossip_errors", Metric: "queen_mesh_gossip_errors_total", Kind: Counter,
		Help: "Error lines memberlist logged: garbage, undecodable or unauthenticated gossip packets and streams, failed probes or state exchanges.", Field: num[uint64](func(s *Snapshot) *uint64 { return &s.Mesh.GossipErrors })},

	// pg: the pool's counters read *_count in /status and *_total on
	// /metrics (Prometheus naming); retries are not the pool's, hence queen_pg_.
	{Status: "pg.max_conns", Metric: "queen_pg_pool_max_conns", Kind: Gauge,
		Help: "Maximum connections of the PostgreSQL pool.", Field: num[int32](func(s *Snapshot) *int32 { return &s.PG.MaxConns })},
	{Status: "pg.total_conns", Metric: "queen_pg_pool_total_conns", Kind: Gauge,
		Help: "Connections currently open.", Field: num[int32](func(s *Snapshot) *int32 { return &s.PG.TotalConns })},
	{Status: "pg.idle_conns", Metric: "queen_pg_pool_idle_conns", Kind: Gauge,
		Help: "Open connections not in use.", Field: num[int32](func(s *Snapshot) *int32 { return &s.PG.IdleConns })},
	{Status: "pg.acquired_conns", Metric: "queen_pg_pool_acquired_conns", Kind: Gauge,
		Help: "Connections in use; equal to max_conns means the pool is saturated.", Field: num[int32](func(s *Snapshot) *int32 { return &s.PG.AcquiredConns })},
	{Status: "pg.acquire_count", Metric: "queen_pg_pool_acquires_total", Kind: Counter,
		Help: "Successful connection acquisitions.", Field: num[int64](func(s *Snapshot) *int64 { return &s.PG.AcquireCount })},
	{Status: "pg.empty_acquire_count", Metric: "queen_pg_pool_empty_acquires_total", Kind: Counter,
		Help: "Acquisitions that had to wait or dial because no idle connection was available.", Field: num[int64](func(s *Snapshot) *int64 { return &s.PG.EmptyAcquire })},
	{Status: "pg.new_conns_count", Metric: "queen_pg_pool_new_conns_total", Kind: Counter,
		Help: "Connections opened.", Field: num[int64](func(s *Snapshot) *int64 { return &s.PG.NewConns })},
	{Status: "pg.retries", Metric: "queen_pg_retries_total", Kind: Counter,
		Help: "Calls run again after a deadlock, serialization failure or concurrent-delete foreign-key violation.", Field: num[int64](func(s *Snapshot) *int64 { return &s.PG.Retries })},
	{Status: "pg.push_fast", Metric: "queen_pg_push_fast_total", Kind: Counter,
		Help: "Pushes (combined flushes or uncombined pushes) written by the fast push statement (docs/storage.md, \"The fast push\"); the others ran queen.push_v4.", Field: num[int64](func(s *Snapshot) *int64 { return &s.PG.PushFast })},
	{Status: "pg.push_fast_duplicates", Metric: "queen_pg_push_fast_duplicates_total", Kind: Counter,
		Help: "Fast pushes a duplicate transaction id undid (nothing written); the flush then ran as queen.push_v4.", Field: num[int64](func(s *Snapshot) *int64 { return &s.PG.PushFastDups })},
	{Status: "pg.claim_sets", Metric: "queen_pg_claim_sets_total", Kind: Counter,
		Help: "Claim flushes that sent their fast claims as one claim set statement (docs/storage.md, \"The claim set\"); a flush of one fast claim sends the single statement.", Field: num[int64](func(s *Snapshot) *int64 { return &s.PG.ClaimSets })},

	// requests: the node core's counters (broker.Counters), plus the HTTP
	// layer's in-flight count.
	{Status: "requests.parked_long_polls", Metric: "queen_parked_long_polls", Kind: Gauge,
		Help: "Long-poll pops parked on a wake gate.", Field: num[int](func(s *Snapshot) *int { return &s.Parked })},
	// The HTTP layer's figure: the family sits with queen_http_*, the
	// field with the other request counts.
	{Status: "requests.http_in_flight", Metric: "queen_http_requests_in_flight", Kind: Gauge, Own: true,
		Help: "HTTP requests being served, parked long-polls included (the request reading this figure excluded).", Field: num[int64](func(s *Snapshot) *int64 { return &s.InFlight })},
	{Status: "requests.pushes", Metric: "queen_pushes_total", Kind: Counter,
		Help: "Push requests.", Field: num[int64](func(s *Snapshot) *int64 { return &s.Requests.Pushes })},
	{Status: "requests.pushed_messages", Metric: "queen_pushed_messages_total", Kind: Counter,
		Help: "Messages stored by pushes.", Field: num[int64](func(s *Snapshot) *int64 { return &s.Requests.PushedItems })},
	{Status: "requests.push_flushes", Metric: "queen_push_flushes_total", Kind: Counter,
		Help: "Push transactions sent to PostgreSQL; fewer than pushes when concurrent pushes are combined (QUEEN_PUSH_COMBINE), though a push spread over several push lanes is carried by a flush in each (QUEEN_PUSH_LANES).", Field: num[int64](func(s *Snapshot) *int64 { return &s.Requests.PushFlushes })},
	{Status: "requests.push_lanes", Metric: "queen_push_lanes", Kind: Gauge,
		Help: "Push lanes this node runs: QUEEN_PUSH_LANES, at most a quarter of QUEEN_PG_MAX_CONNS (one at least); 0 with QUEEN_PUSH_COMBINE=0.", Field: num[int](func(s *Snapshot) *int { return &s.PushLanes })},
	{Status: "requests.push_deferred", Metric: "queen_push_deferred_total", Kind: Counter,
		Help: "Pushed messages a combined flush left for the next one because another transaction (another node's flush) held their partition.", Field: num[int64](func(s *Snapshot) *int64 { return &s.Requests.PushDeferred })},
	// The family is prefixed by what it counts duplicates of; /status
	// nests it under requests.
	{Status: "requests.duplicates", Metric: "queen_push_duplicates_total", Kind: Counter,
		Help: "Pushed messages refused as duplicates.", Field: num[int64](func(s *Snapshot) *int64 { return &s.Requests.Duplicates })},
	// "pops" counts pops begun; queen_pops_total is taken by finished pops
	// by outcome, so the started count has its own family.
	{Status: "requests.pops", Metric: "queen_pops_started_total", Kind: Counter,
		Help: "Pops begun, whatever their end (outcomes are in queen_pops_total).", Field: num[int64](func(s *Snapshot) *int64 { return &s.Requests.Pops })},
	{Status: "requests.pops_with_messages", Metric: "queen_pops_total", Label: Label{"outcome", "messages"}, Kind: Counter,
		Help: helpPops, Field: num[int64](func(s *Snapshot) *int64 { return &s.Requests.PopsMessages })},
	{Status: "requests.pops_empty", Metric: "queen_pops_total", Label: Label{"outcome", "empty"}, Kind: Counter,
		Help: helpPops, Field: num[int64](func(s *Snapshot) *int64 { return &s.Requests.PopsEmpty })},
	{Status: "requests.popped_messages", Metric: "queen_popped_messages_total", Kind: Counter,
		Help: "Messages delivered by pops.", Field: num[int64](func(s *Snapshot) *int64 { return &s.Requests.PoppedItems })},
	{Status: "requests.pop_sql_calls", Metric: "queen_pop_sql_calls_total", Kind: Counter,
		Help: "SQL calls made by pops (hot-list efficiency: low per pop is good).", Field: num[int64](func(s *Snapshot) *int64 { return &s.Requests.PopSQLCalls })},
	{Status: "requests.pop_flushes", Metric: "queen_pop_flushes_total", Kind: Counter,
		Help: "Claim transactions sent to PostgreSQL; fewer than pop_sql_calls when concurrent claims are combined (QUEEN_POP_COMBINE).", Field: num[int64](func(s *Snapshot) *int64 { return &s.Requests.PopFlushes })},
	{Status: "requests.claims_fast", Metric: "queen_claims_fast_total", Kind: Counter,
		Help: "Claim-core calls answered by the fast claim statement (docs/storage.md, \"The fast claim\"); the others ran queen.pop_v3.", Field: num[int64](func(s *Snapshot) *int64 { return &s.Requests.ClaimsFast })},
	{Status: "requests.pop_scans", Metric: "queen_pop_scans_total", Kind: Counter,
		Help: "Claim-core calls that looked for candidates with the SQL scan of the queue's partitions (wildcard pops with the hot-list off; with it on, first contacts of a (queue, group) and wait=false pops that find nothing in the ring); the others named their candidates.", Field: num[int64](func(s *Snapshot) *int64 { return &s.Requests.PopScans })},
	{Status: "requests.consumer_rows_provisioned", Metric: "queen_consumer_rows_provisioned_total", Kind: Counter,
		Help: "Consumer rows created by the bulk provisioning of a group on a queue's partitions (docs/storage.md, \"Bulk provisioning\"); claims create the others.", Field: num[int64](func(s *Snapshot) *int64 { return &s.Requests.RowsProvisioned })},
	{Status: "requests.claim_verdicts.took", Metric: "queen_claim_verdicts_total", Label: Label{"verdict", "took"}, Kind: Counter,
		Help: helpVerdicts, Field: num[int64](func(s *Snapshot) *int64 { return &s.Requests.ClaimTook })},
	{Status: "requests.claim_verdicts.empty", Metric: "queen_claim_verdicts_total", Label: Label{"verdict", "empty"}, Kind: Counter,
		Help: helpVerdicts, Field: num[int64](func(s *Snapshot) *int64 { return &s.Requests.ClaimEmpty })},
	{Status: "requests.claim_verdicts.leased", Metric: "queen_claim_verdicts_total", Label: Label{"verdict", "leased"}, Kind: Counter,
		Help: helpVerdicts, Field: num[int64](func(s *Snapshot) *int64 { return &s.Requests.ClaimLeased })},
	{Status: "requests.claim_verdicts.busy", Metric: "queen_claim_verdicts_total", Label: Label{"verdict", "busy"}, Kind: Counter,
		Help: helpVerdicts, Field: num[int64](func(s *Snapshot) *int64 { return &s.Requests.ClaimBusy })},
	{Status: "requests.claim_verdicts.requeue", Metric: "queen_claim_verdicts_total", Label: Label{"verdict", "requeue"}, Kind: Counter,
		Help: helpVerdicts, Field: num[int64](func(s *Snapshot) *int64 { return &s.Requests.ClaimRequeue })},
	{Status: "requests.acks", Metric: "queen_acks_total", Kind: Counter,
		Help: "Acknowledged items.", Field: num[int64](func(s *Snapshot) *int64 { return &s.Requests.Acks })},
	{Status: "requests.acks_refused", Metric: "queen_acks_refused_total", Kind: Counter,
		Help: "Acknowledged items refused (e.g. unknown or expired lease).", Field: num[int64](func(s *Snapshot) *int64 { return &s.Requests.AcksRefused })},
	{Status: "requests.acks_cas", Metric: "queen_ack_items_total", Label: Label{"path", "cas"}, Kind: Counter,
		Help: helpAckVia, Field: num[int64](func(s *Snapshot) *int64 { return &s.Requests.AcksCAS })},
	{Status: "requests.acks_general", Metric: "queen_ack_items_total", Label: Label{"path", "general"}, Kind: Counter,
		Help: helpAckVia, Field: num[int64](func(s *Snapshot) *int64 { return &s.Requests.AcksGeneral })},
	{Status: "requests.prefetch_taken", Metric: "queen_prefetch_claims_total", Label: Label{"outcome", "taken"}, Kind: Counter,
		Help: helpPrefetch, Field: num[int64](func(s *Snapshot) *int64 { return &s.Requests.PrefetchTaken })},
	{Status: "requests.prefetch_served", Metric: "queen_prefetch_claims_total", Label: Label{"outcome", "served"}, Kind: Counter,
		Help: helpPrefetch, Field: num[int64](func(s *Snapshot) *int64 { return &s.Requests.PrefetchServed })},
	{Status: "requests.prefetch_released", Metric: "queen_prefetch_claims_total", Label: Label{"outcome", "released"}, Kind: Counter,
		Help: helpPrefetch, Field: num[int64](func(s *Snapshot) *int64 { return &s.Requests.PrefetchReleased })},
	{Status: "requests.dead_lettered", Metric: "queen_dead_lettered_total", Kind: Counter,
		Help: "Messages moved to the dead-letter queue.", Field: num[int64](func(s *Snapshot) *int64 { return &s.Requests.DeadLettered })},
	{Status: "requests.transactions", Metric: "queen_transactions_total", Kind: Counter,
		Help: "Transaction requests.", Field: num[int64](func(s *Snapshot) *int64 { return &s.Requests.Transactions })},
	{Status: "requests.leases_released_undelivered", Metric: "queen_leases_released_undelivered_total", Kind: Counter,
		Help: "Leases released because the pop's answer never reached its client (releases that found a lease).", Field: num[int64](func(s *Snapshot) *int64 { return &s.Requests.LeasesDropped })},
	{Status: "requests.lease_release_flushes", Metric: "queen_lease_release_flushes_total", Kind: Counter,
		Help: "Statements that released those leases: releases that arrive while one is written go together, one statement per tenant.", Field: num[int64](func(s *Snapshot) *int64 { return &s.Requests.ReleaseFlushes })},

	// The combiners' time (broker/flushclock.go): a request's latency is
	// its wait for its flush plus that flush.
	{Status: "requests.ack_flushes", Metric: "queen_ack_flushes_total", Kind: Counter,
		Help: "CAS ack statements sent to PostgreSQL, in the claim flight's transactions or alone; fewer than acks when concurrent acks went together.", Field: num[int64](func(s *Snapshot) *int64 { return &s.Requests.AckFlushes })},
	{Status: "requests.flush_busy_seconds.push", Metric: "queen_flush_busy_seconds_total", Label: Label{"kind", "push"}, Kind: Counter,
		Help: helpFlushBusy, Field: num[float64](func(s *Snapshot) *float64 { return &s.Requests.PushFlushTime.BusySeconds })},
	{Status: "requests.flush_runs.push", Metric: "queen_flush_runs_total", Label: Label{"kind", "push"}, Kind: Counter,
		Help: helpFlushRuns, Field: num[int64](func(s *Snapshot) *int64 { return &s.Requests.PushFlushTime.Runs })},
	{Status: "requests.flush_wait_seconds.push", Metric: "queen_flush_wait_seconds_total", Label: Label{"kind", "push"}, Kind: Counter,
		Help: helpFlushWait, Field: num[float64](func(s *Snapshot) *float64 { return &s.Requests.PushFlushTime.WaitSeconds })},
	{Status: "requests.flush_waits.push", Metric: "queen_flush_waits_total", Label: Label{"kind", "push"}, Kind: Counter,
		Help: helpFlushWaits, Field: num[int64](func(s *Snapshot) *int64 { return &s.Requests.PushFlushTime.Waited })},
	{Status: "requests.flush_busy_seconds.pop", Metric: "queen_flush_busy_seconds_total", Label: Label{"kind", "pop"}, Kind: Counter,
		Help: helpFlushBusy, Field: num[float64](func(s *Snapshot) *float64 { return &s.Requests.PopFlushTime.BusySeconds })},
	{Status: "requests.flush_runs.pop", Metric: "queen_flush_runs_total", Label: Label{"kind", "pop"}, Kind: Counter,
		Help: helpFlushRuns, Field: num[int64](func(s *Snapshot) *int64 { return &s.Requests.PopFlushTime.Runs })},
	{Status: "requests.flush_wait_seconds.pop", Metric: "queen_flush_wait_seconds_total", Label: Label{"kind", "pop"}, Kind: Counter,
		Help: helpFlushWait, Field: num[float64](func(s *Snapshot) *float64 { return &s.Requests.PopFlushTime.WaitSeconds })},
	{Status: "requests.flush_waits.pop", Metric: "queen_flush_waits_total", Label: Label{"kind", "pop"}, Kind: Counter,
		Help: helpFlushWaits, Field: num[int64](func(s *Snapshot) *int64 { return &s.Requests.PopFlushTime.Waited })},
	{Status: "requests.flush_busy_seconds.ack", Metric: "queen_flush_busy_seconds_total", Label: Label{"kind", "ack"}, Kind: Counter,
		Help: helpFlushBusy, Field: num[float64](func(s *Snapshot) *float64 { return &s.Requests.AckFlushTime.BusySeconds })},
	{Status: "requests.flush_runs.ack", Metric: "queen_flush_runs_total", Label: Label{"kind", "ack"}, Kind: Counter,
		Help: helpFlushRuns, Field: num[int64](func(s *Snapshot) *int64 { return &s.Requests.AckFlushTime.Runs })},
	{Status: "requests.flush_wait_seconds.ack", Metric: "queen_flush_wait_seconds_total", Label: Label{"kind", "ack"}, Kind: Counter,
		Help: helpFlushWait, Field: num[float64](func(s *Snapshot) *float64 { return &s.Requests.AckFlushTime.WaitSeconds })},
	{Status: "requests.flush_waits.ack", Metric: "queen_flush_waits_total", Label: Label{"kind", "ack"}, Kind: Counter,
		Help: helpFlushWaits, Field: num[int64](func(s *Snapshot) *int64 { return &s.Requests.AckFlushTime.Waited })},

	// retention: the background retention job on this node (docs/api.md,
	// "Retention"). Deleted messages are one family by reason on /metrics,
	// two fields in /status, like marks.
	{Status: "retention.enabled", Metric: "queen_retention_enabled", Kind: Gauge,
		Help: "1 when this node runs the retention job (QUEEN_RETENTION_INTERVAL_MS > 0).", Field: flag(func(s *Snapshot) *bool { return &s.Retention.Enabled })},
	{Status: "retention.runs", Metric: "queen_retention_runs_total", Kind: Counter,
		Help: "Retention passes this node ran while holding the cluster-wide lock.", Field: num[int64](func(s *Snapshot) *int64 { return &s.Retention.Runs })},
	{Status: "retention.skipped", Metric: "queen_retention_runs_skipped_total", Kind: Counter,
		Help: "Retention passes skipped because another node held the lock.", Field: num[int64](func(s *Snapshot) *int64 { return &s.Retention.Skipped })},
	{Status: "retention.errors", Metric: "queen_retention_errors_total", Kind: Counter,
		Help: "Retention passes that ended with an error.", Field: num[int64](func(s *Snapshot) *int64 { return &s.Retention.Errors })},
	{Status: "retention.deleted_completed", Metric: "queen_retention_deleted_messages_total", Label: Label{"reason", "completed"}, Kind: Counter,
		Help: helpRetDel, Field: num[int64](func(s *Snapshot) *int64 { return &s.Retention.DeletedCompleted })},
	{Status: "retention.deleted_pending", Metric: "queen_retention_deleted_messages_total", Label: Label{"reason", "pending"}, Kind: Counter,
		Help: helpRetDel, Field: num[int64](func(s *Snapshot) *int64 { return &s.Retention.DeletedPending })},
	// Prometheus spells the unit out.
	{Status: "retention.last_run_s", Metric: "queen_retention_last_run_seconds", Kind: Gauge,
		Help: "Duration of the last retention pass this node ran.", Field: num[float64](func(s *Snapshot) *float64 { return &s.Retention.LastRunSeconds })},
	{Status: "retention.last_deleted", Metric: "queen_retention_last_run_deleted_messages", Kind: Gauge,
		Help: "Messages the last retention pass this node ran deleted.", Field: num[int64](func(s *Snapshot) *int64 { return &s.Retention.LastDeleted })},

	// forward: push ownership (docs/api.md, "Push ownership"): items this
	// node stored because it owns their queues, items it forwarded to
	// their owners, and forwards that failed and were stored here.
	{Status: "forward.owners", Metric: "queen_push_forward_owners", Kind: Gauge,
		Help: "Members that own queues' pushes in this node's view, itself included (0: no forwarder: the mesh is off or open, or both QUEEN_PUSH_FORWARD=0 and QUEEN_CONSUME_FORWARD=0; 1: alone).", Field: num[int64](func(s *Snapshot) *int64 { return &s.Forward.OwnersKnown })},
	{Status: "forward.requests", Metric: "queen_push_forward_requests_total", Kind: Counter,
		Help: "Pushes this node forwarded to the owners of their queues (one per owner per client push).", Field: num[int64](func(s *Snapshot) *int64 { return &s.Forward.Requests })},
	{Status: "forward.items", Metric: "queen_push_forward_items_total", Kind: Counter,
		Help: "Items in the pushes this node forwarded.", Field: num[int64](func(s *Snapshot) *int64 { return &s.Forward.Items })},
	{Status: "forward.failures", Metric: "queen_push_forward_failures_total", Kind: Counter,
		Help: "Forwarded pushes that failed (owner unreachable, refusing, slow or answering badly) and whose items this node then stored itself.", Field: num[int64](func(s *Snapshot) *int64 { return &s.Forward.Failures })},
	{Status: "forward.fallback_items", Metric: "queen_push_forward_fallback_items_total", Kind: Counter,
		Help: "Items this node stored because their owner failed: in a failed forward, or while the owner cools down after one.", Field: num[int64](func(s *Snapshot) *int64 { return &s.Forward.FallbackItems })},
	{Status: "forward.local_items", Metric: "queen_push_forward_local_items_total", Kind: Counter,
		Help: "Pushed items this node stored because it owns their queues, is alone, or the forward's body would pass the owner's body limit.", Field: num[int64](func(s *Snapshot) *int64 { return &s.Forward.LocalItems })},
	{Status: "forward.received", Metric: "queen_push_forward_received_total", Kind: Counter,
		Help: "Pushes peers forwarded to this node, which stored them.", Field: num[int64](func(s *Snapshot) *int64 { return &s.Forward.ForwardedInbox })},
	// The consumer side of queue ownership (docs/api.md, "Queue
	// ownership"): pops and acks sent to their queue's owner.
	{Status: "forward.pops", Metric: "queen_consume_forward_pops_total", Kind: Counter,
		Help: "Pops this node forwarded to the owners of their queues.", Field: num[int64](func(s *Snapshot) *int64 { return &s.Forward.Pops })},
	{Status: "forward.pop_failures", Metric: "queen_consume_forward_pop_failures_total", Kind: Counter,
		Help: "Forwarded pops that failed (owner unreachable, 3xx, 5xx, 408, 429, slower than the wait plus QUEEN_PUSH_FORWARD_TIMEOUT_MS, an answer broken off or too large) and were served here.", Field: num[int64](func(s *Snapshot) *int64 { return &s.Forward.PopFailures })},
	{Status: "forward.pops_busy", Metric: "queen_consume_forward_pops_busy_total", Kind: Counter,
		Help: fmt.Sprintf("Pops served here because %d pops of this node were already waiting at their queue's owner.", forward.DefaultPopConns), Field: num[int64](func(s *Snapshot) *int64 { return &s.Forward.PopsBusy })},
	{Status: "forward.acks", Metric: "queen_consume_forward_acks_total", Kind: Counter,
		Help: "Ack requests this node forwarded to the owners of their queues (one per owner per client request).", Field: num[int64](func(s *Snapshot) *int64 { return &s.Forward.Acks })},
	{Status: "forward.ack_items", Metric: "queen_consume_forward_ack_items_total", Kind: Counter,
		Help: "Items in the acks this node forwarded.", Field: num[int64](func(s *Snapshot) *int64 { return &s.Forward.AckItems })},
	{Status: "forward.ack_failures", Metric: "queen_consume_forward_ack_failures_total", Kind: Counter,
		Help: "Forwarded ack requests that failed: their items applied here when the owner certainly applied nothing, else their completions only (the others answered \"Outcome unknown\").", Field: num[int64](func(s *Snapshot) *int64 { return &s.Forward.AckFailures })},
	{Status: "forward.ack_fallback_items", Metric: "queen_consume_forward_ack_fallback_items_total", Kind: Counter,
		Help: "Ack items of failed forwards applied here: all of them when the owner certainly applied nothing (no connection, or a 4xx), else the completions only.", Field: num[int64](func(s *Snapshot) *int64 { return &s.Forward.AckFallbackItems })},
	{Status: "forward.ack_unknown_items", Metric: "queen_consume_forward_ack_unknown_items_total", Kind: Counter,
		Help: "Ack items answered \"Outcome unknown\": not completions, in failed forwards the owner may have applied (a failed ack applied twice could decide a second retry), and items this node failed to apply after other items of the request went to their owners.", Field: num[int64](func(s *Snapshot) *int64 { return &s.Forward.AckUnknownItems })},
	{Status: "forward.ack_local_items", Metric: "queen_consume_forward_ack_local_items_total", Kind: Counter,
		Help: "Ack items applied here: this node owns their queue, does not yet know their partition's queue, or the owner cools down.", Field: num[int64](func(s *Snapshot) *int64 { return &s.Forward.AckLocalItems })},
	{Status: "forward.routes", Metric: "queen_consume_forward_routes", Kind: Gauge,
		Help: "Partitions whose queue this node remembers, to send their acks to the queue's owner.", Field: num[int64](func(s *Snapshot) *int64 { return &s.Forward.Routes })},
	{Status: "forward.consume_received", Metric: "queen_consume_forward_received_total", Kind: Counter,
		Help: "Pops and acks peers forwarded to this node, which served them.", Field: num[int64](func(s *Snapshot) *int64 { return &s.Forward.ConsumeInbox })},
	{Status: "forward.resends", Metric: "queen_forward_resends_total", Kind: Counter,
		Help: "Forwarded pushes and pops sent again, once, on another connection because the owner closed their pooled connection as they went out (a pop under a new lease, the first released).", Field: num[int64](func(s *Snapshot) *int64 { return &s.Forward.Resends })},

	// http: the HTTP layer's connection counters (conn.go). /status keeps
	// the short names of its "http" section; /metrics says connections.
	{Status: "http.open_conns", Metric: "queen_http_connections_open", Kind: Gauge, Own: true,
		Help: "Client connections open now.", Field: num[int64](func(s *Snapshot) *int64 { return &s.HTTP.OpenConns })},
	{Status: "http.max_conns", Metric: "queen_http_connections_max", Kind: Gauge, Own: true,
		Help: "Cap of open client connections (QUEEN_HTTP_MAX_CONNS).", Field: num[int](func(s *Snapshot) *int { return &s.HTTP.MaxConns })},
	{Status: "http.conns_refused", Metric: "queen_http_connections_refused_total", Kind: Counter, Own: true,
		Help: "Connections beyond the cap or their address's share, answered 503 and closed.", Field: num[int64](func(s *Snapshot) *int64 { return &s.HTTP.ConnsRefused })},
	{Status: "http.max_conns_per_addr", Metric: "queen_http_connections_max_per_addr", Kind: Gauge, Own: true,
		Help: "Cap of open client connections from one source address (QUEEN_HTTP_MAX_CONNS_PER_ADDR).", Field: num[int](func(s *Snapshot) *int { return &s.HTTP.MaxConnsPerAddr })},
	{Status: "http.conns_refused_share", Metric: "queen_http_connections_refused_share_total", Kind: Counter, Own: true,
		Help: "Of the refused connections, those whose source address held its share.", Field: num[int64](func(s *Snapshot) *int64 { return &s.HTTP.ConnsRefusedShare })},
	{Status: "http.body_timeouts", Metric: "queen_http_body_timeouts_total", Kind: Counter, Own: true,
		Help: "Requests cut with 408 because their body did not arrive in time.", Field: num[int64](func(s *Snapshot) *int64 { return &s.HTTP.BodyTimeouts })},
	{Status: "http.accept_errors", Metric: "queen_http_accept_errors_total", Kind: Counter, Own: true,
		Help: "Failed accepts of client connections, e.g. out of file descriptors.", Field: num[int64](func(s *Snapshot) *int64 { return &s.HTTP.AcceptErrors })},

	// maintenance: the cluster's switches as this node sees them, and its
	// push buffer (broker/maintenance.go; docs/api.md, "Maintenance modes").
	{Status: "maintenance.push_enabled", Metric: "queen_maintenance_push_enabled", Kind: Gauge,
		Help: "1 while push maintenance is on (pushes are buffered on this node's disk).", Field: flag(func(s *Snapshot) *bool { return &s.Maint.PushMaintenance })},
	{Status: "maintenance.pop_enabled", Metric: "queen_maintenance_pop_enabled", Kind: Gauge,
		Help: "1 while pop maintenance is on (every pop answers 204).", Field: flag(func(s *Snapshot) *bool { return &s.Maint.PopMaintenance })},
	{Status: "maintenance.buffer_pending", Metric: "queen_push_buffer_pending_messages", Kind: Gauge,
		Help: "Buffered push items waiting for their replay, every tenant.", Field: num[int64](func(s *Snapshot) *int64 { return &s.Maint.Pending })},
	{Status: "maintenance.buffer_bytes", Metric: "queen_push_buffer_bytes", Kind: Gauge,
		Help: "Size of the push buffer file; it is emptied once replayed.", Field: num[int64](func(s *Snapshot) *int64 { return &s.Maint.Bytes })},
	{Status: "maintenance.buffer_max_bytes", Metric: "queen_push_buffer_max_bytes", Kind: Gauge,
		Help: "Bound of the push buffer file (QUEEN_BUFFER_MAX_BYTES); pushes past it are answered 503.", Field: num[int64](func(s *Snapshot) *int64 { return &s.Maint.MaxBytes })},
	{Status: "maintenance.replaying", Metric: "queen_push_buffer_replaying", Kind: Gauge,
		Help: "1 while the push buffer is being replayed.", Field: flag(func(s *Snapshot) *bool { return &s.Maint.Replaying })},
	{Status: "maintenance.buffered", Metric: "queen_push_buffered_messages_total", Kind: Counter,
		Help: "Push items written to the push buffer.", Field: num[int64](func(s *Snapshot) *int64 { return &s.Maint.Buffered })},
	{Status: "maintenance.replayed", Metric: "queen_push_buffer_replayed_total", Kind: Counter,
		Help: "Buffered push items stored by a replay.", Field: num[int64](func(s *Snapshot) *int64 { return &s.Maint.Replayed })},
	{Status: "maintenance.replay_duplicates", Metric: "queen_push_buffer_replay_duplicates_total", Kind: Counter,
		Help: "Buffered push items a replay found already stored (a replay after a crash).", Field: num[int64](func(s *Snapshot) *int64 { return &s.Maint.ReplayDuplicates })},
	{Status: "maintenance.replay_failed", Metric: "queen_push_buffer_replay_failed_total", Kind: Counter,
		Help: "Buffered push items a replay could not store (their queue was deleted meanwhile); each is logged.", Field: num[int64](func(s *Snapshot) *int64 { return &s.Maint.ReplayFailed })},
	{Status: "maintenance.set_aside", Metric: "queen_push_buffer_set_aside_total", Kind: Counter,
		Help: "Buffered push items a replay could not send (too large), moved to the side file next to the buffer; each is logged.", Field: num[int64](func(s *Snapshot) *int64 { return &s.Maint.SetAside })},
	{Status: "maintenance.set_aside_bytes", Metric: "queen_push_buffer_set_aside_bytes", Kind: Gauge,
		Help: "Size of the push buffer's side file: set-aside items an operator has not recovered and removed yet.", Field: num[int64](func(s *Snapshot) *int64 { return &s.Maint.SetAsideBytes })},
}
