package pg

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// The schema is set up in two steps at every start, under one advisory lock
// (docs/storage.md, "Schema migrations"):
//
//   - sql/migrations/NNNN_name.sql change tables and indexes. Each is applied
//     once, in version order, in its own transaction together with its row
//     in queen.schema_migrations.
//   - sql/functions/*.sql hold only CREATE OR REPLACE FUNCTION (and DROP
//     FUNCTION IF EXISTS of retired signatures). They are re-applied in name
//     order on every start, so a changed body takes effect on the next start
//     without a migration.
//
//go:embed sql/migrations/*.sql sql/functions/*.sql
var sqlFiles embed.FS

// migrationLock is the advisory lock key that serialises schema setup when
// several nodes start at once against one database.
const migrationLock int64 = 0x717565656e // "queen"

// migrationsTable records the applied migrations. Migration 1 is written to
// be idempotent: a database set up before this table existed (every file
// re-run at start) already holds its tables, and adopts version 1 when it
// runs again.
const migrationsTable = `
CREATE SCHEMA IF NOT EXISTS queen;
CREATE TABLE IF NOT EXISTS queen.schema_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);`

// migration is one numbered file of sql/migrations.
type migration struct {
	Version int
	Name    string // file name without the version and extension
	SQL     string
}

// migrations returns the embedded migrations in version order. Versions
// must be unique and start at 1 without gaps.
func migrations() ([]migration, error) {
	names, err := fs.Glob(sqlFiles, "sql/migrations/*.sql")
	if err != nil {
		return nil, fmt.Errorf("list migrations: %w", err)
	}
	var out []migration
	for _, name := range names {
		base := strings.TrimSuffix(path.Base(name), ".sql")
		num, rest, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s: want NNNN_name.sql", name)
		}
		body, err := sqlFiles.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", name, err)
		}
		out = append(out, migration{Version: v, Name: rest, SQL: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i, m := range out {
		if m.Version != i+1 {
			return nil, fmt.Errorf("migration %d_%s: versions must run 1, 2, 3... without gaps or repeats", m.Version, m.Name)
		}
	}
	return out, nil
}

// functionFiles returns the embedded function files in name order.
func functionFiles() ([]string, error) {
	names, err := fs.Glob(sqlFiles, "sql/functions/*.sql")
	if err != nil {
		return nil, fmt.Errorf("list functions: %w", err)
	}
	sort.Strings(names)
	return names, nil
}

// Migrate brings the schema up to date under the advisory lock: pending
// migrations first, then every SQL function. Safe to run at every start and
// from several nodes at once.
//
// Everything runs in one transaction under a transaction-scoped lock: no
// session state outlives it, so Migrate works through a transaction-mode
// pooler (PgBouncer; docs/operations.md, "Behind PgBouncer") as well as
// directly, and a failure half way leaves the schema as it was.
func (db *DB) Migrate(ctx context.Context) error {
	conn, err := db.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("migrate: acquire: %w", err)
	}
	defer conn.Release()
	all, err := migrations()
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	files, err := functionFiles()
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	var applied []migration
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", migrationLock); err != nil {
			return fmt.Errorf("lock: %w", err)
		}
		// Simple protocol: these texts hold several statements.
		if _, err := tx.Exec(ctx, migrationsTable, pgx.QueryExecModeSimpleProtocol); err != nil {
			return fmt.Errorf("version table: %w", err)
		}
		var current int
		if err := tx.QueryRow(ctx, "SELECT COALESCE(max(version), 0) FROM queen.schema_migrations").Scan(&current); err != nil {
			return fmt.Errorf("read version: %w", err)
		}
		if current > len(all) {
			// A newer node migrated this database; this node's functions could
			// not be trusted against its tables.
			return fmt.Errorf("database schema version %d is newer than this node's %d", current, len(all))
		}
		for _, m := range all[current:] {
			if _, err := tx.Exec(ctx, m.SQL, pgx.QueryExecModeSimpleProtocol); err != nil {
				return fmt.Errorf("apply %d_%s: %w", m.Version, m.Name, err)
			}
			if _, err := tx.Exec(ctx, "INSERT INTO queen.schema_migrations (version, name) VALUES ($1, $2)", m.Version, m.Name); err != nil {
				return fmt.Errorf("record %d_%s: %w", m.Version, m.Name, err)
			}
			applied = append(applied, m)
		}
		for _, name := range files {
			body, err := sqlFiles.ReadFile(name)
			if err != nil {
				return fmt.Errorf("read %s: %w", name, err)
			}
			if _, err := tx.Exec(ctx, string(body), pgx.QueryExecModeSimpleProtocol); err != nil {
				return fmt.Errorf("apply %s: %w", name, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	for _, m := range applied {
		db.log.Info("schema migration applied", "version", m.Version, "name", m.Name)
	}
	db.log.Debug("schema up to date", "version", len(all), "function_files", len(files))
	return nil
}
