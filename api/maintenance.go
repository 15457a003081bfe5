package api

import (
	"context"
	"fmt"
	"net/http"

	"queen-node/broker"
)

// MaintenanceBroker is the maintenance modes' part of Broker
// (broker/maintenance.go; docs/api.md, "Maintenance modes").
type MaintenanceBroker interface {
	Maintenance(ctx context.Context) (broker.MaintenanceState, error) // read fresh from PostgreSQL
	SetPushMaintenance(ctx context.Context, on bool) error
	SetPopMaintenance(ctx context.Context, on bool) error
	BufferStats() broker.BufferStats    // this node's buffer, every tenant
	TenantBuffered(tenant string) int64 // this node's buffered records of one tenant
	PushBuffering() bool                // pushes go to this node's buffer now (on, or still replaying)
	PopsPaused() bool                   // pop maintenance is on here (forwarded pops are served here then)
	MaxPopBytes() int64                 // bound of a pop's payload bytes, 0 none (bounds a forwarded pop's answer)
}

// maintenanceBodyLimit bounds a toggle's body: it is {"enabled": bool}.
const maintenanceBodyLimit = 4 << 10

// registerMaintenance adds the maintenance routes. The switches are
// cluster-wide, not per tenant (they exist for work on the shared
// database), so toggling needs admin (docs/api.md, "Authentication");
// reading them needs read-only, and the buffer figures a caller sees are
// its own tenant's.
func (s *Server) registerMaintenance() {
	s.route("GET", "/api/v1/system/maintenance", AccessReadOnly, s.handleGetPushMaintenance)
	s.route("POST", "/api/v1/system/maintenance", AccessAdmin, s.handleSetPushMaintenance)
	s.route("GET", "/api/v1/system/maintenance/pop", AccessReadOnly, s.handleGetPopMaintenance)
	s.route("POST", "/api/v1/system/maintenance/pop", AccessAdmin, s.handleSetPopMaintenance)
	s.route("GET", "/api/v1/status/buffers", AccessReadOnly, s.handleStatusBuffers)
}

// bufferStatsJSON is a caller's view of this node's push buffer.
type bufferStatsJSON struct {
	PendingCount int64 `json:"pendingCount"` // the caller's tenant's records waiting for the replay
	Replaying    bool  `json:"replaying"`    // the node is replaying its buffer
	Healthy      bool  `json:"healthy"`      // the last append succeeded and the buffer has room
	MaxBytes     int64 `json:"maxBytes"`     // QUEEN_BUFFER_MAX_BYTES
}

type pushMaintenanceJSON struct {
	MaintenanceMode    bool             `json:"maintenanceMode"`
	PopMaintenanceMode *bool            `json:"popMaintenanceMode,omitempty"` // GET only, as the reference
	BufferedMessages   int64            `json:"bufferedMessages"`
	BufferHealthy      bool             `json:"bufferHealthy"`
	BufferStats        *bufferStatsJSON `json:"bufferStats,omitempty"` // GET only
	Message            string           `json:"message,omitempty"`     // POST only
}

type popMaintenanceJSON struct {
	PopMaintenanceMode bool   `json:"popMaintenanceMode"`
	Message            string `json:"message"`
}

func (s *Server) bufferView(tenant string) (int64, bufferStatsJSON) {
	st := s.b.BufferStats()
	n := s.b.TenantBuffered(tenant)
	return n, bufferStatsJSON{PendingCount: n, Replaying: st.Replaying, Healthy: st.Healthy, MaxBytes: st.MaxBytes}
}

// GET /api/v1/system/maintenance
func (s *Server) handleGetPushMaintenance(w http.ResponseWriter, r *http.Request, c caller) {
	st, err := s.b.Maintenance(r.Context())
	if err != nil {
		s.brokerError(w, r, "maintenance", err)
		return
	}
	n, view := s.bufferView(c.tenant)
	writeJSON(w, http.StatusOK, pushMaintenanceJSON{MaintenanceMode: st.Push, PopMaintenanceMode: &st.Pop,
		BufferedMessages: n, BufferHealthy: view.Healthy, BufferStats: &view})
}

