package nodetest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// A response whose body is cut off because the caller's context ended is
// no answer: DoCtx reports Status 0, not a 200 with a truncated body (a
// fresh-clone CI run once decoded such a body and failed).
func TestDoCtxBodyCutByContextIsNoAnswer(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1000")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(`{"messages":[`))
		w.(http.Flusher).Flush()
		select { // the rest of the body never comes while the client waits
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	n := &Node{URL: srv.URL}
	if r := n.DoCtx(ctx, t, http.MethodGet, "/", nil); r.Status != 0 {
		t.Fatalf("status %d with body %q, want 0 (no answer)", r.Status, r.Body)
	}
}
