package pg_test

import (
	"context"
	"testing"

	"github.com/hashicorp/go-hclog"

	"queen-node/pg"
)

// TestAsyncCommitIsLocalToTheClaim: a lease claim with AsyncCommit turns
// synchronous_commit off for its own transaction only. On a pool of one
// connection, the next statement must see the server's setting again; a
// session-wide set_config would leave every later push and ack of that
// connection without a durable commit.
func TestAsyncCommitIsLocalToTheClaim(t *testing.T) {
	_, url := openDB(t)
	ctx := context.Background()
	db, err := pg.Open(ctx, url, 1, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	pushN(t, db, "aq", "p0", 3)
	// first contact provisions (a synchronous claim), the second is async
	claim(t, db, pg.PopArgs{Queue: "aq", Names: []string{"p0"}, Budget: 1, LeaseID: "11111111-1111-4111-8111-111111111111"})
	out := claim(t, db, pg.PopArgs{Queue: "aq", Names: []string{"p0"}, Budget: 1, AsyncCommit: true,
		Unprov: []string{}, LeaseID: "22222222-2222-4222-8222-222222222222"})
	if len(out.Verdicts) != 1 {
		t.Fatalf("verdicts %+v", out.Verdicts)
	}
	var sc string
	if err := db.QueryRowForTest(ctx, `SHOW synchronous_commit`, &sc); err != nil {
		t.Fatal(err)
	}
	if sc != "on" {
		t.Fatalf("synchronous_commit after an async claim: %q, want on", sc)
	}
}
