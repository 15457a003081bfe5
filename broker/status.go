package broker

import (
	"time"

	"queen-node/hotlist"
	"queen-node/mesh"
	"queen-node/pg"
)

// MeshView is what the broker needs of the mesh: the push-path hinter and
// the figures the node's snapshot reports. *mesh.Mesh is one.
type MeshView interface {
	Hinter
	Stats() mesh.Stats
	Members() []mesh.Member
}

// Snapshot is the node core's figures at one moment: its own counters and
// those of the components it owns (hot-list, mesh, PostgreSQL pool). The
// HTTP layer turns it into /status and /metrics through one table
// (api/table.go); names and encodings live there, not here.
type Snapshot struct {
	Name     string    // node name
	Started  time.Time // when the broker started
	Requests Counters
	Parked   int // long-poll pops parked on a wake gate now
	// PushLanes is the push lanes this node runs (pushlanes.go): a
	// setting bounded by the pool, 0 with PushCombine off.
	PushLanes int
	PG        pg.PoolStat
	Hotlist   HotlistSnapshot
	Mesh      MeshSnapshot
	Maint     MaintenanceSnapshot // maintenance modes and the push buffer (maintenance.go)
}

// Counters is a copy of Stats at one moment.
type Counters struct {
	Pushes          int64
	PushedItems     int64
	PushFlushes     int64
	PushDeferred    int64
	Duplicates      int64
	Pops            int64
	PopsMessages    int64
	PopsEmpty       int64
	PoppedItems     int64
	PopSQLCalls     int64
	PopFlushes      int64
	ClaimsFast      int64
	PopScans        int64
	RowsProvisioned int64 // consumer rows made by the bulk provisioning (provision.go)
	ClaimTook       int64
	ClaimEmpty      int64
	ClaimLeased     int64
	ClaimBusy       int64
	ClaimRequeue    int64
	Acks            int64
	AcksRefused     int64
	AcksCAS         int64 // ack items resolved by the CAS ack (ackcas.go)
	AcksGeneral     int64 // ack items sent to queen.ack_v2
	DeadLettered    int64
	Transactions    int64
	LeasesDropped   int64
	ReleaseFlushes  int64
	AckFlushes      int64 // CAS ack statements (ackcas.go)
	// Claims taken ahead (prefetch.go): with messages, handed to pops,
	// released unused.
	PrefetchTaken, PrefetchServed, PrefetchReleased int64
	// Combined flushes' time by kind (flushclock.go).
	PushFlushTime, PopFlushTime, AckFlushTime FlushTimes
}

// HotlistSnapshot is the hot-list's figures; Enabled is false (and the rest
// zero) with QUEEN_HOTLIST=0.
type HotlistSnapshot struct {
	Enabled bool
	hotlist.Stats
	TopRings []hotlist.RingStat // the busiest rings, at most Config.LogTopNQueues
	// The churn reseed (churn.go): passes over every ring, rings reseeded.
	ChurnPasses, ChurnReseeds int64
}

// MeshSnapshot is the mesh's figures; Enabled is false (and the rest zero)
// until SetMesh.
type MeshSnapshot struct {
	Enabled bool
	mesh.Stats
	Members []mesh.Member
}

// Snapshot returns the counters as plain values. It takes no SQL and no
// lock a hot path holds for long, so it can be read from a loaded node.
func (s *Stats) Snapshot() Counters {
	return Counters{
		Pushes: s.Pushes.Load(), PushedItems: s.PushedItems.Load(), PushFlushes: s.PushFlushes.Load(),
		PushDeferred: s.PushDeferred.Load(),
		Duplicates:   s.Duplicates.Load(), Pops: s.Pops.Load(), PopsMessages: s.PopsMessages.Load(),
		PopsEmpty: s.PopsEmpty.Load(), PoppedItems: s.PoppedItems.Load(), PopSQLCalls: s.PopSQLCalls.Load(), PopFlushes: s.PopFlushes.Load(),
		ClaimsFast: s.ClaimsFast.Load(), PopScans: s.PopScans.Load(), RowsProvisioned: s.RowsProvisioned.Load(),
		ClaimTook: s.ClaimTook.Load(), ClaimEmpty: s.ClaimEmpty.Load(), ClaimLeased: s.ClaimLeased.Load(),
		ClaimBusy: s.ClaimBusy.Load(), ClaimRequeue: s.ClaimRequeue.Load(),
		Acks: s.Acks.Load(), AcksRefused: s.AcksRefused.Load(), DeadLettered: s.DeadLettered.Load(),
		AcksCAS: s.AcksCAS.Load(), AcksGeneral: s.AcksGeneral.Load(),
		Transactions: s.Transactions.Load(), LeasesDropped: s.LeasesDropped.Load(),
		ReleaseFlushes: s.ReleaseFlushes.Load(), AckFlushes: s.AckCASFlushes.Load(),
		PrefetchTaken: s.PrefetchTaken.Load(), PrefetchServed: s.PrefetchServed.Load(), PrefetchReleased: s.PrefetchReleased.Load(),
		PushFlushTime: s.PushFlushTime.snapshot(), PopFlushTime: s.PopFlushTime.snapshot(), AckFlushTime: s.AckFlushTime.snapshot(),
	}
}

// Snapshot gathers the figures of the node core and its components. Like
// Stats.Snapshot it takes no SQL and no lock a hot path holds for long.
func (b *Broker) Snapshot() Snapshot {
	st := Snapshot{
		Name:     b.cfg.NodeName,
		Started:  b.started,
		Requests: b.stats.Snapshot(),
		Parked:   b.gates.parked(),
		PG:       b.db.Stat(),
		Maint:    b.maintenanceSnapshot(),
	}
	if b.push != nil {
		st.PushLanes = len(b.push.lanes)
	}
	if b.hot != nil {
		st.Hotlist = HotlistSnapshot{Enabled: true, Stats: b.hot.Stats(), TopRings: b.hot.TopRings(b.cfg.LogTopNQueues),
			ChurnPasses: b.churn.passes.Load(), ChurnReseeds: b.churn.reseeds.Load()}
	}
	if ref := b.mesh.Load(); ref != nil {
		st.Mesh = MeshSnapshot{Enabled: true, Stats: ref.h.Stats(), Members: ref.h.Members()}
	}
	return st
}
