// Command queen-demo runs the main job of the README: a disposable
// PostgreSQL, a three-node queen-node cluster on loopback (configs/*.env),
// and a sample workload pushed on one node and consumed through the others.
// It prints where each node answers and stays up until Ctrl-C (or exits
// after the summary with -exit), cleaning up behind it.
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"queen-node/internal/nodeproc"
	"queen-node/internal/pgtemp"
	"queen-node/protocol"
)

func main() {
	var (
		exitAfter  = flag.Bool("exit", false, "exit after the workload summary instead of staying up")
		messages   = flag.Int("messages", 5000, "messages in the sample workload")
		partitions = flag.Int("partitions", 16, "partitions of the sample queue")
		configs    = flag.String("configs", "configs", "directory with node1.env, node2.env, node3.env")
	)
	flag.Parse()
	log := hclog.New(&hclog.LoggerOptions{Name: "demo", Level: hclog.Info})
	if err := run(log, *configs, *messages, *partitions, *exitAfter); err != nil {
		log.Error("demo failed", "error", err)
		os.Exit(1)
	}
}

type node struct {
	name, httpAddr string
	proc           *nodeproc.Proc
}

func run(log hclog.Logger, configDir string, messages, partitions int, exitAfter bool) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	work, err := os.MkdirTemp("", "queen-demo-")
	if err != nil {
		return fmt.Errorf("temp dir: %w", err)
	}
	defer os.RemoveAll(work)

	log.Info("building queen-node")
	bin, err := nodeproc.Build(ctx, "", work, os.Stdout)
	if err != nil {
		return err
	}

	log.Info("starting a disposable PostgreSQL")
	opts := pgtemp.DefaultOptions()
	opts.Logger = log.Named("pgtemp")
	pgs, err := pgtemp.Start(ctx, opts)
	if err != nil {
		return err
	}
	defer func() {
		if err := pgs.Stop(); err != nil {
			log.Warn("stop PostgreSQL", "error", err)
		}
	}()
	pgURL := pgs.URL("postgres")
	log.Info("PostgreSQL is up", "url", pgURL, "pid", pgs.PID())

	var nodes []*node
	defer func() {
		for _, n := range nodes {
			_ = n.proc.Signal(syscall.SIGTERM)
		}
		for _, n := range nodes {
			_, _ = n.proc.Stop(syscall.SIGTERM, 15*time.Second)
		}
	}()
	// One key for the three nodes, unless the caller set one: a sealed mesh,
	// so pushes go to their queue's owner (docs/api.md, "Push ownership").
	secret := os.Getenv("QUEEN_MESH_SECRET")
	if secret == "" {
		key := make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return fmt.Errorf("mesh key: %w", err)
		}
		secret = base64.StdEncoding.EncodeToString(key)
	}
	for i := 1; i <= 3; i++ {
		env, err := readEnvFile(filepath.Join(configDir, fmt.Sprintf("node%d.env", i)))
		if err != nil {
			return err
		}
		n := &node{name: env["QUEEN_NODE_NAME"], httpAddr: env["QUEEN_HTTP_ADDR"]}
		env["QUEEN_PG_URL"] = pgURL
		if _, ok := env["QUEEN_MESH_SECRET"]; !ok {
			env["QUEEN_MESH_SECRET"] = secret
		}
		// The caller's environment passes through (a QUEEN_* there applies
		// unless the node's file sets it), as with a shell running the files.
		n.proc, err = nodeproc.Start(nodeproc.Options{Bin: bin, Env: nodeproc.Env(env),
			LogPath: filepath.Join(work, fmt.Sprintf("node%d.log", i)), DeathSignal: syscall.SIGTERM})
		if err != nil {
			return fmt.Errorf("start %s: %w", n.name, err)
		}
		nodes = append(nodes, n)
	}
	for _, n := range nodes {
		if err := waitHealthy(ctx, n); err != nil {
			return err
		}
		log.Info("node is healthy", "node", n.name, "http", "http://"+n.httpAddr, "log", n.proc.LogPath())
	}

	if err := waitMesh(ctx, nodes); err != nil {
		log.Warn("the mesh did not converge; hints will not flow, the reseed floor still delivers", "error", err)
	} else {
		log.Info("the mesh converged", "members", len(nodes))
	}
	if err := workload(ctx, log, nodes, messages, partitions); err != nil {
		return err
	}
	printCluster(ctx, nodes)

	fmt.Println()
	fmt.Println("The cluster is up:")
	for _, n := range nodes {
		fmt.Printf("  %-6s  status http://%s/status   health http://%s/health   log %s\n", n.name, n.httpAddr, n.httpAddr, n.proc.LogPath())
	}
	fmt.Printf("  dashboard   http://%s/\n", nodes[0].httpAddr)
	fmt.Printf("  PostgreSQL  %s\n", pgURL)
	if exitAfter {
		return nil // everything printed above is removed on exit
	}
	fmt.Printf("  inspect     %s status --addr %s --cluster\n", bin, nodes[0].httpAddr)
	fmt.Println("Press Ctrl-C to stop and clean up.")
	select {
	case <-ctx.Done():
	case <-anyExited(nodes):
		return errors.New("a node exited; see its log above")
	}
	fmt.Println("stopping")
	return nil
}

