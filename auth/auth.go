// Package auth turns an HTTP request into a caller identity or a refusal:
// JWT bearer authentication as Queen MQ's API reference describes it
// (docs/operations.md, "Authentication").
//
// Tokens are parsed and their signatures checked by github.com/golang-jwt/jwt/v5,
// restricted to the one configured algorithm (so an HS256 token is refused
// when RS256 is configured: no algorithm confusion). Keys come from a shared
// secret (HS256), a PEM public key or a JWKS URL (RS256, ES256; jwks.go).
package auth

import (
	"crypto"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"queen-node/api"
)

// Defaults of Config.
const (
	DefaultAlgorithm     = "HS256"
	DefaultClockSkew     = 30 * time.Second
	DefaultRoleClaim     = "role"
	DefaultRolesClaim    = "roles"
	DefaultTenantClaim   = "tenant"
	DefaultRoleReadOnly  = "read-only"
	DefaultRoleReadWrite = "read-write"
	DefaultRoleAdmin     = "admin"
	DefaultJWKSRefetch   = 10 * time.Second // least time between two JWKS fetches
	DefaultJWKSTimeout   = 5 * time.Second
	DefaultJWKSMaxAge    = 5 * time.Minute // a key the identity provider withdrew stops working within about this
)

// DefaultSkipPaths are the paths never authenticated (exact match).
var DefaultSkipPaths = []string{"/health", "/metrics", "/metrics/prometheus", "/"}

// Error bodies of the refusals.
const (
	MsgRequired     = "Authentication required"  // no token: 401
	MsgInvalid      = "Invalid token"            // bad, expired or wrongly signed token: 401
	MsgInsufficient = "Insufficient permissions" // valid token, role too low: 403
)

// Config is the JWT configuration; cmd/queen-node maps the JWT_* variables
// onto it. Zero values of the optional fields take their defaults in New,
// except ClockSkew (0 = no leeway; DefaultConfig sets 30 s).
type Config struct {
	Enabled   bool          // JWT_ENABLED; default false (no authentication)
	Algorithm string        // JWT_ALGORITHM: HS256, RS256 or ES256; default HS256
	Secret    string        // JWT_SECRET: the HS256 shared secret
	PublicKey string        // JWT_PUBLIC_KEY: PEM public key for RS256/ES256
	JWKSURL   string        // JWT_JWKS_URL: JWKS for RS256/ES256, keys chosen by kid
	Issuer    string        // JWT_ISSUER: required `iss` when set
	Audience  string        // JWT_AUDIENCE: required in `aud` when set
	ClockSkew time.Duration // JWT_CLOCK_SKEW (seconds): leeway for exp/nbf; DefaultConfig: 30 s, 0 = none

	RoleClaim     string // JWT_ROLE_CLAIM: string claim with the role; default "role"
	RolesClaim    string // JWT_ROLES_CLAIM: array claim with roles; default "roles"
	TenantClaim   string // JWT_TENANT_CLAIM: string claim with the tenant; default "tenant"
	RoleReadOnly  string // JWT_ROLE_READ_ONLY: default "read-only"
	RoleReadWrite string // JWT_ROLE_READ_WRITE: default "read-write"
	RoleAdmin     string // JWT_ROLE_ADMIN: default "admin"

	SkipPaths []string // JWT_SKIP_PATHS: paths never authenticated (exact match); default DefaultSkipPaths

	JWKSRefetch time.Duration // least time between JWKS fetches (an unknown kid refetches); default 10 s
	JWKSTimeout time.Duration // one JWKS fetch; default 5 s
	JWKSMaxAge  time.Duration // cache age past which a token refreshes the set in the background; default 5 min
	HTTPClient  *http.Client  // JWKS fetches; default a client with JWKSTimeout
}

