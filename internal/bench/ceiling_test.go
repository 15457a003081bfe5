package bench_test

import (
	"context"
	"testing"
	"time"

	"queen-node/internal/bench"
	"queen-node/internal/pgtest"
)

// TestRawCeilings runs both raw loops briefly: they move rows. That the
// scratch tables are gone afterwards is pg's TestScratch.
func TestRawCeilings(t *testing.T) {
	url := pgtest.NewDatabase(t)
	ctx := context.Background()
	opts := bench.CeilingOptions{URL: url, Conns: 2, PayloadBytes: 128, Duration: 300 * time.Millisecond, ClaimRows: 2000}
	ins, err := bench.RawInsertCeiling(ctx, opts)
	if err != nil {
		t.Fatalf("insert: %v", err)
	}
	if ins.Rows == 0 || ins.Rows%bench.CeilingRows != 0 || ins.PerSec <= 0 {
		t.Fatalf("insert: %+v", ins)
	}
	cl, err := bench.RawClaimCeiling(ctx, opts)
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	if cl.Rows == 0 || cl.Rows > 2000 || cl.PerSec <= 0 {
		t.Fatalf("claim: %+v", cl)
	}
}
