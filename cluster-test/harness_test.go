package clustertest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"queen-node/internal/localnet"
	"queen-node/internal/nodeproc"
	"queen-node/internal/pgtemp"
	"queen-node/internal/pgtest"
)

// Harness timings.
const (
	startTimeout      = 30 * time.Second // process start to /health 200
	convergeTimeout   = 30 * time.Second // membership convergence
	stopGrace         = 5 * time.Second  // SIGTERM to SIGKILL
	logTailLines      = 40
	defaultPGMaxConns = "16" // 3-4 nodes per test on a shared server with max_connections 300
)

// subnetSeq hands every cluster its own 127.0.<k>.0/24, so parallel tests
// (and other test binaries on the host) never share an address.
var subnetSeq atomic.Int32

func nextSubnet() int {
	base := 10 + (os.Getpid()*7)%200
	return 2 + (base+int(subnetSeq.Add(1)))%250
}

// Cluster is a set of queen-node processes sharing one database.
type Cluster struct {
	t      *testing.T
	subnet int
	pgURL  string
	env    map[string]string // every node's environment (on top of the harness's)
	dir    string            // node logs
	client *http.Client

	mu    sync.Mutex
	nodes []*Node
}

// Node is one queen-node process (running or not) of a cluster.
type Node struct {
	Idx      int
	Name     string
	IP       string
	HTTPPort int
	MeshPort int
	Env      map[string]string // this node's extra environment (chaos settings)
	LogPath  string

	mu       sync.Mutex
	proc     *nodeproc.Proc
	running  bool        // process started and not signalled
	ready    bool        // running and /health answered 200 once since the start
	served   bool        // /health answered 200 at least once, in any start
	rebinds  int         // first starts repeated on new ports (waitHealthy)
	killedAt []time.Time // kill -9 / stop times, for the checker
}

// HTTP is the node's base URL.
func (n *Node) HTTP() string { return "http://" + net.JoinHostPort(n.IP, strconv.Itoa(n.HTTPPort)) }

// MeshAddr is the node's memberlist host:port.
func (n *Node) MeshAddr() string { return net.JoinHostPort(n.IP, strconv.Itoa(n.MeshPort)) }

// Running tells whether the process is up and served /health since it
// started (as far as the harness knows).
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.running && n.ready
}

// DownBetween tells whether the node was killed or stopped between t0
// and t1.
func (n *Node) DownBetween(t0, t1 time.Time) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, k := range n.killedAt {
		if !k.Before(t0) && !k.After(t1) {
			return true
		}
	}
	return false
}

// ClusterOptions configure startClusterOpts.
type ClusterOptions struct {
	N       int
	Env     map[string]string         // every node
	NodeEnv map[int]map[string]string // per node index
	PGURL   string                    // "" = a fresh database on pgtest's server
	// beforeStart runs after the addresses are handed out and before any
	// process starts (the harness's own test takes a port there).
	beforeStart func(nodes []*Node)
}

// startCluster starts n nodes with env on top of the harness defaults and
// waits for health and full membership.
func startCluster(t *testing.T, n int, env map[string]string) *Cluster {
	t.Helper()
	return startClusterOpts(t, ClusterOptions{N: n, Env: env})
}

