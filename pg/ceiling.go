package pg

// Raw PostgreSQL ceilings for cmd/queen-bench --raw (docs/benchmarks.md,
// "queen-bench"): the same bytes moved by the plainest SQL we can write, on
// the same server, so a node's figures can be read as a fraction of what
// the database itself does. The loops live here because only package pg
// talks SQL. They use their own tables in schema queen_bench, created for
// the run and dropped afterwards; the product schema is not touched.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
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

// scratch is a uniquely named table pair in schema queen_bench, so two
// runs against one database do not collide.
type scratch struct {
	pool    *pgxpool.Pool
	msgs    string
	cursors string
}

func openScratch(ctx context.Context, url string, conns int) (*scratch, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse PostgreSQL URL: %w", err)
	}
	cfg.MaxConns = int32(conns + 1)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open pool: %w", err)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	suffix := hex.EncodeToString(b[:])
	s := &scratch{pool: pool, msgs: "queen_bench.msgs_" + suffix, cursors: "queen_bench.cursors_" + suffix}
	ddl := `CREATE SCHEMA IF NOT EXISTS queen_bench;
CREATE TABLE ` + s.msgs + ` (
    part    int NOT NULL,
    off     bigint NOT NULL,
    payload json NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (part, off)
);
CREATE TABLE ` + s.cursors + ` (part int PRIMARY KEY, cur bigint NOT NULL, hi bigint NOT NULL);`
	if _, err := pool.Exec(ctx, ddl); err != nil {
		pool.Close()
		return nil, fmt.Errorf("create scratch tables: %w", err)
	}
	return s, nil
}

// close drops the tables, and the schema when nothing else is left in it.
func (s *scratch) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, _ = s.pool.Exec(ctx, "DROP TABLE IF EXISTS "+s.msgs+", "+s.cursors)
	_, _ = s.pool.Exec(ctx, "DROP SCHEMA IF EXISTS queen_bench") // fails while another run uses it
	s.pool.Close()
}

// RawInsertCeiling runs opts.Conns connections, each inserting batches of
// 100 rows with one plain INSERT ... SELECT FROM unnest (one transaction per
// batch, autocommit) into a table with only a primary key, for
// opts.Duration, and returns the rows per second.
func RawInsertCeiling(ctx context.Context, opts CeilingOptions) (CeilingResult, error) {
	opts = opts.withDefaults()
	s, err := openScratch(ctx, opts.URL, opts.Conns)
	if err != nil {
		return CeilingResult{}, err
	}
	defer s.close()
	payloads := make([]string, CeilingRows)
	for i := range payloads {
		payloads[i] = ceilingPayload(opts.PayloadBytes)
	}
	insert := `INSERT INTO ` + s.msgs + ` (part, off, payload)
SELECT $1::int, t.off, t.payload::json FROM unnest($2::bigint[], $3::text[]) AS t(off, payload)`

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
				tag, err := s.pool.Exec(runCtx, insert, w, offs, payloads)
				if err != nil {
					if runCtx.Err() == nil {
						errOnce.Do(func() { firstErr = fmt.Errorf("raw insert: %w", err) })
						cancel()
					}
					return
				}
				rows.Add(tag.RowsAffected())
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
	s, err := openScratch(ctx, opts.URL, opts.Conns)
	if err != nil {
		return CeilingResult{}, err
	}
	defer s.close()
	parts := 4 * opts.Conns
	per := int64(opts.ClaimRows / parts)
	if per < CeilingRows {
		per = CeilingRows
	}
	fill := `INSERT INTO ` + s.msgs + ` (part, off, payload)
SELECT p, g, $3::json FROM generate_series(0, $1::int - 1) p, generate_series(1, $2::bigint) g`
	if _, err := s.pool.Exec(ctx, fill, parts, per, ceilingPayload(opts.PayloadBytes)); err != nil {
		return CeilingResult{}, fmt.Errorf("raw claim prefill: %w", err)
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO `+s.cursors+` (part, cur, hi) SELECT p, 0, $2 FROM generate_series(0, $1::int - 1) p`, parts, per); err != nil {
		return CeilingResult{}, fmt.Errorf("raw claim cursors: %w", err)
	}
	if _, err := s.pool.Exec(ctx, "VACUUM ANALYZE "+s.msgs+", "+s.cursors); err != nil {
		return CeilingResult{}, fmt.Errorf("raw claim vacuum: %w", err)
	}
	lock := `SELECT part, cur FROM ` + s.cursors + ` WHERE cur < hi LIMIT 1 FOR UPDATE SKIP LOCKED`
	read := `SELECT off, payload FROM ` + s.msgs + ` WHERE part = $1 AND off > $2 ORDER BY off LIMIT ` + fmt.Sprint(CeilingRows)
	advance := `UPDATE ` + s.cursors + ` SET cur = $2 WHERE part = $1`

	// claim returns the rows read, 0 when every cursor with rows left was
	// locked or drained.
	claim := func(ctx context.Context) (int64, error) {
		tx, err := s.pool.Begin(ctx)
		if err != nil {
			return 0, fmt.Errorf("begin: %w", err)
		}
		defer func() { _ = tx.Rollback(context.Background()) }()
		var part int
		var cur int64
		if err := tx.QueryRow(ctx, lock).Scan(&part, &cur); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return 0, nil
			}
			return 0, fmt.Errorf("lock cursor: %w", err)
		}
		rs, err := tx.Query(ctx, read, part, cur)
		if err != nil {
			return 0, fmt.Errorf("read: %w", err)
		}
		var n, off int64
		var payload []byte
		for rs.Next() {
			if err := rs.Scan(&off, &payload); err != nil {
				rs.Close()
				return 0, fmt.Errorf("scan: %w", err)
			}
			n++
		}
		if err := rs.Err(); err != nil {
			return 0, fmt.Errorf("read: %w", err)
		}
		if _, err := tx.Exec(ctx, advance, part, off); err != nil {
			return 0, fmt.Errorf("advance: %w", err)
		}
		if err := tx.Commit(ctx); err != nil {
			return 0, fmt.Errorf("commit: %w", err)
		}
		return n, nil
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
				n, err := claim(runCtx)
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

// WithBackendPID opens a connection to url and calls fn with the process
// id of the server backend serving it, while the connection is still open.
// queen-bench uses it to find the postmaster (the backend's parent) in
// /proc when PostgreSQL runs on the same machine.
func WithBackendPID(ctx context.Context, url string, fn func(pid int) error) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.Background())
	var pid int
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		return fmt.Errorf("pg_backend_pid: %w", err)
	}
	return fn(pid)
}

// WALPosition is the server's current WAL write position in bytes; two
// readings around a run give the WAL it wrote (queen-bench's WAL per
// message, docs/scale.md).
func WALPosition(ctx context.Context, url string) (int64, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return 0, fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.Background())
	var pos int64
	if err := conn.QueryRow(ctx, "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint").Scan(&pos); err != nil {
		return 0, fmt.Errorf("pg_current_wal_lsn: %w", err)
	}
	return pos, nil
}
