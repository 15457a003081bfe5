package node_test

// End-to-end tests of the maintenance modes (docs/api.md, "Maintenance
// modes") through real HTTP and PostgreSQL.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"queen-node/broker"
	"queen-node/internal/nodetest"
	"queen-node/internal/pgtest"
	"queen-node/node"
	"queen-node/pushbuf"
)

const fastRefresh = 100 * time.Millisecond

func named(name string, bufDir string) nodetest.Option {
	return func(c *broker.Config) {
		c.NodeName = name
		c.Maintenance.RefreshInterval = fastRefresh
		// The two nodes share a database but no mesh: a node learns of the
		// other's pushes (here, its replay) only through the reseed floor,
		// which must come round within the drain's deadline.
		c.Hotlist.ReseedInterval, c.Hotlist.MaxPhase = time.Second, 500*time.Millisecond
		if bufDir != "" {
			c.Maintenance.BufferDir = bufDir
		}
	}
}

// waitFor polls cond every 10 ms until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type seqMsg struct {
	Node string `json:"node"`
	Seq  int    `json:"seq"`
}

// pushSeq pushes one item per seq to partition p and checks every item is
// answered with status want.
func pushSeq(t *testing.T, n *nodetest.Node, auth, queue, p, from string, seqs []int, want string) []map[string]any {
	t.Helper()
	items := make([]map[string]any, len(seqs))
	for i, s := range seqs {
		items[i] = map[string]any{"queue": queue, "partition": p, "payload": seqMsg{from, s}}
	}
	r := n.DoAuth(t, auth, "POST", "/api/v1/push", map[string]any{"items": items})
	if r.Status != http.StatusCreated {
		t.Fatalf("push to %s/%s: %d %s", queue, p, r.Status, r.Body)
	}
	res := r.Arr(t)
	for i, it := range res {
		if it["status"] != want {
			t.Fatalf("push item %d: status %v, want %s: %s", i, it["status"], want, r.Body)
		}
		if tx, _ := it["transactionId"].(string); tx == "" || it["transaction_id"] != tx {
			t.Fatalf("push item %d has no transactionId: %s", i, r.Body)
		}
		if want == "buffered" && (it["message_id"] != nil || it["queueName"] != queue) {
			t.Fatalf("buffered item %d: %s", i, r.Body)
		}
	}
	return res
}

// drain pops (autoAck, batch 100) until want messages arrived or the
// deadline passed, and returns them per partition in pop order.
func drain(t *testing.T, n *nodetest.Node, auth, queue string, want int) map[string][]seqMsg {
	t.Helper()
	got := map[string][]seqMsg{}
	total := 0
	deadline := time.Now().Add(15 * time.Second)
	for total < want && time.Now().Before(deadline) {
		r := n.DoAuth(t, auth, "GET", "/api/v1/pop/queue/"+queue+"?batch=100&autoAck=true&wait=true&timeout=500", nil)
		if r.Status == http.StatusNoContent {
			continue
		}
		if r.Status != http.StatusOK {
			t.Fatalf("pop: %d %s", r.Status, r.Body)
		}
		var body struct {
			Messages []struct {
				Partition string `json:"partition"`
				Data      seqMsg `json:"data"`
			} `json:"messages"`
		}
		r.JSON(t, &body)
		for _, m := range body.Messages {
			got[m.Partition] = append(got[m.Partition], m.Data)
			total++
		}
	}
	if total != want {
		t.Fatalf("popped %d messages, want %d: %v", total, want, got)
	}
	return got
}

func seqs(from, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = from + i
	}
	return out
}

