package pg_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"queen-node/internal/pgtest"
	"queen-node/pg"
)

// TestScratch drives the raw ceilings' SQL once: rows go in (part 99, clear
// of the prefill), a prefilled backlog is claimed to its end, and no
// scratch schema is left behind.
func TestScratch(t *testing.T) {
	url := pgtest.NewDatabase(t)
	ctx := context.Background()
	s, err := pg.OpenScratch(ctx, url, 1)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	n, err := s.Insert(ctx, 99, []int64{1, 2, 3}, []string{`"a"`, `"b"`, `"c"`})
	if err != nil || n != 3 {
		t.Fatalf("insert: %d, %v", n, err)
	}
	if err := s.Prefill(ctx, 2, 150, `"x"`); err != nil {
		t.Fatalf("prefill: %v", err)
	}
	var claimed int64
	for range 10 {
		n, err := s.Claim(ctx, 100)
		if err != nil {
			t.Fatalf("claim: %v", err)
		}
		if n == 0 {
			break
		}
		claimed += n
	}
	if claimed != 300 {
		t.Fatalf("claimed %d rows, want the 300 prefilled", claimed)
	}
	s.Close()

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
	var left int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname = 'queen_bench'`).Scan(&left); err != nil {
		t.Fatalf("schema: %v", err)
	}
	if left != 0 {
		t.Fatal("schema queen_bench left behind")
	}
}
