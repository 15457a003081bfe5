package auth_test

import (
	"net/http/httptest"
	"testing"

	"queen-node/api"
	"queen-node/auth"
	"queen-node/hotlist"
)

// A tenant claim must not contain the byte the broker's ring and long-poll
// keys use as separator (hotlist.KeyOf encodes tenant + "\x1f" + queue): tenant
// "a\x1fb" with queue "c" and tenant "a" with queue "b\x1fc" (queue names
// may hold any UTF-8 but NUL) would share rings and wake gates, and a
// reseed (hotlist.Key.Split) would read tenant "a"'s queue for them. A NUL
// cannot be stored by PostgreSQL (500 on every push). Both are 401.
func TestTenantClaimRefusesControlCharacters(t *testing.T) {
	if k := hotlist.KeyOf("a\x1fb", "c"); k != hotlist.KeyOf("a", "b\x1fc") {
		t.Fatalf("premise: keys differ")
	}
	a, err := auth.New(auth.Config{Enabled: true, Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	for _, tenant := range []string{"a\x1fb", "a\x00b", "a\x7fb", "a\x01"} {
		c := claims("s", "admin")
		c["tenant"] = tenant
		r := httptest.NewRequest("GET", "/api/v1/dlq", nil)
		r.Header.Set("Authorization", "Bearer "+hs(t, c))
		id, err := a.Authenticate(r, api.AccessReadOnly)
		ae, ok := err.(*api.AuthError)
		if !ok || ae.Status != 401 {
			t.Errorf("tenant %q: identity %+v, err %v; want 401", tenant, id, err)
		}
	}
}

// /status names every tenant's queues and groups (top_rings); with
// authentication on it needs an admin token unless JWT_SKIP_PATHS lists it
// (public by default: only /health, /metrics, /metrics/prometheus and /).
// A tenant's read-only or read-write token must not see other tenants.
func TestStatusNeedsAToken(t *testing.T) {
	n := startHS(t, nil)
	wantStatus(t, n.DoAuth(t, "", "GET", "/status", nil), 401, auth.MsgRequired)
	wantStatus(t, n.DoAuth(t, "Bearer "+hs(t, claims("s", "read-only")), "GET", "/status", nil), 403, auth.MsgInsufficient)
	wantStatus(t, n.DoAuth(t, "Bearer "+hs(t, claims("s", "read-write")), "GET", "/status", nil), 403, auth.MsgInsufficient)
	wantStatus(t, n.DoAuth(t, "Bearer "+hs(t, claims("s", "admin")), "GET", "/status", nil), 200, "")
	wantStatus(t, n.DoAuth(t, "", "GET", "/metrics", nil), 200, "")

	// The skip list decides, both ways.
	m := startHS(t, func(c *auth.Config) { c.SkipPaths = []string{"/status", "/health"} })
	wantStatus(t, m.DoAuth(t, "", "GET", "/status", nil), 200, "")
	wantStatus(t, m.DoAuth(t, "", "GET", "/metrics", nil), 401, auth.MsgRequired)
}