// TestPushMaintenanceAcrossNodesAndRestart: push maintenance turned on
// through node A reaches node B through PostgreSQL within the refresh
// interval; pushes on both are answered "buffered" and stay invisible to
// pops; node B restarts with a non-empty buffer on the same directory; once
// maintenance is off every buffered message appears exactly once, in push
// order per partition, and both buffers end empty.
func TestPushMaintenanceAcrossNodesAndRestart(t *testing.T) {
	db := pgtest.NewDatabase(t)
	dirB := t.TempDir()
	a := nodetest.StartOn(t, db, named("node-a", ""))
	b := nodetest.StartOn(t, db, named("node-b", dirB))
	const q = "maint-q"

	// A message stored and consumed before maintenance: the queue exists
	// and any later pop answer can only come from the buffers.
	pushSeq(t, a, "", q, "pa", "pre", []int{0}, "queued")
	if got := drain(t, a, "", q, 1); len(got["pa"]) != 1 {
		t.Fatalf("pre-maintenance message: %v", got)
	}

	r := a.Do(t, "POST", "/api/v1/system/maintenance", map[string]any{"enabled": true})
	if r.Status != http.StatusOK || r.Obj(t)["maintenanceMode"] != true {
		t.Fatalf("enable: %d %s", r.Status, r.Body)
	}
	// The toggling node applies it at once; the other within its refresh.
	pushSeq(t, a, "", q, "pa", "a", seqs(1, 5), "buffered")
	enabledAt := time.Now()
	waitFor(t, 20*fastRefresh, "node B to see push maintenance", func() bool { return b.Broker.MaintenanceView().Push })
	t.Logf("node B saw push maintenance %v after node A", time.Since(enabledAt))
	pushSeq(t, b, "", q, "pb1", "b", seqs(1, 4), "buffered")
	pushSeq(t, b, "", q, "pb2", "b", seqs(1, 3), "buffered")
	pushSeq(t, b, "", q, "pb1", "b", seqs(5, 2), "buffered")

	// Nothing is visible, on either node.
	for _, n := range []*nodetest.Node{a, b} {
		if r := n.Do(t, "GET", "/api/v1/pop/queue/"+q+"?batch=100&autoAck=true", nil); r.Status != http.StatusNoContent {
			t.Fatalf("pop during push maintenance: %d %s", r.Status, r.Body)
		}
	}
	// A transaction with a push is refused; an empty push still answers [].
	r = b.Do(t, "POST", "/api/v1/transaction", map[string]any{"operations": []map[string]any{
		{"type": "push", "items": []map[string]any{{"queue": q, "payload": map[string]any{}}}}}})
	if r.Status != http.StatusServiceUnavailable || r.Obj(t)["error"] == nil {
		t.Fatalf("transaction during push maintenance: %d %s", r.Status, r.Body)
	}
	if got := b.Do(t, "GET", "/api/v1/system/maintenance", nil).Obj(t); got["bufferedMessages"] != float64(9) || got["maintenanceMode"] != true {
		t.Fatalf("node B's maintenance status: %v", got)
	}
	if got := b.Do(t, "GET", "/api/v1/status/buffers", nil).Obj(t); got["pending"] != float64(9) || got["dbHealthy"] != true {
		t.Fatalf("node B's /api/v1/status/buffers: %v", got)
	}

	// Restart node B on the same buffer directory, maintenance still on.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Node.Stop(ctx); err != nil {
		t.Fatalf("stop node B: %v", err)
	}
	b = nodetest.StartOn(t, db, named("node-b", dirB))
	if !b.Broker.MaintenanceView().Push {
		t.Fatal("restarted node B does not start in push maintenance")
	}
	if st := b.Broker.BufferStats(); st.Pending != 9 {
		t.Fatalf("restarted node B's buffer: %+v", st)
	}
	pushSeq(t, b, "", q, "pb1", "b", seqs(7, 3), "buffered")

	// Off, through node B this time: both nodes replay their own buffers.
	r = b.Do(t, "POST", "/api/v1/system/maintenance", map[string]any{"enabled": false})
	if r.Status != http.StatusOK || r.Obj(t)["maintenanceMode"] != false {
		t.Fatalf("disable: %d %s", r.Status, r.Body)
	}
	got := drain(t, a, "", q, 5+9+3)
	want := map[string][]seqMsg{}
	for _, s := range seqs(1, 5) {
		want["pa"] = append(want["pa"], seqMsg{"a", s})
	}
	for _, s := range seqs(1, 9) {
		want["pb1"] = append(want["pb1"], seqMsg{"b", s})
	}
	for _, s := range seqs(1, 3) {
		want["pb2"] = append(want["pb2"], seqMsg{"b", s})
	}
	for p, w := range want {
		if fmt.Sprint(got[p]) != fmt.Sprint(w) {
			t.Errorf("partition %s popped %v, want %v", p, got[p], w)
		}
	}
	if r := a.Do(t, "GET", "/api/v1/pop/queue/"+q+"?batch=100&autoAck=true", nil); r.Status != http.StatusNoContent {
		t.Fatalf("a message popped twice: %d %s", r.Status, r.Body)
	}
	for _, n := range []*nodetest.Node{a, b} {
		waitFor(t, 5*time.Second, "the buffer to be emptied", func() bool {
			st := n.Broker.BufferStats()
			return st.Pending == 0 && st.Bytes == 0 && !st.Replaying
		})
	}
	// Pushes are stored directly again.
	pushSeq(t, b, "", q, "pb1", "b", []int{10}, "queued")

	// /status reports the state and the counters.
	var doc struct {
		Maintenance map[string]any `json:"maintenance"`
	}
	b.Do(t, "GET", "/status", nil).JSON(t, &doc)
	if m := doc.Maintenance; m["push_enabled"] != false || m["buffered"] != float64(3) || m["replayed"] != float64(12) || m["buffer_pending"] != float64(0) {
		t.Fatalf("node B /status maintenance: %v", m)
	}
}

