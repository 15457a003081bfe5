package pg_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"

	"queen-node/internal/pgtest"
	"queen-node/pg"
	"queen-node/protocol"
)

// TestArrayStatementsKeepGenericPlans: the claim set and the CAS ack run
// under plan_cache_mode = force_generic_plan, so PostgreSQL never plans
// them for each call's values, and the connection is back to the default
// afterwards: after flights of claims and acks, after acks alone, and
// after a flight that failed. The pool has one connection, so the checks
// read the connection that ran the statements. It fails without the SET
// (PostgreSQL makes five custom plans first) and without the RESET.
func TestArrayStatementsKeepGenericPlans(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	db, err := pg.Open(ctx, url, 1, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const nparts = 12
	names := make([]string, nparts)
	for i := range names {
		names[i] = fmt.Sprint("p", i)
		pushN(t, db, "q", names[i], 30)
	}
	// The first claim provisions every partition's row (pop_v3).
	first := pg.PopArgs{Tenant: "t", Queue: "q", Group: "__QUEUE_MODE__", Names: names, Unprov: names, ScanLimit: nparts,
		Budget: 1, MaxParts: 1, LeaseID: uuid.NewString(), Owner: "o", SubMode: protocol.SubAll}
	if _, err := db.Pop(ctx, first); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `UPDATE queen.consumers SET lease_id = NULL, lease_expires_at = NULL, batch_end = committed_offset`); err != nil {
		t.Fatal(err)
	}
	check := func(when string, wantGeneric bool) {
		t.Helper()
		for _, s := range []struct{ name, prefix string }{{"claim set", pg.ClaimSetPrefix}, {"CAS ack", pg.AckCASPrefix}} {
			mode, generic, custom, err := db.PlanCounts(ctx, s.prefix)
			if err != nil {
				t.Fatal(err)
			}
			if mode != "auto" {
				t.Fatalf("%s: plan_cache_mode %q on the pool's connection, want auto", when, mode)
			}
			if custom != 0 || (wantGeneric && generic < 10) {
				t.Fatalf("%s: the %s had %d generic and %d custom plans, want only generic ones", when, s.name, generic, custom)
			}
		}
	}
	var pairs []pg.CASPair
	jobsOf := func(round int) []pg.PopArgs {
		jobs := make([]pg.PopArgs, 3)
		for k := range jobs {
			jobs[k] = pg.PopArgs{Tenant: "t", Queue: "q", Group: "__QUEUE_MODE__", Names: []string{names[(round*3+k)%nparts]},
				ScanLimit: 1, Budget: 1 + k, MaxParts: 1, LeaseID: uuid.NewString(), Owner: "o", SubMode: protocol.SubAll}
		}
		return jobs
	}
	for round := 0; round < 12; round++ {
		jobs := jobsOf(round)
		outs := runFlight(ctx, t, db, jobs, pairs)
		for k, out := range outs {
			if out == nil || len(out.Messages) == 0 || !out.Fast {
				t.Fatalf("round %d claim %d: %+v, want a fast claim with messages", round, k, out)
			}
		}
		pairs = acksOf(pairs, "t", "__QUEUE_MODE__", jobs, outs)
	}
	if st := db.Stat(); st.ClaimSets < 12 {
		t.Fatalf("%d claim sets sent, want 12", st.ClaimSets)
	}
	check("after flights of claims and acks", true)

	res, err := db.AckCAS(ctx, pairs)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if !r.OK {
			t.Fatal("an ack alone did not match")
		}
	}
	check("after acks alone", true)

	// A flight that fails after the SET, on the same connection: the
	// server refuses an ack's partition id that is not a UUID, and the
	// failed transaction takes the setting with it.
	pid := backendPID(t, db)
	bad := []pg.CASPair{{Tenant: "t", PartitionID: "not-a-uuid", Group: "__QUEUE_MODE__", LeaseID: "l", First: 1, End: 1, N: 1}}
	if _, _, err := db.PopManyAcks(ctx, jobsOf(0), bad); err == nil {
		t.Fatal("a flight with an ack of a malformed partition id succeeded")
	}
	if _, err := db.AckCAS(ctx, bad); err == nil {
		t.Fatal("an ack of a malformed partition id succeeded")
	}
	if got := backendPID(t, db); got != pid {
		t.Fatalf("the failures changed the pool's connection (backend %d, then %d): the check would prove nothing", pid, got)
	}
	// (pgx drops its prepared statements after a failed batch: they are
	// prepared again, and planned generic again.)
	check("after failed flights", false)
	if _, _, err := db.PopManyAcks(ctx, jobsOf(13), pairs[:0]); err != nil {
		t.Fatal(err)
	}
	check("after a flight that follows them", false)
}

func backendPID(t *testing.T, db *pg.DB) int {
	t.Helper()
	pid, err := db.BackendPID(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return pid
}
