package broker

import (
	"time"

	"queen-node/hotlist"
	"queen-node/mesh"
	"queen-node/pg"
)

// MeshView is what the broker needs of the mesh: the push-path hinter and
// the figures the status endpoint reports.
type MeshView interface {
	Hinter
	Stats() mesh.Stats
	Members() []mesh.Member
}

// Status is the node's GET /status document. Field names are a contract
// (DESIGN.md, "Node status endpoint"): keep them, only add.
type Status struct {
	Node     NodeStatus     `json:"node"`
	Hotlist  HotlistStatus  `json:"hotlist"`
	Mesh     MeshStatus     `json:"mesh"`
	PG       PGStatus       `json:"pg"`
	Requests RequestsStatus `json:"requests"`
	HTTP     HTTPStatus     `json:"http"` // filled by the HTTP layer
}

// NodeStatus identifies the node.
type NodeStatus struct {
	Name     string  `json:"name"`
	Version  string  `json:"version"`
	UptimeS  float64 `json:"uptime_s"`
	HTTPAddr string  `json:"http_addr"`
	Tenant   string  `json:"tenant"`
	Started  string  `json:"started_at"`
}

// HotlistStatus reports the candidate rings.
type HotlistStatus struct {
	Enabled     bool       `json:"enabled"`
	Rings       int        `json:"rings"`
	Queues      int        `json:"queues"`
	Ready       int64      `json:"ready"`
	Wheel       int64      `json:"wheel"`
	Inflight    int64      `json:"inflight"`
	MarksLocal  int64      `json:"marks_local"`
	MarksRemote int64      `json:"marks_remote"`
	MarksCommit int64      `json:"marks_commit"`
	Reseeds     int64      `json:"reseeds"`
	ReseedAdded int64      `json:"reseed_added"`
	Reclaimed   int64      `json:"reclaimed"`
	Swept       int64      `json:"swept"`
	TopRings    []RingStat `json:"top_rings"`
	Unconfirmed int64      `json:"unconfirmed"` // entries only peers' hints vouch for (docs/hotlist.md)
	Pruned      int64      `json:"pruned"`      // unconfirmed entries a reseed dropped in bulk
}

// RingStat is one of the busiest rings.
type RingStat struct {
	Tenant   string `json:"tenant"`
	Queue    string `json:"queue"`
	Group    string `json:"group"`
	Ready    int    `json:"ready"`
	Wheel    int    `json:"wheel"`
	Inflight int    `json:"inflight"`
}

// MeshStatus reports membership and hint traffic.
type MeshStatus struct {
	Enabled        bool            `json:"enabled"`
	Members        []mesh.Member   `json:"members"`
	LivePeers      int             `json:"live_peers"`
	FramesSent     uint64          `json:"frames_sent"`
	FramesReceived uint64          `json:"frames_received"`
	HintsSent      uint64          `json:"hints_sent"`
	HintsReceived  uint64          `json:"hints_received"`
	FramesDropped  uint64          `json:"frames_dropped"`
	FramesRejected uint64          `json:"frames_rejected"`
	QueueDropped   uint64          `json:"frames_queue_dropped"`
	Coalescer      CoalescerStatus `json:"coalescer"`
	// Hint port limits (docs/operations.md, "Limits").
	InboundStreams   int    `json:"inbound_streams"`            // inbound hint streams open now
	InboundRefused   uint64 `json:"inbound_refused"`            // refused: per-address or total stream limit
	InboundEvicted   uint64 `json:"inbound_evicted"`            // unproven streams closed to make room for a new one
	InboundTimedOut  uint64 `json:"inbound_timed_out"`          // closed: a read deadline passed
	InboundNotMember uint64 `json:"inbound_refused_not_member"` // refused: not from a current member's address
	HintsRateLimited uint64 `json:"hints_rate_limited"`         // received hints dropped over the per-peer rate
	GossipErrors     uint64 `json:"gossip_errors"`              // memberlist error lines (garbage packets, failed exchanges)
}

// CoalescerStatus reports the bounded set of pending hints.
type CoalescerStatus struct {
	Size    int    `json:"size"`
	Cap     int    `json:"cap"`
	Dropped uint64 `json:"dropped"`
}

// PGStatus reports the PostgreSQL pool.
type PGStatus struct {
	pg.PoolStat
}

// RequestsStatus reports the node core's own counters.
type RequestsStatus struct {
	Parked        int   `json:"parked_long_polls"`
	InFlight      int64 `json:"http_in_flight"` // filled by the HTTP layer: requests being served besides the status read
	Pushes        int64 `json:"pushes"`
	PushedItems   int64 `json:"pushed_messages"`
	PushFlushes   int64 `json:"push_flushes"`
	Duplicates    int64 `json:"duplicates"`
	Pops          int64 `json:"pops"`
	PopsMessages  int64 `json:"pops_with_messages"`
	PopsEmpty     int64 `json:"pops_empty"`
	PoppedItems   int64 `json:"popped_messages"`
	PopSQLCalls   int64 `json:"pop_sql_calls"`
	Acks          int64 `json:"acks"`
	AcksFailed    int64 `json:"acks_refused"`
	DeadLettered  int64 `json:"dead_lettered"`
	Transactions  int64 `json:"transactions"`
	LeasesDropped int64 `json:"leases_released_undelivered"`
}

