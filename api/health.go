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

// StartingHandler answers while the node is not yet serving the API (its
// broker is still connecting to PostgreSQL): /health says why with a 503,
// so an orchestrator sees "unhealthy: <reason>" instead of a port that
// accepts and never answers; every other request gets a 503 to retry.
// reason returns the latest connect failure ("" before the first).
func StartingHandler(version string, reason func() string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		why := reason()
		if why == "" {
			why = "connecting to PostgreSQL"
		}
		why = "starting: " + truncate(why, 200)
		w.Header().Set("Retry-After", "1")
		if r.Method == http.MethodGet && r.URL.Path == "/health" {
			writeJSON(w, http.StatusServiceUnavailable, healthResponse{
				Status: "unhealthy", Database: "disconnected", Server: "queen-node", Version: version, Error: why,
			})
			return
		}
		writeError(w, http.StatusServiceUnavailable, "node "+why+"; retry later")
	})
}
