// Package patroni runs a disposable PostgreSQL cluster managed by Patroni,
// with a three-member etcd as its store, all on 127.0.0.1 in one temporary
// folder, for the high-availability cluster test (cluster-test,
// TestPatroniFailover; docs/cluster-tests.md, "Failover under Patroni").
//
// Each member is a "machine" stand-in: one etcd member, one Patroni and the
// PostgreSQL Patroni runs, on ports of their own. The test drives what an
// operator or a failure would do to them: kill a member's PostgreSQL, ask
// for a switchover (patronictl), stop a whole machine. Everything is
// started here and stopped by PID in Close, which also reports any process
// of the cluster that outlived it (Strays).
//
// Patroni runs initdb and postgres, and PostgreSQL refuses to run as root:
// when the caller is root, Patroni runs as Options.User ("postgres") and
// its folders belong to that user. etcd runs as the caller. Nothing here
// touches a system cluster: data, sockets and configuration all live in
// the temporary folder. The binaries come from Debian's patroni, etcd-server
// and etcd-client packages (scripts/ensure-ha.sh installs them).
package patroni

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"queen-node/internal/localnet"
	"queen-node/internal/pgtemp"
)

// Options configure Start. Zero fields take the defaults beside them.
type Options struct {
	// Members is the number of machines: etcd members and Patroni members
	// alike. Default 3 (etcd keeps its quorum when one machine is lost, and
	// a synchronous standby is left after a failover).
	Members int
	// BaseDir holds the temporary folder. "" = os.TempDir().
	BaseDir string
	// User runs Patroni (and so initdb and postgres) when the caller is
	// root. "" = "postgres". Ignored when not root.
	User string
	// BinDir holds the PostgreSQL binaries. "" = the highest
	// /usr/lib/postgresql/*/bin.
	BinDir string

	// Patroni's dynamic settings (docs/operations.md, "Running on
	// Patroni"), in seconds: the leader key's time to live (default 15), the
	// pause between Patroni's loops (default 2), and how long Patroni
	// retries etcd and PostgreSQL before it demotes (default 5). Patroni
	// wants TTL >= LoopWait + 2*RetryTimeout.
	TTL, LoopWait, RetryTimeout int
	// MaximumLagOnFailover is the most WAL, in bytes, a replica may lag
	// and still be promoted. Default 1 MiB (Patroni's own default). With
	// synchronous mode only the synchronous standby is promoted anyway.
	MaximumLagOnFailover int
	// PrimaryStartTimeout is how long, in seconds, Patroni tries to restart
	// a crashed primary in place before failing over. 0 here means fail over
	// at once (when a synchronous standby can take over); Patroni's own
	// default is 300.
	PrimaryStartTimeout int
	// Parameters are PostgreSQL settings over the defaults below.
	Parameters map[string]string

	// Logf receives progress lines. nil = discard.
	Logf func(format string, args ...any)
}

func (o Options) withDefaults() Options {
	if o.Members == 0 {
		o.Members = 3
	}
	if o.BaseDir == "" {
		o.BaseDir = os.TempDir()
	}
	if o.User == "" {
		o.User = "postgres"
	}
	if o.TTL == 0 {
		o.TTL = 15
	}
	if o.LoopWait == 0 {
		o.LoopWait = 2
	}
	if o.RetryTimeout == 0 {
		o.RetryTimeout = 5
	}
	if o.MaximumLagOnFailover == 0 {
		o.MaximumLagOnFailover = 1 << 20
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	return o
}

// defaultParameters suit throwaway test data on a shared machine. fsync is
// off: the test kills processes, never the machine, so what a process wrote
// is in the page cache and survives (a production cluster keeps fsync on).
// full_page_writes stays on: pg_rewind needs it.
func defaultParameters() map[string]string {
	return map[string]string{
		"max_connections":  "200",
		"shared_buffers":   "64MB",
		"fsync":            "off",
		"max_wal_senders":  "10",
		"wal_keep_size":    "256MB",
		"log_min_messages": "warning",
	}
}

// Machine is one member: its etcd, its Patroni and the PostgreSQL Patroni
// runs.
type Machine struct {
	Name           string // Patroni member name, "pg1", ...
	EtcdName       string // "etcd1", ...
	PGPort         int    // PostgreSQL on 127.0.0.1
	APIPort        int    // Patroni's REST API on 127.0.0.1
	EtcdClientPort int
	EtcdPeerPort   int

	dir     string // owned by Options.User: data/, patroni.yml, patroni.log
	etcdDir string

	mu      sync.Mutex
	etcd    *proc
	patroni *proc
	stopped bool // StopMachine or FreezeMachine was called
	frozen  bool // FreezeMachine was called
}

// DataDir is the member's PostgreSQL data directory.
func (m *Machine) DataDir() string { return filepath.Join(m.dir, "data") }

// PatroniLog is the path of the member's Patroni log (PostgreSQL's own
// output goes there too).
func (m *Machine) PatroniLog() string { return filepath.Join(m.dir, "patroni.log") }

// EtcdLog is the path of the member's etcd log.
func (m *Machine) EtcdLog() string { return filepath.Join(m.etcdDir, "etcd.log") }

// Stopped tells whether StopMachine took this machine down.
func (m *Machine) Stopped() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.stopped
}

