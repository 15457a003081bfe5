package api

import (
	"net/http"
)

// StatusHandler serves GET /status: the node's status document
// (docs/operations.md) indented for curl, written from Table. httpAddr is
// the address the node advertises for HTTP, as peers see it in membership.
//
// The figures come from the components' own counters in one Snapshot
// call: no SQL and no lock a hot path holds, so an operator can poll it
// from a loaded node.
func (s *Server) StatusHandler(src SnapshotSource, httpAddr string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		doc, err := EncodeStatus(s.snapshot(src, httpAddr))
		if err != nil {
			s.log.Error("encode status", "error", err)
			writeError(w, http.StatusInternalServerError, "internal error: encode status")
			return
		}
		h := w.Header()
		h.Set("Content-Type", "application/json")
		// A status is a snapshot; a cached one misleads.
		h.Set("Cache-Control", "no-store")
		_, _ = w.Write(doc)
	})
}
