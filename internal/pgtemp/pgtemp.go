// Package pgtemp runs a disposable local PostgreSQL cluster in a temporary
// folder, for tests, the demo and CI.
//
// A Server owns one cluster: initdb into a fresh directory, the postgres
// postmaster started directly (so we hold its PID), trust authentication,
// TCP on 127.0.0.1 only and the unix socket inside the directory. The
// cluster can be stopped or killed and started again on the same port with
// the same data, which cluster tests use to simulate database outages.
// StartStandby (standby.go) adds a streaming standby of a running server,
// RequireSyncStandby makes the primary's commits wait for it, and Promote
// turns it into the primary, for failover tests.
package pgtemp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"reflect"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
)

// ErrNotInstalled is wrapped by Start when the PostgreSQL server binaries
// cannot be found; the error text names the command that installs them.
var ErrNotInstalled = errors.New("PostgreSQL server binaries not found")

// Options configure Start. The zero value is valid and means the defaults
// documented beside each field.
type Options struct {
	// BinDir holds initdb and postgres. "" = search: `pg_config --bindir`,
	// then the highest /usr/lib/postgresql/*/bin, then PATH.
	BinDir string
	// Port to listen on at 127.0.0.1. 0 = pick a free one.
	Port int
	// BaseDir is where the temporary cluster directory is created.
	// "" = os.TempDir(). Must be traversable by User.
	BaseDir string
	// User is the OS user that runs initdb and postgres when we are root
	// (both refuse to run as root). "" = "postgres". Ignored when not root.
	User string
	// Settings are extra server settings passed as `-c key=value`. They are
	// merged over DefaultSettings(); nil = just the defaults.
	Settings map[string]string
	// StartTimeout bounds initdb plus waiting for connections. 0 = 60s.
	StartTimeout time.Duration
	// StopTimeout is how long a fast shutdown may take before SIGKILL. 0 = 30s.
	StopTimeout time.Duration
	// Logger receives progress messages. nil = discard.
	Logger hclog.Logger
}

// DefaultSettings are tuned for throwaway test data: no fsync (a crash of
// the host loses data, which is fine here) and enough connections for
// parallel tests with pools.
//
// synchronous_commit stays on on purpose: with fsync=off it costs only a
// write() per commit (about 2% in pgbench), whereas off keeps commits in
// shared memory for up to ~600ms, so Kill() would lose transactions that
// were already acknowledged, and crash tests would report false data loss.
func DefaultSettings() map[string]string {
	return map[string]string{
		"fsync":              "off",
		"synchronous_commit": "on",
		"full_page_writes":   "off",
		"max_connections":    "300",
		"shared_buffers":     "256MB",
	}
}

// DefaultOptions returns Options with every default spelled out.
func DefaultOptions() Options {
	return Options{
		User:         "postgres",
		Settings:     DefaultSettings(),
		StartTimeout: 60 * time.Second,
		StopTimeout:  30 * time.Second,
		Logger:       hclog.NewNullLogger(),
	}
}

func (o Options) withDefaults() Options {
	d := DefaultOptions()
	if o.User == "" {
		o.User = d.User
	}
	settings := d.Settings
	for k, v := range o.Settings {
		settings[k] = v
	}
	o.Settings = settings
	if o.StartTimeout <= 0 {
		o.StartTimeout = d.StartTimeout
	}
	if o.StopTimeout <= 0 {
		o.StopTimeout = d.StopTimeout
	}
	if o.Logger == nil {
		o.Logger = d.Logger
	}
	if o.BaseDir == "" {
		o.BaseDir = os.TempDir()
	}
	return o
}

// Server is a running (or stopped, with data kept) temporary cluster.
// Its methods are safe for concurrent use.
type Server struct {
	opts     Options
	log      hclog.Logger
	initdb   string
	postgres string
	cred     *syscall.Credential // nil when not root
	dir      string
	port     int

	mu      sync.Mutex // serialises start/stop; guards proc and removed
	proc    *proc      // nil while stopped
	removed bool       // dir deleted by Stop
}

