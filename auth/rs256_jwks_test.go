package auth_test

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"queen-node/auth"
	"queen-node/internal/nodetest"
	"queen-node/node"
)

// rsaJWKS serves a JWKS of RSA signing keys whose set can change: the
// shape identity providers (Auth0, Keycloak, Cognito) publish for RS256.
type rsaJWKS struct {
	mu      sync.Mutex
	keys    map[string]*rsa.PrivateKey
	fetches atomic.Int32
	srv     *httptest.Server
}

func newRSAJWKS(t *testing.T) *rsaJWKS {
	j := &rsaJWKS{keys: map[string]*rsa.PrivateKey{}}
	j.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		j.fetches.Add(1)
		j.mu.Lock()
		defer j.mu.Unlock()
		enc := base64.RawURLEncoding.EncodeToString
		var set struct {
			Keys []map[string]string `json:"keys"`
		}
		for kid, k := range j.keys {
			set.Keys = append(set.Keys, map[string]string{"kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256",
				"n": enc(k.N.Bytes()), "e": enc(big.NewInt(int64(k.E)).Bytes())})
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(set)
	}))
	t.Cleanup(j.srv.Close)
	return j
}

func (j *rsaJWKS) add(t *testing.T, kid string) *rsa.PrivateKey {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	j.mu.Lock()
	j.keys[kid] = k
	j.mu.Unlock()
	return k
}

func (j *rsaJWKS) remove(kid string) {
	j.mu.Lock()
	delete(j.keys, kid)
	j.mu.Unlock()
}

func rs(t *testing.T, kid string, k *rsa.PrivateKey, c jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, c)
	tok.Header["kid"] = kid
	s, err := tok.SignedString(k)
	if err != nil {
		t.Fatal(err)
	}
	return "Bearer " + s
}

// TestRS256JWKSEndToEnd runs RS256 through a JWKS URL with key rotation by
// kid, as docs/api.md "Authentication" describes: a token signed by a key
// published later is accepted after one refetch, tokens from a withdrawn
// key stop working once the cache expires, and the identity (tenant, sub,
// role) flows from the token through push and pop.
func TestRS256JWKSEndToEnd(t *testing.T) {
	j := newRSAJWKS(t)
	k1 := j.add(t, "2026-a")
	n := nodetest.StartConfig(t, func(c *node.Config) {
		c.Auth.Enabled, c.Auth.Algorithm, c.Auth.JWKSURL = true, "RS256", j.srv.URL+"/.well-known/jwks.json"
		c.Auth.JWKSRefetch = 200 * time.Millisecond
		c.Auth.JWKSMaxAge = 600 * time.Millisecond
	})
	tenantClaims := func(sub, role, tenant string) jwt.MapClaims {
		c := claims(sub, role)
		c["tenant"] = tenant
		return c
	}
	body := `{"items":[{"queue":"rsq","payload":{"n":1},"producerSub":"spoof"}]}`
	wantStatus(t, n.DoAuth(t, rs(t, "2026-a", k1, tenantClaims("alice", "read-write", "acme")), "POST", "/api/v1/push", body), 201, "")

	// The pop of the same tenant sees the message, stamped with the sub.
	r := n.DoAuth(t, rs(t, "2026-a", k1, tenantClaims("bob", "read-write", "acme")), "GET", "/api/v1/pop/queue/rsq?batch=10", "")
	wantStatus(t, r, 200, "")
	var pop struct {
		Messages []struct {
			ProducerSub *string `json:"producerSub"`
		} `json:"messages"`
	}
	r.JSON(t, &pop)
	if len(pop.Messages) != 1 || pop.Messages[0].ProducerSub == nil || *pop.Messages[0].ProducerSub != "alice" {
		t.Fatalf("pop = %s, want one message stamped alice", r.Body)
	}
	// Another tenant does not.
	wantStatus(t, n.DoAuth(t, rs(t, "2026-a", k1, tenantClaims("eve", "read-write", "other")), "GET", "/api/v1/pop/queue/rsq?batch=10", ""), 204, "")
	// Roles come from the RS256 token too.
	wantStatus(t, n.DoAuth(t, rs(t, "2026-a", k1, tenantClaims("ro", "read-only", "acme")), "POST", "/api/v1/push", body), 403, "Insufficient permissions")

	// Rotation: the provider publishes 2026-b; a token signed with it is
	// accepted once the refetch limit allows one fetch.
	k2 := j.add(t, "2026-b")
	deadline := time.Now().Add(5 * time.Second)
	for {
		r := n.DoAuth(t, rs(t, "2026-b", k2, tenantClaims("alice", "read-write", "acme")), "POST", "/api/v1/push", body)
		if r.Status == 201 {
			break
		}
		if r.Status != 401 || time.Now().After(deadline) {
			t.Fatalf("token of the rotated-in key: status %d: %s", r.Status, r.Body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A token naming a published kid but signed by another key fails.
	forged, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, n.DoAuth(t, rs(t, "2026-b", forged, tenantClaims("alice", "admin", "acme")), "POST", "/api/v1/push", body), 401, auth.MsgInvalid)

	// The provider withdraws 2026-a: its tokens stop being accepted once
	// the cached set is older than JWKSMaxAge and refetched.
	j.remove("2026-a")
	deadline = time.Now().Add(5 * time.Second)
	for {
		r := n.DoAuth(t, rs(t, "2026-a", k1, tenantClaims("alice", "read-write", "acme")), "POST", "/api/v1/push", body)
		if r.Status == 401 {
			break
		}
		if r.Status != 201 || time.Now().After(deadline) {
			t.Fatalf("token of the withdrawn key: status %d: %s", r.Status, r.Body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// 2026-b still works after the refetch that dropped 2026-a.
	wantStatus(t, n.DoAuth(t, rs(t, "2026-b", k2, tenantClaims("alice", "read-write", "acme")), "POST", "/api/v1/push", body), 201, "")
}
