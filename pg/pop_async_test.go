package pg_test

import (
	"context"
	"fmt"
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

// TestAsyncCommitOnlyForLeases: a claim asked to commit asynchronously that
// finds it must create the group's marker (the group was deleted since the
// node learned its rows) or a cursor commits durably after all: a lost
// marker would move a 'new' subscription's start. A claim that only takes a
// lease keeps the asynchronous commit.
func TestAsyncCommitOnlyForLeases(t *testing.T) {
	db, _ := openDB(t)
	ctx := context.Background()
	pushN(t, db, "sq", "p0", 3)
	lease := func(n int) string { return fmt.Sprintf("33333333-3333-4333-8333-%012d", n) }
	job := func(group string, n int) pg.PopArgs {
		return pg.PopArgs{Tenant: "t", Queue: "sq", Group: group, Names: []string{"p0"}, ScanLimit: 1, Budget: 1,
			MaxParts: 1, LeaseID: lease(n), Owner: "n", SubMode: "new", AsyncCommit: true, Unprov: []string{}}
	}
	// a group seen for the first time: marker and cursor are created
	if sc, err := db.PopManySyncCommit(ctx, []pg.PopArgs{job("fresh", 1)}); err != nil || sc != "on" {
		t.Fatalf("claim creating the marker: synchronous_commit %q (%v), want on", sc, err)
	}
	// the same group again: only a lease
	if sc, err := db.PopManySyncCommit(ctx, []pg.PopArgs{job("fresh", 2)}); err != nil || sc != "off" {
		t.Fatalf("lease-only claim: synchronous_commit %q (%v), want off", sc, err)
	}
	// one job of the flush creates a cursor: the whole transaction is durable
	if sc, err := db.PopManySyncCommit(ctx, []pg.PopArgs{job("fresh", 3), job("other", 4)}); err != nil || sc != "on" {
		t.Fatalf("flush with a new group: synchronous_commit %q (%v), want on", sc, err)
	}
}
