package api

import (
	"context"
	"net/http"

	"queen-node/broker"
	"queen-node/forward"
)

// SetPushForwarder makes POST /api/v1/push store each item on the node that
// owns its queue (docs/api.md, "Push ownership"); /status and /metrics
// then report its counters (the forward.* rows of table.go). Call it before
// or after the server serves (the node sets it once the mesh runs); without
// it every push is stored here.
func (s *Server) SetPushForwarder(f *forward.Forwarder) { s.fwd.Store(f) }

// forwardStats reads the forwarder's counters, zero without one.
func (s *Server) forwardStats() forward.Stats {
	if f := s.fwd.Load(); f != nil {
		return f.Stats()
	}
	return forward.Stats{}
}

// push stores a push's items: through the forwarder when there is one and
// the push was not forwarded here by a peer (a forwarded push is never
// forwarded again, whatever this node thinks its owners are).
func (s *Server) push(r *http.Request, c caller, items []broker.PushItem) ([]broker.PushResult, error) {
	local := func(ctx context.Context, items []broker.PushItem) ([]broker.PushResult, error) {
		return s.b.Push(ctx, c.tenant, c.sub, items)
	}
	f := s.fwd.Load()
	if f == nil {
		return local(r.Context(), items)
	}
	if r.Header.Get(forward.Header) != "" {
		f.Received()
		return local(r.Context(), items)
	}
	if s.b.PushBuffering() {
		// Buffered pushes keep their order behind this node's buffer only
		// (docs/api.md, "Maintenance modes"); nothing reaches PostgreSQL
		// meanwhile, so ownership would gain nothing.
		return local(r.Context(), items)
	}
	return f.Push(r.Context(), c.tenant, r.Header.Get("Authorization"), items, local)
}
