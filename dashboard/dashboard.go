// Package dashboard serves the operator's web page (docs/operations.md,
// "Dashboard"): three static files embedded in the binary, so building the
// node needs only Go. The page reads the node's own JSON endpoints from the
// browser; the files themselves carry no data and need no token.
package dashboard

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"net/http"
	"strings"
	"time"
)

//go:embed assets/index.html assets/app.js assets/app.css
var files embed.FS

type asset struct {
	body  []byte
	ctype string
	etag  string
}

// assets by URL path; built once at init from the embedded files.
var assets = func() map[string]asset {
	m := map[string]asset{}
	for name, ctype := range map[string]string{
		"index.html": "text/html; charset=utf-8",
		"app.js":     "text/javascript; charset=utf-8",
		"app.css":    "text/css; charset=utf-8",
	} {
		b, err := files.ReadFile("assets/" + name)
		if err != nil {
			panic("dashboard: embedded asset missing: " + name) // a build error, not a runtime one
		}
		sum := sha256.Sum256(b)
		a := asset{body: b, ctype: ctype, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		m["/assets/"+name] = a
		if name == "index.html" {
			m["/"] = a
		}
	}
	return m
}()

// Handler serves "/" (the page) and "/assets/{index.html,app.js,app.css}";
// any other path is 404. Register it as "GET /{$}" and "GET /assets/" so
// unknown API paths still reach the API's JSON 404.
//
// Caching: "no-cache" with a content ETag, so a browser revalidates each
// load (304, no body) and never runs a stale app.js after an upgrade.
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, ok := assets[r.URL.Path]
		if !ok {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error":"not found: ` + strings.ReplaceAll(r.URL.Path, `"`, `\"`) + `"}`))
			return
		}
		h := w.Header()
		h.Set("Content-Type", a.ctype)
		h.Set("Cache-Control", "no-cache")
		h.Set("ETag", a.etag)
		h.Set("X-Content-Type-Options", "nosniff")
		// The page talks to other members' /status from the browser; it
		// must not be framed by another site (clickjacking of the admin
		// buttons).
		h.Set("X-Frame-Options", "DENY")
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(a.body))
	})
}
