package auth_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"queen-node/auth"
	"queen-node/internal/nodetest"
	"queen-node/internal/pgtest"
	"queen-node/node"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const secret = "test-secret-0123456789"

// hs signs claims with HS256 and key (default secret).
func hs(t *testing.T, claims jwt.MapClaims, key ...string) string {
	t.Helper()
	k := secret
	if len(key) > 0 {
		k = key[0]
	}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(k))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// claims are valid claims with role and sub, expiring in an hour.
func claims(sub, role string) jwt.MapClaims {
	return jwt.MapClaims{"sub": sub, "role": role, "exp": time.Now().Add(time.Hour).Unix()}
}

func startHS(t *testing.T, edit func(*auth.Config)) *nodetest.Node {
	t.Helper()
	return nodetest.StartConfig(t, func(c *node.Config) {
		c.Auth.Enabled = true
		c.Auth.Secret = secret
		if edit != nil {
			edit(&c.Auth)
		}
	})
}

func wantStatus(t *testing.T, r nodetest.Response, status int, msg string) {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status %d, want %d: %s", r.Status, status, r.Body)
	}
	if msg != "" {
		var e struct {
			Error string `json:"error"`
		}
		r.JSON(t, &e)
		if e.Error != msg {
			t.Fatalf("error %q, want %q", e.Error, msg)
		}
	}
}

const pushBody = `{"items":[{"queue":"q","payload":{"n":1},"producerSub":"spoof"}]}`

func TestHS256PushPopStampsSub(t *testing.T) {
	n := startHS(t, nil)
	rw := "Bearer " + hs(t, claims("alice", "read-write"))
	wantStatus(t, n.DoAuth(t, rw, "POST", "/api/v1/push", pushBody), 201, "")
	r := n.DoAuth(t, rw, "GET", "/api/v1/pop/queue/q?wait=false", nil)
	wantStatus(t, r, 200, "")
	var pop struct {
		Messages []struct {
			ProducerSub *string `json:"producerSub"`
		} `json:"messages"`
	}
	r.JSON(t, &pop)
	if len(pop.Messages) != 1 || pop.Messages[0].ProducerSub == nil || *pop.Messages[0].ProducerSub != "alice" {
		t.Fatalf("pop: %s", r.Body)
	}
	// A lower-case prefix and a raw token (no prefix) are accepted too.
	wantStatus(t, n.DoAuth(t, "bearer "+hs(t, claims("bob", "read-write")), "POST", "/api/v1/push", pushBody), 201, "")
	wantStatus(t, n.DoAuth(t, hs(t, claims("carol", "read-write")), "POST", "/api/v1/push", pushBody), 201, "")
	// roles (array) works as well as role.
	arr := jwt.MapClaims{"sub": "dave", "roles": []string{"nobody", "read-write"}, "exp": time.Now().Add(time.Hour).Unix()}
	wantStatus(t, n.DoAuth(t, "Bearer "+hs(t, arr), "POST", "/api/v1/push", pushBody), 201, "")
	// Transaction pushes are stamped too.
	tx := `{"operations":[{"type":"push","items":[{"queue":"tx","payload":1}]}]}`
	wantStatus(t, n.DoAuth(t, "Bearer "+hs(t, claims("erin", "read-write")), "POST", "/api/v1/transaction", tx), 200, "")
	r = n.DoAuth(t, rw, "GET", "/api/v1/pop/queue/tx?wait=false", nil)
	wantStatus(t, r, 200, "")
	r.JSON(t, &pop)
	if len(pop.Messages) != 1 || pop.Messages[0].ProducerSub == nil || *pop.Messages[0].ProducerSub != "erin" {
		t.Fatalf("transaction pop: %s", r.Body)
	}
}