// proc is one run of the postmaster.
type proc struct {
	cmd     *exec.Cmd
	exited  chan struct{} // closed after cmd.Wait returned
	waitErr error         // cmd.Wait result; read only after exited is closed
}

// Start creates a new cluster in a temporary directory, starts it and waits
// until it accepts connections. Call Stop to shut it down and delete it.
func Start(ctx context.Context, opts Options) (*Server, error) {
	opts = opts.withDefaults()
	initdb, postgres, err := findBinaries(opts.BinDir)
	if err != nil {
		return nil, err
	}
	s := &Server{opts: opts, log: opts.Logger, initdb: initdb, postgres: postgres}
	if os.Geteuid() == 0 {
		if s.cred, err = LookupCredential(opts.User); err != nil {
			return nil, err
		}
	}

	ctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()

	if err := s.makeDir("pgtemp-"); err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			_ = s.Stop()
		}
	}()
	if err := s.prepareDir(); err != nil {
		return nil, err
	}
	if err := s.runInitdb(ctx); err != nil {
		return nil, err
	}

	// An auto-picked port can be taken by someone else between picking and
	// binding; retry a few times with a new port in that case.
	for attempt := 1; ; attempt++ {
		s.port = opts.Port
		if s.port == 0 {
			if s.port, err = freePort(); err != nil {
				return nil, err
			}
		}
		s.mu.Lock()
		err = s.startLocked(ctx)
		s.mu.Unlock()
		if err == nil {
			break
		}
		if opts.Port != 0 || attempt == 3 || !strings.Contains(err.Error(), "already in use") {
			return nil, err
		}
		s.log.Debug("port taken, retrying", "port", s.port)
	}
	ok = true
	s.log.Info("postgres started", "url", s.URL("postgres"), "pid", s.PID(), "dir", s.dir)
	return s, nil
}

// URL returns a connection URL for database db on this server.
func (s *Server) URL(db string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User("postgres"),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)),
		Path:     "/" + db,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// Port returns the TCP port on 127.0.0.1; it stays the same across restarts.
func (s *Server) Port() int { return s.port }

// Dir returns the cluster directory (data/, sock/ and postgres.log inside).
func (s *Server) Dir() string { return s.dir }

// LogFile returns the path of the server log, useful when a test fails.
func (s *Server) LogFile() string { return filepath.Join(s.dir, "postgres.log") }

// PID returns the postmaster PID, or 0 while stopped.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.cmd.Process.Pid
}

// Stop shuts the server down (fast shutdown, SIGKILL after StopTimeout) and
// deletes its directory. Calling it again is a no-op.
func (s *Server) Stop() error {
	err := s.StopKeepData()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.removed || s.dir == "" {
		return err
	}
	if rmErr := os.RemoveAll(s.dir); rmErr != nil {
		return errors.Join(err, fmt.Errorf("pgtemp: remove %s: %w", s.dir, rmErr))
	}
	s.removed = true
	return err
}

// StopKeepData shuts the server down cleanly but keeps the data directory
// so StartAgain can bring it back.
func (s *Server) StopKeepData() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	// SIGINT is PostgreSQL's "fast" shutdown: disconnect clients, checkpoint, exit.
	return s.stopLocked(syscall.SIGINT, s.opts.StopTimeout)
}

// Kill simulates a crash: SIGKILL to the postmaster and all its backends
// (they share a process group), keeping the data. StartAgain then runs crash
// recovery.
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopLocked(syscall.SIGKILL, 0)
}