// Cluster is a running etcd and Patroni cluster.
type Cluster struct {
	opts     Options
	dir      string
	scope    string
	binDir   string
	cred     *syscall.Credential // nil when not root
	machines []*Machine
	client   *http.Client

	mu      sync.Mutex
	groups  map[int]bool // process groups of postmasters seen, for Close and Strays
	closed  bool
	removed bool
}

// Start creates the folder, starts the etcd members, then the Patroni
// members, and waits until Patroni reports a running leader, a synchronous
// standby and every member running on the leader's timeline. On error
// everything started is stopped again.
func Start(ctx context.Context, o Options) (_ *Cluster, err error) {
	o = o.withDefaults()
	for _, bin := range []string{"etcd", "patroni", "patronictl"} {
		if _, err := exec.LookPath(bin); err != nil {
			return nil, fmt.Errorf("patroni: %s not found (bash scripts/ensure-ha.sh installs it): %w", bin, err)
		}
	}
	binDir := o.BinDir
	if binDir == "" {
		if binDir, err = findBinDir(); err != nil {
			return nil, err
		}
	}
	c := &Cluster{opts: o, binDir: binDir, groups: map[int]bool{},
		client: &http.Client{Timeout: 3 * time.Second}}
	if os.Geteuid() == 0 {
		if c.cred, err = pgtemp.LookupCredential(o.User); err != nil {
			return nil, err
		}
	}
	base, err := filepath.Abs(o.BaseDir)
	if err != nil {
		return nil, fmt.Errorf("patroni: %w", err)
	}
	if c.dir, err = os.MkdirTemp(base, "queen-ha-"); err != nil {
		return nil, fmt.Errorf("patroni: create the cluster folder: %w", err)
	}
	// The scope names the cluster in etcd and, as PostgreSQL's
	// cluster_name, in every backend's process title, which Strays looks
	// for.
	c.scope = filepath.Base(c.dir)
	defer func() {
		if err != nil {
			err = errors.Join(err, c.Close())
		}
	}()
	if err := os.Chmod(c.dir, 0o755); err != nil { // Patroni's user must reach its folder
		return nil, fmt.Errorf("patroni: %w", err)
	}
	for i := 1; i <= o.Members; i++ {
		m := &Machine{Name: fmt.Sprintf("pg%d", i), EtcdName: fmt.Sprintf("etcd%d", i),
			dir: filepath.Join(c.dir, fmt.Sprintf("pg%d", i)), etcdDir: filepath.Join(c.dir, fmt.Sprintf("etcd%d", i))}
		if err := c.ports(m); err != nil {
			return nil, err
		}
		c.machines = append(c.machines, m)
	}
	for _, m := range c.machines {
		if err := c.startEtcd(m); err != nil {
			return nil, err
		}
	}
	if err := c.waitEtcd(ctx); err != nil {
		return nil, err
	}
	for _, m := range c.machines {
		if err := c.startPatroni(m); err != nil {
			return nil, err
		}
	}
	st, err := c.WaitHealthy(ctx)
	if err != nil {
		return nil, err
	}
	o.Logf("patroni: cluster %s up in %s: leader %s, synchronous standby %s", c.scope, c.dir, st.Leader().Name, st.SyncStandby().Name)
	return c, nil
}

// ports picks the machine's four free ports, all different.
func (c *Cluster) ports(m *Machine) error {
	seen := map[int]bool{}
	for _, c := range c.machines {
		for _, p := range []int{c.PGPort, c.APIPort, c.EtcdClientPort, c.EtcdPeerPort} {
			seen[p] = true
		}
	}
	for _, p := range []*int{&m.PGPort, &m.APIPort, &m.EtcdClientPort, &m.EtcdPeerPort} {
		for attempt := 0; ; attempt++ {
			port, err := localnet.FreePort("127.0.0.1", false)
			if err != nil {
				return fmt.Errorf("patroni: %w", err)
			}
			if !seen[port] {
				*p, seen[port] = port, true
				break
			}
			if attempt > 20 {
				return errors.New("patroni: no distinct free ports")
			}
		}
	}
	return nil
}

// Dir is the cluster's temporary folder.
func (c *Cluster) Dir() string { return c.dir }

