// Package pg is the only package that talks SQL: it holds the embedded
// schema migrations and SQL functions (migrate.go, docs/storage.md,
// "Schema migrations"), and typed calls for every statement the broker
// runs. PostgreSQL is the sole authority on claiming, leases, cursors and
// visibility; the functions in sql/ implement those rules.
package pg

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// querier is what a pool and a transaction have in common.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// DB is a connection pool to the queen schema.
type DB struct {
	pool    *pgxpool.Pool
	log     hclog.Logger
	retries atomic.Int64 // calls retried after a deadlock or similar (retry.go)

	pids              pidCache     // partition ids for the fast push (pushfast.go)
	pushFastFlushes   atomic.Int64 // push flushes the fast push statement wrote
	pushFastFallbacks atomic.Int64 // fast pushes undone by a duplicate, run as push_v4
	claimSetFlushes   atomic.Int64 // claim flushes that sent a claim set (claimset.go)

	noClaimSets bool // tests and benchmarks: every fast claim as its own statement
}

// Open connects, applies the schema and returns a ready DB. An empty url
// means the pgx/libpq PG* environment variables.
func Open(ctx context.Context, url string, maxConns int32, log hclog.Logger) (*DB, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse PostgreSQL URL: %w", &badURLError{reason: parseReason(err)})
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	// Fail fast on a dead server instead of hanging a request. The bound is
	// per host: with several hosts in the URL, a host that takes the
	// connection and never answers (a frozen or partitioned machine, which a
	// failover leaves behind) costs this much for every new connection
	// while it comes before the primary in the list; 2 s, libpq's minimum
	// (docs/operations.md, "Running on Patroni").
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = 2 * time.Second
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open pool: %w", err)
	}
	db := &DB{pool: pool, log: log}
	if err := db.Migrate(ctx); err != nil {
		pool.Close()
		if multiHost(cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Fallbacks) {
			// Several hosts: pgx stops at the first that refuses the role or
			// database, which may be a replica that has not yet replayed
			// their creation. Retrying is the only way through; /health
			// shows the reason meanwhile (docs/operations.md, "Starting").
			return nil, err
		}
		return nil, refused(err)
	}
	return db, nil
}

// multiHost tells a URL naming several servers. pgx adds a fallback for a
// single host too (sslmode=prefer, the default: TLS, then plain), so only a
// fallback to another host or port counts.
func multiHost(host string, port uint16, fallbacks []*pgconn.FallbackConfig) bool {
	for _, f := range fallbacks {
		if f.Host != host || f.Port != port {
			return true
		}
	}
	return false
}

// Close closes the pool.
func (db *DB) Close() { db.pool.Close() }

// Ping checks that PostgreSQL answers.
func (db *DB) Ping(ctx context.Context) error {
	var one int
	if err := db.pool.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
		return fmt.Errorf("ping: %w", err)
	}
	return nil
}

// PoolStat are the pool figures the node's status and metrics report
// (their names are in api/table.go).
type PoolStat struct {
	MaxConns      int32
	TotalConns    int32
	IdleConns     int32
	AcquiredConns int32
	AcquireCount  int64
	EmptyAcquire  int64
	NewConns      int64
	Retries       int64 // calls run again after a deadlock, serialization failure or concurrent delete (pg/retry.go)
	PushFast      int64 // push flushes written by the fast push statement (pg/pushfast.go)
	PushFastDups  int64 // fast pushes a duplicate undid, run as queen.push_v4 instead
	ClaimSets     int64 // claim flushes that sent their fast claims as one claim set (pg/claimset.go)
}

// Stat returns the pool figures without touching the database.
func (db *DB) Stat() PoolStat {
	s := db.pool.Stat()
	return PoolStat{
		MaxConns:      s.MaxConns(),
		TotalConns:    s.TotalConns(),
		IdleConns:     s.IdleConns(),
		AcquiredConns: s.AcquiredConns(),
		AcquireCount:  s.AcquireCount(),
		EmptyAcquire:  s.EmptyAcquireCount(),
		NewConns:      s.NewConnsCount(),
		Retries:       db.Retries(),
		PushFast:      db.pushFastFlushes.Load(),
		PushFastDups:  db.pushFastFallbacks.Load(),
		ClaimSets:     db.claimSetFlushes.Load(),
	}
}

// Tx is an open transaction with the same typed calls as DB.
type Tx struct{ tx pgx.Tx }

// InTx runs fn in one transaction, committing when fn returns nil.
func (db *DB) InTx(ctx context.Context, fn func(*Tx) error) error {
	tx, err := db.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	if err := fn(&Tx{tx: tx}); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// ErrUnavailable marks an error caused by PostgreSQL being unreachable
// (MarkUnavailable): the callers of pg (broker, reads) return it so the
// API answers 503 whichever of them failed.
var ErrUnavailable = errors.New("database unavailable")

// MarkUnavailable wraps err with ErrUnavailable when IsUnavailable says so;
// a cancellation, an error already marked and any other error are returned
// as they are.
func MarkUnavailable(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, ErrUnavailable) {
		return err
	}
	if IsUnavailable(err) {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return err
}

// IsUnavailable tells whether err means PostgreSQL could not be reached (as
// opposed to a statement failing), so callers can answer 503.
func IsUnavailable(err error) bool {
	if err == nil {
		return false
	}
	// A connection that could not be made is unavailable whatever the
	// server said (too many connections, starting up, shutting down), so
	// this is decided before the server's error code.
	var connErr *pgconn.ConnectError
	if errors.As(err, &connErr) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// Class 08 is connection exceptions; 57P0x is shutdown; 53 is
		// insufficient resources (53300: no free connection slot); 25006
		// is a read-only server (a primary demoted under the node).
		c := pgErr.Code
		return len(c) == 5 && (c[:2] == "08" || c[:4] == "57P0" || c[:2] == "53" || c == "25006")
	}
	// The server closed the connection under a statement: a killed or
	// crashed primary (a failover, docs/operations.md "Running on a highly
	// available PostgreSQL") ends the socket without an error message, and
	// pgx reports that end of file as io.ErrUnexpectedEOF (never io.EOF, which
	// other packages use for ordinary ends); a later use of that connection
	// says it is closed. Whether the statement committed is unknown, which
	// is what a 503 tells the client (retry pushes with the same
	// transaction ids).
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, pgconn.ErrConnClosed) {
		return true
	}
	var netErr net.Error
	return pgconn.SafeToRetry(err) || errors.As(err, &netErr)
}
