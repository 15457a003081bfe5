package pg

import (
	"context"
	"embed"
	"errors"
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
//     FUNCTION IF EXISTS of retired signatures). They are numbered as a whole
//     (FunctionSet, recorded in queen.function_set with the files' hash) and
//     re-applied in name order when this node's set is at least as new as
//     the database's, so a changed body takes effect without a migration and
//     an older node never puts back older bodies.
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
//
// queen.function_set is the one row naming the installed function set. It
// is created here rather than by a numbered migration: a new migration
// makes every node of the previous release refuse the database, and this
// table exists precisely so that those nodes can keep running during the
// upgrade (nodes from before it ignore it).
const migrationsTable = `
CREATE SCHEMA IF NOT EXISTS queen;
CREATE TABLE IF NOT EXISTS queen.schema_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS queen.function_set (
    one          boolean PRIMARY KEY DEFAULT true CHECK (one),
    version      integer NOT NULL,
    hash         text NOT NULL,
    installed_at timestamptz NOT NULL DEFAULT now()
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
// migrations first, then this build's SQL functions unless the database
// holds a newer set. Safe to run at every start and from several nodes at
// once. Errors that a retry cannot fix wrap ErrSchema.
//
// Everything runs in one transaction under a transaction-scoped lock: no
// session state outlives it, so Migrate works through a transaction-mode
// pooler (PgBouncer; docs/operations.md, "Behind PgBouncer") as well as
// directly, and a failure half way leaves the schema as it was.
func (db *DB) Migrate(ctx context.Context) error {
	set, err := embeddedFunctionSet()
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return db.migrate(ctx, set)
}

// functionsOutcome is what migrate did with the function set.
type functionsOutcome struct {
	installed bool
	dbVersion int // the database's set before this start (0 = none recorded)
}

// migrate is Migrate with the function set given, so that tests can play
// nodes of other versions.
func (db *DB) migrate(ctx context.Context, set functionSet) error {
	conn, err := db.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("migrate: acquire: %w", err)
	}
	defer conn.Release()
	all, err := migrations()
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	var applied []migration
	var fn functionsOutcome
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", migrationLock); err != nil {
			return fmt.Errorf("lock: %w", err)
		}
		// Simple protocol: these texts hold several statements.
		if _, err := tx.Exec(ctx, migrationsTable, pgx.QueryExecModeSimpleProtocol); err != nil {
			return fmt.Errorf("version table: %w", permanent(err))
		}
		var current int
		if err := tx.QueryRow(ctx, "SELECT COALESCE(max(version), 0) FROM queen.schema_migrations").Scan(&current); err != nil {
			return fmt.Errorf("read version: %w", err)
		}
		if current > len(all) {
			// A newer node migrated this database; this node's functions could
			// not be trusted against its tables.
			return &schemaError{err: fmt.Errorf("database schema version %d is newer than this node's %d; run a node of the newer release", current, len(all))}
		}
		for _, m := range all[current:] {
			if _, err := tx.Exec(ctx, m.SQL, pgx.QueryExecModeSimpleProtocol); err != nil {
				return fmt.Errorf("apply %d_%s: %w", m.Version, m.Name, permanent(err))
			}
			if _, err := tx.Exec(ctx, "INSERT INTO queen.schema_migrations (version, name) VALUES ($1, $2)", m.Version, m.Name); err != nil {
				return fmt.Errorf("record %d_%s: %w", m.Version, m.Name, permanent(err))
			}
			applied = append(applied, m)
		}
		fn, err = installFunctions(ctx, tx, set)
		return err
	})
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	for _, m := range applied {
		db.log.Info("schema migration applied", "version", m.Version, "name", m.Name)
	}
	switch {
	case !fn.installed:
		db.log.Info("database functions are newer than this node's; running on them",
			"database_function_set", fn.dbVersion, "node_function_set", set.Version)
	case fn.dbVersion != set.Version:
		db.log.Info("SQL functions installed", "function_set", set.Version, "previous", fn.dbVersion)
	}
	db.log.Debug("schema up to date", "version", len(all), "function_set", set.Version, "function_files", len(set.Files))
	return nil
}

// installFunctions applies the ordering rule of docs/storage.md ("Schema
// migrations") inside the migration transaction:
//
//   - no set recorded, or an older one: install this one and record it;
//   - the same number and hash: install again (a no-op for bodies already
//     there, and it restores any that a node from before queen.function_set
//     re-created with its older text);
//   - the same number with another hash: two builds disagree on what that
//     set is, refuse;
//   - a newer set: leave it, after checking that every function this set
//     creates exists there (the renaming rule keeps them compatible), and
//     refuse if one is missing.
func installFunctions(ctx context.Context, tx pgx.Tx, set functionSet) (functionsOutcome, error) {
	var out functionsOutcome
	var dbHash string
	err := tx.QueryRow(ctx, "SELECT version, hash FROM queen.function_set").Scan(&out.dbVersion, &dbHash)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return out, fmt.Errorf("read function set: %w", err)
	}
	hash := set.Hash()
	switch {
	case out.dbVersion > set.Version:
		sigs, err := set.Signatures()
		if err != nil {
			return out, fmt.Errorf("function signatures: %w", err)
		}
		rows, err := tx.Query(ctx, "SELECT s FROM unnest($1::text[]) AS s WHERE to_regprocedure(s) IS NULL", sigs)
		if err != nil {
			return out, fmt.Errorf("check functions: %w", err)
		}
		missing, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return out, fmt.Errorf("check functions: %w", err)
		}
		if len(missing) > 0 {
			return out, &schemaError{err: fmt.Errorf("the database's functions (set %d) are newer than this node's (set %d) and lack %s, which this node calls; run a node of the newer release",
				out.dbVersion, set.Version, strings.Join(missing, ", "))}
		}
		return out, nil
	case out.dbVersion == set.Version && dbHash != hash:
		return out, &schemaError{err: fmt.Errorf("the database's function set %d has hash %.12s, this node's set %d has %.12s: two builds carry different pg/sql/functions under one number (bump pg.FunctionSet with every change)",
			out.dbVersion, dbHash, set.Version, hash)}
	}
	for _, f := range set.Files {
		if _, err := tx.Exec(ctx, f.Body, pgx.QueryExecModeSimpleProtocol); err != nil {
			return out, fmt.Errorf("apply %s: %w", f.Name, permanent(err))
		}
	}
	if _, err := tx.Exec(ctx, `INSERT INTO queen.function_set AS f (version, hash) VALUES ($1, $2)
		ON CONFLICT (one) DO UPDATE SET version = EXCLUDED.version, hash = EXCLUDED.hash,
		    installed_at = CASE WHEN (f.version, f.hash) = (EXCLUDED.version, EXCLUDED.hash) THEN f.installed_at ELSE now() END`,
		set.Version, hash); err != nil {
		return out, fmt.Errorf("record function set: %w", permanent(err))
	}
	out.installed = true
	return out, nil
}