// DefaultConfig returns a Config (authentication off) with every default
// filled in.
func DefaultConfig() Config {
	return Config{
		Algorithm:     DefaultAlgorithm,
		ClockSkew:     DefaultClockSkew,
		RoleClaim:     DefaultRoleClaim,
		RolesClaim:    DefaultRolesClaim,
		TenantClaim:   DefaultTenantClaim,
		RoleReadOnly:  DefaultRoleReadOnly,
		RoleReadWrite: DefaultRoleReadWrite,
		RoleAdmin:     DefaultRoleAdmin,
		SkipPaths:     append([]string(nil), DefaultSkipPaths...),
		JWKSRefetch:   DefaultJWKSRefetch,
		JWKSTimeout:   DefaultJWKSTimeout,
		JWKSMaxAge:    DefaultJWKSMaxAge,
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	def := func(v *string, dv string) {
		if *v == "" {
			*v = dv
		}
	}
	def(&c.Algorithm, d.Algorithm)
	def(&c.RoleClaim, d.RoleClaim)
	def(&c.RolesClaim, d.RolesClaim)
	def(&c.TenantClaim, d.TenantClaim)
	def(&c.RoleReadOnly, d.RoleReadOnly)
	def(&c.RoleReadWrite, d.RoleReadWrite)
	def(&c.RoleAdmin, d.RoleAdmin)
	c.Algorithm = strings.ToUpper(c.Algorithm)
	if c.SkipPaths == nil {
		c.SkipPaths = d.SkipPaths
	}
	if c.JWKSRefetch == 0 {
		c.JWKSRefetch = d.JWKSRefetch
	}
	if c.JWKSTimeout <= 0 {
		c.JWKSTimeout = d.JWKSTimeout
	}
	if c.JWKSMaxAge <= 0 {
		c.JWKSMaxAge = d.JWKSMaxAge
	}
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{Timeout: c.JWKSTimeout}
	}
	return c
}

// Validate checks an enabled Config; a disabled one is always valid. Each
// error names the variable to set.
func (c Config) Validate() error {
	if !c.Enabled {
		return nil
	}
	_, err := newVerifier(c.withDefaults())
	return err
}

// Authenticator checks requests against one Config. Its Authenticate
// method is an api.Authenticator.
type Authenticator struct {
	cfg    Config
	parser *jwt.Parser
	skip   map[string]bool
	v      *verifier
}

// New checks cfg and returns its Authenticator. It does not fetch a JWKS:
// the first token does (so start-up does not depend on the identity
// provider).
func New(cfg Config) (*Authenticator, error) {
	cfg = cfg.withDefaults()
	v, err := newVerifier(cfg)
	if err != nil {
		return nil, err
	}
	opts := []jwt.ParserOption{jwt.WithValidMethods([]string{cfg.Algorithm}), jwt.WithLeeway(cfg.ClockSkew)}
	if cfg.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(cfg.Issuer))
	}
	if cfg.Audience != "" {
		opts = append(opts, jwt.WithAudience(cfg.Audience))
	}
	a := &Authenticator{cfg: cfg, parser: jwt.NewParser(opts...), skip: map[string]bool{}, v: v}
	for _, p := range cfg.SkipPaths {
		a.skip[p] = true
	}
	return a, nil
}

// Authenticate is the api.Authenticator: the caller's identity, or an
// *api.AuthError (401 without or with a bad token, 403 with a role below need).
func (a *Authenticator) Authenticate(r *http.Request, need api.Access) (api.Identity, error) {
	if need == api.AccessPublic || a.skip[r.URL.Path] {
		return api.Identity{}, nil
	}
	raw := bearer(r.Header.Get("Authorization"))
	if raw == "" {
		return api.Identity{}, &api.AuthError{Status: http.StatusUnauthorized, Msg: MsgRequired}
	}
	claims := jwt.MapClaims{}
	if _, err := a.parser.ParseWithClaims(raw, claims, a.v.key); err != nil {
		return api.Identity{}, &api.AuthError{Status: http.StatusUnauthorized, Msg: MsgInvalid}
	}
	id := api.Identity{}
	if sub, ok := claims["sub"].(string); ok {
		// Stamped on every pushed message (producerSub): unbounded, one
		// 10,000-item push would copy it 10,000 times. OpenID Connect caps a
		// subject at 255 ASCII characters.
		if len(sub) > maxSubjectBytes {
			return api.Identity{}, &api.AuthError{Status: http.StatusUnauthorized, Msg: MsgInvalid}
		}
		id.Subject = sub
	}
	if t, present := claims[a.cfg.TenantClaim]; present {
		s, ok := t.(string)
		if !ok || !validTenant(s) {
			return api.Identity{}, &api.AuthError{Status: http.StatusUnauthorized, Msg: MsgInvalid}
		}
		id.Tenant = s
	}
	if a.level(claims) < need {
		return api.Identity{}, &api.AuthError{Status: http.StatusForbidden, Msg: MsgInsufficient}
	}
	return id, nil
}

