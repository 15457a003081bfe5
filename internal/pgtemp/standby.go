package pgtemp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// StartStandby clones s with `pg_basebackup -R` into a new temporary
// directory and starts the copy as a streaming hot standby of s on another
// free port of 127.0.0.1. name is the standby's application_name, which
// RequireSyncStandby on the primary matches. The standby runs with the
// primary's options except synchronous_standby_names, which is empty on it:
// once promoted it has no standby of its own, and a non-empty list would
// make every commit on it wait forever.
//
// Stop (or Kill) the standby like any Server; Promote turns it into a
// primary.
func (s *Server) StartStandby(ctx context.Context, name string) (*Server, error) {
	if name == "" || strings.ContainsAny(name, " '\\\"") {
		return nil, fmt.Errorf("pgtemp: standby name %q: want a plain word", name)
	}
	if s.PID() == 0 {
		return nil, errors.New("pgtemp: StartStandby: the primary is not running")
	}
	opts := s.opts
	opts.Port = 0
	settings := make(map[string]string, len(s.opts.Settings)+2)
	for k, v := range s.opts.Settings {
		settings[k] = v
	}
	settings["synchronous_standby_names"] = ""
	// On the command line, so it wins over what pg_basebackup -R wrote to
	// postgresql.auto.conf: application_name is what the primary's
	// synchronous_standby_names names.
	settings["primary_conninfo"] = fmt.Sprintf("host=127.0.0.1 port=%d user=postgres application_name=%s", s.port, name)
	opts.Settings = settings

	st := &Server{opts: opts, log: s.log.Named(name), initdb: s.initdb, postgres: s.postgres, cred: s.cred}
	ctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()
	if err := st.makeDir("pgtemp-standby-"); err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			_ = st.Stop()
		}
	}()
	if err := st.prepareDir(); err != nil {
		return nil, err
	}
	// -X stream: the WAL written during the copy comes along, so the
	// standby is consistent on its own; -R writes standby.signal.
	cmd := exec.CommandContext(ctx, filepath.Join(filepath.Dir(s.initdb), "pg_basebackup"),
		"-D", st.dataDir(), "-h", "127.0.0.1", "-p", strconv.Itoa(s.port), "-U", "postgres",
		"-X", "stream", "-R", "--checkpoint=fast", "--no-sync")
	cmd.Dir = st.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("pgtemp: pg_basebackup: %w\n%s", err, bytes.TrimSpace(out))
	}
	for attempt := 1; ; attempt++ {
		var err error
		if st.port, err = freePort(); err != nil {
			return nil, err
		}
		st.mu.Lock()
		err = st.startLocked(ctx)
		st.mu.Unlock()
		if err == nil {
			break
		}
		if attempt == 3 || !strings.Contains(err.Error(), "already in use") {
			return nil, err
		}
	}
	ok = true
	st.log.Info("standby started", "port", st.port, "pid", st.PID(), "primary_port", s.port, "dir", st.dir)
	return st, nil
}

// RequireSyncStandby makes commits on s wait until the standby named name
// has flushed them (ALTER SYSTEM synchronous_standby_names, then a reload),
// and waits until that standby is streaming as "sync". From then on a
// commit acknowledged to a client survives the loss of s. The setting must
// not be among the Options' Settings: the command line would override it.
func (s *Server) RequireSyncStandby(ctx context.Context, name string) error {
	if _, ok := s.opts.Settings["synchronous_standby_names"]; ok {
		return errors.New("pgtemp: RequireSyncStandby: synchronous_standby_names is set in the server's Settings")
	}
	conn, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		return fmt.Errorf("pgtemp: require sync standby: %w", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "ALTER SYSTEM SET synchronous_standby_names = "+quoteLiteral(`"`+name+`"`)); err != nil {
		return fmt.Errorf("pgtemp: set synchronous_standby_names: %w", err)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		return fmt.Errorf("pgtemp: reload: %w", err)
	}
	for {
		var state string
		err := conn.QueryRow(ctx, "SELECT sync_state FROM pg_stat_replication WHERE application_name = $1 AND state = 'streaming'", name).Scan(&state)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("pgtemp: pg_stat_replication: %w", err)
		}
		if state == "sync" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgtemp: standby %q not streaming synchronously (state %q): %w", name, state, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Promote turns a standby into a primary (pg_promote, waiting up to 60 s)
// and returns once it accepts writes.
func (s *Server) Promote(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		return fmt.Errorf("pgtemp: promote: %w", err)
	}
	defer conn.Close(context.Background())
	var done bool
	if err := conn.QueryRow(ctx, "SELECT pg_promote(true, 60)").Scan(&done); err != nil {
		return fmt.Errorf("pgtemp: pg_promote: %w", err)
	}
	if !done {
		return errors.New("pgtemp: pg_promote: not promoted within 60 s")
	}
	s.log.Info("standby promoted", "port", s.port)
	return nil
}

// InRecovery tells whether the server is a standby (pg_is_in_recovery).
func (s *Server) InRecovery(ctx context.Context) (bool, error) {
	conn, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		return false, fmt.Errorf("pgtemp: in recovery: %w", err)
	}
	defer conn.Close(context.Background())
	var r bool
	if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&r); err != nil {
		return false, fmt.Errorf("pgtemp: pg_is_in_recovery: %w", err)
	}
	return r, nil
}

// MultiHostURL is a libpq/pgx URL naming every server, in order, for
// database db, with target_session_attrs=read-write: a client connects to
// the first one that accepts writes, which after a failover is the
// promoted standby (docs/operations.md, "Running on a highly available
// PostgreSQL").
func MultiHostURL(db string, servers ...*Server) string {
	hosts := make([]string, len(servers))
	for i, s := range servers {
		hosts[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
	}
	return "postgres://postgres@" + strings.Join(hosts, ",") + "/" + url.PathEscape(db) +
		"?sslmode=disable&target_session_attrs=read-write"
}

// quoteLiteral quotes s as an SQL string literal.
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
