package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"sync"
	"time"
)

// maxJWKSBytes bounds a JWKS response body.
const maxJWKSBytes = 1 << 20

// jwks is a JWKS URL's keys of the configured algorithm, by kid. A token
// with a kid not in the cache refetches the set, at most once per refetch
// interval (key rotation without hammering the identity provider). Tokens
// with known kids never wait for a fetch.
type jwks struct {
	url     string
	alg     string
	client  *http.Client
	refetch time.Duration
	maxAge  time.Duration // cache age past which a hit refreshes in the background; 0 = never

	fetchMu sync.Mutex // held during a fetch, so concurrent misses fetch once

	mu      sync.RWMutex
	keys    map[string]any
	fetched time.Time // last fetch attempt; zero = never
}

// newJWKS returns an empty cache of url's keys. maxAge is how old the cached
// set may grow before a token refreshes it in the background: a key the
// identity provider removed (revoked) stops being accepted within about
// that time.
func newJWKS(url, alg string, client *http.Client, refetch, maxAge time.Duration) *jwks {
	return &jwks{url: url, alg: alg, client: client, refetch: refetch, maxAge: maxAge}
}

// key returns the key with kid ("" = the set's only usable key), fetching
// the set when kid is unknown and the last fetch is old enough.
func (j *jwks) key(kid string) (any, error) {
	if k, ok, fetched := j.cached(kid); ok {
		if j.maxAge > 0 && time.Since(fetched) > j.maxAge {
			j.refreshAsync()
		}
		return k, nil
	}
	j.fetchMu.Lock()
	defer j.fetchMu.Unlock()
	k, ok, fetched := j.cached(kid) // another miss may have fetched meanwhile
	if ok {
		return k, nil
	}
	if !fetched.IsZero() && time.Since(fetched) < j.refetch {
		return nil, fmt.Errorf("unknown kid %q (JWKS refetch rate-limited)", kid)
	}
	j.mu.Lock()
	j.fetched = time.Now()
	j.mu.Unlock()
	keys, err := j.fetch()
	if err != nil {
		return nil, fmt.Errorf("fetch JWKS: %w", err)
	}
	j.mu.Lock()
	j.keys = keys
	j.mu.Unlock()
	if k, ok, _ := j.cached(kid); ok {
		return k, nil
	}
	return nil, fmt.Errorf("unknown kid %q", kid)
}

// refreshAsync refetches the set in the background unless a fetch is
// running; the token that noticed the stale cache does not wait. A failed
// fetch keeps the cached keys (the identity provider being down does not
// lock everyone out).
func (j *jwks) refreshAsync() {
	if !j.fetchMu.TryLock() {
		return
	}
	go func() {
		defer j.fetchMu.Unlock()
		j.mu.Lock()
		if time.Since(j.fetched) <= j.maxAge { // refreshed meanwhile
			j.mu.Unlock()
			return
		}
		j.fetched = time.Now()
		j.mu.Unlock()
		if keys, err := j.fetch(); err == nil {
			j.mu.Lock()
			j.keys = keys
			j.mu.Unlock()
		}
	}()
}

// cached looks kid up in the cache and reports the last fetch time.
func (j *jwks) cached(kid string) (any, bool, time.Time) {
	j.mu.RLock()
	defer j.mu.RUnlock()
	if kid == "" {
		if len(j.keys) != 1 {
			return nil, false, j.fetched
		}
		for _, k := range j.keys {
			return k, true, j.fetched
		}
	}
	k, ok := j.keys[kid]
	return k, ok, j.fetched
}

func (j *jwks) fetch() (map[string]any, error) {
	resp, err := j.client.Get(j.url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %d", resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKSBytes))
	if err != nil {
		return nil, err
	}
	return parseJWKS(body, j.alg)
}

// jwk is the part of a JSON Web Key (RFC 7517/7518) this package reads.
type jwk struct {
	Kty string `json:"kty"`
	Kid string `json:"kid"`
	Use string `json:"use"`
	Alg string `json:"alg"`
	N   string `json:"n"`
	E   string `json:"e"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	Y   string `json:"y"`
}

// parseJWKS returns the set's keys usable with alg (RS256: RSA keys,
// ES256: EC P-256 keys), by kid. Keys of other types, for encryption, for
// another algorithm or malformed are skipped.
func parseJWKS(body []byte, alg string) (map[string]any, error) {
	var set struct {
		Keys []jwk `json:"keys"`
	}
	if err := json.Unmarshal(body, &set); err != nil {
		return nil, fmt.Errorf("not a JWKS: %w", err)
	}
	keys := map[string]any{}
	for _, k := range set.Keys {
		if (k.Use != "" && k.Use != "sig") || (k.Alg != "" && k.Alg != alg) {
			continue
		}
		key, err := k.publicKey(alg)
		if err != nil {
			continue
		}
		keys[k.Kid] = key
	}
	return keys, nil
}

func (k jwk) publicKey(alg string) (any, error) {
	b64 := base64.RawURLEncoding.DecodeString
	switch {
	case alg == "RS256" && k.Kty == "RSA":
		n, err := b64(k.N)
		if err != nil || len(n) < 256 { // at least 2048 bits
			return nil, errors.New("bad n")
		}
		e, err := b64(k.E)
		if err != nil || len(e) == 0 || len(e) > 4 {
			return nil, errors.New("bad e")
		}
		ev := new(big.Int).SetBytes(e).Int64()
		if ev < 3 || ev%2 == 0 {
			return nil, errors.New("bad e")
		}
		return &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(ev)}, nil
	case alg == "ES256" && k.Kty == "EC" && k.Crv == "P-256":
		x, errX := b64(k.X)
		y, errY := b64(k.Y)
		if errX != nil || errY != nil || len(x) != 32 || len(y) != 32 {
			return nil, errors.New("bad x or y")
		}
		point := append(append([]byte{4}, x...), y...)
		return ecdsa.ParseUncompressedPublicKey(elliptic.P256(), point) // checks the point is on the curve
	}
	return nil, errors.New("unusable key")
}