// maxSubjectBytes bounds the `sub` claim (docs/api.md, "Authentication").
const maxSubjectBytes = 255

// validTenant: 1 to 255 bytes, no spaces and no control characters (NUL
// cannot be stored; \x1f separates tenant and queue in the broker's ring
// and long-poll keys, hotlist.KeyOf, so it would let two tenants collide).
func validTenant(s string) bool {
	if s == "" || len(s) > 255 {
		return false
	}
	for _, r := range s {
		if r == ' ' || r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return false
		}
	}
	return true
}

// bearer extracts the token: "Bearer <jwt>" (prefix in any case), or the
// whole header when it has no prefix. "Bearer" alone is no token.
func bearer(h string) string {
	h = strings.TrimSpace(h)
	if strings.EqualFold(h, "bearer") {
		return ""
	}
	if len(h) >= 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return h
}

// level is the highest access the token's role claims grant
// (api.AccessPublic = none).
func (a *Authenticator) level(claims jwt.MapClaims) api.Access {
	best := api.AccessPublic
	grant := func(role string) {
		var l api.Access
		switch role {
		case a.cfg.RoleAdmin:
			l = api.AccessAdmin
		case a.cfg.RoleReadWrite:
			l = api.AccessReadWrite
		case a.cfg.RoleReadOnly:
			l = api.AccessReadOnly
		}
		if l > best {
			best = l
		}
	}
	if s, ok := claims[a.cfg.RoleClaim].(string); ok {
		grant(s)
	}
	if arr, ok := claims[a.cfg.RolesClaim].([]any); ok {
		for _, v := range arr {
			if s, ok := v.(string); ok {
				grant(s)
			}
		}
	}
	return best
}

// verifier finds the key that checks a token's signature.
type verifier struct {
	alg    string
	secret []byte
	pem    crypto.PublicKey // nil = none
	jwks   *jwks            // nil = none
}

func newVerifier(c Config) (*verifier, error) {
	v := &verifier{alg: c.Algorithm}
	if c.ClockSkew < 0 {
		return nil, fmt.Errorf("JWT_CLOCK_SKEW: %v: want 0 or more seconds", c.ClockSkew)
	}
	switch c.Algorithm {
	case "HS256":
		if c.Secret == "" {
			return nil, errors.New("JWT_SECRET is required with JWT_ENABLED=true and JWT_ALGORITHM=HS256")
		}
		v.secret = []byte(c.Secret)
		return v, nil
	case "RS256", "ES256":
	default:
		return nil, fmt.Errorf("JWT_ALGORITHM: %q: want HS256, RS256 or ES256", c.Algorithm)
	}
	if c.PublicKey == "" && c.JWKSURL == "" {
		return nil, fmt.Errorf("JWT_PUBLIC_KEY or JWT_JWKS_URL is required with JWT_ENABLED=true and JWT_ALGORITHM=%s", c.Algorithm)
	}
	if c.PublicKey != "" {
		var err error
		if c.Algorithm == "RS256" {
			v.pem, err = jwt.ParseRSAPublicKeyFromPEM([]byte(c.PublicKey))
		} else {
			v.pem, err = jwt.ParseECPublicKeyFromPEM([]byte(c.PublicKey))
		}
		if err != nil {
			return nil, fmt.Errorf("JWT_PUBLIC_KEY: not a PEM %s public key: %v", keyKind(c.Algorithm), err)
		}
	}
	if c.JWKSURL != "" {
		u, err := url.Parse(c.JWKSURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, errors.New("JWT_JWKS_URL: want an http:// or https:// URL")
		}
		v.jwks = newJWKS(c.JWKSURL, c.Algorithm, c.HTTPClient, c.JWKSRefetch, c.JWKSMaxAge)
	}
	return v, nil
}

func keyKind(alg string) string {
	if alg == "RS256" {
		return "RSA"
	}
	return "EC P-256"
}

// key is the jwt.Keyfunc. The parser has already refused any algorithm
// but the configured one.
func (v *verifier) key(t *jwt.Token) (any, error) {
	if v.secret != nil {
		return v.secret, nil
	}
	kid, _ := t.Header["kid"].(string)
	if v.jwks != nil && (kid != "" || v.pem == nil) {
		return v.jwks.key(kid)
	}
	if v.pem != nil {
		return v.pem, nil
	}
	return nil, errors.New("no key")
}
