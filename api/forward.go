package api

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"

	"queen-node/broker"
	"queen-node/forward"
	"queen-node/internal/jsonscan"
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
	if f == nil || !f.Pushes() {
		return local(r.Context(), items)
	}
	if s.forwarded(r) {
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

// forwarded reports whether r was forwarded here by a peer: its
// forward.Header carries the mesh's mark (Config.ForwardMark,
// forward/mark.go). Without a sealed mesh nothing is.
func (s *Server) forwarded(r *http.Request) bool {
	return forward.Marked(r.Header.Get(forward.Header), s.cfg.ForwardMark)
}

// forwardPop sends a pop to its queue's owner and copies the answer to the
// client (docs/api.md, "Queue ownership"); false means the pop is served
// here, with req.Timeout lowered to what is left of its wait. A forwarded
// pop and an autoAck pop are always served here: an autoAck answer lost on
// the way would be messages lost, where a leased one is redelivered.
func (s *Server) forwardPop(w http.ResponseWriter, r *http.Request, c caller, req *broker.PopRequest) bool {
	f := s.fwd.Load()
	if f == nil {
		return false
	}
	if s.forwarded(r) {
		f.ReceivedConsume()
		return false
	}
	if req.AutoAck || s.b.PopsPaused() {
		// (pop maintenance here: the owner may learn of it a moment later)
		return false
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(s.drainCtx, cancel)
	defer stop()
	start := time.Now()
	serveHere := func() bool {
		req.Timeout = max(0, req.Timeout-time.Since(start))
		return false
	}
	// The owner claims under a lease id chosen here, so this node can
	// hand back what its client will not take even when the owner's
	// answer never arrives (the client left, or the owner failed after
	// claiming): any node can release a lease by its id. The client's
	// last ack may have asked the owner to take this pop's claim ahead
	// under a lease chosen then (ahead.go).
	ak, ahead := aheadKeyOf(c.tenant, req)
	ahead = ahead && s.prefetching()
	lease := ""
	if ahead {
		lease = s.ahead.leaseFor(ak, start)
	}
	if lease == "" {
		lease = uuid.NewString()
	}
	renew := func(old string) string {
		// Sent again after the owner closed the connection as it went
		// out: it most likely never read it, but if it did, it may
		// still claim under the first lease.
		s.releaseForwarded(c.tenant, old, "", "resent", true)
		lease = uuid.NewString()
		return lease
	}
	a, sent := f.Pop(ctx, c.tenant, req.Queue, r.URL.RequestURI(), r.Header.Get("Authorization"), lease, req.Timeout, renew)
	if a == nil {
		if sent {
			// The owner may still be claiming: released now and once
			// more a moment later.
			s.releaseForwarded(c.tenant, lease, "", "no answer", true)
		}
		switch {
		case r.Context().Err() != nil:
			return true // the client left
		case s.drainCtx.Err() != nil:
			w.WriteHeader(http.StatusNoContent)
			return true
		}
		return serveHere()
	}
	// The whole answer is read before any of it is written, so the client
	// gets it in one write and flush, as from servePop: a client may leave
	// as soon as it has decoded the body, and only a failure of that last
	// write says it did not arrive. Either way the lease is released (an
	// answer that has begun comes after the owner's claim, so once is
	// enough). Reading it first also frees the connection to the owner
	// before a slow client reads.
	body, err := a.ReadAll(s.maxForwardedPop())
	var headLease, queue, pid string
	if a.Status == http.StatusOK {
		headLease, queue, pid = answerHead(body[:min(len(body), maxAnswerHead)])
	}
	release := func(why string) { s.releaseForwarded(c.tenant, lease, headLease, why, false) }
	switch {
	case err != nil:
		// The owner's answer broke off (it died while answering) or is
		// more than any pop gives: hand its lease back and serve the pop
		// here.
		s.log.Warn("forwarded pop answer unusable; serving the pop here", "queue", req.Queue, "bytes", len(body), "error", err)
		release("answer unusable")
		if r.Context().Err() != nil {
			return true
		}
		return serveHere()
	case r.Context().Err() != nil:
		release("client left")
		return true
	}
	if queue != "" && pid != "" {
		// The answer names its partition's queue: the client's acks of it
		// can go to the owner from the first (forward.Forwarder.Ack).
		f.LearnRoute(c.tenant, pid, queue)
		if ahead && headLease == lease {
			s.ahead.servedPop(lease, ak, time.Now())
		}
	}
	if a.ContentType != "" {
		w.Header().Set("Content-Type", a.ContentType)
	}
	if a.Status != http.StatusNoContent && a.Status != http.StatusNotModified && a.Status >= 200 {
		// Whole already: sent in one write, not chunked (as writePop does).
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	}
	w.WriteHeader(a.Status)
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Now().Add(s.popWriteTime(len(body))))
	if _, err := w.Write(body); err != nil {
		release("write failed")
		return true
	}
	if err := rc.Flush(); err != nil {
		release("write failed")
	}
	return true
}

// releaseForwarded releases the lease this node chose for a forwarded pop
// whose client did not get the answer (broker.ReleaseForwarded: again
// when the owner may still be claiming), and the answer's own lease if it
// names another (an owner that predates LeaseHeader chooses its own).
func (s *Server) releaseForwarded(tenant, lease, headLease, why string, again bool) {
	s.log.Debug("releasing lease of undelivered forwarded pop", "lease", lease, "why", why)
	s.b.ReleaseForwarded(tenant, lease, again)
	if headLease != "" && headLease != lease {
		s.b.ReleaseUndelivered(tenant, &broker.PopResult{LeaseID: headLease})
	}
}

// maxForwardedPop bounds a forwarded pop's answer: twice the payload
// bytes of a pop (QUEEN_POP_MAX_BYTES; every node of a cluster has the
// same) plus 64 MiB for the envelopes of up to 10,000 messages; 4 GiB when
// pops are unbounded.
func (s *Server) maxForwardedPop() int64 {
	if m := s.b.MaxPopBytes(); m > 0 {
		return 2*m + 64<<20
	}
	return 4 << 30
}

// maxAnswerHead bounds what of a forwarded pop answer is kept to find its
// lease: the head's names are at most a few hundred bytes.
const maxAnswerHead = 4 << 10

// answerHead reads the head of a pop answer (writePop's popHead, whose
// fields come before the messages): its lease, queue and first partition,
// "" for what it does not name. It is read on every forwarded pop, in one
// pass (fastAnswerHead); a head that pass declines is read token by token.
func answerHead(head []byte) (leaseID, queue, partitionID string) {
	if l, q, p, ok := fastAnswerHead(head); ok {
		return l, q, p
	}
	return answerHeadTokens(head)
}

// fastAnswerHead is answerHeadTokens in one pass over the head's scalar
// members; it declines (ok false) an escaped key, a nested value, and
// anything else jsonscan cannot read exactly as the tokens would, where
// answerHeadTokens gives its own answer.
func fastAnswerHead(head []byte) (leaseID, queue, partitionID string, ok bool) {
	s := jsonscan.Scanner{Data: head}
	if s.Peek() != '{' {
		return "", "", "", false
	}
	s.Pos++
	for first := true; ; first = false {
		key, escaped, done, ok := s.Member(first)
		switch {
		case !ok || escaped:
			return "", "", "", false
		case done || string(key) == "messages":
			return leaseID, queue, partitionID, true
		}
		var dst *string
		switch string(key) {
		case "leaseId":
			dst = &leaseID
		case "queue":
			dst = &queue
		case "partitionId":
			dst = &partitionID
		}
		var v string
		switch c := s.Peek(); {
		case c == '{' || c == '[':
			return "", "", "", false
		case c == '"':
			var f jsonscan.Field
			if !s.StringField(&f) {
				return "", "", "", false
			}
			if v, ok = f.Text(""); !ok {
				return "", "", "", false
			}
		case c == '-' || '0' <= c && c <= '9':
			// json.Decoder's tokens stop at a number beyond float64's
			// range; decline it so the token reader gives its answer.
			start := s.Pos
			if !s.Number() {
				return "", "", "", false
			}
			if _, err := strconv.ParseFloat(string(head[start:s.Pos]), 64); err != nil {
				return "", "", "", false
			}
		case !s.SkipValue(1): // true, false or null: "" as a field
			return "", "", "", false
		}
		if dst != nil {
			*dst = v
		}
	}
}

// answerHeadTokens is answerHead with json.Decoder's tokens.
func answerHeadTokens(head []byte) (leaseID, queue, partitionID string) {
	dec := json.NewDecoder(bytes.NewReader(head))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return "", "", ""
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil || k == "messages" {
			return
		}
		v, err := dec.Token()
		if err != nil {
			return
		}
		str, _ := v.(string)
		switch k {
		case "leaseId":
			leaseID = str
		case "queue":
			queue = str
		case "partitionId":
			partitionID = str
		}
	}
	return
}