// workload pushes messages on node1 in batches of 100 and consumes them with
// two consumer groups through node2 and node3, then checks nothing was lost.
func workload(ctx context.Context, log hclog.Logger, nodes []*node, messages, partitions int) error {
	const queue = "demo-orders"
	producer := "http://" + nodes[0].httpAddr
	if _, err := call(ctx, producer, "POST", "/api/v1/configure", map[string]any{"queue": queue, "options": map[string]any{"leaseTime": 30}}); err != nil {
		return err
	}
	groups := []string{"billing", "shipping"}
	var consumed [2]atomic.Int64
	perNode := make([]atomic.Int64, len(nodes))
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for gi, g := range groups {
		for w := 0; w < 2; w++ {
			ni := 1 + (gi+w)%2
			wg.Add(1)
			go func() {
				defer wg.Done()
				base := "http://" + nodes[ni].httpAddr
				for cctx.Err() == nil {
					body, err := call(cctx, base, "GET", "/api/v1/pop/queue/"+queue+"?batch=100&wait=true&timeout=2000&consumerGroup="+g, nil)
					if err != nil || body == nil {
						continue
					}
					var res struct {
						Messages []struct {
							TransactionID string `json:"transactionId"`
							PartitionID   string `json:"partitionId"`
						} `json:"messages"`
						LeaseID string `json:"leaseId"`
					}
					if json.Unmarshal(body, &res) != nil {
						continue
					}
					acks := make([]map[string]any, len(res.Messages))
					for i, m := range res.Messages {
						acks[i] = map[string]any{"transactionId": m.TransactionID, "partitionId": m.PartitionID, "leaseId": res.LeaseID, "status": protocol.AckCompleted}
					}
					if _, err := call(cctx, base, "POST", "/api/v1/ack/batch", map[string]any{"consumerGroup": g, "acknowledgments": acks}); err == nil {
						consumed[gi].Add(int64(len(acks)))
						perNode[ni].Add(int64(len(acks)))
					}
				}
			}()
		}
	}

	start := time.Now()
	log.Info("pushing the sample workload", "node", nodes[0].name, "messages", messages, "partitions", partitions)
	for sent := 0; sent < messages; sent += 100 {
		items := make([]map[string]any, 0, 100)
		for i := sent; i < min(sent+100, messages); i++ {
			items = append(items, map[string]any{"queue": queue, "partition": fmt.Sprintf("customer-%02d", i%partitions),
				"payload": map[string]any{"order": i, "amount": i % 97}})
		}
		if _, err := call(ctx, producer, "POST", "/api/v1/push", map[string]any{"items": items}); err != nil {
			return err
		}
	}
	pushed := time.Since(start)
	deadline := time.Now().Add(2 * time.Minute)
	for consumed[0].Load() < int64(messages) || consumed[1].Load() < int64(messages) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			cancel()
			wg.Wait()
			return fmt.Errorf("consumed %d and %d of %d messages", consumed[0].Load(), consumed[1].Load(), messages)
		}
		time.Sleep(20 * time.Millisecond)
	}
	elapsed := time.Since(start)
	cancel()
	wg.Wait()
	fmt.Println()
	fmt.Println("Sample workload")
	fmt.Printf("  pushed     %d messages on %s in %v (%.0f msg/s)\n", messages, nodes[0].name, pushed.Round(time.Millisecond), float64(messages)/pushed.Seconds())
	for gi, g := range groups {
		fmt.Printf("  consumed   %d messages in group %-8s (exactly the pushed set: %v)\n", consumed[gi].Load(), g, consumed[gi].Load() == int64(messages))
	}
	for i := 1; i < len(nodes); i++ {
		fmt.Printf("  through    %-6s %d messages\n", nodes[i].name, perNode[i].Load())
	}
	fmt.Printf("  elapsed    %v for push + both groups\n", elapsed.Round(time.Millisecond))
	return nil
}

