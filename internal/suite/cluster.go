package suite

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"queen-node/internal/localnet"
	"queen-node/internal/nodeproc"
	"queen-node/protocol"
)

// Cluster timings.
const (
	healthTimeout = 60 * time.Second // process start to /health 200
	meshTimeout   = 30 * time.Second // every node sees every other alive
	stopGrace     = 10 * time.Second // SIGTERM to SIGKILL
)

// node is one queen-node process the suite started.
type node struct {
	name    string
	http    string // base URL
	mesh    string // host:port
	logPath string
	proc    *nodeproc.Proc
}

// cluster is a set of nodes on loopback sharing one database.
type cluster struct {
	log   hclog.Logger
	nodes []*node
	env   map[string]string // the suite's settings, on top of the node defaults
}

// URLs returns the nodes' base URLs.
func (c *cluster) URLs() []string {
	out := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.http
	}
	return out
}

// EnvLine is the cluster's settings as KEY=VALUE words, sorted, for the report.
func (c *cluster) EnvLine() string {
	keys := make([]string, 0, len(c.env))
	for k := range c.env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(k + "=" + c.env[k])
	}
	return b.String()
}

// startCluster starts n nodes of bin on 127.0.0.1 with env (QUEEN_* on top
// of the defaults), the first one the mesh seed, and waits until every
// node answers /health and sees all n members alive. On error the nodes
// already started are stopped.
func startCluster(ctx context.Context, log hclog.Logger, bin, pgURL, logDir string, n int, env map[string]string, tag string) (*cluster, error) {
	c := &cluster{log: log, env: env}
	var seed string
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("mesh key: %w", err)
	}
	secret := base64.StdEncoding.EncodeToString(key)
	for i := range n {
		httpPort, err := localnet.FreePort("127.0.0.1", false)
		if err != nil {
			c.stop()
			return nil, err
		}
		meshPort, err := localnet.FreePort("127.0.0.1", true)
		if err != nil {
			c.stop()
			return nil, err
		}
		nd := &node{
			name:    fmt.Sprintf("%s-n%d", tag, i+1),
			http:    "http://127.0.0.1:" + strconv.Itoa(httpPort),
			mesh:    "127.0.0.1:" + strconv.Itoa(meshPort),
			logPath: filepath.Join(logDir, fmt.Sprintf("%s-n%d.log", tag, i+1)),
		}
		vars := map[string]string{
			"QUEEN_PG_URL":      pgURL,
			"QUEEN_HTTP_ADDR":   "127.0.0.1:" + strconv.Itoa(httpPort),
			"QUEEN_MESH_BIND":   nd.mesh,
			"QUEEN_NODE_NAME":   nd.name,
			"QUEEN_MESH_JOIN":   seed,
			"QUEEN_MESH_SECRET": secret, // sealed, as in production: push ownership needs it (docs/api.md)
		}
		for k, v := range env {
			vars[k] = v
		}
		if err := c.spawn(bin, nd, vars); err != nil {
			c.stop()
			return nil, err
		}
		if seed == "" {
			seed = nd.mesh
		}
	}
	for _, nd := range c.nodes {
		if err := waitHealthy(ctx, nd); err != nil {
			c.stop()
			return nil, err
		}
	}
	if env["QUEEN_MESH"] != "0" {
		if err := waitMesh(ctx, c.nodes); err != nil {
			c.stop()
			return nil, err
		}
	}
	log.Info("cluster up", "tag", tag, "nodes", n, "env", c.EnvLine())
	return c, nil
}

func (c *cluster) spawn(bin string, nd *node, vars map[string]string) error {
	// Only our variables plus the basics: a QUEEN_* left in the caller's
	// environment must not change what is measured.
	p, err := nodeproc.Start(nodeproc.Options{Bin: bin, Env: nodeproc.Env(vars, "QUEEN_"), LogPath: nd.logPath})
	if err != nil {
		return fmt.Errorf("start %s: %w", nd.name, err)
	}
	nd.proc = p
	c.nodes = append(c.nodes, nd)
	c.log.Debug("node started", "node", nd.name, "pid", p.PID(), "http", nd.http)
	return nil
}

// stop sends SIGTERM to every node by PID, waits, and SIGKILLs the ones
// still running after stopGrace.
func (c *cluster) stop() {
	if c == nil {
		return
	}
	for _, nd := range c.nodes {
		_ = nd.proc.Signal(syscall.SIGTERM)
	}
	for _, nd := range c.nodes {
		if killed, _ := nd.proc.Stop(syscall.SIGTERM, stopGrace); killed {
			c.log.Warn("node did not stop; killed it", "node", nd.name, "pid", nd.proc.PID())
		}
	}
	c.nodes = nil
}

var probe = &http.Client{Timeout: 5 * time.Second}

// get returns the body of a 200 answer.
func get(ctx context.Context, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := probe.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %d", url, resp.StatusCode)
	}
	return body, nil
}

func waitHealthy(ctx context.Context, nd *node) error {
	if err := nodeproc.WaitHealthy(ctx, nd.proc, nd.http, healthTimeout, 100*time.Millisecond); err != nil {
		return fmt.Errorf("%s: %w", nd.name, err)
	}
	return nil
}

// waitMesh waits until every node's /status lists every node alive.
func waitMesh(ctx context.Context, nodes []*node) error {
	deadline := time.Now().Add(meshTimeout)
	for {
		formed := true
		for _, nd := range nodes {
			if alive(ctx, nd) != len(nodes) {
				formed = false
				break
			}
		}
		if formed {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("mesh of %d nodes not formed after %s", len(nodes), meshTimeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func alive(ctx context.Context, nd *node) int {
	body, err := get(ctx, nd.http+"/status")
	if err != nil {
		return 0
	}
	var st struct {
		Mesh struct {
			Members []struct {
				State protocol.MemberState `json:"state"`
			} `json:"members"`
		} `json:"mesh"`
	}
	if json.Unmarshal(body, &st) != nil {
		return 0
	}
	n := 0
	for _, m := range st.Mesh.Members {
		if m.State == protocol.MemberAlive {
			n++
		}
	}
	return n
}