// StartAgain starts a stopped or killed server on the same port with the
// same data and waits until it accepts connections.
func (s *Server) StartAgain(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		return errors.New("pgtemp: StartAgain: server is running")
	}
	if s.removed {
		return errors.New("pgtemp: StartAgain: server was stopped and its data removed")
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.StartTimeout)
	defer cancel()
	for {
		err := s.startLocked(ctx)
		if err == nil {
			break
		}
		// After a kill, the kernel may still count an exiting backend as
		// attached to the old shared memory block for a moment on a loaded
		// machine, and postgres refuses to start: try again until the
		// deadline.
		if !strings.Contains(err.Error(), "pre-existing shared memory block") || ctx.Err() != nil {
			return err
		}
		s.log.Debug("old shared memory still attached, starting again", "err", err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
	s.log.Info("postgres restarted", "pid", s.proc.cmd.Process.Pid, "port", s.port)
	return nil
}

// Restart is StopKeepData followed by StartAgain.
func (s *Server) Restart(ctx context.Context) error {
	if err := s.StopKeepData(); err != nil {
		return err
	}
	return s.StartAgain(ctx)
}

// CreateDatabase creates an empty database (from template0) and returns its URL.
func (s *Server) CreateDatabase(ctx context.Context, name string) (string, error) {
	err := s.exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE template0")
	if err != nil {
		return "", fmt.Errorf("pgtemp: create database %q: %w", name, err)
	}
	return s.URL(name), nil
}

// DropDatabase drops a database if it exists, disconnecting its clients.
func (s *Server) DropDatabase(ctx context.Context, name string) error {
	err := s.exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	if err != nil {
		return fmt.Errorf("pgtemp: drop database %q: %w", name, err)
	}
	return nil
}

func (s *Server) exec(ctx context.Context, sql string) error {
	conn, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}

func (s *Server) dataDir() string { return filepath.Join(s.dir, "data") }
func (s *Server) sockDir() string { return filepath.Join(s.dir, "sock") }

// prepareDir creates data/ and sock/ and hands everything to the server user.
func (s *Server) prepareDir() error {
	for _, d := range []string{s.dir, s.dataDir(), s.sockDir()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("pgtemp: %w", err)
		}
		if s.cred != nil {
			if err := os.Chown(d, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
				return fmt.Errorf("pgtemp: chown %s to %s: %w", d, s.opts.User, err)
			}
		}
	}
	return nil
}

func (s *Server) runInitdb(ctx context.Context) error {
	cmd := exec.CommandContext(ctx, s.initdb,
		"-D", s.dataDir(), "-A", "trust", "-U", "postgres", "-E", "UTF8",
		"--locale=C", "--no-sync")
	cmd.Dir = s.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgtemp: initdb: %w\n%s", err, bytes.TrimSpace(out))
	}
	s.log.Debug("initdb done", "dir", s.dataDir())
	return nil
}

// startLocked launches the postmaster and waits until it accepts
// connections. s.mu must be held.
func (s *Server) startLocked(ctx context.Context) error {
	logf, err := os.OpenFile(s.LogFile(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("pgtemp: open server log: %w", err)
	}
	defer logf.Close() // the child keeps its own copy of the descriptor

	args := []string{
		"-D", s.dataDir(),
		"-p", strconv.Itoa(s.port),
		"-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories=" + s.sockDir(),
	}
	keys := make([]string, 0, len(s.opts.Settings))
	for k := range s.opts.Settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		args = append(args, "-c", k+"="+s.opts.Settings[k])
	}
	cmd := exec.Command(s.postgres, args...)
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: s.cred,
		// Own process group: a Ctrl-C on the terminal reaches only us (we
		// shut postgres down in order), and Kill can signal the postmaster
		// together with its backends.
		Setpgid: true,
	}
	setParentDeathSignal(cmd.SysProcAttr)

	if err := StartOnDedicatedThread(cmd); err != nil {
		return fmt.Errorf("pgtemp: start postgres: %w", err)
	}
	p := &proc{cmd: cmd, exited: make(chan struct{})}
	s.proc = p
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()

	if err := s.waitReady(ctx, p); err != nil {
		_ = s.stopLocked(syscall.SIGKILL, 0)
		return fmt.Errorf("%w\n--- server log (last lines) ---\n%s", err, s.logTail(20))
	}
	return nil
}

