package pg

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"queen-node/internal/pgtemp"
	"queen-node/internal/pgtest"
)

// A statement whose server dies under it (a hard-killed primary during a
// failover, docs/operations.md "Running on a highly available PostgreSQL")
// fails with the connection's end of file, which must count as
// "unavailable" (503), not as a failed statement (500).
func TestKilledServerIsUnavailable(t *testing.T) {
	if testing.Short() {
		t.Skip("starts its own PostgreSQL")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := pgtemp.Start(ctx, pgtemp.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	db, err := Open(ctx, srv.URL("postgres"), 4, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	done := make(chan error, 1)
	go func() {
		// QueryRow, as the typed calls (Pop, Ack) use.
		var one int
		done <- db.pool.QueryRow(ctx, "SELECT 1 FROM pg_sleep(60)").Scan(&one)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		if err := db.pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE query = 'SELECT 1 FROM pg_sleep(60)' AND state = 'active'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the sleeping statement never started")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	err = <-done
	if err == nil {
		t.Fatal("statement survived the kill")
	}
	t.Logf("error after the kill: %T %v", err, err)
	if !IsUnavailable(fmt.Errorf("pop q: %w", err)) {
		t.Fatalf("error of a statement cut by a killed server not classified unavailable: %T %v", err, err)
	}
}

func TestIsUnavailableClasses(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("ack: %w", io.ErrUnexpectedEOF), true},
		{fmt.Errorf("read buffer: %w", io.EOF), false},
		{fmt.Errorf("push: %w", pgconn.ErrConnClosed), true},
		{&pgconn.PgError{Code: "57P01"}, true},
		{&pgconn.PgError{Code: "08006"}, true},
		{&pgconn.PgError{Code: "23505"}, false},
		{errors.New("bad row"), false},
		{nil, false},
	} {
		if got := IsUnavailable(c.err); got != c.want {
			t.Errorf("IsUnavailable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// A server that refuses a new connection with an error of its own (no
// free connection slot, 53300) is unavailable, not a failed statement:
// the connect error wraps a PostgreSQL error, and its code alone must not
// decide. So is a statement that finds the server read-only (25006: a
// primary demoted under the node before the multi-host URL moves on).
func TestRefusedConnectionIsUnavailable(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	role := fmt.Sprintf("nolimit_%d", time.Now().UnixNano())
	if _, err := admin.Exec(ctx, "CREATE ROLE "+role+" LOGIN CONNECTION LIMIT 0"); err != nil {
		t.Fatal(err)
	}
	defer admin.Exec(ctx, "DROP ROLE "+role) //nolint:errcheck
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.User = role
	_, err = pgx.ConnectConfig(ctx, cfg)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "53300" {
		t.Fatalf("connect over the role's limit: %T %v, want a 53300 refusal", err, err)
	}
	if !IsUnavailable(err) {
		t.Fatalf("a refused connection (%v) is not unavailable", err)
	}
	if !IsUnavailable(fmt.Errorf("push: %w", &pgconn.PgError{Code: "25006"})) {
		t.Fatal("a read-only server (25006) is not unavailable")
	}
}
