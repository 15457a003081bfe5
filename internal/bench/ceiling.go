package bench

// Raw PostgreSQL ceilings for cmd/queen-bench --raw (docs/benchmarks.md,
// "queen-bench"): the same bytes moved by the plainest SQL we can write, on
// the same server, so a node's figures can be read as a fraction of what
// the database itself does. The loops are here; their SQL is package pg's
// (pg.Scratch: its own tables in schema queen_bench, created for the run
// and dropped afterwards; the product schema is not touched).

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"queen-node/pg"
)

// CeilingRows is the number of rows per INSERT and the claim limit, as in
// pg/storage_bench_test.go and the node's batches.
const CeilingRows = 100

// CeilingOptions configure RawInsertCeiling and RawClaimCeiling.
type CeilingOptions struct {
	// URL of the database. The loops create schema queen_bench in it.
	URL string
	// Conns is the number of connections (insert) or workers (claim).
	Conns int
	// PayloadBytes is the size of each row's JSON payload.
	PayloadBytes int
	// Duration bounds the measured loop.
	Duration time.Duration
	// ClaimRows is the backlog the claim loop drains (prefilled before the
	// clock starts); the loop stops early when it runs dry. 0 = 300,000.
	ClaimRows int
}

// CeilingResult is one measured loop.
type CeilingResult struct {
	Rows     int64         `json:"rows"`
	Elapsed  time.Duration `json:"elapsed_ns"`
	PerSec   float64       `json:"rows_per_s"`
	Conns    int           `json:"conns"`
	Payload  int           `json:"payload_bytes"`
	RowsPerX int           `json:"rows_per_txn"`
}

func (o CeilingOptions) withDefaults() CeilingOptions {
	if o.Conns <= 0 {
		o.Conns = 4
	}
	if o.PayloadBytes <= 0 {
		o.PayloadBytes = 256
	}
	if o.Duration <= 0 {
		o.Duration = 10 * time.Second
	}
	if o.ClaimRows <= 0 {
		o.ClaimRows = 300_000
	}
	return o
}

// ceilingPayload is a JSON string value of exactly n bytes (n >= 2).
func ceilingPayload(n int) string {
	if n < 2 {
		n = 2
	}
	return `"` + strings.Repeat("x", n-2) + `"`
}

// RawInsertCeiling runs opts.Conns connections, each inserting batches of
// 100 rows with one plain INSERT ... SELECT FROM unnest (one transaction per
// batch, autocommit) into a table with only a primary key, for
// opts.Duration, and returns the rows per second.
func RawInsertCeiling(ctx context.Context, opts CeilingOptions) (CeilingResult, error) {
	opts = opts.withDefaults()
	s, err := pg.OpenScratch(ctx, opts.URL, opts.Conns)
	if err != nil {
		return CeilingResult{}, err
	}
	defer s.Close()
	payloads := make([]string, CeilingRows)
	for i := range payloads {
		payloads[i] = ceilingPayload(opts.PayloadBytes)
	}

	var rows atomic.Int64
	var firstErr error
	var errOnce sync.Once
	runCtx, cancel := context.WithTimeout(ctx, opts.Duration)
	defer cancel()
	var wg sync.WaitGroup
	start := time.Now()
	for w := range opts.Conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			offs := make([]int64, CeilingRows)
			var next int64
			for runCtx.Err() == nil {
				for i := range offs {
					next++
					offs[i] = next
				}
				n, err := s.Insert(runCtx, w, offs, payloads)
				if err != nil {
					if runCtx.Err() == nil {
						errOnce.Do(func() { firstErr = fmt.Errorf("raw insert: %w", err) })
						cancel()
					}
					return
				}
				rows.Add(n)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return CeilingResult{}, firstErr
	}
	return result(rows.Load(), elapsed, opts), nil
}

// RawClaimCeiling prefills opts.ClaimRows rows over 4*opts.Conns
// partitions (not timed), then runs opts.Conns workers, each looping on one
// transaction: lock a cursor row with FOR UPDATE SKIP LOCKED, read up to
// 100 rows after it, move it, commit. It returns the rows read per second,
// until the backlog is drained or opts.Duration passes.
func RawClaimCeiling(ctx context.Context, opts CeilingOptions) (CeilingResult, error) {
	opts = opts.withDefaults()
	s, err := pg.OpenScratch(ctx, opts.URL, opts.Conns)
	if err != nil {
		return CeilingResult{}, err
	}
	defer s.Close()
	parts := 4 * opts.Conns
	per := int64(opts.ClaimRows / parts)
	if per < CeilingRows {
		per = CeilingRows
	}
	if err := s.Prefill(ctx, parts, per, ceilingPayload(opts.PayloadBytes)); err != nil {
		return CeilingResult{}, fmt.Errorf("raw claim: %w", err)
	}

	var rows atomic.Int64
	var firstErr error
	var errOnce sync.Once
	runCtx, cancel := context.WithTimeout(ctx, opts.Duration)
	defer cancel()
	var wg sync.WaitGroup
	start := time.Now()
	for range opts.Conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for runCtx.Err() == nil {
				n, err := s.Claim(runCtx, CeilingRows)
				if err != nil {
					if runCtx.Err() == nil {
						errOnce.Do(func() { firstErr = fmt.Errorf("raw claim: %w", err) })
						cancel()
					}
					return
				}
				if n == 0 {
					return // drained (or the rest is held by other workers)
				}
				rows.Add(n)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return CeilingResult{}, firstErr
	}
	return result(rows.Load(), elapsed, opts), nil
}

func result(rows int64, elapsed time.Duration, opts CeilingOptions) CeilingResult {
	r := CeilingResult{Rows: rows, Elapsed: elapsed, Conns: opts.Conns, Payload: opts.PayloadBytes, RowsPerX: CeilingRows}
	if elapsed > 0 {
		r.PerSec = float64(rows) / elapsed.Seconds()
	}
	return r
}
