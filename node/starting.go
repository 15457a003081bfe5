package node

import (
	"net/http"
	"sync/atomic"

	"queen-node/api"
)

// lateBroker is the api.Broker of a server that serves before its broker
// exists: the API server (its listener with the connection cap and the
// per-address share, api/conn.go) answers from the moment the port is
// bound, and the broker, connected later, is set before startGate opens.
type lateBroker struct{ api.Broker }

// startGate is the HTTP handler of a node that is starting: until open, it
// answers api.StartingHandler (/health 503 with the last connect error,
// every other request 503 to retry), then the API. Setting the broker and
// the routes before open, and reading open first, orders them before any
// request that reaches the API (docs/operations.md, "Starting").
type startGate struct {
	api      http.Handler
	starting http.Handler
	ready    atomic.Bool
	reason   atomic.Pointer[string]
}

func newStartGate(apiHandler http.Handler, version string) *startGate {
	g := &startGate{api: apiHandler}
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
	g.starting.ServeHTTP(w, r)
}

// setReason records the latest connect failure for /health.
func (g *startGate) setReason(err error) {
	msg := err.Error()
	g.reason.Store(&msg)
}

// open sends every later request to the API.
func (g *startGate) open() { g.ready.Store(true) }
