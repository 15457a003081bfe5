package node

import (
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"queen-node/api"
)

// lateBroker is the api.Broker of a server that serves before its broker
// exists: the API server (its listener with the connection cap and the
// per-address share, api/conn.go) answers from the moment the port is
// bound, and the broker, connected later, is set before startGate opens.
type lateBroker struct{ api.Broker }

// lateReads is the api.Reads of the same server, set with the broker.
type lateReads struct{ api.Reads }

// startGate is the HTTP handler of a node that is starting: until open,
// /health answers api.StartingHandler's 503 with the last connect error at
// once, and every other request waits for the API up to startWait, then
// gets its 503 to retry. Setting the broker and
// the routes before open, and reading open first, orders them before any
// request that reaches the API (docs/operations.md, "Starting").
type startGate struct {
	api      http.Handler
	starting http.Handler
	ready    atomic.Bool
	opened   chan struct{} // closed by open
	failed   chan struct{} // closed by fail: the start failed, waiting requests end
	once     sync.Once
	failOnce sync.Once
	reason   atomic.Pointer[string]
}

// startWait is how long a request other than /health waits for a starting
// node before it is answered 503: a restart's own start (connect and
// migrate) takes well under a second, and a client sent there meanwhile is
// served, not refused, as when the port was not yet answering; a database
// that stays away costs a request this much, then a clear 503.
const startWait = 5 * time.Second

func newStartGate(apiHandler http.Handler, version string) *startGate {
	g := &startGate{api: apiHandler, opened: make(chan struct{}), failed: make(chan struct{})}
	g.starting = api.StartingHandler(version, func() string {
		if p := g.reason.Load(); p != nil {
			return *p
		}
		return ""
	})
	return g
}

func (g *startGate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if g.ready.Load() {
		g.api.ServeHTTP(w, r)
		return
	}
	if r.URL.Path != "/health" {
		t := time.NewTimer(startWait)
		defer t.Stop()
		select {
		case <-g.opened:
			g.api.ServeHTTP(w, r)
			return
		case <-t.C:
		case <-g.failed:
		case <-r.Context().Done():
			return // the client left, or the start failed and the server closed
		}
	}
	g.starting.ServeHTTP(w, r)
}

// setReason records the latest connect failure for /health.
func (g *startGate) setReason(err error) {
	msg := err.Error()
	g.reason.Store(&msg)
}

// fail answers the waiting requests (503) at once: the start failed. (A
// request whose body is unread does not see its connection close.)
func (g *startGate) fail() { g.failOnce.Do(func() { close(g.failed) }) }

// open sends every later request, and the waiting ones, to the API.
func (g *startGate) open() {
	g.ready.Store(true)
	g.once.Do(func() { close(g.opened) })
}