// POST /api/v1/system/maintenance {"enabled": bool}
func (s *Server) handleSetPushMaintenance(w http.ResponseWriter, r *http.Request, c caller) {
	on, ok := s.readEnabled(w, r)
	if !ok {
		return
	}
	if err := s.b.SetPushMaintenance(r.Context(), on); err != nil {
		s.brokerError(w, r, "maintenance", err)
		return
	}
	s.log.Info("push maintenance set", "enabled", on, "tenant", c.tenant)
	n, view := s.bufferView(c.tenant)
	msg := "Push maintenance disabled: this node replays its buffered pushes to the database, in order; the other nodes follow within their refresh interval."
	if on {
		msg = "Push maintenance enabled: pushes are buffered on each node's disk and answered \"buffered\"; the other nodes follow within their refresh interval."
	}
	writeJSON(w, http.StatusOK, pushMaintenanceJSON{MaintenanceMode: on, BufferedMessages: n,
		BufferHealthy: view.Healthy, Message: msg})
}

// GET /api/v1/system/maintenance/pop
func (s *Server) handleGetPopMaintenance(w http.ResponseWriter, r *http.Request, _ caller) {
	st, err := s.b.Maintenance(r.Context())
	if err != nil {
		s.brokerError(w, r, "maintenance", err)
		return
	}
	writeJSON(w, http.StatusOK, popMaintenanceJSON{PopMaintenanceMode: st.Pop, Message: popMaintenanceMessage(st.Pop, false)})
}

// POST /api/v1/system/maintenance/pop {"enabled": bool}
func (s *Server) handleSetPopMaintenance(w http.ResponseWriter, r *http.Request, c caller) {
	on, ok := s.readEnabled(w, r)
	if !ok {
		return
	}
	if err := s.b.SetPopMaintenance(r.Context(), on); err != nil {
		s.brokerError(w, r, "maintenance", err)
		return
	}
	s.log.Info("pop maintenance set", "enabled", on, "tenant", c.tenant)
	writeJSON(w, http.StatusOK, popMaintenanceJSON{PopMaintenanceMode: on, Message: popMaintenanceMessage(on, true)})
}

func popMaintenanceMessage(on, changed bool) string {
	switch {
	case on && changed:
		return "Pop maintenance enabled: every pop answers 204 (parked long-polls too); the other nodes follow within their refresh interval."
	case on:
		return "Pop maintenance is on: every pop answers 204."
	case changed:
		return "Pop maintenance disabled: pops are served again."
	}
	return "Pop maintenance is off."
}

// readEnabled reads a toggle body; false means the 4xx was answered.
func (s *Server) readEnabled(w http.ResponseWriter, r *http.Request) (bool, bool) {
	if r.ContentLength > maintenanceBodyLimit {
		writeReqError(w, tooLarge(fmt.Sprintf("request body too large (limit %d bytes)", maintenanceBodyLimit)))
		return false, false
	}
	r.Body = http.MaxBytesReader(w, r.Body, maintenanceBodyLimit) // a chunked body past the limit: readBody's 413
	raw, err := s.readBody(w, r)
	if err != nil {
		writeReqError(w, err)
		return false, false
	}
	body, err := parseObject(raw, "request body")
	if err != nil {
		writeReqError(w, err)
		return false, false
	}
	on, present, err := body.boolean("enabled")
	if err != nil || !present {
		writeReqError(w, badRequest("enabled (boolean) is required"))
		return false, false
	}
	return on, true
}

// statusBuffersJSON is GET /api/v1/status/buffers: the reference's fields
// (pending, failed, dbHealthy) plus this node's replay state.
type statusBuffersJSON struct {
	Pending   int64 `json:"pending"`   // the caller tenant's records waiting in this node's buffer
	Failed    int64 `json:"failed"`    // records a replay could not store since start (node-wide, logged)
	DBHealthy bool  `json:"dbHealthy"` // PostgreSQL answered a health probe now
	Replaying bool  `json:"replaying"` // this node is replaying its buffer
	Healthy   bool  `json:"healthy"`   // the buffer file takes appends
}

// GET /api/v1/status/buffers
func (s *Server) handleStatusBuffers(w http.ResponseWriter, r *http.Request, c caller) {
	st := s.b.BufferStats()
	writeJSON(w, http.StatusOK, statusBuffersJSON{Pending: s.b.TenantBuffered(c.tenant), Failed: st.ReplayFailed,
		DBHealthy: s.b.Health(r.Context()) == nil, Replaying: st.Replaying, Healthy: st.Healthy})
}
