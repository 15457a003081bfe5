package pg

// The SQL of the raw PostgreSQL ceilings of cmd/queen-bench --raw
// (internal/bench/ceiling.go runs the loops): scratch tables in schema
// queen_bench, created for one run and dropped afterwards, never the
// product schema. It lives here because only package pg talks SQL.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Scratch is a uniquely named table pair in schema queen_bench, so two
// runs against one database do not collide: messages (part, off, payload)
// with only a primary key, and one cursor per part.
type Scratch struct {
	pool    *pgxpool.Pool
	msgs    string
	cursors string
	insert  string
	lock    string
	advance string
}

// OpenScratch opens a pool of conns+1 connections to url and creates the
// scratch tables. Close drops them.
func OpenScratch(ctx context.Context, url string, conns int) (*Scratch, error) {
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
	s := &Scratch{pool: pool, msgs: "queen_bench.msgs_" + suffix, cursors: "queen_bench.cursors_" + suffix}
	s.insert = `INSERT INTO ` + s.msgs + ` (part, off, payload)
SELECT $1::int, t.off, t.payload::json FROM unnest($2::bigint[], $3::text[]) AS t(off, payload)`
	s.lock = `SELECT part, cur FROM ` + s.cursors + ` WHERE cur < hi LIMIT 1 FOR UPDATE SKIP LOCKED`
	s.advance = `UPDATE ` + s.cursors + ` SET cur = $2 WHERE part = $1`
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

// Close drops the tables, and the schema when nothing else is left in it.
func (s *Scratch) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, _ = s.pool.Exec(ctx, "DROP TABLE IF EXISTS "+s.msgs+", "+s.cursors)
	_, _ = s.pool.Exec(ctx, "DROP SCHEMA IF EXISTS queen_bench") // fails while another run uses it
	s.pool.Close()
}

// Insert stores one row per offset of part with one plain INSERT ...
// SELECT FROM unnest (autocommit) and returns the rows inserted.
func (s *Scratch) Insert(ctx context.Context, part int, offs []int64, payloads []string) (int64, error) {
	tag, err := s.pool.Exec(ctx, s.insert, part, offs, payloads)
	if err != nil {
		return 0, fmt.Errorf("insert: %w", err)
	}
	return tag.RowsAffected(), nil
}

// Prefill stores per rows in each of parts parts with one cursor each at
// the start, then vacuums and analyzes both tables.
func (s *Scratch) Prefill(ctx context.Context, parts int, per int64, payload string) error {
	fill := `INSERT INTO ` + s.msgs + ` (part, off, payload)
SELECT p, g, $3::json FROM generate_series(0, $1::int - 1) p, generate_series(1, $2::bigint) g`
	if _, err := s.pool.Exec(ctx, fill, parts, per, payload); err != nil {
		return fmt.Errorf("prefill: %w", err)
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO `+s.cursors+` (part, cur, hi) SELECT p, 0, $2 FROM generate_series(0, $1::int - 1) p`, parts, per); err != nil {
		return fmt.Errorf("cursors: %w", err)
	}
	if _, err := s.pool.Exec(ctx, "VACUUM ANALYZE "+s.msgs+", "+s.cursors); err != nil {
		return fmt.Errorf("vacuum: %w", err)
	}
	return nil
}

// Claim runs one claim transaction: lock a cursor row with rows left (FOR
// UPDATE SKIP LOCKED), read up to limit rows after it, move it, commit. It
// returns the rows read, 0 when every cursor with rows left was locked or
// drained.
func (s *Scratch) Claim(ctx context.Context, limit int) (int64, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	var part int
	var cur int64
	if err := tx.QueryRow(ctx, s.lock).Scan(&part, &cur); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return 0, nil
		}
		return 0, fmt.Errorf("lock cursor: %w", err)
	}
	read := `SELECT off, payload FROM ` + s.msgs + ` WHERE part = $1 AND off > $2 ORDER BY off LIMIT ` + fmt.Sprint(limit)
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
	if _, err := tx.Exec(ctx, s.advance, part, off); err != nil {
		return 0, fmt.Errorf("advance: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("commit: %w", err)
	}
	return n, nil
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
