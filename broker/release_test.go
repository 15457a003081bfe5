package broker_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"

	"queen-node/broker"
	"queen-node/internal/pgtest"
)

// A pop claims under the lease id its request names (a forwarded pop's,
// chosen by the forwarding node), and ReleaseForwarded releases it: only
// the tenant's rows, counted only when it found some, and with again once
// more a moment later, which frees a claim made after the first release.
func TestReleaseForwarded(t *testing.T) {
	b := newBroker(t, false)
	ctx := context.Background()
	if _, err := b.Push(ctx, "t", nil, append(goItems("q", "p1", "a"), goItems("q", "p2", "b")...)); err != nil {
		t.Fatal(err)
	}
	dropped := func() int64 { return b.Snapshot().Requests.LeasesDropped }
	pop := func(part, lease string) *broker.PopResult {
		t.Helper()
		res, err := b.Pop(ctx, "t", broker.PopRequest{Queue: "q", Partition: part, Batch: 10, LeaseID: lease})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}

	l1 := uuid.NewString()
	if res := pop("p1", l1); res == nil || res.LeaseID != l1 || res.Messages[0].LeaseID != l1 {
		t.Fatalf("pop under lease %s: %+v", l1, res)
	}
	before := dropped()
	b.ReleaseForwarded("other-tenant", l1, false)
	if res := pop("p1", ""); res != nil {
		t.Fatalf("another tenant released lease %s: p1 popped again %+v", l1, res)
	}
	b.ReleaseForwarded("t", uuid.NewString(), false) // claimed by nobody
	if n := dropped() - before; n != 0 {
		t.Fatalf("%d releases counted, none found a lease", n)
	}
	b.ReleaseForwarded("t", l1, false)
	if n := dropped() - before; n != 1 {
		t.Fatalf("%d releases counted, want 1", n)
	}
	if res := pop("p1", ""); res == nil || res.Messages[0].TransactionID != "a" || res.LeaseID == l1 {
		t.Fatalf("p1 after its lease was released: %+v", res)
	}

	// The owner claims after the first release: the second frees it.
	l2 := uuid.NewString()
	b.ReleaseForwarded("t", l2, true)
	if res := pop("p2", l2); res == nil || res.LeaseID != l2 {
		t.Fatalf("pop under lease %s: %+v", l2, res)
	}
	deadline := time.Now().Add(10 * time.Second)
	for pop("p2", "") == nil {
		if time.Now().After(deadline) {
			t.Fatal("the claim made after the first release was never released")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// releaseBroker is a broker on its own database (URL returned) with n
// messages claimed, one per partition p0..p<n-1>, each under its own
// lease, and release statements bounded by a minute, so a test may hold
// their rows without racing the bound.
func releaseBroker(t *testing.T, n int, edits ...func(*broker.Config)) (*broker.Broker, string, []string) {
	t.Helper()
	cfg := broker.DefaultConfig()
	cfg.PG.URL = pgtest.NewDatabase(t)
	for _, e := range edits {
		e(&cfg)
	}
	cfg.NodeName = "release"
	cfg.Maintenance.BufferDir = t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b, err := broker.New(ctx, cfg, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	b.SetReleaseTimeout(time.Minute)
	leases := make([]string, n)
	for i := range leases {
		p := fmt.Sprintf("p%d", i)
		if _, err := b.Push(ctx, "t", nil, goItems("q", p, "m"+p)); err != nil {
			t.Fatal(err)
		}
		leases[i] = uuid.NewString()
		if res, err := b.Pop(ctx, "t", broker.PopRequest{Queue: "q", Partition: p, Batch: 1, LeaseID: leases[i]}); err != nil || res == nil {
			t.Fatalf("pop %s: %+v %v", p, res, err)
		}
	}
	return b, cfg.PG.URL, leases
}

// holdTx opens a transaction on url that runs sql (with args) and stays
// open until the test rolls it back (or ends).
func holdTx(t *testing.T, url, sql string, args ...any) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback(context.Background()) })
	if _, err := tx.Exec(ctx, sql, args...); err != nil {
		t.Fatal(err)
	}
	return tx
}

// waitFlushes waits until b has run at least n release statements in
// all; what says what did not happen.
func waitFlushes(t *testing.T, b *broker.Broker, n int64, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for b.Snapshot().Requests.ReleaseFlushes < n {
		if time.Now().After(deadline) {
			t.Fatal(what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// waitReleased waits for a release's done (what names it), then checks
// that its lease holds no row.
func waitReleased(t *testing.T, url string, done <-chan struct{}, lease, what string) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s never returned", what)
	}
	if n := leased(t, url, lease); n != 0 {
		t.Fatalf("%s returned with %d rows still held", what, n)
	}
}

// leased counts the consumer rows still held by lease.
func leased(t *testing.T, url, lease string) int {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM queen.consumers WHERE lease_id = $1`, lease).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Releases that arrive while one is being written go together, in one
// statement: the first release here waits for the consumers table, which
// another transaction holds, the 39 others queue behind it, and once the
// lock goes they run as one more flush. Every lease is released and
// counted.
func TestReleasesOfABurstShareAStatement(t *testing.T) {
	const n = 40
	b, url, leases := releaseBroker(t, n)
	ctx := context.Background()
	tx := holdTx(t, url, `LOCK TABLE queen.consumers IN ACCESS EXCLUSIVE MODE`)
	before := b.Snapshot().Requests
	waitState := func(what string, ok func(pending int, running bool) bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			if p, r := b.ReleaseState(); ok(p, r) {
				return
			} else if time.Now().After(deadline) {
				t.Fatalf("%s: %d pending, running %v", what, p, r)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	var wg sync.WaitGroup
	release := func(l string) {
		wg.Add(1)
		go func() { defer wg.Done(); b.ReleaseForwarded("t", l, false) }()
	}
	release(leases[0])
	waitState("the first release to be in flight", func(p int, r bool) bool { return p == 0 && r })
	for _, l := range leases[1:] {
		release(l)
	}
	waitState("the others to queue behind it", func(p int, r bool) bool { return p == n-1 })
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	after := b.Snapshot().Requests
	if got := after.LeasesDropped - before.LeasesDropped; got != n {
		t.Fatalf("%d releases counted, want %d", got, n)
	}
	if got := after.ReleaseFlushes - before.ReleaseFlushes; got != 2 {
		t.Fatalf("%d release statements, want 2 (the held one and the burst)", got)
	}
	for i := range leases {
		p := fmt.Sprintf("p%d", i)
		if res, err := b.Pop(ctx, "t", broker.PopRequest{Queue: "q", Partition: p, Batch: 1}); err != nil || res == nil {
			t.Fatalf("%s after its lease was released: %+v %v", p, res, err)
		}
	}
}

// A row held by another transaction (an ack of that lease, a purge) does
// not hold up the release of the others: with the rows of leases 0 and 2
// held, the release of lease 1 returns with its row free, and those of 0
// and 2 return once the holder is done, their rows free too.
func TestAHeldRowDoesNotHoldUpOtherReleases(t *testing.T) {
	b, url, leases := releaseBroker(t, 3)
	tx := holdTx(t, url, `SELECT 1 FROM queen.consumers WHERE lease_id = ANY($1) FOR UPDATE`, []string{leases[0], leases[2]})
	before := b.Snapshot().Requests
	done := make([]chan struct{}, 3)
	release := func(i int) {
		done[i] = make(chan struct{})
		go func() { defer close(done[i]); b.ReleaseForwarded("t", leases[i], false) }()
	}
	// Lease 0's release first, until its statement found the row held;
	// then the others, which a release that waited in its flush would hold
	// up.
	release(0)
	waitFlushes(t, b, before.ReleaseFlushes+1, "the release of lease 0 never ran")
	release(2)
	release(1)
	waitReleased(t, url, done[1], leases[1], "the release of a free row (lease 1), while others are held")
	if err := tx.Rollback(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 2} {
		waitReleased(t, url, done[i], leases[i], fmt.Sprintf("the release of lease %d", i))
	}
	if got := b.Snapshot().Requests.LeasesDropped - before.LeasesDropped; got != 3 {
		t.Fatalf("%d releases counted, want 3", got)
	}
}

// Releases waiting for held rows cannot take the connection pool: with
// the rows of 12 leases held and each release in a flush of its own
// (12 statements that would wait, against a pool of 8), an unrelated
// push and pop still get connections at once; once the rows go, every
// lease is released.
func TestHeldReleasesLeaveThePoolFree(t *testing.T) {
	const n = 12
	b, url, leases := releaseBroker(t, n, func(c *broker.Config) { c.PG.MaxConns = 8 })
	tx := holdTx(t, url, `SELECT 1 FROM queen.consumers WHERE lease_id = ANY($1) FOR UPDATE`, leases)
	var wg sync.WaitGroup
	for _, l := range leases {
		flushes := b.Snapshot().Requests.ReleaseFlushes
		wg.Add(1)
		go func() { defer wg.Done(); b.ReleaseForwarded("t", l, false) }()
		// Its flush has run (and left the lease to a release that waits).
		waitFlushes(t, b, flushes+1, "the release flush never ran: releases waiting for held rows took the pool")
	}
	// The held leases are tried again together: one statement a round
	// for the tenant, not one per flush that found rows held (12 here).
	// In half a second the pause (5 ms doubling to 100) allows about 9
	// rounds.
	f0 := b.Snapshot().Requests.ReleaseFlushes
	time.Sleep(500 * time.Millisecond) // a measurement window, not a wait for an event
	if got := b.Snapshot().Requests.ReleaseFlushes - f0; got > 24 {
		t.Fatalf("%d retry statements in 0.5 s for 12 held leases of one tenant: retries are not merged", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := b.Push(ctx, "t", nil, goItems("other", "p", "o1")); err != nil {
		t.Fatalf("a push while releases wait for held rows: %v", err)
	}
	if res, err := b.Pop(ctx, "t", broker.PopRequest{Queue: "other", Batch: 1}); err != nil || res == nil {
		t.Fatalf("a pop while releases wait for held rows: %+v %v", res, err)
	}
	if err := tx.Rollback(context.Background()); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i, l := range leases {
		if got := leased(t, url, l); got != 0 {
			t.Fatalf("lease %d still holds %d rows", i, got)
		}
	}
}

// A lease whose rows are held a moment is released as soon as they are
// free, even when another lease of the same burst stays held: neither
// waits for the other, and the long-held one is released once its holder
// is done.
func TestAShortHoldIsNotHeldUpByALongOne(t *testing.T) {
	b, url, leases := releaseBroker(t, 2)
	long := holdTx(t, url, `SELECT 1 FROM queen.consumers WHERE lease_id = $1 FOR UPDATE`, leases[0])
	short := holdTx(t, url, `SELECT 1 FROM queen.consumers WHERE lease_id = $1 FOR UPDATE`, leases[1])
	flushes := b.Snapshot().Requests.ReleaseFlushes
	done := make([]chan struct{}, 2)
	for i := range leases {
		done[i] = make(chan struct{})
		go func() { defer close(done[i]); b.ReleaseForwarded("t", leases[i], false) }()
	}
	waitFlushes(t, b, flushes+2, "the releases never ran") // both tried at least once (or retried)
	if err := short.Rollback(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitReleased(t, url, done[1], leases[1], "the release of the briefly held lease, while the other stays held")
	select {
	case <-done[0]:
		t.Fatal("the long-held lease's release returned while its row is still held")
	default:
	}
	if err := long.Rollback(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitReleased(t, url, done[0], leases[0], "the long-held lease's release")
}

// A lease whose rows are released in part before the bound passes (its
// other rows still held) counts as a release that found a lease, and its
// caller is answered at the bound.
func TestAPartlyReleasedLeaseCountsAtTheBound(t *testing.T) {
	b, url, _ := releaseBroker(t, 0)
	b.SetReleaseTimeout(time.Second)
	ctx := context.Background()
	for _, p := range []string{"x0", "x1"} {
		if _, err := b.Push(ctx, "t", nil, goItems("two", p, "m"+p)); err != nil {
			t.Fatal(err)
		}
	}
	lease := uuid.NewString()
	res, err := b.Pop(ctx, "t", broker.PopRequest{Queue: "two", Batch: 10, Partitions: 2, LeaseID: lease})
	if err != nil || res == nil || res.PartitionsClaimed != 2 {
		t.Fatalf("pop of two partitions under one lease: %+v %v", res, err)
	}
	holdTx(t, url, `SELECT 1 FROM queen.consumers c JOIN queen.partitions p ON p.id = c.partition_id
		WHERE c.lease_id = $1 AND p.name = 'x1' FOR UPDATE OF c`, lease)
	before := b.Snapshot().Requests.LeasesDropped
	start := time.Now()
	b.ReleaseForwarded("t", lease, false)
	if took := time.Since(start); took < time.Second {
		t.Fatalf("the release returned after %v, before the bound, with a row still held", took)
	}
	if n := leased(t, url, lease); n != 1 {
		t.Fatalf("lease holds %d rows, want 1 (x0 released, x1 held)", n)
	}
	if got := b.Snapshot().Requests.LeasesDropped - before; got != 1 {
		t.Fatalf("%d releases counted, want 1: the lease was found", got)
	}
}

// No held caller waits past its own bound for another's later one: with
// statements on the consumers table blocked (a queued table lock), lease
// A (bound 3 s) and lease B (joining 2 s later, bound 5 s) are retried in
// the same rounds, and A is answered near its own bound, not B's.
func TestAHeldReleaseEndsAtItsOwnBound(t *testing.T) {
	b, url, leases := releaseBroker(t, 2)
	b.SetReleaseTimeout(3 * time.Second)
	holdTx(t, url, `SELECT 1 FROM queen.consumers WHERE lease_id = ANY($1) FOR UPDATE`, leases)
	startA := time.Now()
	doneA := make(chan time.Duration, 1)
	go func() { b.ReleaseForwarded("t", leases[0], false); doneA <- time.Since(startA) }()
	time.Sleep(2 * time.Second) // B's bound comes 2 s after A's (an offset, not a wait for an event)
	go b.ReleaseForwarded("t", leases[1], false)
	// A table lock queued behind the held rows: every later statement on
	// the table waits behind it, skipping or not.
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	tx, err := conn.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback(context.Background()) })
	lockCtx, stopLock := context.WithCancel(context.Background())
	locking := make(chan struct{})
	go func() {
		defer close(locking)
		tx.Exec(lockCtx, `LOCK TABLE queen.consumers IN ACCESS EXCLUSIVE MODE`)
	}()
	t.Cleanup(func() { stopLock(); <-locking }) // before the rollback: one goroutine per connection
	select {
	case took := <-doneA:
		if took > 4200*time.Millisecond {
			t.Fatalf("lease A (bound 3 s) answered after %v: it waited for lease B's bound (5 s)", took)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("lease A was never answered")
	}
}