// TestPopMaintenance: every pop answers 204 (by queue, by partition, by
// namespace/task), a parked long-poll is woken at once, and the other node
// follows; off again, the message is there.
func TestPopMaintenance(t *testing.T) {
	db := pgtest.NewDatabase(t)
	a := nodetest.StartOn(t, db, named("node-a", ""))
	b := nodetest.StartOn(t, db, named("node-b", ""))
	const q = "popm-q"
	if r := a.Do(t, "POST", "/api/v1/configure", map[string]any{"queue": q, "namespace": "ns", "task": "tk"}); r.Status/100 != 2 {
		t.Fatalf("configure: %d %s", r.Status, r.Body)
	}
	if r := a.Do(t, "POST", "/api/v1/configure", map[string]any{"queue": "empty-q", "namespace": "ns2"}); r.Status/100 != 2 {
		t.Fatalf("configure: %d %s", r.Status, r.Body)
	}
	pushSeq(t, a, "", q, "p1", "a", []int{1}, "queued")

	// Long-polls parked on an empty queue, by name and by namespace, then
	// pop maintenance on.
	parked := make(chan nodetest.Response, 1)
	go func() {
		parked <- a.Do(t, "GET", "/api/v1/pop/queue/empty-q?wait=true&timeout=30000", nil)
	}()
	parkedAny := make(chan nodetest.Response, 1)
	go func() {
		parkedAny <- a.Do(t, "GET", "/api/v1/pop?namespace=ns2&wait=true&timeout=30000", nil)
	}()
	waitFor(t, 10*time.Second, "the long-polls to park", func() bool { return a.Broker.Parked() >= 2 })
	r := a.Do(t, "POST", "/api/v1/system/maintenance/pop", map[string]any{"enabled": true})
	if r.Status != http.StatusOK || r.Obj(t)["popMaintenanceMode"] != true {
		t.Fatalf("enable: %d %s", r.Status, r.Body)
	}
	on := time.Now()
	for _, ch := range []chan nodetest.Response{parked, parkedAny} {
		select {
		case r := <-ch:
			if r.Status != http.StatusNoContent {
				t.Fatalf("parked pop: %d %s", r.Status, r.Body)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a parked long-poll was not woken by pop maintenance")
		}
	}
	t.Logf("parked pops answered %v after the toggle", time.Since(on))

	waitFor(t, 20*fastRefresh, "node B to see pop maintenance", func() bool { return b.Broker.MaintenanceView().Pop })
	for _, n := range []*nodetest.Node{a, b} {
		for _, path := range []string{"/api/v1/pop/queue/" + q, "/api/v1/pop/queue/" + q + "/partition/p1",
			"/api/v1/pop?namespace=ns", "/api/v1/pop?task=tk", "/api/v1/pop/queue/" + q + "?wait=true&timeout=200"} {
			if r := n.Do(t, "GET", path, nil); r.Status != http.StatusNoContent {
				t.Fatalf("%s during pop maintenance: %d %s", path, r.Status, r.Body)
			}
		}
	}
	if r := b.Do(t, "GET", "/api/v1/system/maintenance/pop", nil); r.Obj(t)["popMaintenanceMode"] != true {
		t.Fatalf("GET pop maintenance: %s", r.Body)
	}
	// Pushes are not affected by pop maintenance.
	pushSeq(t, b, "", q, "p1", "b", []int{2}, "queued")

	if r := b.Do(t, "POST", "/api/v1/system/maintenance/pop", map[string]any{"enabled": false}); r.Status != http.StatusOK {
		t.Fatalf("disable: %d %s", r.Status, r.Body)
	}
	waitFor(t, 20*fastRefresh, "node A to see pop maintenance off", func() bool { return !a.Broker.MaintenanceView().Pop })
	got := drain(t, a, "", q, 2)
	if fmt.Sprint(got["p1"]) != fmt.Sprint([]seqMsg{{"a", 1}, {"b", 2}}) {
		t.Fatalf("after pop maintenance: %v", got)
	}
}

const maintSecret = "maint-secret-0123456789"

func maintToken(t *testing.T, tenant, role string) string {
	t.Helper()
	c := jwt.MapClaims{"sub": tenant + "-" + role, "role": role, "tenant": tenant, "exp": time.Now().Add(time.Hour).Unix()}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString([]byte(maintSecret))
	if err != nil {
		t.Fatal(err)
	}
	return "Bearer " + s
}

// TestMaintenanceAccess: 401 without a token, reading needs read-only,
// toggling needs admin (403 below it); the buffered figures a tenant reads
// are its own, and its buffered messages reach only its own queues.
func TestMaintenanceAccess(t *testing.T) {
	n := nodetest.StartConfig(t, func(c *node.Config) {
		c.Auth.Enabled = true
		c.Auth.Secret = maintSecret
		c.Broker.Maintenance.RefreshInterval = fastRefresh
	})
	ro, rw, admin := maintToken(t, "acme", "read-only"), maintToken(t, "acme", "read-write"), maintToken(t, "acme", "admin")
	globexAdmin := maintToken(t, "globex", "admin")
	for _, path := range []string{"/api/v1/system/maintenance", "/api/v1/system/maintenance/pop"} {
		if r := n.DoAuth(t, "", "GET", path, nil); r.Status != http.StatusUnauthorized {
			t.Fatalf("GET %s without a token: %d", path, r.Status)
		}
		if r := n.DoAuth(t, "", "POST", path, map[string]any{"enabled": true}); r.Status != http.StatusUnauthorized {
			t.Fatalf("POST %s without a token: %d", path, r.Status)
		}
		if r := n.DoAuth(t, ro, "GET", path, nil); r.Status != http.StatusOK {
			t.Fatalf("GET %s read-only: %d %s", path, r.Status, r.Body)
		}
		for _, tok := range []string{ro, rw} {
			r := n.DoAuth(t, tok, "POST", path, map[string]any{"enabled": true})
			if r.Status != http.StatusForbidden || r.Obj(t)["error"] == nil {
				t.Fatalf("POST %s below admin: %d %s", path, r.Status, r.Body)
			}
		}
	}
	if n.Broker.MaintenanceView() != (broker.MaintenanceState{}) {
		t.Fatal("a refused toggle changed the switches")
	}

	if r := n.DoAuth(t, admin, "POST", "/api/v1/system/maintenance", map[string]any{"enabled": true}); r.Status != http.StatusOK {
		t.Fatalf("admin toggle: %d %s", r.Status, r.Body)
	}
	pushSeq(t, n, rw, "shared-name", "p", "acme", seqs(1, 3), "buffered")
	status := func(tok string) map[string]any {
		r := n.DoAuth(t, tok, "GET", "/api/v1/system/maintenance", nil)
		if r.Status != http.StatusOK {
			t.Fatalf("GET: %d %s", r.Status, r.Body)
		}
		var m map[string]any
		if err := json.Unmarshal(r.Body, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	if m := status(ro); m["bufferedMessages"] != float64(3) || m["maintenanceMode"] != true {
		t.Fatalf("acme's view: %v", m)
	}
	if m := status(globexAdmin); m["bufferedMessages"] != float64(0) || m["bufferStats"].(map[string]any)["pendingCount"] != float64(0) {
		t.Fatalf("globex sees acme's buffered messages: %v", m)
	}
	// Maintenance is cluster-wide: globex's admin turns it off for everyone.
	if r := n.DoAuth(t, globexAdmin, "POST", "/api/v1/system/maintenance", map[string]any{"enabled": false}); r.Status != http.StatusOK {
		t.Fatalf("globex toggle: %d %s", r.Status, r.Body)
	}
	got := drain(t, n, rw, "shared-name", 3)
	if fmt.Sprint(got["p"]) != fmt.Sprint([]seqMsg{{"acme", 1}, {"acme", 2}, {"acme", 3}}) {
		t.Fatalf("acme's replayed messages: %v", got)
	}
	if r := n.DoAuth(t, globexAdmin, "GET", "/api/v1/pop/queue/shared-name?autoAck=true", nil); r.Status != http.StatusNoContent {
		t.Fatalf("globex popped acme's replayed message: %d %s", r.Status, r.Body)
	}
}

// TestReplayAfterCrashStoresOnce: a buffer replayed but not yet emptied
// when the node died (simulated by putting the replayed file back) is
// replayed again at the next start; the transaction ids fixed at buffering
// make the second replay store nothing (docs/api.md, "Maintenance modes").
func TestReplayAfterCrashStoresOnce(t *testing.T) {
	db := pgtest.NewDatabase(t)
	dir := t.TempDir()
	n := nodetest.StartOn(t, db, named("node-c", dir))
	const q = "crash-q"
	if r := n.Do(t, "POST", "/api/v1/system/maintenance", map[string]any{"enabled": true}); r.Status != http.StatusOK {
		t.Fatalf("enable: %d %s", r.Status, r.Body)
	}
	pushSeq(t, n, "", q, "p", "c", seqs(1, 4), "buffered")
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := n.Node.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	}
	stop()
	saved, err := os.ReadFile(filepath.Join(dir, pushbuf.FileName))
	if err != nil || len(saved) == 0 {
		t.Fatalf("buffer file: %d bytes, %v", len(saved), err)
	}
	n = nodetest.StartOn(t, db, named("node-c", dir))
	if r := n.Do(t, "POST", "/api/v1/system/maintenance", map[string]any{"enabled": false}); r.Status != http.StatusOK {
		t.Fatalf("disable: %d %s", r.Status, r.Body)
	}
	waitFor(t, 5*time.Second, "the first replay", func() bool { st := n.Broker.BufferStats(); return st.Bytes == 0 && st.Replayed == 4 })
	stop()
	if err := os.WriteFile(filepath.Join(dir, pushbuf.FileName), saved, 0o600); err != nil {
		t.Fatal(err)
	}
	n = nodetest.StartOn(t, db, named("node-c", dir))
	waitFor(t, 5*time.Second, "the second replay", func() bool { st := n.Broker.BufferStats(); return st.Bytes == 0 && st.ReplayDuplicates == 4 })
	if st := n.Broker.BufferStats(); st.Replayed != 0 {
		t.Fatalf("the second replay stored %d messages again", st.Replayed)
	}
	got := drain(t, n, "", q, 4)
	if fmt.Sprint(got["p"]) != fmt.Sprint([]seqMsg{{"c", 1}, {"c", 2}, {"c", 3}, {"c", 4}}) {
		t.Fatalf("popped %v", got)
	}
	if r := n.Do(t, "GET", "/api/v1/pop/queue/"+q+"?autoAck=true", nil); r.Status != http.StatusNoContent {
		t.Fatalf("a message stored twice: %d %s", r.Status, r.Body)
	}
}