func TestRefusals(t *testing.T) {
	n := startHS(t, func(c *auth.Config) { c.Issuer = "https://idp.example"; c.Audience = "queen" })
	good := func() jwt.MapClaims {
		c := claims("alice", "admin")
		c["iss"], c["aud"] = "https://idp.example", "queen"
		return c
	}
	with := func(k string, v any) jwt.MapClaims { c := good(); c[k] = v; return c }
	wantStatus(t, n.DoAuth(t, "Bearer "+hs(t, good()), "POST", "/api/v1/push", pushBody), 201, "")

	wantStatus(t, n.DoAuth(t, "", "POST", "/api/v1/push", pushBody), 401, auth.MsgRequired)
	wantStatus(t, n.DoAuth(t, "Bearer ", "POST", "/api/v1/push", pushBody), 401, auth.MsgRequired)
	for name, tok := range map[string]string{
		"malformed":          "Bearer not.a.jwt",
		"garbage":            "Bearer xyz",
		"expired":            "Bearer " + hs(t, with("exp", time.Now().Add(-time.Minute).Unix())), // beyond the 30 s skew
		"not yet valid":      "Bearer " + hs(t, with("nbf", time.Now().Add(time.Minute).Unix())),
		"wrong secret":       "Bearer " + hs(t, good(), "another-secret"),
		"wrong issuer":       "Bearer " + hs(t, with("iss", "https://evil.example")),
		"no issuer":          "Bearer " + hs(t, with("iss", nil)),
		"wrong audience":     "Bearer " + hs(t, with("aud", "other")),
		"alg none":           "Bearer " + none(t, good()),
		"bad tenant":         "Bearer " + hs(t, with("tenant", "a b")),
		"non-string tenant":  "Bearer " + hs(t, with("tenant", 7)),
		"sub over 255 bytes": "Bearer " + hs(t, with("sub", strings.Repeat("s", 256))),
		"signature stripped": "Bearer " + strings.Join(strings.Split(hs(t, good()), ".")[:2], ".") + ".",
	} {
		t.Run(name, func(t *testing.T) {
			wantStatus(t, n.DoAuth(t, tok, "POST", "/api/v1/push", pushBody), 401, auth.MsgInvalid)
		})
	}
	wantStatus(t, n.DoAuth(t, "Bearer "+hs(t, with("sub", strings.Repeat("s", 255))), "POST", "/api/v1/push", pushBody), 201, "")
	// Within the clock skew an expired token still passes.
	wantStatus(t, n.DoAuth(t, "Bearer "+hs(t, with("exp", time.Now().Add(-10*time.Second).Unix())), "POST", "/api/v1/push", pushBody), 201, "")
}

