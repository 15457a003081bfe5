package api

import (
	"time"

	"queen-node/broker"
	"queen-node/forward"
	"queen-node/retention"
)

// SnapshotSource gives the node core's figures; *broker.Broker is one.
type SnapshotSource interface {
	Snapshot() broker.Snapshot
}

// Snapshot is everything /status and /metrics report, read once per
// request: the node core's snapshot plus what only the HTTP layer knows.
// The table (table.go) names every field for both outputs.
type Snapshot struct {
	broker.Snapshot
	Version   string  // build version (Config.Version)
	HTTPAddr  string  // the address the node advertises for HTTP
	Tenant    string  // Config.Tenant
	UptimeS   float64 // seconds since Started
	StartedAt string  // Started in RFC 3339, UTC
	InFlight  int64   // HTTP requests being served besides the one reading the snapshot
	HTTP      ConnSnapshot
	Retention retention.Stats // the retention job's counters (SetRetentionSource)
	Forward   forward.Stats   // push forwarding's counters (SetPushForwarder)
}

// ConnSnapshot is the HTTP layer's connection counters (conn.go).
type ConnSnapshot struct {
	OpenConns         int64 // client connections open now
	MaxConns          int   // Config.MaxConns
	MaxConnsPerAddr   int   // Config.MaxConnsPerAddr
	ConnsRefused      int64 // connections beyond MaxConns or their address's share, answered 503 and closed
	ConnsRefusedShare int64 // of ConnsRefused: refused because their address held MaxConnsPerAddr
	BodyTimeouts      int64 // requests cut (408) because their body was slower than BodyTimeout
	AcceptErrors      int64 // failed accepts, e.g. out of file descriptors
}

// snapshot reads src and the server's own counters. It is called from a
// request (GET /status or a scrape), which the in-flight count excludes.
func (s *Server) snapshot(src SnapshotSource, httpAddr string) *Snapshot {
	core := src.Snapshot()
	return &Snapshot{
		Snapshot:  core,
		Version:   s.cfg.Version,
		HTTPAddr:  httpAddr,
		Tenant:    s.cfg.Tenant,
		UptimeS:   time.Since(core.Started).Seconds(),
		StartedAt: core.Started.UTC().Format(time.RFC3339),
		InFlight:  max(s.metrics.inflight.Load()-1, 0),
		HTTP:      s.ConnStatus(),
		Retention: s.retentionStats(),
		Forward:   s.forwardStats(),
	}
}

// ownSnapshot has only the HTTP layer's own figures (rows marked Own),
// for scrapes before MetricsHandler names the node core's source.
func (s *Server) ownSnapshot() *Snapshot {
	return &Snapshot{Version: s.cfg.Version, Tenant: s.cfg.Tenant,
		InFlight: max(s.metrics.inflight.Load()-1, 0), HTTP: s.ConnStatus()}
}
