package pg_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"queen-node/pg"
	"queen-node/protocol"
)

// TestPopManyAcksOneTransaction: the CAS acks a claim flush carries run
// first, in the claims' transaction (broker/popcombine.go). A claim of the
// partition an ack of the same flush releases takes its next messages at
// once; when the transaction fails, the acks are not written either.
func TestPopManyAcksOneTransaction(t *testing.T) {
	db, url := openDB(t)
	ctx := context.Background()
	pushN(t, db, "q", "p", 10)
	args := func(lease string) pg.PopArgs {
		return pg.PopArgs{Tenant: "t", Queue: "q", Group: "g", Names: []string{"p"}, Budget: 4, MaxParts: 1,
			ScanLimit: 16, SubMode: protocol.SubAll, LeaseID: lease, LeaseSeconds: 600}
	}
	l1 := uuid.NewString()
	first := claim(t, db, args(l1))
	if len(first.Messages) != 4 {
		t.Fatalf("first claim: %d messages", len(first.Messages))
	}
	ackOf := func(out *pg.PopOutcome, lease string) pg.CASPair { return casPairOf("t", "g", lease, out) }
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	cursor := func() (off int64, lease string) {
		t.Helper()
		var l *string
		if err := conn.QueryRow(ctx, `SELECT c.committed_offset, c.lease_id FROM queen.consumers c
			JOIN queen.partitions p ON p.id = c.partition_id WHERE p.name = 'p' AND c.consumer_group = 'g'`).Scan(&off, &l); err != nil {
			t.Fatal(err)
		}
		if l != nil {
			lease = *l
		}
		return off, lease
	}

	// A transaction that fails (a parameter PostgreSQL refuses: a NUL in
	// text) writes neither the ack nor any claim.
	bad := args(uuid.NewString())
	bad.Tenant = "t\x00"
	if outs, cas, err := db.PopManyAcks(ctx, []pg.PopArgs{bad}, []pg.CASPair{ackOf(first, l1)}); err == nil || cas != nil || outs != nil {
		t.Fatalf("failed flush: outs %v, cas %v, err %v; want an error and nothing", outs, cas, err)
	}
	if off, lease := cursor(); off != 0 || lease != l1 {
		t.Fatalf("after the failed flush: cursor %d, lease %q; want 0 and the first claim's %q", off, lease, l1)
	}

	// The ack releases the partition and the claim in the same flush takes
	// the next four, in the first transaction (the fast claim; a claim that
	// found the partition still leased would have answered nothing there).
	l2 := uuid.NewString()
	outs, cas, err := db.PopManyAcks(ctx, []pg.PopArgs{args(l2)}, []pg.CASPair{ackOf(first, l1)})
	if err != nil || len(cas) != 1 || !cas[0].OK {
		t.Fatalf("flush: cas %+v, err %v", cas, err)
	}
	second := outs[0]
	if second == nil || len(second.Messages) != 4 || second.Messages[0].Off != first.Messages[3].Off+1 || !second.Fast {
		t.Fatalf("the flush's claim: %+v; want the next 4 messages, by the fast claim", second)
	}
	if off, lease := cursor(); off != first.Messages[3].Off || lease != l2 {
		t.Fatalf("after the flush: cursor %d, lease %q; want %d and %q", off, lease, first.Messages[3].Off, l2)
	}
}

// TestPopManyAcksSecondTransactionFails: when the second transaction (the
// fast claims that found nothing, run again as pop_v3) fails, the first,
// with the acks, committed: their results come back with the error.
func TestPopManyAcksSecondTransactionFails(t *testing.T) {
	db, url := openDB(t)
	ctx := context.Background()
	pushN(t, db, "q", "p", 10)
	args := func(lease string, names ...string) pg.PopArgs {
		return pg.PopArgs{Tenant: "t", Queue: "q", Group: "g", Names: names, Budget: 4, MaxParts: 1,
			ScanLimit: 16, SubMode: protocol.SubAll, LeaseID: lease, LeaseSeconds: 600}
	}
	l1 := uuid.NewString()
	first := claim(t, db, args(l1, "p"))
	n := len(first.Messages)
	pair := pg.CASPair{Tenant: "t", PartitionID: first.Messages[0].PartitionID, Group: "g", LeaseID: l1,
		First: first.Messages[0].Off, End: first.Messages[n-1].Off, N: n}
	// The fast claim takes the first name only and finds no such
	// partition; pop_v3 then gets a second name PostgreSQL refuses.
	bad := args(uuid.NewString(), "nope", "x\x00")
	_, cas, err := db.PopManyAcks(ctx, []pg.PopArgs{bad}, []pg.CASPair{pair})
	if err == nil {
		t.Fatal("want the second transaction to fail")
	}
	if len(cas) != 1 || !cas[0].OK {
		t.Fatalf("acks %+v (%v): want the committed ack's result", cas, err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var off int64
	var lease *string
	if err := conn.QueryRow(ctx, `SELECT c.committed_offset, c.lease_id FROM queen.consumers c
		JOIN queen.partitions p ON p.id = c.partition_id WHERE p.name = 'p' AND c.consumer_group = 'g'`).Scan(&off, &lease); err != nil {
		t.Fatal(err)
	}
	if off != first.Messages[n-1].Off || lease != nil {
		t.Fatalf("cursor %d, lease %v; want %d and none", off, lease, first.Messages[n-1].Off)
	}
}

// casPairOf is the CAS ack of a claim's whole batch (out, one partition)
// under its lease.
func casPairOf(tenant, group, lease string, out *pg.PopOutcome) pg.CASPair {
	m := out.Messages
	return pg.CASPair{Tenant: tenant, PartitionID: m[0].PartitionID, Group: group, LeaseID: lease,
		First: m[0].Off, End: m[len(m)-1].Off, N: len(m)}
}

// runFlight runs one claim flight as the pop combiner sends it: jobs'
// claims with the CAS acks of pairs, in one transaction. It fails tb
// unless every ack matched.
func runFlight(ctx context.Context, tb testing.TB, db *pg.DB, jobs []pg.PopArgs, pairs []pg.CASPair) []*pg.PopOutcome {
	tb.Helper()
	outs, cas, err := db.PopManyAcks(ctx, jobs, pairs)
	if err != nil {
		tb.Fatal(err)
	}
	for _, r := range cas {
		if !r.OK {
			tb.Fatalf("an ack did not match: %+v", r)
		}
	}
	return outs
}

// acksOf is the next flight's CAS acks: one per claim of outs (each took
// messages), reusing pairs' array.
func acksOf(pairs []pg.CASPair, tenant, group string, jobs []pg.PopArgs, outs []*pg.PopOutcome) []pg.CASPair {
	pairs = pairs[:0]
	for k, out := range outs {
		pairs = append(pairs, casPairOf(tenant, group, jobs[k].LeaseID, out))
	}
	return pairs
}
