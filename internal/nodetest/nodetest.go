// Package nodetest starts real in-process queen-nodes (package node: broker,
// HTTP API on a loopback listener, optionally the mesh) against a real
// PostgreSQL database, for tests that go through HTTP. Use pgtest.Main in the test package's TestMain.
package nodetest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"queen-node/broker"
	"queen-node/internal/localnet"
	"queen-node/internal/pgtest"
	"queen-node/mesh"
	"queen-node/node"
	"queen-node/reads"
)

// stopGrace bounds a test node's graceful stop.
const stopGrace = 5 * time.Second

// Node is one running node.
type Node struct {
	URL    string
	DBURL  string
	Broker *broker.Broker
	Reads  *reads.Service
	Mesh   *mesh.Mesh // set by StartCluster
	Node   *node.Node
}

// Option changes a node's broker configuration before it starts.
type Option func(*broker.Config)

// Start starts a node on a fresh database.
func Start(t testing.TB, opts ...Option) *Node {
	t.Helper()
	return StartOn(t, pgtest.NewDatabase(t), opts...)
}

// StartOn starts a node on an existing database (several nodes may share it).
func StartOn(t testing.TB, dbURL string, opts ...Option) *Node {
	t.Helper()
	return start(t, dbURL, t.Name(), nil, opts)
}

// StartConfig starts a node on a fresh database after edit has changed its
// node configuration (e.g. Auth); the mesh is off.
func StartConfig(t testing.TB, edit func(*node.Config)) *Node {
	t.Helper()
	return startCfg(t, pgtest.NewDatabase(t), t.Name(), nil, nil, edit)
}

// StartConfigOn is StartConfig on an existing database (several nodes may
// share it); the mesh is off.
func StartConfigOn(t testing.TB, dbURL, name string, edit func(*node.Config)) *Node {
	t.Helper()
	return startCfg(t, dbURL, name, nil, nil, edit)
}

// start starts one node through package node, on a loopback port; mc, when
// not nil, turns the mesh on with that configuration.
func start(t testing.TB, dbURL, name string, mc *mesh.Config, opts []Option) *Node {
	t.Helper()
	return startCfg(t, dbURL, name, mc, opts, nil)
}

func startCfg(t testing.TB, dbURL, name string, mc *mesh.Config, opts []Option, edit func(*node.Config)) *Node {
	t.Helper()
	n, err := tryStart(t, dbURL, name, mc, opts, edit)
	if err != nil {
		t.Fatalf("start node: %v", err)
	}
	return n
}

// tryStart starts a node and registers its stop with t.Cleanup.
func tryStart(t testing.TB, dbURL, name string, mc *mesh.Config, opts []Option, edit func(*node.Config)) (*Node, error) {
	t.Helper()
	cfg := node.DefaultConfig()
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.Broker.PG.URL = dbURL
	cfg.Broker.NodeName = name
	cfg.Broker.PG.MaxConns = 16
	cfg.Broker.Maintenance.BufferDir = t.TempDir() // one push buffer per node; an Option may share one across a restart
	for _, o := range opts {
		o(&cfg.Broker)
	}
	cfg.Mesh.Enabled = mc != nil
	if mc != nil {
		cfg.Mesh.Config = *mc
	}
	if edit != nil {
		edit(&cfg)
	}
	level := hclog.Warn
	if os.Getenv("QUEEN_TEST_LOG") != "" {
		level = hclog.Debug
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "node", Level: level, Output: os.Stderr})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nd, err := node.Start(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() {
		// Parked long-polls answer 204 at once (drain); a test's request
		// still running after this short grace is cut.
		ctx, cancel := context.WithTimeout(context.Background(), stopGrace)
		defer cancel()
		_ = nd.Stop(ctx)
	})
	return &Node{URL: nd.URL(), DBURL: dbURL, Broker: nd.Broker(), Reads: nd.Reads(), Mesh: nd.Mesh(), Node: nd}, nil
}

// Response is an HTTP answer.
type Response struct {
	Status int
	Body   []byte
	Header http.Header
}

// JSON decodes the body into v, failing the test on error.
func (r Response) JSON(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("decode %d response %q: %v", r.Status, r.Body, err)
	}
}

// Obj decodes the body as a JSON object.
func (r Response) Obj(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	r.JSON(t, &m)
	return m
}

// Arr decodes the body as a JSON array of objects.
func (r Response) Arr(t testing.TB) []map[string]any {
	t.Helper()
	var a []map[string]any
	r.JSON(t, &a)
	return a
}

// Do sends a request; body is marshalled unless it is a string or []byte.
func (n *Node) Do(t testing.TB, method, path string, body any) Response {
	t.Helper()
	return n.DoCtx(context.Background(), t, method, path, body)
}

