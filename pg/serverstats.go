package pg

// Server facts and counters for the benchmark suite (internal/suite,
// docs/benchmarks.md): the version and settings it records in
// docs/BENCHMARKS.md, and the transaction counter of its idle-cost scenario.

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// ServerSetting is one setting as SHOW prints it ("1GB", "15min").
type ServerSetting struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// ServerFacts returns the server's version string and the named settings,
// in the order asked (a name the server does not know is skipped).
func ServerFacts(ctx context.Context, url string, names []string) (string, []ServerSetting, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return "", nil, fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.Background())
	var version string
	if err := conn.QueryRow(ctx, "SELECT version()").Scan(&version); err != nil {
		return "", nil, fmt.Errorf("version: %w", err)
	}
	var out []ServerSetting
	for _, n := range names {
		var s ServerSetting
		err := conn.QueryRow(ctx, "SELECT name, current_setting(name) FROM pg_settings WHERE name = $1", n).
			Scan(&s.Name, &s.Value)
		if err == pgx.ErrNoRows {
			continue
		}
		if err != nil {
			return "", nil, fmt.Errorf("setting %s: %w", n, err)
		}
		out = append(out, s)
	}
	return version, out, nil
}

// XactCommits returns pg_stat_database.xact_commit + xact_rollback of the
// URL's database. Backends flush these counters when they go idle (at most
// about once a second), so differences over a few seconds are approximate.
func XactCommits(ctx context.Context, url string) (int64, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return 0, fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.Background())
	var n int64
	err = conn.QueryRow(ctx, `SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("pg_stat_database: %w", err)
	}
	return n, nil
}
