// Package pgtest gives _test.go files a PostgreSQL server and a fresh
// database per test.
//
// Use it from TestMain:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
// and in tests:
//
//	url := pgtest.NewDatabase(t)
//
// When QUEEN_TEST_PG_URL is set (as `make test` does through cmd/pgtemp)
// all test binaries share that server; otherwise each test binary starts
// its own disposable server with internal/pgtemp.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"

	"queen-node/internal/pgtemp"
)

// EnvURL names the variable holding an external server URL; its database
// part is ignored.
const EnvURL = "QUEEN_TEST_PG_URL"

var (
	serverURL string         // admin URL (database "postgres")
	server    *pgtemp.Server // nil when external
	counter   atomic.Int64
)

// Main runs the tests of a package against a PostgreSQL server and exits
// with their exit code. Call it from TestMain.
func Main(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if env := os.Getenv(EnvURL); env != "" {
		u, err := withDatabase(env, "postgres")
		if err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: %s: %v\n", EnvURL, err)
			return 1
		}
		serverURL = u
		return m.Run()
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	opts := pgtemp.DefaultOptions()
	opts.Logger = hclog.New(&hclog.LoggerOptions{Name: "pgtemp", Level: hclog.Warn, Output: os.Stderr})
	s, err := pgtemp.Start(ctx, opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: %v\n(or set %s to an existing server)\n", err, EnvURL)
		return 1
	}
	server, serverURL = s, s.URL("postgres")
	// If a test panics or times out the process dies without reaching
	// Stop; pgtemp's parent-death signal still shuts postgres down.
	code := m.Run()
	if err := s.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// ServerURL returns the URL of the server's "postgres" database.
func ServerURL() string {
	mustMain()
	return serverURL
}

// Server returns the pgtemp server started by Main, or nil when tests use an
// external server from QUEEN_TEST_PG_URL (tests that restart PostgreSQL
// should then start their own pgtemp server or skip).
func Server() *pgtemp.Server {
	mustMain()
	return server
}

// NewDatabase creates a fresh, uniquely named, empty database, drops it when
// the test ends and returns its URL. Safe for parallel tests.
func NewDatabase(t testing.TB) string {
	t.Helper()
	mustMain()
	name := dbName(t.Name())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := adminExec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE template0"); err != nil {
		t.Fatalf("pgtest: create database %s: %v", name, err)
	}
	dbURL, err := withDatabase(serverURL, name)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// FORCE disconnects pools the test forgot to close.
		if err := adminExec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Logf("pgtest: drop database %s: %v", name, err)
		}
	})
	return dbURL
}

func mustMain() {
	if serverURL == "" {
		panic("pgtest: call pgtest.Main(m) from TestMain first")
	}
}

func adminExec(ctx context.Context, sql string) error {
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}

// dbName builds a name that is unique across tests, test binaries and
// machines sharing one server, readable in psql, and within PostgreSQL's
// 63-byte identifier limit.
func dbName(testName string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(testName) {
		if r < unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsDigit(r)) {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
		if b.Len() >= 32 {
			break
		}
	}
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	return fmt.Sprintf("t_%s_%d_%d_%s", b.String(), os.Getpid(), counter.Add(1), hex.EncodeToString(rnd[:]))
}

// withDatabase replaces the database in a postgres:// URL.
func withDatabase(raw, db string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", fmt.Errorf("not a postgres:// URL: %q", raw)
	}
	u.Path, u.RawPath = "/"+db, ""
	return u.String(), nil
}

// TransactionCount returns the transactions (committed and rolled back) the
// database at url has run, from pg_stat_database. It counts its own query
// too: subtract one per call between two readings.
func TransactionCount(ctx context.Context, url string) (int64, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return 0, fmt.Errorf("pgtest: connect: %w", err)
	}
	defer conn.Close(ctx)
	var n int64
	err = conn.QueryRow(ctx, `SELECT xact_commit + xact_rollback FROM pg_stat_database
		WHERE datname = current_database()`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("pgtest: pg_stat_database: %w", err)
	}
	return n, nil
}

// Int64s runs query on the database at url and returns the first column of
// its rows, each an integer (NULL reads as 0): for tests that check what is
// stored, e.g. sizes per transaction, without importing pgx themselves.
func Int64s(ctx context.Context, url, query string, args ...any) ([]int64, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("pgtest: connect: %w", err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	var out []int64
	for rows.Next() {
		var v *int64
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return nil, fmt.Errorf("pgtest: scan: %w", err)
		}
		if v == nil {
			out = append(out, 0)
		} else {
			out = append(out, *v)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	return out, nil
}