func none(t *testing.T, c jwt.MapClaims) string {
	s, err := jwt.NewWithClaims(jwt.SigningMethodNone, c).SignedString(jwt.UnsafeAllowNoneSignatureType)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestRoles(t *testing.T) {
	n := startHS(t, nil)
	ro := "Bearer " + hs(t, claims("r", "read-only"))
	rw := "Bearer " + hs(t, claims("w", "read-write"))
	admin := "Bearer " + hs(t, claims("a", "admin"))
	norole := "Bearer " + hs(t, jwt.MapClaims{"sub": "x", "exp": time.Now().Add(time.Hour).Unix()})

	wantStatus(t, n.DoAuth(t, ro, "POST", "/api/v1/push", pushBody), 403, auth.MsgInsufficient)
	wantStatus(t, n.DoAuth(t, ro, "GET", "/api/v1/dlq", nil), 200, "")
	wantStatus(t, n.DoAuth(t, norole, "GET", "/api/v1/dlq", nil), 403, auth.MsgInsufficient)
	wantStatus(t, n.DoAuth(t, rw, "POST", "/api/v1/push", pushBody), 201, "")
	wantStatus(t, n.DoAuth(t, rw, "GET", "/api/v1/dlq", nil), 200, "")
	wantStatus(t, n.DoAuth(t, rw, "DELETE", "/api/v1/resources/queues/q", nil), 403, auth.MsgInsufficient)
	wantStatus(t, n.DoAuth(t, admin, "DELETE", "/api/v1/resources/queues/q", nil), 200, "")
	wantStatus(t, n.DoAuth(t, admin, "POST", "/api/v1/push", pushBody), 201, "")
}

func TestConfigurableClaims(t *testing.T) {
	n := startHS(t, func(c *auth.Config) {
		c.RoleClaim, c.RolesClaim, c.TenantClaim = "queen_role", "groups", "org"
		c.RoleReadWrite, c.RoleAdmin = "writer", "boss"
	})
	w := "Bearer " + hs(t, jwt.MapClaims{"sub": "s", "queen_role": "writer", "exp": time.Now().Add(time.Hour).Unix()})
	wantStatus(t, n.DoAuth(t, w, "POST", "/api/v1/push", pushBody), 201, "")
	wantStatus(t, n.DoAuth(t, w, "DELETE", "/api/v1/resources/queues/q", nil), 403, auth.MsgInsufficient)
	b := "Bearer " + hs(t, jwt.MapClaims{"sub": "s", "groups": []string{"boss"}, "exp": time.Now().Add(time.Hour).Unix()})
	wantStatus(t, n.DoAuth(t, b, "DELETE", "/api/v1/resources/queues/q", nil), 200, "")
	// The default claim names mean nothing now.
	wantStatus(t, n.DoAuth(t, "Bearer "+hs(t, claims("s", "read-write")), "POST", "/api/v1/push", pushBody), 403, auth.MsgInsufficient)
}

func TestTenantFromToken(t *testing.T) {
	n := startHS(t, nil)
	tok := func(tenant string) string {
		c := claims("s", "read-write")
		if tenant != "" {
			c["tenant"] = tenant
		}
		return "Bearer " + hs(t, c)
	}
	wantStatus(t, n.DoAuth(t, tok("acme"), "POST", "/api/v1/push", pushBody), 201, "")
	// Another tenant (and the default tenant, for a token without one) does not see acme's queue.
	wantStatus(t, n.DoAuth(t, tok("globex"), "GET", "/api/v1/pop/queue/q?wait=false", nil), 204, "")
	wantStatus(t, n.DoAuth(t, tok(""), "GET", "/api/v1/pop/queue/q?wait=false", nil), 204, "")
	wantStatus(t, n.DoAuth(t, tok("acme"), "GET", "/api/v1/pop/queue/q?wait=false", nil), 200, "")
}

func TestSkipList(t *testing.T) {
	n := startHS(t, nil)
	for _, p := range []string{"/health", "/metrics", "/metrics/prometheus"} {
		if r := n.DoAuth(t, "", "GET", p, nil); r.Status != 200 {
			t.Fatalf("%s without a token: %d %s", p, r.Status, r.Body)
		}
	}
	// Exact match: a path below a skipped one is not skipped.
	wantStatus(t, n.DoAuth(t, "", "GET", "/api/v1/dlq", nil), 401, auth.MsgRequired)

	// A configured skip list makes a guarded route public.
	m := startHS(t, func(c *auth.Config) { c.SkipPaths = []string{"/api/v1/dlq"} })
	wantStatus(t, m.DoAuth(t, "", "GET", "/api/v1/dlq", nil), 200, "")
	wantStatus(t, m.DoAuth(t, "", "GET", "/api/v1/dlq/", nil), 404, "")
	wantStatus(t, m.DoAuth(t, "", "POST", "/api/v1/push", pushBody), 401, auth.MsgRequired)
}

func pemOf(t *testing.T, pub any) string {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}

func TestRS256PEM(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	n := nodetest.StartConfig(t, func(c *node.Config) {
		c.Auth.Enabled, c.Auth.Algorithm, c.Auth.PublicKey = true, "RS256", pemOf(t, &key.PublicKey)
	})
	sign := func(k *rsa.PrivateKey) string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodRS256, claims("rsa-user", "read-write")).SignedString(k)
		if err != nil {
			t.Fatal(err)
		}
		return "Bearer " + s
	}
	wantStatus(t, n.DoAuth(t, sign(key), "POST", "/api/v1/push", pushBody), 201, "")
	other, _ := rsa.GenerateKey(rand.Reader, 2048)
	wantStatus(t, n.DoAuth(t, sign(other), "POST", "/api/v1/push", pushBody), 401, auth.MsgInvalid)
	// Algorithm confusion: an HS256 token whose HMAC key is the public key's PEM.
	wantStatus(t, n.DoAuth(t, "Bearer "+hs(t, claims("x", "admin"), pemOf(t, &key.PublicKey)), "POST", "/api/v1/push", pushBody), 401, auth.MsgInvalid)
	wantStatus(t, n.DoAuth(t, "Bearer "+hs(t, claims("x", "admin")), "POST", "/api/v1/push", pushBody), 401, auth.MsgInvalid)
}

// jwksServer serves a JWKS of EC keys whose set can change, counting fetches.
type jwksServer struct {
	mu      sync.Mutex
	keys    map[string]*ecdsa.PrivateKey
	fetches atomic.Int32
	srv     *httptest.Server
}

func newJWKSServer(t *testing.T) *jwksServer {
	j := &jwksServer{keys: map[string]*ecdsa.PrivateKey{}}
	j.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		j.fetches.Add(1)
		j.mu.Lock()
		defer j.mu.Unlock()
		var set struct {
			Keys []map[string]string `json:"keys"`
		}
		// An RSA key and an encryption key the ES256 verifier must skip.
		set.Keys = append(set.Keys, map[string]string{"kty": "RSA", "kid": "rsa", "n": "AQAB", "e": "AQAB"})
		for kid, k := range j.keys {
			b, err := k.PublicKey.Bytes()
			if err != nil {
				t.Error(err)
			}
			enc := base64.RawURLEncoding.EncodeToString
			set.Keys = append(set.Keys, map[string]string{"kty": "EC", "crv": "P-256", "kid": kid, "use": "sig", "alg": "ES256",
				"x": enc(b[1:33]), "y": enc(b[33:])})
		}
		_ = json.NewEncoder(w).Encode(set)
	}))
	t.Cleanup(j.srv.Close)
	return j
}