func startClusterOpts(t *testing.T, o ClusterOptions) *Cluster {
	t.Helper()
	pgURL := o.PGURL
	if pgURL == "" {
		pgURL = pgtest.NewDatabase(t) // dropped after the nodes are gone (cleanups run LIFO)
	}
	c := &Cluster{
		t:      t,
		subnet: nextSubnet(),
		pgURL:  pgURL,
		env:    o.Env,
		dir:    t.TempDir(),
		client: &http.Client{Transport: &http.Transport{
			MaxIdleConns:        256,
			MaxIdleConnsPerHost: 64,
			IdleConnTimeout:     30 * time.Second,
			DialContext:         (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
		}},
	}
	t.Cleanup(c.teardown)
	for i := 0; i < o.N; i++ {
		c.allocNode(o.NodeEnv[i])
	}
	if o.beforeStart != nil {
		o.beforeStart(c.Nodes())
	}
	for _, nd := range c.nodes {
		c.startProcess(nd)
	}
	for _, nd := range c.nodes {
		c.waitHealthy(nd, startTimeout)
	}
	c.waitMembership(convergeTimeout)
	t.Logf("cluster 127.0.%d.0/24 up: %d nodes", c.subnet, o.N)
	return c
}

// allocNode reserves an address and two ports for a new node.
func (c *Cluster) allocNode(extra map[string]string) *Node {
	c.t.Helper()
	c.mu.Lock()
	idx := len(c.nodes)
	c.mu.Unlock()
	ip := fmt.Sprintf("127.0.%d.%d", c.subnet, idx+2)
	httpPort, meshPort := c.pickPorts(ip)
	nd := &Node{Idx: idx, Name: fmt.Sprintf("n%d-%d", c.subnet, idx), IP: ip, HTTPPort: httpPort, MeshPort: meshPort,
		Env: extra}
	nd.LogPath = filepath.Join(c.dir, nd.Name+".log")
	c.mu.Lock()
	c.nodes = append(c.nodes, nd)
	c.mu.Unlock()
	return nd
}

// pickPorts finds an HTTP port and a different mesh port (TCP and UDP)
// free on ip.
func (c *Cluster) pickPorts(ip string) (httpPort, meshPort int) {
	c.t.Helper()
	httpPort, err := localnet.FreePort(ip, false)
	if err != nil {
		c.t.Fatalf("%s: %v", ip, err)
	}
	for attempt := 0; ; attempt++ {
		if meshPort, err = localnet.FreePort(ip, true); err == nil && meshPort != httpPort {
			return httpPort, meshPort
		}
		if attempt > 20 {
			c.t.Fatalf("no free mesh port on %s: %v", ip, err)
		}
	}
}

// Node returns node i.
func (c *Cluster) Node(i int) *Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i]
}

// Nodes returns every node, running or not.
func (c *Cluster) Nodes() []*Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Node(nil), c.nodes...)
}

// Running returns the indices of the running nodes.
func (c *Cluster) Running() []int {
	var out []int
	for _, nd := range c.Nodes() {
		if nd.Running() {
			out = append(out, nd.Idx)
		}
	}
	return out
}

// joinList is every known member's mesh address.
func (c *Cluster) joinList() string {
	var addrs []string
	for _, nd := range c.Nodes() {
		addrs = append(addrs, nd.MeshAddr())
	}
	return strings.Join(addrs, ",")
}

// nodeEnv is the full environment of a node process: the inherited one
// without QUEEN_* and PG* variables, the harness defaults, the cluster's
// env, then the node's own.
func (c *Cluster) nodeEnv(nd *Node) []string {
	m := map[string]string{
		"QUEEN_PG_URL":         c.pgURL,
		"QUEEN_NODE_NAME":      nd.Name,
		"QUEEN_HTTP_ADDR":      net.JoinHostPort(nd.IP, strconv.Itoa(nd.HTTPPort)),
		"QUEEN_MESH_BIND":      nd.MeshAddr(),
		"QUEEN_MESH_ADVERTISE": nd.MeshAddr(),
		"QUEEN_MESH_JOIN":      c.joinList(),
		"QUEEN_MESH_PROBE_MS":  "200",
		"QUEEN_MESH_GOSSIP_MS": "50",
		"QUEEN_PG_MAX_CONNS":   defaultPGMaxConns,
		"QUEEN_LOG_LEVEL":      "info",
	}
	if lvl := os.Getenv("CLUSTER_TEST_LOG_LEVEL"); lvl != "" {
		m["QUEEN_LOG_LEVEL"] = lvl
	}
	for k, v := range c.env {
		m[k] = v
	}
	for k, v := range nd.Env {
		m[k] = v
	}
	return nodeproc.Env(m, "QUEEN_", "PG")
}

