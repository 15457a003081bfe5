package auth

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Concurrent misses of one unknown kid fetch the set once, and a slow
// fetch does not hold up tokens whose kid is cached.
func TestJWKSConcurrentMissesFetchOnce(t *testing.T) {
	var fetches atomic.Int32
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if fetches.Add(1) > 1 {
			<-release
		}
		_, _ = w.Write([]byte(`{"keys":[{"kty":"EC","crv":"P-256","kid":"k1",` +
			`"x":"MKBCTNIcKUSDii11ySs3526iDZ8AiTo7Tu6KPAqv7D4","y":"4Etl6SRW2YiLUrN5vfvVHuhp7x8PxltmWWlbbM4IFyM"}]}`))
	}))
	defer srv.Close()
	j := newJWKS(srv.URL, "ES256", srv.Client(), 0, DefaultJWKSMaxAge)
	if _, err := j.key("k1"); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() { defer wg.Done(); _, _ = j.key("unknown") }()
	}
	time.Sleep(100 * time.Millisecond) // the misses are parked behind one fetch
	start := time.Now()
	if _, err := j.key("k1"); err != nil || time.Since(start) > 50*time.Millisecond {
		t.Fatalf("cached kid during a fetch: %v after %v", err, time.Since(start))
	}
	close(release)
	wg.Wait()
	// One initial fetch; the 20 misses refetch one after another (refetch
	// interval 0), each finding the set unchanged.
	if got := fetches.Load(); got < 2 {
		t.Fatalf("fetches %d", got)
	}
}

func TestParseJWKSSkipsUnusableKeys(t *testing.T) {
	keys, err := parseJWKS([]byte(`{"keys":[
		{"kty":"EC","crv":"P-256","kid":"good","x":"MKBCTNIcKUSDii11ySs3526iDZ8AiTo7Tu6KPAqv7D4","y":"4Etl6SRW2YiLUrN5vfvVHuhp7x8PxltmWWlbbM4IFyM"},
		{"kty":"EC","crv":"P-256","kid":"enc","use":"enc","x":"MKBCTNIcKUSDii11ySs3526iDZ8AiTo7Tu6KPAqv7D4","y":"4Etl6SRW2YiLUrN5vfvVHuhp7x8PxltmWWlbbM4IFyM"},
		{"kty":"EC","crv":"P-256","kid":"other-alg","alg":"ES384","x":"MKBCTNIcKUSDii11ySs3526iDZ8AiTo7Tu6KPAqv7D4","y":"4Etl6SRW2YiLUrN5vfvVHuhp7x8PxltmWWlbbM4IFyM"},
		{"kty":"EC","crv":"P-256","kid":"off-curve","x":"MKBCTNIcKUSDii11ySs3526iDZ8AiTo7Tu6KPAqv7D4","y":"4Etl6SRW2YiLUrN5vfvVHuhp7x8PxltmWWlbbM4IFyA"},
		{"kty":"RSA","kid":"rsa","n":"AQAB","e":"AQAB"}
	]}`), "ES256")
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 || keys["good"] == nil {
		t.Fatalf("keys %v", keys)
	}
	if _, err := parseJWKS([]byte(`not json`), "ES256"); err == nil {
		t.Fatal("garbage accepted")
	}
}
