package pg_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"queen-node/pg"
)

// The retention lease (a row, not a session lock, so it works through
// PgBouncer): one holder at a time; free again once released; taken over
// once expired, and the old holder's next call then fails with
// ErrRetentionLeaseLost instead of running a second pass beside the new one.
func TestRetentionLease(t *testing.T) {
	db, url := openDB(t)
	ctx := context.Background()
	a, ok, err := db.TryRetentionLock(ctx, "a")
	if err != nil || !ok {
		t.Fatalf("first lease: %v %v", ok, err)
	}
	if _, ok, err := db.TryRetentionLock(ctx, "b"); err != nil || ok {
		t.Fatalf("second lease while the first is held: %v %v", ok, err)
	}
	a.Release()
	b, ok, err := db.TryRetentionLock(ctx, "b")
	if err != nil || !ok {
		t.Fatalf("lease after release: %v %v", ok, err)
	}

	// b's lease expires (its node froze past the TTL) and c takes it.
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var node string
	if err := conn.QueryRow(ctx, `UPDATE queen.singletons SET until = now() - interval '1 second' WHERE name = 'retention' RETURNING node`).Scan(&node); err != nil || node != "b" {
		t.Fatalf("expire b's lease: %q %v", node, err)
	}
	c, ok, err := db.TryRetentionLock(ctx, "c")
	if err != nil || !ok {
		t.Fatalf("lease after expiry: %v %v", ok, err)
	}
	pg.AgeRetentionRenewal(b)
	if _, err := b.RetentionPartitions(ctx, "", 10); !errors.Is(err, pg.ErrRetentionLeaseLost) {
		t.Fatalf("old holder's call after a takeover: %v, want ErrRetentionLeaseLost", err)
	}
	b.Release() // must not free c's lease
	if _, ok, err := db.TryRetentionLock(ctx, "d"); err != nil || ok {
		t.Fatalf("lease free after the old holder's release: %v %v", ok, err)
	}
	pg.AgeRetentionRenewal(c)
	if _, err := c.RetentionPartitions(ctx, "", 10); err != nil {
		t.Fatalf("holder's renewal: %v", err)
	}
	c.Release()
}
