package pgtemp

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
)

// TestStandbyFailover: a synchronous standby has every row the primary
// acknowledged, refuses writes until promoted, accepts them after, and a
// multi-host read-write URL finds whichever server is the primary.
func TestStandbyFailover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	opts := DefaultOptions()
	opts.Logger = hclog.New(&hclog.LoggerOptions{Name: "pgtemp", Level: hclog.Debug, Output: testWriter{t}})
	primary, err := Start(ctx, opts)
	if errors.Is(err, ErrNotInstalled) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer primary.Stop()
	if _, err := primary.CreateDatabase(ctx, "ha"); err != nil {
		t.Fatal(err)
	}
	standby, err := primary.StartStandby(ctx, "standby1")
	if err != nil {
		t.Fatal(err)
	}
	defer standby.Stop()
	if err := primary.RequireSyncStandby(ctx, "standby1"); err != nil {
		t.Fatal(err)
	}
	if r, err := standby.InRecovery(ctx); err != nil || !r {
		t.Fatalf("standby in recovery = %v, %v; want true", r, err)
	}

	url := MultiHostURL("ha", primary, standby)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if conn.PgConn().Conn().RemoteAddr().String() != "127.0.0.1:"+strconv.Itoa(primary.Port()) {
		t.Fatalf("multi-host URL connected to %s, want the primary", conn.PgConn().Conn().RemoteAddr())
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE t (n int); INSERT INTO t SELECT generate_series(1, 1000)"); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)

	if err := primary.Kill(); err != nil {
		t.Fatal(err)
	}
	// Neither server accepts writes now: a read-write connection must fail,
	// not land on the standby.
	if c, err := pgx.Connect(ctx, url); err == nil {
		c.Close(ctx)
		t.Fatal("read-write URL connected while only the standby was up")
	}
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	conn, err = pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&n); err != nil || n != 1000 {
		t.Fatalf("rows on the promoted standby: %d, %v; want 1000", n, err)
	}
	// Writes commit at once: the promoted server waits for no standby.
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	defer wcancel()
	if _, err := conn.Exec(wctx, "INSERT INTO t VALUES (1001)"); err != nil {
		t.Fatalf("write on the promoted standby: %v", err)
	}
}
