package api

import (
	"bytes"
	"encoding/json"
	"net/http"
)

// StatusHandler serves GET /status: the node's status document
// (DESIGN.md, "Node status endpoint") indented for curl. httpAddr is the
// address the node advertises for HTTP, as peers see it in membership.
//
// The document comes from the components' own counters in one Status call:
// no SQL and no lock a hot path holds, so an operator can poll it from a
// loaded node. The HTTP layer adds its in-flight request count.
func (s *Server) StatusHandler(src StatusSource, httpAddr string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st := src.Status(s.cfg.Version, httpAddr, s.cfg.Tenant)
		// This request is itself in flight; report the others.
		st.Requests.InFlight = max(s.metrics.inflight.Load()-1, 0)
		st.HTTP = s.ConnStatus()
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		if err := enc.Encode(st); err != nil {
			s.log.Error("encode status", "error", err)
			writeError(w, http.StatusInternalServerError, "internal error: encode status")
			return
		}
		h := w.Header()
		h.Set("Content-Type", "application/json")
		// A status is a snapshot; a cached one misleads.
		h.Set("Cache-Control", "no-store")
		_, _ = w.Write(buf.Bytes())
	})
}