// startProcess launches the node's process with its log file appended to.
func (c *Cluster) startProcess(nd *Node) {
	c.t.Helper()
	env := c.nodeEnv(nd)
	var shown []string
	for _, kv := range env {
		if strings.HasPrefix(kv, "QUEEN_") && !strings.HasPrefix(kv, "QUEEN_MESH_SECRET") {
			shown = append(shown, kv)
		}
	}
	// The node dies with the test binary (SIGKILL) even if the cleanup
	// never runs; the log keeps every start of a restarted node.
	p, err := nodeproc.Start(nodeproc.Options{Bin: nodeBin, Env: env, LogPath: nd.LogPath, Append: true,
		Header: fmt.Sprintf("=== harness %s: starting %s with %s", time.Now().Format(time.RFC3339Nano), nd.Name, strings.Join(shown, " ")),
		Start:  startOnDedicatedThread})
	if err != nil {
		c.t.Fatalf("start %s: %v", nd.Name, err)
	}
	nd.mu.Lock()
	nd.proc, nd.running, nd.ready = p, true, false
	nd.mu.Unlock()
}

// waitHealthy waits for /health 200, failing early if the process exits.
// A node's first start that exits because a port was taken meanwhile
// starts again on new ports: FreePort's port is free only when it looks,
// and an outgoing connection's ephemeral port (or a test of another
// package) can take it before the node binds (a fresh-clone CI run lost
// TestPostgresFailover that way). A restarted node keeps its address. Not
// covered: a taken mesh port fails the start just after /health opens
// (node.Start binds the mesh last), so a poll in between sees the node up
// and the loss shows later as a membership timeout.
func (c *Cluster) waitHealthy(nd *Node, within time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(within)
	for {
		nd.mu.Lock()
		exited := nd.proc.Exited()
		nd.mu.Unlock()
		select {
		case <-exited:
			tail := localnet.LogTail(nd.LogPath, logTailLines)
			last := tail[strings.LastIndex(tail, "=== harness")+1:]
			if !nd.served && nd.rebinds < 5 && strings.Contains(last, "address already in use") {
				nd.rebinds++
				nd.HTTPPort, nd.MeshPort = c.pickPorts(nd.IP)
				c.t.Logf("%s: a port was taken before it bound; starting again on %s and %s", nd.Name, nd.HTTP(), nd.MeshAddr())
				c.startProcess(nd)
				continue
			}
			c.t.Fatalf("%s exited during start:\n%s", nd.Name, tail)
		default:
		}
		st, _, err := c.do(context.Background(), nd.Idx, "GET", "/health", nil)
		if err == nil && st == 200 {
			nd.mu.Lock()
			nd.ready = nd.running
			nd.served = true
			nd.mu.Unlock()
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s: /health not 200 within %v (last: %d %v)", nd.Name, within, st, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitMembership waits until every running node sees every running node
// alive.
func (c *Cluster) waitMembership(within time.Duration) {
	c.t.Helper()
	start := time.Now()
	var last string
	for {
		ok := true
		want := map[string]bool{}
		for _, i := range c.Running() {
			want[c.Node(i).Name] = true
		}
		for _, i := range c.Running() {
			st, err := c.Status(i)
			if err != nil {
				ok, last = false, err.Error()
				break
			}
			alive := 0
			for _, m := range st.Mesh.Members {
				if want[m.Name] && m.State == "alive" {
					alive++
				}
			}
			if alive != len(want) {
				ok, last = false, fmt.Sprintf("%s sees %d/%d alive: %+v", c.Node(i).Name, alive, len(want), st.Mesh.Members)
				break
			}
		}
		if ok {
			return
		}
		if time.Since(start) > within {
			c.t.Fatalf("membership did not converge within %v: %s", within, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Kill sends SIGKILL to node i and waits for it to exit.
func (c *Cluster) Kill(i int) { c.signal(c.Node(i), syscall.SIGKILL) }

// Stop sends SIGTERM to node i and waits (SIGKILL after stopGrace).
func (c *Cluster) Stop(i int) { c.signal(c.Node(i), syscall.SIGTERM) }

func (c *Cluster) signal(nd *Node, sig syscall.Signal) {
	nd.mu.Lock()
	p, running := nd.proc, nd.running
	if running {
		nd.killedAt = append(nd.killedAt, time.Now())
	}
	nd.running, nd.ready = false, false
	nd.mu.Unlock()
	if !running {
		return
	}
	killed, err := p.Stop(sig, stopGrace)
	if killed {
		c.t.Logf("%s did not stop within %v after %v; killed", nd.Name, stopGrace, sig)
	}
	if err != nil {
		c.t.Errorf("%s: %v", nd.Name, err)
	}
}

// Restart stops node i if it runs and starts it again with the same
// address, ports and environment; it waits for health and membership.
func (c *Cluster) Restart(i int) { c.RestartWithEnv(i, nil) }

// RestartWithEnv is Restart with extra environment merged over the
// node's own (it stays for later restarts).
func (c *Cluster) RestartWithEnv(i int, extra map[string]string) {
	c.t.Helper()
	nd := c.Node(i)
	c.Stop(i)
	if len(extra) > 0 {
		env := map[string]string{}
		for k, v := range nd.Env {
			env[k] = v
		}
		for k, v := range extra {
			env[k] = v
		}
		nd.Env = env
	}
	c.startProcess(nd)
	c.waitHealthy(nd, startTimeout)
	c.waitMembership(convergeTimeout)
}

// AddNode starts one more node joining through every existing member and
// waits for its health only (the caller decides what to wait for next).
func (c *Cluster) AddNode(extra map[string]string) *Node {
	c.t.Helper()
	nd := c.allocNode(extra)
	c.startProcess(nd)
	c.waitHealthy(nd, startTimeout)
	return nd
}

// teardown kills every node by PID (SIGTERM, then SIGKILL) and prints the
// log tails when the test failed.
func (c *Cluster) teardown() {
	var wg sync.WaitGroup
	for _, nd := range c.Nodes() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.signal(nd, syscall.SIGTERM)
		}()
	}
	wg.Wait()
	c.client.CloseIdleConnections()
	if c.t.Failed() {
		for _, nd := range c.Nodes() {
			c.t.Logf("--- last %d lines of %s (%s) ---\n%s", logTailLines, nd.Name, nd.HTTP(), localnet.LogTail(nd.LogPath, logTailLines))
		}
	}
}

// do sends one request to node i and returns status and body.
func (c *Cluster) do(ctx context.Context, i int, method, path string, body any) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.Node(i).HTTP()+path, rd)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// Status is the part of GET /status the tests read.
type Status struct {
	Node struct {
		Name string `json:"name"`
	} `json:"node"`
	Hotlist struct {
		Enabled     bool  `json:"enabled"`
		Rings       int   `json:"rings"`
		Queues      int   `json:"queues"`
		MarksLocal  int64 `json:"marks_local"`
		MarksRemote int64 `json:"marks_remote"`
		Reseeds     int64 `json:"reseeds"`
		ReseedAdded int64 `json:"reseed_added"`
		Swept       int64 `json:"swept"`

		EarlyReseeds    int64 `json:"early_reseeds"`
		EarlySuppressed int64 `json:"early_reseeds_suppressed"`
		DarkMs          struct {
			Count uint64 `json:"count"`
			SumMs int64  `json:"sum_ms"`
		} `json:"early_reseed_dark_ms"`
	} `json:"hotlist"`
	Mesh struct {
		Enabled        bool     `json:"enabled"`
		Members        []Member `json:"members"`
		FramesSent     uint64   `json:"frames_sent"`
		FramesReceived uint64   `json:"frames_received"`
		HintsSent      uint64   `json:"hints_sent"`
		HintsReceived  uint64   `json:"hints_received"`
		FramesDropped  uint64   `json:"frames_dropped"`
		FramesRejected uint64   `json:"frames_rejected"`
		GapsSeen       uint64   `json:"gaps_seen"`
		OverflowSeen   uint64   `json:"overflow_signals_seen"`
		HeartbeatsSent uint64   `json:"heartbeats_sent"`
		Coalescer      struct {
			Size    int    `json:"size"`
			Cap     int    `json:"cap"`
			Dropped uint64 `json:"dropped"`
		} `json:"coalescer"`
	} `json:"mesh"`
	Forward struct {
		Owners   int64 `json:"owners"`
		Requests int64 `json:"requests"`
		Failures int64 `json:"failures"`
		Fallback int64 `json:"fallback_items"`
	} `json:"forward"`
	Retention struct {
		Runs    int64 `json:"runs"`
		Skipped int64 `json:"skipped"`
		Errors  int64 `json:"errors"`
	} `json:"retention"`
	Requests struct {
		Parked       int   `json:"parked_long_polls"`
		Pops         int64 `json:"pops"`
		PoppedItems  int64 `json:"popped_messages"`
		PushedItems  int64 `json:"pushed_messages"`
		PopSQLCalls  int64 `json:"pop_sql_calls"`
		Acks         int64 `json:"acks"`
		AcksRefused  int64 `json:"acks_refused"`
		Duplicates   int64 `json:"duplicates"`
		PopsMessages int64 `json:"pops_with_messages"`
	} `json:"requests"`
}

// Member is one entry of mesh.members.
type Member struct {
	Name     string `json:"name"`
	Addr     string `json:"addr"`
	HTTPAddr string `json:"http_addr"`
	State    string `json:"state"`
}

// Status reads node i's /status.
func (c *Cluster) Status(i int) (*Status, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	code, body, err := c.do(ctx, i, "GET", "/status", nil)
	if err != nil {
		return nil, err
	}
	if code != 200 {
		return nil, fmt.Errorf("status of %s: %d %s", c.Node(i).Name, code, body)
	}
	var st Status
	if err := json.Unmarshal(body, &st); err != nil {
		return nil, fmt.Errorf("status of %s: %w", c.Node(i).Name, err)
	}
	return &st, nil
}

// MustStatus is Status that fails the test on error.
func (c *Cluster) MustStatus(i int) *Status {
	c.t.Helper()
	st, err := c.Status(i)
	if err != nil {
		c.t.Fatal(err)
	}
	return st
}

// memberState is the state node i reports for name ("" when absent).
func (st *Status) memberState(name string) string {
	for _, m := range st.Mesh.Members {
		if m.Name == name {
			return m.State
		}
	}
	return ""
}

// Health returns node i's /health status code (0 on a transport error).
func (c *Cluster) Health(i int) int {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	code, _, err := c.do(ctx, i, "GET", "/health", nil)
	if err != nil {
		return 0
	}
	return code
}

// Configure creates or updates a queue through node i.
func (c *Cluster) Configure(i int, queue string, options map[string]any) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	code, body, err := c.do(ctx, i, "POST", "/api/v1/configure", map[string]any{"queue": queue, "options": options})
	if err != nil || code != 200 {
		c.t.Fatalf("configure %s: %d %s %v", queue, code, body, err)
	}
}

// startPG starts a dedicated disposable PostgreSQL for a test that
// restarts it, and returns it with the URL of a fresh database.
func startPG(t *testing.T) (*pgtemp.Server, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := pgtemp.Start(ctx, pgtemp.DefaultOptions())
	if err != nil {
		t.Fatalf("dedicated PostgreSQL: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Logf("stop dedicated PostgreSQL: %v", err)
		}
	})
	url, err := s.CreateDatabase(ctx, "cluster")
	if err != nil {
		t.Fatal(err)
	}
	return s, url
}

var starter struct {
	once sync.Once
	reqs chan startReq
}

type startReq struct {
	cmd  *exec.Cmd
	errc chan error
}

// startOnDedicatedThread starts cmd from one goroutine locked to its OS
// thread for the life of the process: the parent-death signal fires when
// the thread that forked the child exits, and this one never does.
func startOnDedicatedThread(cmd *exec.Cmd) error {
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

// waitUntil polls cond every 20 ms until it holds or within passes, and
// returns how long it took.
func waitUntil(t *testing.T, within time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > within {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start)
}