func (j *jwksServer) add(t *testing.T, kid string) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	j.mu.Lock()
	j.keys[kid] = k
	j.mu.Unlock()
	return k
}

func es(t *testing.T, kid string, k *ecdsa.PrivateKey, c jwt.MapClaims) string {
	tok := jwt.NewWithClaims(jwt.SigningMethodES256, c)
	tok.Header["kid"] = kid
	s, err := tok.SignedString(k)
	if err != nil {
		t.Fatal(err)
	}
	return "Bearer " + s
}

func TestES256JWKSRotation(t *testing.T) {
	j := newJWKSServer(t)
	k1 := j.add(t, "k1")
	n := nodetest.StartConfig(t, func(c *node.Config) {
		c.Auth.Enabled, c.Auth.Algorithm, c.Auth.JWKSURL = true, "ES256", j.srv.URL+"/jwks.json"
		c.Auth.JWKSRefetch = 300 * time.Millisecond
	})
	if got := j.fetches.Load(); got != 0 {
		t.Fatalf("JWKS fetched %d times before the first token", got)
	}
	wantStatus(t, n.DoAuth(t, es(t, "k1", k1, claims("es", "read-write")), "POST", "/api/v1/push", pushBody), 201, "")
	wantStatus(t, n.DoAuth(t, es(t, "k1", k1, claims("es", "read-write")), "POST", "/api/v1/push", pushBody), 201, "")
	if got := j.fetches.Load(); got != 1 {
		t.Fatalf("JWKS fetched %d times, want 1 (cached)", got)
	}
	// Rotation: k2 appears after the first fetch. Within the refetch
	// interval an unknown kid is refused without a fetch...
	k2 := j.add(t, "k2")
	wantStatus(t, n.DoAuth(t, es(t, "k2", k2, claims("es", "read-write")), "POST", "/api/v1/push", pushBody), 401, auth.MsgInvalid)
	wantStatus(t, n.DoAuth(t, es(t, "nope", k2, claims("es", "read-write")), "POST", "/api/v1/push", pushBody), 401, auth.MsgInvalid)
	if got := j.fetches.Load(); got != 1 {
		t.Fatalf("JWKS fetched %d times within the refetch interval, want 1", got)
	}
	// ...and after it, found by one refetch.
	time.Sleep(350 * time.Millisecond)
	wantStatus(t, n.DoAuth(t, es(t, "k2", k2, claims("es", "read-write")), "POST", "/api/v1/push", pushBody), 201, "")
	if got := j.fetches.Load(); got != 2 {
		t.Fatalf("JWKS fetched %d times, want 2", got)
	}
	// A key with a known kid but the wrong signer, and an RS256 token, fail.
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	wantStatus(t, n.DoAuth(t, es(t, "k1", other, claims("es", "read-write")), "POST", "/api/v1/push", pushBody), 401, auth.MsgInvalid)
	wantStatus(t, n.DoAuth(t, "Bearer "+hs(t, claims("x", "admin")), "POST", "/api/v1/push", pushBody), 401, auth.MsgInvalid)
}

func TestConfigErrors(t *testing.T) {
	for name, c := range map[string]auth.Config{
		"HS256 without secret":   {Enabled: true},
		"RS256 without key":      {Enabled: true, Algorithm: "RS256"},
		"ES256 without key":      {Enabled: true, Algorithm: "ES256", Secret: "s"},
		"unknown algorithm":      {Enabled: true, Algorithm: "HS512", Secret: "s"},
		"bad PEM":                {Enabled: true, Algorithm: "RS256", PublicKey: "-----BEGIN PUBLIC KEY-----\nxx\n-----END PUBLIC KEY-----\n"},
		"JWKS URL not http(s)":   {Enabled: true, Algorithm: "ES256", JWKSURL: "file:///etc/passwd"},
		"negative clock skew":    {Enabled: true, Secret: "s", ClockSkew: -time.Second},
		"EC PEM for RS256 (bad)": {Enabled: true, Algorithm: "RS256", PublicKey: ecPEM(t)},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := node.DefaultConfig()
			cfg.Broker.NodeName = "n1"
			cfg.Auth = c
			err := cfg.Validate()
			if err == nil {
				t.Fatal("config accepted")
			}
			if msg := err.Error(); strings.Contains(msg, "\n") || !strings.HasPrefix(msg, "Auth: JWT_") {
				t.Fatalf("want one line naming the JWT_ variable, got %q", msg)
			}
		})
	}
	if err := (auth.Config{Enabled: false, Algorithm: "bogus"}).Validate(); err != nil {
		t.Fatalf("disabled config refused: %v", err)
	}
}

func ecPEM(t *testing.T) string {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return pemOf(t, &k.PublicKey)
}
