package broker_test

import (
	"context"
	"testing"
	"time"

	"queen-node/internal/nodetest"
	"queen-node/internal/pgtemp"
)

// TestPostgresLossAndRecovery: with PostgreSQL gone, /health answers 503 and
// data calls 5xx with a JSON error; when it comes back the node recovers by
// itself and nothing committed before is lost.
func TestPostgresLossAndRecovery(t *testing.T) {
	if testing.Short() {
		t.Skip("starts its own PostgreSQL")
	}
	ctx := context.Background()
	srv, err := pgtemp.Start(ctx, pgtemp.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	n := nodetest.StartOn(t, srv.URL("postgres"))
	push(t, n, "survive", "Default", "before")

	if err := srv.StopKeepData(); err != nil {
		t.Fatal(err)
	}
	r := n.Do(t, "GET", "/health", nil)
	if r.Status != 503 || r.Obj(t)["status"] != "unhealthy" {
		t.Fatalf("health with PostgreSQL down: %d %s", r.Status, r.Body)
	}
	r = n.Do(t, "POST", "/api/v1/push", msg{"items": []msg{{"queue": "survive", "payload": "lost?"}}})
	if r.Status < 500 || r.Obj(t)["error"] == nil {
		t.Fatalf("push with PostgreSQL down: %d %s", r.Status, r.Body)
	}
	r = n.Do(t, "GET", "/api/v1/pop/queue/survive?batch=1", nil)
	if r.Status < 500 {
		t.Fatalf("pop with PostgreSQL down: %d %s", r.Status, r.Body)
	}

	if err := srv.StartAgain(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for n.Do(t, "GET", "/health", nil).Status != 200 {
		if time.Now().After(deadline) {
			t.Fatal("node did not recover after PostgreSQL came back")
		}
		time.Sleep(100 * time.Millisecond)
	}
	ms := popUntil(t, n, "survive", "batch=10", 10*time.Second)
	if len(ms) != 1 || ms[0]["data"] != "before" {
		t.Fatalf("after recovery want exactly the committed message, got %v", payloads(ms))
	}
}
