package dashboard_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"queen-node/dashboard"
	"queen-node/internal/nodetest"
	"queen-node/internal/pgtest"
	"queen-node/node"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestAssetsHaveTheirTypes: each asset is served whole with its content
// type and a validator, a matching If-None-Match answers 304, and a path
// that is not an asset is a JSON 404.
func TestAssetsHaveTheirTypes(t *testing.T) {
	srv := httptest.NewServer(dashboard.Handler())
	defer srv.Close()
	for path, want := range map[string]struct{ ctype, marker string }{
		"/":                  {"text/html; charset=utf-8", `id="members"`},
		"/assets/index.html": {"text/html; charset=utf-8", `id="queue-search"`},
		"/assets/app.js":     {"text/javascript; charset=utf-8", "queen-token"},
		"/assets/app.css":    {"text/css; charset=utf-8", "#error"},
	} {
		r := get(t, srv.URL+path, nil)
		if r.status != 200 || r.header.Get("Content-Type") != want.ctype || !strings.Contains(r.body, want.marker) {
			t.Fatalf("%s: status %d, type %q, has %q: %v", path, r.status, r.header.Get("Content-Type"), want.marker, strings.Contains(r.body, want.marker))
		}
		if r.header.Get("Cache-Control") != "no-cache" || r.header.Get("ETag") == "" {
			t.Fatalf("%s: cache headers %v", path, r.header)
		}
		if r2 := get(t, srv.URL+path, http.Header{"If-None-Match": {r.header.Get("ETag")}}); r2.status != http.StatusNotModified {
			t.Fatalf("%s: revalidation answered %d, want 304", path, r2.status)
		}
	}
	if r := get(t, srv.URL+"/assets/nope.js", nil); r.status != 404 || !strings.Contains(r.header.Get("Content-Type"), "json") {
		t.Fatalf("missing asset: %d %q", r.status, r.header.Get("Content-Type"))
	}
}

// TestServedByANodeWithoutToken: through a real node with JWT on, the
// page and its assets need no token, the data it reads does, and an
// unknown GET path is still the API's JSON 404 (not the page).
func TestServedByANodeWithoutToken(t *testing.T) {
	n := nodetest.StartConfig(t, func(c *node.Config) {
		c.Auth.Enabled = true
		c.Auth.Secret = "test-secret-0123456789"
	})
	for _, p := range []string{"/", "/assets/app.js", "/assets/app.css"} {
		r := n.Do(t, "GET", p, nil)
		if r.Status != 200 {
			t.Fatalf("GET %s without a token: %d %s", p, r.Status, r.Body)
		}
	}
	if r := n.Do(t, "GET", "/", nil); !strings.HasPrefix(r.Header.Get("Content-Type"), "text/html") || !strings.Contains(string(r.Body), `src="/assets/app.js"`) {
		t.Fatalf("GET /: %q %s", r.Header.Get("Content-Type"), r.Body)
	}
	if r := n.Do(t, "GET", "/status", nil); r.Status != 401 {
		t.Fatalf("GET /status without a token: %d, want 401", r.Status)
	}
	for _, p := range []string{"/no/such/path", "/api/v1/nope", "/index.html"} {
		r := n.Do(t, "GET", p, nil)
		if r.Status != 404 || !strings.Contains(string(r.Body), `"error"`) {
			t.Fatalf("GET %s: %d %s, want the JSON 404", p, r.Status, r.Body)
		}
	}
}

type resp struct {
	status int
	header http.Header
	body   string
}

func get(t *testing.T, url string, h http.Header) resp {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	var b strings.Builder
	buf := make([]byte, 32<<10)
	for {
		k, err := r.Body.Read(buf)
		b.Write(buf[:k])
		if err != nil {
			break
		}
	}
	return resp{r.StatusCode, r.Header, b.String()}
}