// waitReady polls with real connections until one succeeds, the postmaster
// exits or ctx expires.
func (s *Server) waitReady(ctx context.Context, p *proc) error {
	var lastErr error
	for delay := 20 * time.Millisecond; ; delay = min(2*delay, 250*time.Millisecond) {
		attemptCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		conn, err := pgx.Connect(attemptCtx, s.URL("postgres"))
		if err == nil {
			// Make sure it is our server: if the port was taken, another
			// PostgreSQL may answer while ours fails to bind and exits.
			var dd string
			err = conn.QueryRow(attemptCtx, "SHOW data_directory").Scan(&dd)
			if err == nil && dd != s.dataDir() {
				err = fmt.Errorf("port %d is served by another PostgreSQL (data_directory %s)", s.port, dd)
			}
			conn.Close(context.Background())
		}
		cancel()
		if err == nil {
			return nil
		}
		lastErr = err
		select {
		case <-p.exited:
			return fmt.Errorf("pgtemp: postgres exited during startup (%v)", p.waitErr)
		case <-ctx.Done():
			return fmt.Errorf("pgtemp: postgres not accepting connections on port %d: %w (last error: %v)",
				s.port, ctx.Err(), lastErr)
		case <-time.After(delay):
		}
	}
}

// stopLocked sends sig to the postmaster (SIGKILL goes to its whole process
// group), waits up to timeout, then SIGKILLs the group. s.mu must be held.
func (s *Server) stopLocked(sig syscall.Signal, timeout time.Duration) error {
	if s.proc == nil {
		return nil
	}
	pid, exited := s.proc.cmd.Process.Pid, s.proc.exited
	signal := func(target int, sig syscall.Signal) error {
		if err := syscall.Kill(target, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("pgtemp: signal postgres pid %d: %w", pid, err)
		}
		return nil
	}
	if sig == syscall.SIGKILL {
		if err := signal(-pid, sig); err != nil {
			return err
		}
	} else {
		if err := signal(pid, sig); err != nil {
			return err
		}
		select {
		case <-exited:
		case <-time.After(timeout):
			s.log.Warn("postgres did not stop in time, killing", "pid", pid, "timeout", timeout)
			if err := signal(-pid, syscall.SIGKILL); err != nil {
				return err
			}
		}
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		return fmt.Errorf("pgtemp: postgres pid %d still running after SIGKILL", pid)
	}
	// Backends of a killed postmaster may outlive it for a moment while
	// still attached to the shared memory block, and a new postmaster
	// refuses to start until they are gone.
	waitGroupGone(pid, 10*time.Second)
	s.proc = nil
	s.log.Debug("postgres stopped", "pid", pid, "signal", sig)
	return nil
}

// waitGroupGone waits until no live (non-zombie) process is left in the
// process group pgid. Zombies are ignored: this container's init may reap
// them late, and they hold no shared memory.
func waitGroupGone(pgid int, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if !groupAlive(pgid) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func groupAlive(pgid int) bool {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return false
	}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		data, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// Fields after the parenthesised command: state, ppid, pgrp, ...
		i := strings.LastIndexByte(string(data), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(data[i+1:]))
		if len(f) > 2 && f[0] != "Z" && f[2] == strconv.Itoa(pgid) {
			return true
		}
	}
	return false
}