// Scope is the Patroni cluster name (the folder's name).
func (c *Cluster) Scope() string { return c.scope }

// Machines returns every machine, stopped ones included.
func (c *Cluster) Machines() []*Machine { return append([]*Machine(nil), c.machines...) }

// Machine returns the machine of the Patroni member name, or nil.
func (c *Cluster) Machine(name string) *Machine {
	for _, m := range c.machines {
		if m.Name == name {
			return m
		}
	}
	return nil
}

// URL is the multi-host URL of database db naming every member's
// PostgreSQL with target_session_attrs=read-write: a client connects to
// whichever is the primary (docs/operations.md, "Running on Patroni").
func (c *Cluster) URL(db string) string {
	hosts := make([]string, len(c.machines))
	for i, m := range c.machines {
		hosts[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(m.PGPort))
	}
	return "postgres://postgres@" + strings.Join(hosts, ",") + "/" + db + "?sslmode=disable&target_session_attrs=read-write"
}

// ---------------------------------------------------------------------------
// etcd

func (c *Cluster) startEtcd(m *Machine) error {
	if err := os.MkdirAll(m.etcdDir, 0o700); err != nil {
		return fmt.Errorf("patroni: %w", err)
	}
	var initial []string
	for _, o := range c.machines {
		initial = append(initial, fmt.Sprintf("%s=http://127.0.0.1:%d", o.EtcdName, o.EtcdPeerPort))
	}
	client := fmt.Sprintf("http://127.0.0.1:%d", m.EtcdClientPort)
	peer := fmt.Sprintf("http://127.0.0.1:%d", m.EtcdPeerPort)
	args := []string{
		"--name", m.EtcdName,
		"--data-dir", filepath.Join(m.etcdDir, "data"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", strings.Join(initial, ","),
		"--initial-cluster-token", c.scope, "--initial-cluster-state", "new",
		// Tolerant of a loaded two-core machine: the defaults (100 ms,
		// 1 s) make a starved member call elections that are not needed.
		"--heartbeat-interval", "250", "--election-timeout", "2500",
		"--logger", "zap", "--log-level", "warn",
	}
	p, err := startProc(exec.Command("etcd", args...), m.EtcdLog(), nil, syscall.SIGKILL)
	if err != nil {
		return fmt.Errorf("patroni: start %s: %w", m.EtcdName, err)
	}
	m.mu.Lock()
	m.etcd = p
	m.mu.Unlock()
	return nil
}

// waitEtcd waits until every member answers its health check with true.
func (c *Cluster) waitEtcd(ctx context.Context) error {
	for _, m := range c.machines {
		for {
			var h struct {
				Health string `json:"health"`
			}
			err := c.getJSON(ctx, fmt.Sprintf("http://127.0.0.1:%d/health", m.EtcdClientPort), &h)
			if err == nil && h.Health == "true" {
				break
			}
			select {
			case <-m.etcd.exited:
				return fmt.Errorf("patroni: %s exited at start:\n%s", m.EtcdName, localnet.LogTail(m.EtcdLog(), 20))
			case <-ctx.Done():
				return fmt.Errorf("patroni: %s not healthy (%v): %w", m.EtcdName, err, ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

func (c *Cluster) etcdHosts() []string {
	var hosts []string
	for _, m := range c.machines {
		hosts = append(hosts, fmt.Sprintf("127.0.0.1:%d", m.EtcdClientPort))
	}
	return hosts
}

// ---------------------------------------------------------------------------
// Patroni

// patroniConfig is the member's configuration, written as JSON (which is
// YAML). The settings that matter for failover are explained in
// docs/operations.md, "Running on Patroni".
func (c *Cluster) patroniConfig(m *Machine) map[string]any {
	o := c.opts
	params := defaultParameters()
	for k, v := range o.Parameters {
		params[k] = v
	}
	params["unix_socket_directories"] = m.dir
	pgAddr := fmt.Sprintf("127.0.0.1:%d", m.PGPort)
	apiAddr := fmt.Sprintf("127.0.0.1:%d", m.APIPort)
	return map[string]any{
		"scope":     c.scope,
		"namespace": "/queen-ha/",
		"name":      m.Name,
		"log":       map[string]any{"level": "INFO"},
		"restapi":   map[string]any{"listen": apiAddr, "connect_address": apiAddr},
		// etcd's v3 API through its HTTP gateway.
		"etcd3": map[string]any{"hosts": c.etcdHosts(), "protocol": "http"},
		"bootstrap": map[string]any{
			"dcs": map[string]any{
				"ttl":                     o.TTL,
				"loop_wait":               o.LoopWait,
				"retry_timeout":           o.RetryTimeout,
				"maximum_lag_on_failover": o.MaximumLagOnFailover,
				"primary_start_timeout":   o.PrimaryStartTimeout,
				// A commit returns once the synchronous standby has it, so
				// an acknowledged push survives a failover; not strict, so
				// the last member left still takes writes.
				"synchronous_mode":        true,
				"synchronous_mode_strict": false,
				"postgresql": map[string]any{
					"use_pg_rewind": true,
					"use_slots":     true,
					"parameters":    params,
				},
			},
			"initdb": []any{map[string]any{"encoding": "UTF8"}, map[string]any{"locale": "C"}},
		},
		"postgresql": map[string]any{
			"listen":          pgAddr,
			"connect_address": pgAddr,
			"data_dir":        m.DataDir(),
			"bin_dir":         c.binDir,
			"pgpass":          filepath.Join(m.dir, "pgpass"),
			// Trust on loopback: the passwords below are never asked for.
			"authentication": map[string]any{
				"superuser":   map[string]any{"username": "postgres", "password": "postgres"},
				"replication": map[string]any{"username": "replicator", "password": "replicator"},
			},
			"pg_hba": []string{
				"local all all trust",
				"host all all 127.0.0.1/32 trust",
				"host replication all 127.0.0.1/32 trust",
			},
			"basebackup": []any{map[string]any{"checkpoint": "fast"}},
			"remove_data_directory_on_rewind_failure":     true,
			"remove_data_directory_on_diverged_timelines": true,
			"parameters": map[string]any{"unix_socket_directories": m.dir},
		},
		"tags": map[string]any{"nofailover": false, "noloadbalance": false, "clonefrom": false, "nosync": false},
	}
}

func (c *Cluster) startPatroni(m *Machine) error {
	if err := os.MkdirAll(m.dir, 0o700); err != nil {
		return fmt.Errorf("patroni: %w", err)
	}
	cfg, err := json.MarshalIndent(c.patroniConfig(m), "", "  ")
	if err != nil {
		return fmt.Errorf("patroni: config: %w", err)
	}
	path := filepath.Join(m.dir, "patroni.yml")
	if err := os.WriteFile(path, cfg, 0o600); err != nil {
		return fmt.Errorf("patroni: %w", err)
	}
	if c.cred != nil {
		for _, p := range []string{m.dir, path} {
			if err := os.Chown(p, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
				return fmt.Errorf("patroni: chown %s: %w", p, err)
			}
		}
	}
	cmd := exec.Command("patroni", path)
	cmd.Dir = m.dir
	cmd.Env = cleanEnv(map[string]string{"HOME": m.dir, "USER": c.opts.User, "LOGNAME": c.opts.User})
	// SIGTERM when the test binary dies without its cleanup: Patroni then
	// stops its PostgreSQL (which runs in a session of its own and would
	// otherwise be left behind).
	p, err := startProc(cmd, m.PatroniLog(), c.cred, syscall.SIGTERM)
	if err != nil {
		return fmt.Errorf("patroni: start %s: %w", m.Name, err)
	}
	m.mu.Lock()
	m.patroni = p
	m.mu.Unlock()
	return nil
}

// ---------------------------------------------------------------------------
// State

// Member is one member as Patroni's REST API (GET /cluster) reports it.
type Member struct {
	Name     string          `json:"name"`
	Role     string          `json:"role"`  // leader, sync_standby, replica
	State    string          `json:"state"` // running, starting, stopped, ...
	Host     string          `json:"host"`
	Port     int             `json:"port"`
	Timeline int             `json:"timeline"`
	Lag      json.RawMessage `json:"lag"` // bytes, or "unknown"
}

// State is Patroni's view of the cluster.
type State struct {
	Members []Member `json:"members"`
	Pause   bool     `json:"pause"`
}

// Leader is the member holding the leader key (zero Member if none).
func (s *State) Leader() Member { return s.role("leader") }

// SyncStandby is the synchronous standby (zero Member if none).
func (s *State) SyncStandby() Member { return s.role("sync_standby") }

func (s *State) role(r string) Member {
	for _, m := range s.Members {
		if m.Role == r {
			return m
		}
	}
	return Member{}
}

// String is a one-line summary: name role state timeline lag.
func (s *State) String() string {
	var parts []string
	for _, m := range s.Members {
		parts = append(parts, fmt.Sprintf("%s %s %s tl%d lag %s", m.Name, m.Role, m.State, m.Timeline, m.Lag))
	}
	return strings.Join(parts, "; ")
}

// State asks the REST API of every machine that is not stopped, all at
// once, for Patroni's view of the cluster, and returns the first answer. At
// once, not in turn: a member in the middle of a demotion can be slow to
// answer, and the others' view should not wait for it.
func (c *Cluster) State(ctx context.Context) (*State, error) {
	type answer struct {
		st  *State
		err error
	}
	live := c.live()
	ch := make(chan answer, len(live))
	for _, m := range live {
		go func() {
			var st State
			err := c.getJSON(ctx, fmt.Sprintf("http://127.0.0.1:%d/cluster", m.APIPort), &st)
			if err != nil {
				ch <- answer{nil, fmt.Errorf("%s: %w", m.Name, err)}
				return
			}
			ch <- answer{&st, nil}
		}()
	}
	var errs []error
	for range live {
		a := <-ch
		if a.err == nil {
			return a.st, nil
		}
		errs = append(errs, a.err)
	}
	return nil, fmt.Errorf("patroni: no member answered GET /cluster: %w", errors.Join(errs...))
}

// Primary asks every machine that is not stopped, all at once, for GET
// /primary and returns the member that answers 200, which Patroni does
// once it runs that member's PostgreSQL as the primary (promoted, taking
// writes); "" when none does.
func (c *Cluster) Primary(ctx context.Context) string {
	live := c.live()
	ch := make(chan string, len(live))
	for _, m := range live {
		go func() {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/primary", m.APIPort), nil)
			if err != nil {
				ch <- ""
				return
			}
			resp, err := c.client.Do(req)
			if err != nil {
				ch <- ""
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				ch <- m.Name
				return
			}
			ch <- ""
		}()
	}
	for range live {
		if name := <-ch; name != "" {
			return name
		}
	}
	return ""
}

// live returns the machines that are not stopped.
func (c *Cluster) live() []*Machine {
	var out []*Machine
	for _, m := range c.machines {
		if !m.Stopped() {
			out = append(out, m)
		}
	}
	return out
}

// healthy tells why st is not yet a cluster to run a test against, or ""
// when it is: a running leader, a running synchronous standby, and every
// machine that is not stopped running on the leader's timeline with a
// known lag.
func (c *Cluster) healthy(st *State) string {
	l := st.Leader()
	if l.Name == "" || l.State != "running" {
		return "no running leader"
	}
	if s := st.SyncStandby(); s.Name == "" || s.State != "running" {
		return "no running synchronous standby"
	}
	byName := map[string]Member{}
	for _, m := range st.Members {
		byName[m.Name] = m
	}
	for _, m := range c.machines {
		if m.Stopped() {
			continue
		}
		pm, ok := byName[m.Name]
		switch {
		case !ok:
			return m.Name + " not registered"
		case pm.State != "running":
			return m.Name + " is " + pm.State
		case pm.Timeline != l.Timeline:
			return fmt.Sprintf("%s on timeline %d, the leader on %d", m.Name, pm.Timeline, l.Timeline)
		case pm.Role != "leader" && (len(pm.Lag) == 0 || pm.Lag[0] == '"'):
			return m.Name + " lag unknown"
		}
	}
	return ""
}

// WaitHealthy polls State until the cluster is healthy (see healthy) or
// ctx ends, and returns that state. It fails early when a Patroni process
// that should run exited.
func (c *Cluster) WaitHealthy(ctx context.Context) (*State, error) {
	why := ""
	for {
		st, err := c.State(ctx)
		if err == nil {
			if why = c.healthy(st); why == "" {
				return st, nil
			}
			why += " (" + st.String() + ")"
		} else {
			why = err.Error()
		}
		for _, m := range c.machines {
			m.mu.Lock()
			p, stopped := m.patroni, m.stopped
			m.mu.Unlock()
			if p != nil && !stopped && p.hasExited() {
				return nil, fmt.Errorf("patroni: %s's Patroni exited:\n%s", m.Name, localnet.LogTail(m.PatroniLog(), 30))
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("patroni: cluster not healthy: %s: %w", why, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// CreateDatabase creates database name on the leader with psql and waits
// until every member that runs has replayed it. A client given every member
// in one URL needs that: pgx stops at the first host that answers "database
// does not exist" (3D000) instead of trying the next, and queen-node treats
// that answer as a refusal and stops (docs/operations.md, "Running on
// Patroni").
func (c *Cluster) CreateDatabase(ctx context.Context, name string) error {
	st, err := c.State(ctx)
	if err != nil {
		return err
	}
	l := st.Leader()
	if l.Name == "" {
		return errors.New("patroni: create database: no leader")
	}
	if out, err := c.psql(ctx, c.Machine(l.Name), "postgres", `CREATE DATABASE "`+name+`"`); err != nil {
		return fmt.Errorf("patroni: create database %s on %s: %w\n%s", name, l.Name, err, out)
	}
	for _, m := range c.machines {
		for !m.Stopped() {
			out, err := c.psql(ctx, m, name, "SELECT 1")
			if err == nil {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("patroni: database %s not on %s: %w\n%s", name, m.Name, ctx.Err(), out)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

// psql runs one statement on the machine's PostgreSQL in database db.
func (c *Cluster) psql(ctx context.Context, m *Machine, db, sql string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.binDir, "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1",
		"-h", "127.0.0.1", "-p", strconv.Itoa(m.PGPort), "-U", "postgres", "-d", db, "-c", sql)
	cmd.Env = cleanEnv(map[string]string{"PGCONNECT_TIMEOUT": "5"})
	out, err := cmd.CombinedOutput()
	return bytes.TrimSpace(out), err
}

// ---------------------------------------------------------------------------
// What the test does to the cluster

// Postmaster returns the PID of the machine's postmaster and its process
// group (postmaster.pid, checked against /proc so a stale file or a reused
// PID is not taken for it), or 0, 0 when none runs.
func (c *Cluster) Postmaster(m *Machine) (pid, pgrp int) {
	b, err := os.ReadFile(filepath.Join(m.DataDir(), "postmaster.pid"))
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err = strconv.Atoi(strings.TrimSpace(line))
	if err != nil || pid <= 0 {
		return 0, 0
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !bytes.Contains(cmdline, []byte(m.DataDir())) {
		return 0, 0
	}
	_, pgrp, state, ok := procStat(pid)
	if !ok || state == "Z" {
		return 0, 0
	}
	c.mu.Lock()
	c.groups[pgrp] = true
	c.mu.Unlock()
	return pid, pgrp
}

// signalPostgres sends sig to the machine's postmaster, then to each of
// its children (backends, WAL sender, checkpointer, ...: PostgreSQL puts
// every child in a process group of its own, so the postmaster's group is
// not enough), and returns their PIDs. The postmaster goes first, so it
// starts no child after the list was read.
func (c *Cluster) signalPostgres(m *Machine, sig syscall.Signal) ([]int, error) {
	pid, _ := c.Postmaster(m)
	if pid == 0 {
		return nil, fmt.Errorf("patroni: %s: no postmaster running", m.Name)
	}
	if err := syscall.Kill(pid, sig); err != nil {
		return nil, fmt.Errorf("patroni: signal %s's postmaster %d: %w", m.Name, pid, err)
	}
	pids := append([]int{pid}, children(pid)...)
	for _, p := range pids[1:] {
		_ = syscall.Kill(p, sig) // one may have exited meanwhile
	}
	return pids, nil
}

// KillPostgres sends SIGKILL to the machine's postmaster and every child
// of it and waits until they are gone. Patroni stays up.
func (c *Cluster) KillPostgres(m *Machine) error {
	pids, err := c.signalPostgres(m, syscall.SIGKILL)
	if err != nil {
		return err
	}
	if !waitGone(pids, 10*time.Second) {
		return fmt.Errorf("patroni: %s's postgres still running 10 s after SIGKILL", m.Name)
	}
	return nil
}

// Switchover asks Patroni, through patronictl, to hand the leader role
// from the current leader to a replica of its choosing (the synchronous
// standby, in synchronous mode), and returns patronictl's output.
func (c *Cluster) Switchover(ctx context.Context, leader string) (string, error) {
	var hosts []string
	for _, m := range c.machines {
		if !m.Stopped() {
			hosts = append(hosts, fmt.Sprintf("127.0.0.1:%d", m.EtcdClientPort))
		}
	}
	cfg, err := json.Marshal(map[string]any{"scope": c.scope, "namespace": "/queen-ha/",
		"etcd3": map[string]any{"hosts": hosts, "protocol": "http"}})
	if err != nil {
		return "", err
	}
	path := filepath.Join(c.dir, "patronictl.yml")
	if err := os.WriteFile(path, cfg, 0o600); err != nil {
		return "", fmt.Errorf("patroni: %w", err)
	}
	cmd := exec.CommandContext(ctx, "patronictl", "-c", path, "switchover", "--force", "--leader", leader, c.scope)
	cmd.Env = cleanEnv(nil)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("patroni: patronictl switchover: %w\n%s", err, bytes.TrimSpace(out))
	}
	return string(out), nil
}

// StopMachine takes a whole machine away at once, as a power loss would:
// SIGKILL to its Patroni, its PostgreSQL (postmaster and backends) and its
// etcd member. Nothing is released in etcd, so the other members wait for
// the leader key's TTL before they take over.
func (c *Cluster) StopMachine(m *Machine) error {
	m.mu.Lock()
	m.stopped = true
	etcd, pat := m.etcd, m.patroni
	m.mu.Unlock()
	var errs []error
	if pat != nil {
		errs = append(errs, pat.kill())
	}
	pids, err := c.signalPostgres(m, syscall.SIGKILL)
	errs = append(errs, err)
	if etcd != nil {
		errs = append(errs, etcd.kill())
	}
	if !waitGone(pids, 10*time.Second) {
		errs = append(errs, fmt.Errorf("patroni: %s's postgres still running 10 s after SIGKILL", m.Name))
	}
	return errors.Join(errs...)
}

// FreezeMachine takes a whole machine away as a network partition or a
// hung host would: SIGSTOP to its Patroni, its PostgreSQL and its etcd
// member. Unlike StopMachine, their sockets stay open and answer nothing,
// so a client waits on them until its own timeouts. Close kills them.
func (c *Cluster) FreezeMachine(m *Machine) error {
	m.mu.Lock()
	m.stopped, m.frozen = true, true
	etcd, pat := m.etcd, m.patroni
	m.mu.Unlock()
	var errs []error
	for _, p := range []*proc{pat, etcd} {
		if err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGSTOP); err != nil {
			errs = append(errs, fmt.Errorf("patroni: SIGSTOP %s: %w", m.Name, err))
		}
	}
	_, err := c.signalPostgres(m, syscall.SIGSTOP)
	return errors.Join(append(errs, err)...)
}

// Close stops every Patroni (SIGTERM: Patroni stops its PostgreSQL; SIGKILL
// after 30 s), then any postmaster still running, then etcd, and removes
// the folder when nothing is left running. Calling it again is a no-op.
func (c *Cluster) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	var errs []error
	var wg sync.WaitGroup
	var emu sync.Mutex
	for _, m := range c.machines {
		c.Postmaster(m) // remember its group before Patroni removes the pid file
		m.mu.Lock()
		p, frozen := m.patroni, m.frozen
		m.mu.Unlock()
		if p == nil {
			continue
		}
		sig := syscall.SIGTERM
		if frozen {
			sig = syscall.SIGKILL // a stopped process would hold SIGTERM until the grace ran out
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.stop(sig, 30*time.Second); err != nil {
				emu.Lock()
				errs = append(errs, fmt.Errorf("%s's Patroni: %w", m.Name, err))
				emu.Unlock()
			}
		}()
	}
	wg.Wait()
	// A postmaster Patroni did not stop (Patroni killed, or the machine
	// frozen: its stopped children would never see the postmaster die).
	for _, m := range c.machines {
		if pids, err := c.signalPostgres(m, syscall.SIGKILL); err == nil && !waitGone(pids, 10*time.Second) {
			errs = append(errs, fmt.Errorf("patroni: %s's postgres still running after SIGKILL", m.Name))
		}
	}
	for _, m := range c.machines {
		m.mu.Lock()
		p, frozen := m.etcd, m.frozen
		m.mu.Unlock()
		sig := syscall.SIGTERM
		if frozen {
			sig = syscall.SIGKILL
		}
		if p != nil {
			if err := p.stop(sig, 10*time.Second); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", m.EtcdName, err))
			}
		}
	}
	// Anything of the cluster still alive (a backend of a frozen machine
	// whose postmaster was already gone) is killed by PID.
	var left []int
	for _, p := range c.strayPIDs() {
		_ = syscall.Kill(p, syscall.SIGKILL)
		left = append(left, p)
	}
	if len(left) > 0 {
		waitGone(left, 10*time.Second)
	}
	if s := c.Strays(); len(s) > 0 {
		errs = append(errs, fmt.Errorf("patroni: processes of the cluster still running after Close: %s", strings.Join(s, "; ")))
	} else if c.dir != "" && !c.removed {
		if err := os.RemoveAll(c.dir); err != nil {
			errs = append(errs, fmt.Errorf("patroni: remove %s: %w", c.dir, err))
		}
		c.removed = true
	}
	return errors.Join(errs...)
}

// KeepDir keeps the folder (logs, data) after Close, for a failed test;
// it returns the folder.
func (c *Cluster) KeepDir() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.removed = true
	return c.dir
}

// Strays lists the live processes that belong to this cluster: any whose
// command line names the cluster's folder or scope (etcd, Patroni, a
// postmaster; a backend's title carries the cluster_name, which Patroni
// sets to the scope), or that is in a postmaster's process group seen here.
func (c *Cluster) Strays() []string {
	var out []string
	for _, pid := range c.strayPIDs() {
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		cmd = bytes.ReplaceAll(bytes.TrimRight(cmd, "\x00"), []byte{0}, []byte{' '})
		out = append(out, fmt.Sprintf("pid %d: %.120s", pid, cmd))
	}
	return out
}

func (c *Cluster) strayPIDs() []int {
	c.mu.Lock()
	groups := map[int]bool{}
	for g := range c.groups {
		groups[g] = true
	}
	c.mu.Unlock()
	var out []int
	for _, pid := range pids() {
		if pid == os.Getpid() {
			continue
		}
		_, pgrp, state, ok := procStat(pid)
		if !ok || state == "Z" {
			continue
		}
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if groups[pgrp] || bytes.Contains(cmd, []byte(c.dir)) || bytes.Contains(cmd, []byte(c.scope)) {
			out = append(out, pid)
		}
	}
	sort.Ints(out)
	return out
}

// ---------------------------------------------------------------------------
// Processes

// proc is one process started here.
type proc struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

func (p *proc) hasExited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// startProc starts cmd in a process group of its own with its output
// appended to logPath, as cred (and the log owned by it) when not nil,
// with death as its parent-death signal.
func startProc(cmd *exec.Cmd, logPath string, cred *syscall.Credential, death syscall.Signal) (*proc, error) {
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	if cred != nil {
		_ = lf.Chown(int(cred.Uid), int(cred.Gid))
	}
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred, Pdeathsig: death}
	if err := pgtemp.StartOnDedicatedThread(cmd); err != nil {
		lf.Close()
		return nil, err
	}
	p := &proc{cmd: cmd, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); lf.Close(); close(p.exited) }()
	return p, nil
}

// kill sends SIGKILL to the process group and waits for the process.
func (p *proc) kill() error { return p.stop(syscall.SIGKILL, 0) }

// stop sends sig to the process and waits up to grace, then SIGKILLs its
// process group and waits up to 10 s more.
func (p *proc) stop(sig syscall.Signal, grace time.Duration) error {
	pid := p.cmd.Process.Pid
	if sig == syscall.SIGKILL {
		_ = syscall.Kill(-pid, sig)
	} else {
		_ = syscall.Kill(pid, sig)
		select {
		case <-p.exited:
		case <-time.After(grace):
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
	}
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		return fmt.Errorf("pid %d still running after SIGKILL", pid)
	}
	// Helpers it started in its group go with it.
	if groupAlive(pid) {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		if !waitGroupGone(pid, 10*time.Second) {
			return fmt.Errorf("process group %d still running after SIGKILL", pid)
		}
	}
	return nil
}

// procStat reads ppid, process group and state of pid from /proc.
func procStat(pid int) (ppid, pgrp int, state string, ok bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, "", false
	}
	// Fields after the parenthesised command: state, ppid, pgrp, ...
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, 0, "", false
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 3 {
		return 0, 0, "", false
	}
	ppid, _ = strconv.Atoi(f[1])
	pgrp, _ = strconv.Atoi(f[2])
	return ppid, pgrp, f[0], true
}

// pids lists the process IDs in /proc.
func pids() []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// children lists the live processes whose parent is pid.
func children(pid int) []int {
	var out []int
	for _, p := range pids() {
		if ppid, _, state, ok := procStat(p); ok && ppid == pid && state != "Z" {
			out = append(out, p)
		}
	}
	return out
}

// alive tells whether pid runs (and is not a zombie).
func alive(pid int) bool {
	_, _, state, ok := procStat(pid)
	return ok && state != "Z"
}

// waitGone polls until none of pids is alive, or timeout.
func waitGone(pids []int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		left := false
		for _, p := range pids {
			left = left || alive(p)
		}
		if !left {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// groupAlive tells whether a live (not zombie) process is in group pgid.
// Zombies are ignored: this container's init may reap orphans late.
func groupAlive(pgid int) bool {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return false
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if _, g, state, ok := procStat(pid); ok && g == pgid && state != "Z" {
			return true
		}
	}
	return false
}

// waitGroupGone polls until group pgid has no live process, or timeout.
func waitGroupGone(pgid int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for groupAlive(pgid) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// ---------------------------------------------------------------------------
// Small helpers

func (c *Cluster) getJSON(ctx context.Context, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %d %.200s", url, resp.StatusCode, b)
	}
	return json.Unmarshal(b, v)
}

// cleanEnv is the caller's environment without PG* variables (they would
// point Patroni's and psql's libpq elsewhere), plus vars.
func cleanEnv(vars map[string]string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "PG") || vars[k] != "" {
			continue
		}
		env = append(env, kv)
	}
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	return env
}

// findBinDir returns the highest /usr/lib/postgresql/*/bin holding
// initdb, postgres and pg_rewind.
func findBinDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { // numeric: 9.6 < 10 < 15
		vi, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(dirs[i])), 64)
		vj, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(dirs[j])), 64)
		return vi > vj
	})
	for _, d := range dirs {
		ok := true
		for _, b := range []string{"initdb", "postgres", "pg_rewind", "pg_basebackup", "psql"} {
			if _, err := os.Stat(filepath.Join(d, b)); err != nil {
				ok = false
			}
		}
		if ok {
			return d, nil
		}
	}
	return "", errors.New("patroni: no /usr/lib/postgresql/*/bin with initdb, postgres and pg_rewind (bash scripts/ensure-postgres.sh installs them)")
}
