package api

import (
	"context"
	"net/http"
	"time"
)

// healthTimeout keeps /health answering when PostgreSQL hangs instead of
// refusing: a probe that never returns is worse than a 503.
const healthTimeout = 5 * time.Second

type healthResponse struct {
	Status   string `json:"status"`
	Database string `json:"database"`
	Server   string `json:"server"`
	Version  string `json:"version"`
	Error    string `json:"error,omitempty"`
}

// GET /health
func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request, _ caller) {
	ctx, cancel := context.WithTimeout(r.Context(), healthTimeout)
	defer cancel()
	code, hr := s.health(ctx)
	writeJSON(w, code, hr)
}

// health is the answer of /health, also given to a probe beyond the
// connection cap (conn.go).
func (s *Server) health(ctx context.Context) (int, healthResponse) {
	if err := s.b.Health(ctx); err != nil {
		s.log.Debug("health check failed", "error", err)
		reason := truncate(err.Error(), 200)
		if reason == "" {
			reason = "database unreachable"
		}
		return http.StatusServiceUnavailable, healthResponse{
			Status: "unhealthy", Database: "disconnected", Server: "queen-node",
			Version: s.cfg.Version, Error: reason,
		}
	}
	return http.StatusOK, healthResponse{
		Status: "healthy", Database: "connected", Server: "queen-node", Version: s.cfg.Version,
	}
}