func (s *Server) logTail(n int) string {
	b, err := os.ReadFile(s.LogFile())
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// setParentDeathSignal asks the kernel (Linux, FreeBSD) to send SIGQUIT to
// the postmaster when its parent dies, so a killed or crashed test binary
// does not leave PostgreSQL running forever. SIGQUIT is "immediate
// shutdown": postgres stops its backends and frees shared memory itself.
// The field only exists on some platforms, so it is set by name to keep this
// file portable.
func setParentDeathSignal(attr *syscall.SysProcAttr) {
	if f := reflect.ValueOf(attr).Elem().FieldByName("Pdeathsig"); f.IsValid() && f.CanSet() {
		f.Set(reflect.ValueOf(syscall.SIGQUIT))
	}
}

var starter struct {
	once sync.Once
	reqs chan startReq
}

type startReq struct {
	cmd  *exec.Cmd
	errc chan error
}

// StartOnDedicatedThread runs cmd.Start on one goroutine that is locked to
// its OS thread for the life of the process. The parent-death signal fires
// when the *thread* that forked the child exits, not the process; a plain
// LockOSThread/Unlock around Start would return that thread to the
// scheduler, and the runtime terminates a thread whenever a goroutine exits
// while locked to it — killing postgres mid-test. A thread that never
// unlocks and never exits avoids that, at the cost of one idle thread.
func StartOnDedicatedThread(cmd *exec.Cmd) error {
	starter.once.Do(func() {
		starter.reqs = make(chan startReq)
		go func() {
			runtime.LockOSThread() // never unlocked, on purpose
			for r := range starter.reqs {
				r.errc <- r.cmd.Start()
			}
		}()
	})
	errc := make(chan error, 1)
	starter.reqs <- startReq{cmd, errc}
	return <-errc
}

// findBinaries returns the paths of initdb and postgres.
func findBinaries(binDir string) (initdb, postgres string, err error) {
	has := func(dir string) bool {
		for _, name := range []string{"initdb", "postgres"} {
			if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.IsDir() {
				return false
			}
		}
		return true
	}
	in := func(dir string) (string, string, error) {
		return filepath.Join(dir, "initdb"), filepath.Join(dir, "postgres"), nil
	}
	if binDir != "" {
		if has(binDir) {
			return in(binDir)
		}
		return "", "", fmt.Errorf("pgtemp: %w in BinDir %s", ErrNotInstalled, binDir)
	}
	// pg_config may come from libpq-dev without the server; check the result.
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		if dir := strings.TrimSpace(string(out)); has(dir) {
			return in(dir)
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { // numeric: 9.6 < 10 < 15
		vi, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(dirs[i])), 64)
		vj, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(dirs[j])), 64)
		return vi > vj
	})
	for _, dir := range dirs {
		if has(dir) {
			return in(dir)
		}
	}
	initdb, err1 := exec.LookPath("initdb")
	postgres, err2 := exec.LookPath("postgres")
	if err1 == nil && err2 == nil {
		return initdb, postgres, nil
	}
	return "", "", fmt.Errorf("pgtemp: %w (searched pg_config --bindir, /usr/lib/postgresql/*/bin, PATH); install with: %s",
		ErrNotInstalled, installHint())
}

// installHint names the one command that installs the server on this host.
func installHint() string {
	switch {
	case lookPathOK("apt-get"):
		return "apt-get install -y postgresql-15"
	case lookPathOK("dnf"):
		return "dnf install -y postgresql-server"
	case lookPathOK("apk"):
		return "apk add postgresql15"
	case lookPathOK("brew"):
		return "brew install postgresql@15"
	}
	return "apt-get install -y postgresql-15"
}

func lookPathOK(name string) bool {
	_, err := exec.LookPath(name)
	return err == nil
}

// LookupCredential is the uid and gid of user name, for a child that must
// not run as root (PostgreSQL's tools refuse to).
func LookupCredential(name string) (*syscall.Credential, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("pgtemp: running as root, so PostgreSQL must run as another user: %w", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("pgtemp: user %s: %w", name, err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// freePort asks the kernel for a free port on 127.0.0.1.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgtemp: pick free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// makeDir creates the server's temporary folder under opts.BaseDir, by its
// absolute path (postgres reports data_directory absolute).
func (s *Server) makeDir(prefix string) error {
	base, err := filepath.Abs(s.opts.BaseDir)
	if err != nil {
		return fmt.Errorf("pgtemp: %w", err)
	}
	if s.dir, err = os.MkdirTemp(base, prefix); err != nil {
		return fmt.Errorf("pgtemp: create temp dir: %w", err)
	}
	return nil
}

// StartChild starts cmd the way the server itself is started: as user (when
// running as root; PostgreSQL's tools refuse root), in its own process
// group, with a parent-death signal so it cannot outlive this process. For
// the daemons tests run beside a server (internal/pgbouncer).
func StartChild(cmd *exec.Cmd, user string) error {
	attr := &syscall.SysProcAttr{Setpgid: true}
	if os.Geteuid() == 0 {
		cred, err := LookupCredential(user)
		if err != nil {
			return err
		}
		attr.Credential = cred
	}
	setParentDeathSignal(attr)
	cmd.SysProcAttr = attr
	return StartOnDedicatedThread(cmd)
}
