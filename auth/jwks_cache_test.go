package auth

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// A key the identity provider removed from its JWKS (revoked, compromised)
// stops being accepted once the cache is older than its maximum age, even
// when no token with an unknown kid ever triggers a refetch. Without a
// maximum age the first fetched set is trusted for the life of the process.
func TestJWKSRemovedKeyExpiresFromCache(t *testing.T) {
	const k1 = `{"kty":"EC","crv":"P-256","kid":"k1",` +
		`"x":"MKBCTNIcKUSDii11ySs3526iDZ8AiTo7Tu6KPAqv7D4","y":"4Etl6SRW2YiLUrN5vfvVHuhp7x8PxltmWWlbbM4IFyM"}`
	var revoked atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if revoked.Load() {
			_, _ = w.Write([]byte(`{"keys":[]}`))
			return
		}
		_, _ = w.Write([]byte(`{"keys":[` + k1 + `]}`))
	}))
	defer srv.Close()
	j := newJWKS(srv.URL, "ES256", srv.Client(), 0, DefaultJWKSMaxAge)
	j.maxAge = 50 * time.Millisecond
	if _, err := j.key("k1"); err != nil {
		t.Fatal(err)
	}
	revoked.Store(true)
	time.Sleep(100 * time.Millisecond)
	deadline := time.Now().Add(2 * time.Second)
	for {
		_, err := j.key("k1")
		if err != nil {
			return // the refreshed set no longer has k1
		}
		if time.Now().After(deadline) {
			t.Fatal("k1, removed from the JWKS, still accepted 2 s after the cache's maximum age")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
