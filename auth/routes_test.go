package auth_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"

	"queen-node/api"
	"queen-node/auth"
)

// routeAccess is docs/api.md "Authentication" (API.md section 3) as a
// table: the role every route needs. A route the node serves that is
// missing here fails the test, so a new endpoint cannot ship without
// being classified.
var routeAccess = map[string]api.Access{
	"GET /health":             api.AccessPublic,
	"GET /{$}":                api.AccessPublic,   // the dashboard page: static, its data calls carry the token
	"GET /assets/":            api.AccessPublic,   // the dashboard's scripts and styles
	"GET /metrics":            api.AccessReadOnly, // public through the default skip list
	"GET /metrics/prometheus": api.AccessReadOnly, // public through the default skip list
	"GET /status":             api.AccessAdmin,    // names every tenant's queues and groups

	"POST /api/v1/configure":                                   api.AccessReadWrite,
	"DELETE /api/v1/resources/queues/{queue}":                  api.AccessAdmin,
	"POST /api/v1/push":                                        api.AccessReadWrite,
	"GET /api/v1/pop/queue/{queue}":                            api.AccessReadWrite,
	"GET /api/v1/pop/queue/{queue}/partition/{partition}":      api.AccessReadWrite,
	"GET /api/v1/pop":                                          api.AccessReadWrite,
	"POST /api/v1/ack":                                         api.AccessReadWrite,
	"POST /api/v1/ack/batch":                                   api.AccessReadWrite,
	"POST /api/v1/lease/{leaseId}/extend":                      api.AccessReadWrite,
	"POST /api/v1/transaction":                                 api.AccessReadWrite,
	"GET /api/v1/dlq":                                          api.AccessReadOnly,
	"POST /api/v1/dlq/{partitionId}/{transactionId}/retry":     api.AccessAdmin,
	"DELETE /api/v1/dlq/{partitionId}/{transactionId}":         api.AccessAdmin,
	"DELETE /api/v1/consumer-groups/{group}":                   api.AccessAdmin,
	"DELETE /api/v1/consumer-groups/{group}/queues/{queue}":    api.AccessAdmin,
	"POST /api/v1/consumer-groups/{group}/queues/{queue}/seek": api.AccessReadWrite,

	// Maintenance modes: reading is a read, toggling is admin.
	"GET /api/v1/system/maintenance":      api.AccessReadOnly,
	"POST /api/v1/system/maintenance":     api.AccessAdmin,
	"GET /api/v1/system/maintenance/pop":  api.AccessReadOnly,
	"POST /api/v1/system/maintenance/pop": api.AccessAdmin,

	// Resources, messages and consumer groups.
	"GET /api/v1/resources/overview":                                                  api.AccessReadOnly,
	"GET /api/v1/resources/queues":                                                    api.AccessReadOnly,
	"GET /api/v1/resources/queues/{queue}":                                            api.AccessReadOnly,
	"GET /api/v1/resources/namespaces":                                                api.AccessReadOnly,
	"GET /api/v1/resources/tasks":                                                     api.AccessReadOnly,
	"GET /api/v1/messages":                                                            api.AccessReadOnly,
	"GET /api/v1/messages/{partitionId}/{transactionId}":                              api.AccessReadOnly,
	"DELETE /api/v1/messages/{partitionId}/{transactionId}":                           api.AccessAdmin, // removes data no consumer resolved
	"GET /api/v1/consumer-groups":                                                     api.AccessReadOnly,
	"GET /api/v1/consumer-groups/lagging":                                             api.AccessReadOnly,
	"GET /api/v1/consumer-groups/{group}":                                             api.AccessReadOnly,
	"POST /api/v1/consumer-groups/{group}/subscription":                               api.AccessReadWrite,
	"POST /api/v1/consumer-groups/{group}/queues/{queue}/partitions/{partition}/seek": api.AccessReadWrite,
	"POST /api/v1/stats/refresh":                                                      api.AccessAdmin,

	// Traces.
	"POST /api/v1/traces":                              api.AccessReadWrite,
	"GET /api/v1/traces/names":                         api.AccessReadOnly,
	"GET /api/v1/traces/by-name/{name}":                api.AccessReadOnly,
	"GET /api/v1/traces/{partitionId}/{transactionId}": api.AccessReadOnly,

	// Status and analytics, all reads.
	"GET /api/v1/status":                          api.AccessReadOnly,
	"GET /api/v1/status/queues":                   api.AccessReadOnly,
	"GET /api/v1/status/queues/{queue}":           api.AccessReadOnly,
	"GET /api/v1/status/queues/{queue}/messages":  api.AccessReadOnly,
	"GET /api/v1/status/analytics":                api.AccessReadOnly,
	"GET /api/v1/status/buffers":                  api.AccessReadOnly,
	"GET /api/v1/status/hotlist/{queue}":          api.AccessReadOnly, // this node's rings of the caller's tenant's queue
	"GET /api/v1/analytics/queue-ops":             api.AccessReadOnly,
	"GET /api/v1/analytics/queue-lag":             api.AccessReadOnly,
	"GET /api/v1/analytics/queue-parked-replicas": api.AccessReadOnly,
	"GET /api/v1/analytics/retention":             api.AccessReadOnly,
	"GET /api/v1/analytics/system-metrics":        api.AccessReadOnly,
	"GET /api/v1/analytics/worker-metrics":        api.AccessReadOnly,
	"GET /api/v1/analytics/postgres-stats":        api.AccessReadOnly,

	// Streams: state reads are reads.
	"POST /streams/v1/queries":   api.AccessReadWrite,
	"POST /streams/v1/state/get": api.AccessReadOnly,
	"POST /streams/v1/cycle":     api.AccessReadWrite,
}

