package forward

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"
	"time"
)

// A pooled connection to a peer can be closed by the peer (its
// QUEEN_HTTP_IDLE_TIMEOUT_MS) at the moment this node sends a request on
// it. The request then fails before any of an answer arrives, though
// nothing is wrong with the peer, and the HTTP client does not send it
// again: a push is a POST, and a forwarded pop is made non-replayable on
// purpose (get). Such a failure is "stale": a push or a pop is sent once
// more, on another connection (a pop under a new lease, the first one
// released by the caller); an ack is not (applied twice, a failed ack
// would count twice), but neither of them starts the peer's cool-down
// for it. If the peer did fail, the next attempt says so: a dead peer
// refuses the connection.
//
// Config.IdleConnTimeout keeps this rare: connections are dropped here
// before the peer's own idle timeout closes them. The second attempt
// goes on a new connection (Forwarder.freshPush, freshPop), never
// another pooled one that may be as old.

// connTrace notes, for one attempt, whether the request went out on a
// reused connection, when, and whether any of its answer came back.
type connTrace struct {
	reused, answered atomic.Bool
	sent             atomic.Int64 // unix nanoseconds: the connection was got for the request
}

// staleWindow bounds how long after its request went out a failure can be
// a closed idle connection: the peer closed it before reading the
// request, so the failure follows at once. A later one (a long-poll the
// owner parked, then a reset) is the peer's, and not sent again.
const staleWindow = time.Second

// on returns ctx with a client trace that fills t.
func (t *connTrace) on(ctx context.Context) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(i httptrace.GotConnInfo) {
			t.reused.Store(i.Reused)
			t.sent.Store(time.Now().UnixNano())
		},
		GotFirstResponseByte: func() { t.answered.Store(true) },
	})
}

// stale reports whether err, from an attempt traced by t under ctx, is a
// pooled connection that broke before any answer and within staleWindow
// of the request going out: neither the caller nor a deadline ended the
// attempt.
func (t *connTrace) stale(ctx context.Context, err error) bool {
	return err != nil && ctx.Err() == nil && t.reused.Load() && !t.answered.Load() &&
		time.Since(time.Unix(0, t.sent.Load())) < staleWindow
}

// staleConn marks the failure of a request whose pooled connection broke
// before any answer: it does not blame the peer (blamesPeer).
type staleConn struct{ err error }

func (e *staleConn) Error() string {
	return "pooled connection closed before an answer: " + e.err.Error()
}
func (e *staleConn) Unwrap() error { return e.err }

func isStale(err error) bool {
	var s *staleConn
	return errors.As(err, &s)
}

// do sends req once (traced); a stale failure comes back as *staleConn.
func do(c *http.Client, req *http.Request) (*http.Response, error) {
	var t connTrace
	ctx := req.Context()
	resp, err := c.Do(req.WithContext(t.on(ctx)))
	if t.stale(ctx, err) {
		return nil, &staleConn{err}
	}
	return resp, err
}