// DoAuth is Do with an Authorization header (none when authorization is "").
func (n *Node) DoAuth(t testing.TB, authorization, method, path string, body any) Response {
	t.Helper()
	return n.do(context.Background(), t, authorization, method, path, body)
}

// DoCtx is Do with a context (to cancel long-polls).
func (n *Node) DoCtx(ctx context.Context, t testing.TB, method, path string, body any) Response {
	t.Helper()
	return n.do(ctx, t, "", method, path, body)
}

// DoHeader is Do with extra request headers.
func (n *Node) DoHeader(t testing.TB, header map[string]string, method, path string, body any) Response {
	t.Helper()
	return n.doHeader(context.Background(), t, header, method, path, body)
}

func (n *Node) do(ctx context.Context, t testing.TB, authorization, method, path string, body any) Response {
	t.Helper()
	var h map[string]string
	if authorization != "" {
		h = map[string]string{"Authorization": authorization}
	}
	return n.doHeader(ctx, t, h, method, path, body)
}

func (n *Node) doHeader(ctx context.Context, t testing.TB, header map[string]string, method, path string, body any) Response {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = bytes.NewBufferString(b)
	case []byte:
		rd = bytes.NewBuffer(b)
	default:
		buf, err := json.Marshal(b)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		rd = bytes.NewBuffer(buf)
	}
	req, err := http.NewRequestWithContext(ctx, method, n.URL+path, rd)
	if err != nil {
		t.Fatalf("request: %v", err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return Response{Status: 0}
		}
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		if ctx.Err() != nil {
			// The caller's context ended mid-body: a truncated body is no
			// answer (a fresh-clone CI run decoded one and failed).
			return Response{Status: 0}
		}
		t.Fatalf("%s %s: read: %v", method, path, err)
	}
	return Response{Status: resp.StatusCode, Body: data, Header: resp.Header}
}

// clusterPorts hands out mesh ports so parallel tests do not collide.
var clusterPorts struct {
	sync.Mutex
	next int
}

// StartCluster starts n nodes on one fresh database, meshed over loopback
// addresses 127.0.1.x with fast gossip timings, and waits until every node
// sees all n members alive.
func StartCluster(t testing.TB, n int, opts ...Option) []*Node {
	t.Helper()
	return startCluster(t, n, opts, nil)
}

// StartClusterConfig is StartCluster with edit applied to every node's
// configuration (e.g. authentication).
func StartClusterConfig(t testing.TB, n int, edit func(*node.Config)) []*Node {
	t.Helper()
	return startCluster(t, n, nil, edit)
}

func startCluster(t testing.TB, n int, opts []Option, edit func(*node.Config)) []*Node {
	t.Helper()
	db := pgtest.NewDatabase(t)
	clusterPorts.Lock()
	if clusterPorts.next == 0 {
		clusterPorts.next = 20000 + os.Getpid()%20000
	}
	base := clusterPorts.next
	clusterPorts.next += 10
	clusterPorts.Unlock()
	var nodes []*Node
	var seed string
	for i := 0; i < n; i++ {
		mc := mesh.DefaultConfig()
		mc.Bind = fmt.Sprintf("127.0.1.%d:%d", 1+i, base+i)
		if seed != "" {
			mc.Join = []string{seed}
		}
		mc.Timings = mesh.FastTimings()
		nd, err := tryStart(t, db, fmt.Sprintf("%s-%d", t.Name(), i), &mc, opts, edit)
		// The handed-out port can be taken meanwhile (by an outgoing
		// connection's ephemeral port, or a test in another package):
		// retry on ports the kernel says are free right now.
		for attempt := 0; err != nil && strings.Contains(err.Error(), "address already in use") && attempt < 5; attempt++ {
			ip := fmt.Sprintf("127.0.1.%d", 1+i)
			port, perr := localnet.FreePort(ip, true)
			if perr != nil {
				t.Fatalf("start node: %v", perr)
			}
			mc.Bind = fmt.Sprintf("%s:%d", ip, port)
			nd, err = tryStart(t, db, fmt.Sprintf("%s-%d", t.Name(), i), &mc, opts, edit)
		}
		if err != nil {
			t.Fatalf("start node: %v", err)
		}
		seed = mc.Bind
		nodes = append(nodes, nd)
	}
	deadline := time.Now().Add(15 * time.Second)
	for _, node := range nodes {
		for node.Mesh.Stats().LivePeers != n-1 {
			if time.Now().After(deadline) {
				t.Fatalf("mesh did not converge: %+v", node.Mesh.Members())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return nodes
}
