package pg_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"queen-node/internal/pgtest"
	"queen-node/pg"
)

// TestRawCeilings runs both raw loops briefly: they move rows and leave no
// scratch tables behind.
func TestRawCeilings(t *testing.T) {
	url := pgtest.NewDatabase(t)
	ctx := context.Background()
	opts := pg.CeilingOptions{URL: url, Conns: 2, PayloadBytes: 128, Duration: 300 * time.Millisecond, ClaimRows: 2000}
	ins, err := pg.RawInsertCeiling(ctx, opts)
	if err != nil {
		t.Fatalf("insert: %v", err)
	}
	if ins.Rows == 0 || ins.Rows%pg.CeilingRows != 0 || ins.PerSec <= 0 {
		t.Fatalf("insert: %+v", ins)
	}
	cl, err := pg.RawClaimCeiling(ctx, opts)
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	if cl.Rows == 0 || cl.Rows > 2000 || cl.PerSec <= 0 {
		t.Fatalf("claim: %+v", cl)
	}
	err = pg.WithBackendPID(ctx, url, func(pid int) error {
		if pid <= 0 {
			t.Errorf("backend pid %d", pid)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("backend pid: %v", err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname = 'queen_bench'`).Scan(&n); err != nil {
		t.Fatalf("schema: %v", err)
	}
	if n != 0 {
		t.Fatal("schema queen_bench left behind")
	}
}
