package pgtemp

import (
	"context"
	"errors"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
)

func TestLifecycle(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	opts := DefaultOptions()
	opts.Logger = hclog.New(&hclog.LoggerOptions{Name: "pgtemp", Level: hclog.Debug, Output: testWriter{t}})
	s, err := Start(ctx, opts)
	if errors.Is(err, ErrNotInstalled) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()

	pid, port, dir := s.PID(), s.Port(), s.Dir()
	if pid == 0 || port == 0 || dir == "" {
		t.Fatalf("pid=%d port=%d dir=%q", pid, port, dir)
	}

	url, err := s.CreateDatabase(ctx, "Lifecycle-DB") // needs quoting
	if err != nil {
		t.Fatal(err)
	}
	exec := func(sql string) {
		t.Helper()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	count := func() int {
		t.Helper()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	exec("CREATE TABLE t (id int); INSERT INTO t VALUES (1), (2)")

	if err := s.StopKeepData(); err != nil {
		t.Fatal(err)
	}
	if s.PID() != 0 || alive(pid) {
		t.Fatalf("postgres pid %d still running after StopKeepData", pid)
	}
	if err := s.StartAgain(ctx); err != nil {
		t.Fatal(err)
	}
	if s.Port() != port {
		t.Fatalf("port changed: %d -> %d", port, s.Port())
	}
	if n := count(); n != 2 {
		t.Fatalf("after StopKeepData+StartAgain: %d rows, want 2", n)
	}

	// Crash and recover: committed rows must survive (fsync=off is fine
	// because the page cache survives a process kill).
	exec("INSERT INTO t VALUES (3)")
	pid = s.PID()
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if alive(pid) {
		t.Fatalf("postgres pid %d alive after Kill", pid)
	}
	if err := s.StartAgain(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 3 {
		t.Fatalf("after Kill+StartAgain: %d rows, want 3", n)
	}

	if err := s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.DropDatabase(ctx, "Lifecycle-DB"); err != nil {
		t.Fatal(err)
	}

	pid = s.PID()
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if alive(pid) {
		t.Fatalf("postgres pid %d alive after Stop", pid)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("dir %s not removed: %v", dir, err)
	}
	if err := s.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
}

func TestMissingBinaries(t *testing.T) {
	_, err := Start(context.Background(), Options{BinDir: t.TempDir()})
	if !errors.Is(err, ErrNotInstalled) {
		t.Fatalf("got %v, want ErrNotInstalled", err)
	}
}

// alive reports whether pid exists and is not a zombie waiting to be reaped
// by someone else (backends of a killed postmaster are reparented).
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true // no procfs: trust kill(0)
	}
	// Field 3 is the state; the command name (field 2) is in parentheses.
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == ')' && i+2 < len(b) {
			return b[i+2] != 'Z'
		}
	}
	return true
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