// Status assembles the status document from the components' own counters.
// It takes no SQL and no lock a hot path holds for long.
func (b *Broker) Status(version, httpAddr, tenant string) Status {
	now := time.Now()
	st := Status{
		Node: NodeStatus{Name: b.cfg.NodeName, Version: version, UptimeS: now.Sub(b.started).Seconds(),
			HTTPAddr: httpAddr, Tenant: tenant, Started: b.started.UTC().Format(time.RFC3339)},
		PG: PGStatus{b.db.Stat()},
		Requests: RequestsStatus{
			Parked: b.gates.parked(), Pushes: b.stats.Pushes.Load(), PushedItems: b.stats.PushedItems.Load(),
			PushFlushes: b.stats.PushFlushes.Load(),
			Duplicates:  b.stats.Duplicates.Load(), Pops: b.stats.Pops.Load(), PopsMessages: b.stats.PopsMessages.Load(),
			PopsEmpty: b.stats.PopsEmpty.Load(), PoppedItems: b.stats.PoppedItems.Load(),
			PopSQLCalls: b.stats.PopSQLCalls.Load(), Acks: b.stats.Acks.Load(), AcksFailed: b.stats.AcksFailed.Load(),
			DeadLettered: b.stats.DeadLettered.Load(), Transactions: b.stats.Transactions.Load(),
			LeasesDropped: b.stats.LeasesDropped.Load(),
		},
		Hotlist: HotlistStatus{TopRings: []RingStat{}},
		Mesh:    MeshStatus{Members: []mesh.Member{}},
	}
	if b.hot != nil {
		hs := b.hot.Stats()
		st.Hotlist = HotlistStatus{Enabled: true, Rings: hs.Rings, Queues: hs.Queues, Ready: hs.Ready,
			Wheel: hs.Wheel, Inflight: hs.Inflight, MarksLocal: hs.MarksLocal, MarksRemote: hs.MarksRemote,
			MarksCommit: hs.MarksCommit, Reseeds: hs.Reseeds, ReseedAdded: hs.ReseedAdded,
			Reclaimed: hs.Reclaimed, Swept: hs.Swept, TopRings: ringStats(b.hot.TopRings(b.cfg.LogTopNQueues)),
			Unconfirmed: hs.Unconfirmed, Pruned: hs.Pruned}
	}
	if ref := b.mesh.Load(); ref != nil {
		if mv, ok := ref.h.(MeshView); ok {
			ms := mv.Stats()
			st.Mesh = MeshStatus{Enabled: true, Members: mv.Members(), LivePeers: ms.LivePeers,
				FramesSent: ms.FramesSent, FramesReceived: ms.FramesReceived, HintsSent: ms.HintsSent,
				HintsReceived: ms.HintsReceived, FramesDropped: ms.FramesDropped, FramesRejected: ms.FramesRejected,
				QueueDropped:   ms.QueueDropped,
				Coalescer:      CoalescerStatus{Size: ms.CoalescerSize, Cap: ms.CoalescerCap, Dropped: ms.CoalescerDropped},
				InboundStreams: ms.InboundStreams, InboundRefused: ms.InboundRefusedLimit,
				InboundEvicted: ms.InboundEvicted, InboundTimedOut: ms.InboundTimedOut,
				InboundNotMember: ms.InboundRefusedNotMember, HintsRateLimited: ms.HintsRateLimited,
				GossipErrors: ms.GossipErrors}
		}
	}
	return st
}

func ringStats(in []hotlist.RingStat) []RingStat {
	out := make([]RingStat, len(in))
	for i, r := range in {
		out[i] = RingStat{Tenant: r.Tenant, Queue: r.Queue, Group: r.Group, Ready: r.Ready, Wheel: r.Wheel, Inflight: r.Inflight}
	}
	return out
}

// HTTPStatus reports the HTTP layer's client connections (api/conn.go).
type HTTPStatus struct {
	OpenConns    int64 `json:"open_conns"`    // client connections open now
	MaxConns     int   `json:"max_conns"`     // QUEEN_HTTP_MAX_CONNS
	ConnsRefused int64 `json:"conns_refused"` // connections beyond max_conns, answered 503 and closed
	BodyTimeouts int64 `json:"body_timeouts"` // requests cut (408) because their body was slower than QUEEN_HTTP_BODY_TIMEOUT_MS
	AcceptErrors int64 `json:"accept_errors"` // failed accepts, e.g. out of file descriptors
}