var wildcard = regexp.MustCompile(`\{[^}]+\}`)

// TestEveryRouteNeedsItsRole sends every route the node serves a request
// without a token, with a token one role too low, and with the role it
// needs: 401, 403, and neither. The per-endpoint tests check the 200s and
// the answers; this one checks the boundary of every route at once.
func TestEveryRouteNeedsItsRole(t *testing.T) {
	n := startHS(t, func(c *auth.Config) { c.SkipPaths = []string{"/health"} })
	tokens := map[api.Access]string{
		api.AccessReadOnly:  "Bearer " + hs(t, claims("r", "read-only")),
		api.AccessReadWrite: "Bearer " + hs(t, claims("w", "read-write")),
		api.AccessAdmin:     "Bearer " + hs(t, claims("a", "admin")),
	}
	norole := "Bearer " + hs(t, jwt.MapClaims{"sub": "x", "exp": claims("", "")["exp"]})
	below := map[api.Access]string{
		api.AccessReadOnly:  norole,
		api.AccessReadWrite: tokens[api.AccessReadOnly],
		api.AccessAdmin:     tokens[api.AccessReadWrite],
	}
	seen := map[string]bool{}
	for _, r := range n.Node.Routes() {
		seen[r.Pattern] = true
		want, ok := routeAccess[r.Pattern]
		if !ok {
			t.Errorf("route %q is served but not classified in routeAccess (docs/api.md, Authentication)", r.Pattern)
			continue
		}
		if r.Access != want {
			t.Errorf("route %q needs access %d, docs say %d", r.Pattern, r.Access, want)
			continue
		}
		method, path, _ := strings.Cut(r.Pattern, " ")
		path = wildcard.ReplaceAllString(path, "x")
		// Long-polls must not park: the refusal comes before any wait, and
		// the authorised request asks for no wait.
		if strings.Contains(path, "/pop") {
			path += "?wait=false&namespace=x"
		}
		body := ""
		if method == "POST" {
			body = "{}"
		}
		if want == api.AccessPublic {
			if got := n.DoAuth(t, "", method, path, body).Status; got == 401 || got == 403 {
				t.Errorf("%s %s: public route answered %d", method, path, got)
			}
			continue
		}
		wantStatus := func(tok string, status int) {
			t.Helper()
			if got := n.DoAuth(t, tok, method, path, body); got.Status != status {
				t.Errorf("%s %s: status %d, want %d: %s", method, path, got.Status, status, got.Body)
			}
		}
		wantStatus("", 401)
		wantStatus(below[want], 403)
		if got := n.DoAuth(t, tokens[want], method, path, body).Status; got == 401 || got == 403 {
			t.Errorf("%s %s: with its role answered %d", method, path, got)
		}
	}
	for p := range routeAccess {
		if !seen[p] {
			t.Errorf("routeAccess names %q, which the node does not serve", p)
		}
	}
}