var client = &http.Client{Timeout: 30 * time.Second}

// call sends a JSON request and returns the body, nil for 204.
func call(ctx context.Context, base, method, path string, body any) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		buf, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(buf)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if resp.StatusCode >= 400 {
		return nil, fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, data)
	}
	if resp.StatusCode == 204 {
		return nil, nil
	}
	return data, nil
}

// nodeStatus is the part of GET /status the demo prints.
type nodeStatus struct {
	Hotlist struct {
		Rings       int   `json:"rings"`
		MarksLocal  int64 `json:"marks_local"`
		MarksRemote int64 `json:"marks_remote"`
		ReseedAdded int64 `json:"reseed_added"`
	} `json:"hotlist"`
	Mesh struct {
		Members []struct {
			Name  string               `json:"name"`
			State protocol.MemberState `json:"state"`
		} `json:"members"`
		HintsSent     uint64 `json:"hints_sent"`
		HintsReceived uint64 `json:"hints_received"`
	} `json:"mesh"`
}

func fetchStatus(ctx context.Context, n *node) (nodeStatus, error) {
	var st nodeStatus
	body, err := call(ctx, "http://"+n.httpAddr, "GET", "/status", nil)
	if err != nil {
		return st, err
	}
	return st, json.Unmarshal(body, &st)
}

// waitMesh waits until every node sees every other alive.
func waitMesh(ctx context.Context, nodes []*node) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		converged := true
		for _, n := range nodes {
			st, err := fetchStatus(ctx, n)
			alive := 0
			for _, m := range st.Mesh.Members {
				if m.State == protocol.MemberAlive {
					alive++
				}
			}
			if err != nil || alive != len(nodes) {
				converged = false
			}
		}
		if converged {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return errors.New("members not all alive after 20 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// printCluster prints what each node's /status says about the run.
func printCluster(ctx context.Context, nodes []*node) {
	fmt.Println()
	fmt.Println("What the nodes saw (GET /status)")
	fmt.Printf("  %-6s %8s %12s %12s %11s %12s %6s\n", "node", "members", "marks local", "marks remote", "hints sent", "hints recv", "rings")
	for _, n := range nodes {
		st, err := fetchStatus(ctx, n)
		if err != nil {
			fmt.Printf("  %-6s unreachable: %v\n", n.name, err)
			continue
		}
		fmt.Printf("  %-6s %8d %12d %12d %11d %12d %6d\n", n.name, len(st.Mesh.Members), st.Hotlist.MarksLocal,
			st.Hotlist.MarksRemote, st.Mesh.HintsSent, st.Mesh.HintsReceived, st.Hotlist.Rings)
	}
}

func waitHealthy(ctx context.Context, n *node) error {
	if err := nodeproc.WaitHealthy(ctx, n.proc, "http://"+n.httpAddr, 60*time.Second, 100*time.Millisecond); err != nil {
		return fmt.Errorf("%s: %w", n.name, err)
	}
	return nil
}

func anyExited(nodes []*node) <-chan struct{} {
	ch := make(chan struct{})
	for _, n := range nodes {
		go func() { <-n.proc.Exited(); close(ch) }()
	}
	return ch
}

// readEnvFile reads KEY=VALUE lines; blank lines and # comments are skipped.
func readEnvFile(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("config %s: line %q is not KEY=VALUE", path, line)
		}
		env[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return env, sc.Err()
}
