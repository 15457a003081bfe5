package clustertest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"queen-node/internal/localnet"
	"queen-node/internal/nodeproc"
	"queen-node/internal/pgtest"
	"queen-node/pg"
)

// upgradeFromEnv names a commit to upgrade from instead of the previous
// release found in git history (e.g. to run the test against a build with
// the old behaviour).
const upgradeFromEnv = "QUEEN_UPGRADE_FROM"

var functionSetConst = regexp.MustCompile(`(?m)^const FunctionSet = (\d+)$`)

// git runs git in dir and returns its trimmed output.
func git(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(string(out)), nil
}

// functionSetAt is pg.FunctionSet at commit c; 0 for a commit from before
// the number existed (its nodes re-create their functions at every start).
func functionSetAt(root, c string) int {
	src, err := git(root, "show", c+":pg/functionset.go")
	if err != nil {
		return 0
	}
	m := functionSetConst.FindStringSubmatch(src)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// previousRelease is the commit this tree upgrades from: the parent of the
// newest first-parent commit that changed the function set, i.e. the last
// tree whose nodes carry an older set than this one (or none at all).
func previousRelease(t *testing.T, root string) (commit string, set int) {
	t.Helper()
	if c := os.Getenv(upgradeFromEnv); c != "" {
		full, err := git(root, "rev-parse", "--verify", c+"^{commit}")
		if err != nil {
			t.Fatalf("%s: %v", upgradeFromEnv, err)
		}
		return full, functionSetAt(root, full)
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git: the previous release cannot be built")
	}
	shallow, err := git(root, "rev-parse", "--is-shallow-repository")
	if err != nil {
		t.Skipf("no git history: %v", err)
	}
	if shallow == "true" {
		t.Skip("shallow clone: the previous release is not in the history (git fetch --unshallow to run this test)")
	}
	list, err := git(root, "rev-list", "--first-parent", "HEAD", "--", "pg/sql/functions", "pg/functionset.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range strings.Fields(list) {
		parent, err := git(root, "rev-parse", "--verify", "--quiet", c+"^1")
		if err != nil {
			continue // the first commit
		}
		if s := functionSetAt(root, parent); s < pg.FunctionSet {
			return parent, s
		}
	}
	t.Skip("no commit in the history carries an older function set")
	return "", 0
}

// buildAt builds cmd/queen-node as of commit c, from a git archive of it.
func buildAt(t *testing.T, root, c string) string {
	t.Helper()
	dir := t.TempDir()
	archive := exec.Command("git", "archive", "--format=tar", c)
	archive.Dir = root
	untar := exec.Command("tar", "-x", "-C", dir)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	untar.Stdin = pipe
	// One buffer each: the two processes' stderr is copied by two
	// goroutines, and a shared bytes.Buffer was a data race (go test -race).
	var archiveErrs, untarErrs bytes.Buffer
	archive.Stderr, untar.Stderr = &archiveErrs, &untarErrs
	if err := untar.Start(); err != nil {
		t.Fatal(err)
	}
	if err := archive.Run(); err != nil {
		t.Fatalf("git archive %s: %v: %s", c, err, archiveErrs.String())
	}
	if err := untar.Wait(); err != nil {
		t.Fatalf("tar: %v: %s", err, untarErrs.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin, err := nodeproc.Build(ctx, dir, dir, nil)
	if err != nil {
		t.Fatalf("build %s: %v", c, err)
	}
	return bin
}

// upgradeNode is one HTTP address that processes of either binary take in
// turn.
type upgradeNode struct {
	name string
	addr string
	log  string
	proc *nodeproc.Proc
	up   atomic.Bool // the traffic sends to it
}

func (n *upgradeNode) base() string { return "http://" + n.addr }

// launch starts bin as node n on pgURL, its log appended under label.
func (n *upgradeNode) launch(t *testing.T, bin, pgURL, label string) *nodeproc.Proc {
	t.Helper()
	env := nodeproc.Env(map[string]string{
		"QUEEN_PG_URL":       pgURL,
		"QUEEN_NODE_NAME":    n.name,
		"QUEEN_HTTP_ADDR":    n.addr,
		"QUEEN_MESH":         "0",
		"QUEEN_PG_MAX_CONNS": "8",
		"QUEEN_LOG_LEVEL":    "info",
	}, "QUEEN_", "PG")
	p, err := nodeproc.Start(nodeproc.Options{Bin: bin, Env: env, LogPath: n.log, Append: true,
		Header: "=== " + n.name + " started as " + label})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (n *upgradeNode) start(t *testing.T, bin, pgURL, label string) {
	t.Helper()
	p := n.launch(t, bin, pgURL, label)
	n.proc = p
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := nodeproc.WaitHealthy(ctx, p, n.base(), 50*time.Second, 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	n.up.Store(true)
}

// startRefused starts bin and expects it to stop at once with the
// documented refusal of a database a newer release migrated
// (docs/operations.md, "Upgrades"): an old node cannot come back once the
// new release added a migration.
func (n *upgradeNode) startRefused(t *testing.T, bin, pgURL, label string) {
	t.Helper()
	p := n.launch(t, bin, pgURL, label)
	select {
	case <-p.Exited():
	case <-time.After(30 * time.Second):
		_, _ = p.Stop(syscall.SIGKILL, 5*time.Second)
		t.Fatalf("%s: the old node kept running on a database a newer release migrated", n.name)
	}
	if tail := localnet.LogTail(n.log, 20); !strings.Contains(tail, "is newer than this node's") {
		t.Fatalf("%s: the old node stopped without the documented refusal:\n%s", n.name, tail)
	}
}

// migrationsAt counts the schema migrations of commit c.
func migrationsAt(t *testing.T, root, c string) int {
	t.Helper()
	out, err := git(root, "ls-tree", "--name-only", c, "pg/sql/migrations/")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range strings.Fields(out) {
		if strings.HasSuffix(f, ".sql") {
			n++
		}
	}
	return n
}

func (n *upgradeNode) stop(t *testing.T) {
	t.Helper()
	n.up.Store(false)
	if n.proc == nil {
		return
	}
	if killed, err := n.proc.Stop(syscall.SIGTERM, 20*time.Second); err != nil || killed {
		t.Fatalf("stop %s: killed %v, %v", n.name, killed, err)
	}
	n.proc = nil
}

// upgradeTraffic pushes, pops and acks through whichever nodes are up, and
// records every 5xx and every message pushed and acked.
type upgradeTraffic struct {
	nodes  []*upgradeNode
	client *http.Client
	queue  string

	mu       sync.Mutex
	pushed   map[string]bool // transaction id -> acked
	errs5xx  []string
	failures []string
	rr       atomic.Uint64
}

func (tr *upgradeTraffic) fail(format string, args ...any) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if len(tr.failures) < 20 {
		tr.failures = append(tr.failures, fmt.Sprintf(format, args...))
	}
}

// do sends one request to a node that is up (round robin), retrying
// another on a transport error (a node being stopped); a 5xx is recorded.
func (tr *upgradeTraffic) do(ctx context.Context, method, path string, body any) (int, []byte, error) {
	var payload []byte
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		payload = b
	}
	for ctx.Err() == nil {
		n := tr.nodes[tr.rr.Add(1)%uint64(len(tr.nodes))]
		if !n.up.Load() {
			continue
		}
		req, err := http.NewRequestWithContext(ctx, method, n.base()+path, bytes.NewReader(payload))
		if err != nil {
			return 0, nil, err
		}
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := tr.client.Do(req)
		if err != nil {
			if ctx.Err() == nil {
				time.Sleep(20 * time.Millisecond) // back off, not synchronisation
			}
			continue
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			continue
		}
		if resp.StatusCode >= 500 {
			tr.mu.Lock()
			tr.errs5xx = append(tr.errs5xx, fmt.Sprintf("%s %s via %s: %d %.300s", method, path, n.name, resp.StatusCode, b))
			tr.mu.Unlock()
		}
		return resp.StatusCode, b, nil
	}
	return 0, nil, ctx.Err()
}

func (tr *upgradeTraffic) producer(ctx context.Context, wg *sync.WaitGroup, id int) {
	defer wg.Done()
	for i := 0; ctx.Err() == nil; i++ {
		txid := fmt.Sprintf("p%d-%d", id, i)
		item := map[string]any{"queue": tr.queue, "partition": fmt.Sprintf("p%d", i%4),
			"payload": map[string]any{"n": i}, "transactionId": txid}
		for ctx.Err() == nil {
			code, b, err := tr.do(ctx, "POST", "/api/v1/push", map[string]any{"items": []any{item}})
			if err != nil {
				return
			}
			if code == 201 {
				tr.mu.Lock()
				if _, ok := tr.pushed[txid]; !ok {
					tr.pushed[txid] = false
				}
				tr.mu.Unlock()
				break
			}
			if code < 500 {
				tr.fail("push: %d %s", code, b)
				return
			}
		}
		time.Sleep(5 * time.Millisecond) // pace the load, not synchronisation
	}
}

// consumer pops and acks until ctx ends; stop tells it to go on only until
// everything pushed is acked.
func (tr *upgradeTraffic) consumer(ctx context.Context, wg *sync.WaitGroup, draining func() bool) {
	defer wg.Done()
	for ctx.Err() == nil {
		if draining() && tr.allAcked() {
			return
		}
		q := url.Values{"batch": {"10"}, "wait": {"true"}, "timeout": {"200"}, "consumerGroup": {"g"}}
		code, b, err := tr.do(ctx, "GET", "/api/v1/pop/queue/"+tr.queue+"?"+q.Encode(), nil)
		if err != nil {
			return
		}
		if code != 200 {
			if code != 204 && code < 500 {
				tr.fail("pop: %d %s", code, b)
			}
			continue
		}
		var res struct {
			Messages []popMsg `json:"messages"`
		}
		if err := json.Unmarshal(b, &res); err != nil {
			tr.fail("pop body %q: %v", b, err)
			continue
		}
		acks := make([]map[string]any, 0, len(res.Messages))
		for _, m := range res.Messages {
			acks = append(acks, map[string]any{"transactionId": m.TransactionID, "partitionId": m.PartitionID,
				"leaseId": m.LeaseID, "status": "completed"})
		}
		code, b, err = tr.do(ctx, "POST", "/api/v1/ack/batch", map[string]any{"consumerGroup": "g", "acknowledgments": acks})
		if err != nil {
			return
		}
		if code != 200 {
			continue // a lost ack: the lease expires and the batch comes back
		}
		var out []struct {
			Success bool `json:"success"`
		}
		if json.Unmarshal(b, &out) != nil || len(out) != len(acks) {
			tr.fail("ack body %q", b)
			continue
		}
		tr.mu.Lock()
		for i, r := range out {
			if r.Success {
				tr.pushed[res.Messages[i].TransactionID] = true
			}
		}
		tr.mu.Unlock()
	}
}

func (tr *upgradeTraffic) allAcked() bool {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, acked := range tr.pushed {
		if !acked {
			return false
		}
	}
	return true
}

func (tr *upgradeTraffic) counts() (pushed, acked int) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, a := range tr.pushed {
		pushed++
		if a {
			acked++
		}
	}
	return pushed, acked
}

// functionState is what the database says about its functions: the
// recorded set (-1 = no queen.function_set row or table) and a fingerprint
// of every queen function's identity and body, which changes when any body
// is re-created with other text.
func functionState(t *testing.T, pgURL string) (set int64, fingerprint int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	exists, err := pgtest.Int64s(ctx, pgURL, `SELECT (to_regclass('queen.function_set') IS NOT NULL)::int`)
	if err != nil {
		t.Fatal(err)
	}
	set = -1
	if exists[0] == 1 {
		v, err := pgtest.Int64s(ctx, pgURL, `SELECT coalesce((SELECT version FROM queen.function_set), -1)`)
		if err != nil {
			t.Fatal(err)
		}
		set = v[0]
	}
	f, err := pgtest.Int64s(ctx, pgURL, `SELECT ('x' || substr(md5(string_agg(p.oid::regprocedure::text || E'\n' || p.prosrc, E'\n' ORDER BY p.oid::regprocedure::text)), 1, 16))::bit(64)::bigint
		FROM pg_proc p WHERE p.pronamespace = 'queen'::regnamespace`)
	if err != nil {
		t.Fatal(err)
	}
	return set, f[0]
}

// A rolling upgrade from the previous release (built from git) to this
// tree on one database, with push, pop and ack traffic through both
// binaries throughout: old node up; the new node starts and installs its
// function set; the old node restarts and must not put its older bodies
// back (a previous release that predates queen.function_set cannot help
// re-creating them: then the test checks that the next start of a new node
// restores them); the old node is replaced by a new one. No request may
// answer 5xx and every message pushed must be acked (docs/operations.md,
// "Upgrades").
func TestRollingUpgradeFromPreviousRelease(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	prev, prevSet := previousRelease(t, root)
	short, _ := git(root, "rev-parse", "--short", prev)
	t.Logf("upgrading from %s (function set %d; 0 = before queen.function_set) to this tree (set %d)", short, prevSet, pg.FunctionSet)
	oldBin := buildAt(t, root, prev)

	pgURL := pgtest.NewDatabase(t)
	logDir := t.TempDir()
	var nodes []*upgradeNode
	for _, name := range []string{"a", "b"} {
		port, err := localnet.FreePort("127.0.0.1", false)
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, &upgradeNode{name: name, addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
			log: filepath.Join(logDir, name+".log")})
	}
	a, b := nodes[0], nodes[1]
	defer func() {
		for _, n := range nodes {
			if n.proc != nil {
				_, _ = n.proc.Stop(syscall.SIGKILL, 5*time.Second)
			}
			if t.Failed() {
				t.Logf("log of %s:\n%s", n.name, localnet.LogTail(n.log, 40))
			}
		}
	}()

	a.start(t, oldBin, pgURL, "previous release "+short)
	oldSet, oldPrint := functionState(t, pgURL)
	// A short lease brings back at once a batch whose pop answer was lost
	// with a stopping node; no retry limit moves it to the DLQ meanwhile.
	if code, body, err := (&upgradeTraffic{nodes: nodes, client: http.DefaultClient}).do(context.Background(), "POST", "/api/v1/configure",
		map[string]any{"queue": "upgrade", "options": map[string]any{"leaseTime": 2, "retryLimit": 1000}}); err != nil || code/100 != 2 {
		t.Fatalf("configure: %d %s %v", code, body, err)
	}

	tr := &upgradeTraffic{nodes: nodes, client: &http.Client{Timeout: 20 * time.Second}, queue: "upgrade",
		pushed: map[string]bool{}}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	prodCtx, stopProducers := context.WithCancel(ctx)
	var draining atomic.Bool
	var prodWG, consWG sync.WaitGroup
	for i := range 2 {
		prodWG.Add(1)
		go tr.producer(prodCtx, &prodWG, i)
	}
	for range 2 {
		consWG.Add(1)
		go tr.consumer(ctx, &consWG, draining.Load)
	}
	// progress waits until the traffic has pushed and acked more since the
	// last call, so that every phase carries traffic.
	lastPushed, lastAcked := 0, 0
	progress := func(phase string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			p, a := tr.counts()
			if p >= lastPushed+20 && a >= lastAcked+20 {
				lastPushed, lastAcked = p, a
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: no traffic: pushed %d acked %d (before %d, %d); failures %v", phase, p, a, lastPushed, lastAcked, tr.failures)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	progress("old node alone")

	b.start(t, nodeBin, pgURL, "this tree")
	newSet, newPrint := functionState(t, pgURL)
	if newSet != int64(pg.FunctionSet) {
		t.Fatalf("after the new node started: function set %d, want %d", newSet, pg.FunctionSet)
	}
	t.Logf("function set %d -> %d; bodies changed: %v", oldSet, newSet, oldPrint != newPrint)
	progress("old and new nodes")

	a.stop(t)
	progress("new node alone")
	here, err := filepath.Glob(filepath.Join(root, "pg", "sql", "migrations", "*.sql"))
	if err != nil {
		t.Fatal(err)
	}
	migrated := migrationsAt(t, root, prev) < len(here)
	if migrated {
		// This tree adds a migration: the old node cannot come back.
		a.startRefused(t, oldBin, pgURL, "previous release "+short+", restarted after a migration")
		t.Logf("this tree adds a schema migration (%d -> %d): the old node refused to start, as documented",
			migrationsAt(t, root, prev), len(here))
	} else {
		a.start(t, oldBin, pgURL, "previous release "+short+", restarted")
	}
	set, print := functionState(t, pgURL)
	switch {
	case migrated:
	case prevSet > 0:
		if set != newSet || print != newPrint {
			t.Fatalf("the old node's restart downgraded the functions: set %d (want %d), bodies changed %v", set, newSet, print != newPrint)
		}
		if !strings.Contains(localnet.LogTail(a.log, 200), "running on them") {
			t.Fatalf("the old node does not say it runs on the newer functions:\n%s", localnet.LogTail(a.log, 20))
		}
	case print != newPrint:
		// Before queen.function_set every start re-created its bodies; a
		// new node's next start puts the newer ones back.
		if print != oldPrint {
			t.Fatalf("the old node's restart left bodies of neither release")
		}
		t.Logf("the previous release predates queen.function_set and re-created its bodies at restart, as expected")
	}
	if !migrated {
		progress("old node restarted beside the new")
	}

	b.stop(t)
	b.start(t, nodeBin, pgURL, "this tree, restarted")
	if set, print := functionState(t, pgURL); set != newSet || print != newPrint {
		t.Fatalf("after the new node restarted: set %d, bodies changed %v", set, print != newPrint)
	}
	progress("new node restarted")

	a.stop(t)
	a.start(t, nodeBin, pgURL, "this tree (upgrade done)")
	progress("both nodes new")

	stopProducers()
	prodWG.Wait()
	draining.Store(true)
	deadline := time.Now().Add(60 * time.Second)
	for !tr.allAcked() {
		if time.Now().After(deadline) {
			p, a := tr.counts()
			t.Fatalf("pushed %d, acked only %d after the traffic stopped", p, a)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	consWG.Wait()
	p, ac := tr.counts()
	t.Logf("pushed %d, acked %d", p, ac)
	if len(tr.errs5xx) > 0 {
		t.Fatalf("%d answers were 5xx, e.g. %v", len(tr.errs5xx), tr.errs5xx[:min(5, len(tr.errs5xx))])
	}
	if len(tr.failures) > 0 {
		t.Fatalf("traffic failures: %v", tr.failures)
	}
}