// ack applies acks: through the forwarder, at their queues' owners, unless
// the request was forwarded here by a peer.
func (s *Server) ack(r *http.Request, c caller, items []broker.AckItem) ([]broker.AckResult, error) {
	local := func(ctx context.Context, items []broker.AckItem) ([]broker.AckResult, error) {
		return s.b.Ack(ctx, c.tenant, items)
	}
	f := s.fwd.Load()
	if f == nil {
		return local(r.Context(), items)
	}
	if s.forwarded(r) {
		f.ReceivedConsume()
		if peers := forward.ParseNextLeases(r.Header.Get(forward.NextLeaseHeader)); len(peers) > 0 {
			return s.b.AckPeer(r.Context(), c.tenant, items, peers)
		}
		return local(r.Context(), items)
	}
	if !s.prefetching() {
		return f.Ack(r.Context(), c.tenant, r.Header.Get("Authorization"), items, local)
	}
	// Asks the owners to take the acking clients' next claims ahead
	// (ahead.go).
	ask := s.ahead.ask(items, time.Now())
	res, err := f.Ack(forward.WithNextLeases(r.Context(), ask.next), c.tenant, r.Header.Get("Authorization"), items, local)
	if err == nil {
		s.ahead.commit(ask, items, res, time.Now())
	}
	return res, err
}
