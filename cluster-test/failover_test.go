package clustertest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"queen-node/internal/pgtemp"
)

// PostgreSQL failover (docs/cluster-tests.md, docs/operations.md "Running on
// a highly available PostgreSQL"): a primary and a synchronous streaming
// standby, three nodes given both hosts with target_session_attrs=read-write,
// a workload through every node; the primary is killed (SIGKILL to the
// postmaster and its backends) and, after an outage window, the standby is
// promoted.
//
// What it proves:
//   - every push answered 201 before the kill is delivered afterwards: the
//     checker's delivered set == pushed set for the workload's groups, and a
//     fresh "audit" group reads the whole queue from the new primary at the
//     end. Synchronous replication is what makes this hold: a commit is
//     acknowledged only once the standby has it.
//   - nothing acked is redelivered, and nothing is redelivered before its
//     lease expired (checker rules 3 and 4): acks and leases are rows, and
//     they are on the standby too.
//   - during the gap the nodes answer 503 (never 500, never a transport
//     error, never slower than the client's timeout), /health is 503, and
//     every node comes back by itself once the standby is promoted.
//   - the time to recover, from the kill to the first successful push and
//     pop on each node, is measured and logged.

// failoverSpec sizes one failover run.
type failoverSpec struct {
	name      string
	messages  int
	rate      float64
	outage    time.Duration // from the kill to the promotion, at least
	warmup    int           // messages pushed before the kill
	timeout   time.Duration // the workload's
	maxAnswer time.Duration // bound on any push/ack answer, and on a pop's beyond its wait
}

func TestPostgresFailover(t *testing.T) {
	runFailover(t, failoverSpec{name: "PostgreSQL failover mid-load", messages: 8000, rate: 800,
		outage: 2 * time.Second, warmup: 2000, timeout: 3 * time.Minute, maxAnswer: 10 * time.Second})
}

// TestSoakFailover is the long variant (make soak, QUEEN_SOAK=1): five
// times the messages and a longer outage.
func TestSoakFailover(t *testing.T) {
	if os.Getenv("QUEEN_SOAK") != "1" {
		t.Skip("set QUEEN_SOAK=1 (make soak) to run the soak")
	}
	runFailover(t, failoverSpec{name: "PostgreSQL failover soak", messages: 40000, rate: 800,
		outage: 8 * time.Second, warmup: 20000, timeout: 6 * time.Minute, maxAnswer: 10 * time.Second})
}

func runFailover(t *testing.T, fs failoverSpec) {
	primary, standby, pgURL := startReplicatedPG(t)
	c := startClusterOpts(t, ClusterOptions{N: 3, PGURL: pgURL})
	rt := &recordingTransport{base: c.client.Transport}
	c.client.Transport = rt // before any workload request

	const waitMS = 1500
	w := startWorkload(t, c, WorkloadSpec{
		Messages: fs.messages, Rate: fs.rate, Partitions: 30, Producers: 3, PushBatch: [2]int{1, 20},
		ConsumersPerGroup: 3, PopBatches: []int{1, 10, 50}, LeaseTime: 5, ForgetRate: 0.005,
		WaitTimeoutMS: waitMS, Timeout: fs.timeout, RetryUnknownAcks: true,
	})
	waitUntil(t, time.Minute, "warm-up pushes", func() bool { return w.rec.pushedCount() >= fs.warmup })
	held, heldAt := holdBatch(t, c, w.spec.Queue)

	killCall := time.Now()
	if err := primary.Kill(); err != nil {
		t.Fatal(err)
	}
	// From here the primary is gone (Kill waited for the postmaster's exit
	// and its backends'): a request sent earlier may still have committed,
	// so this, not the signal, is where "before" and "after" split.
	kill := time.Now()
	t.Logf("SIGKILL to the primary's process group; it was gone %v later", kill.Sub(killCall).Round(time.Millisecond))
	seen503 := waitAll(t, c, 20*time.Second, "503 on /health", func(code int) bool { return code == 503 })
	t.Logf("primary killed; /health 503 on every node %v after the kill", seen503.Round(time.Millisecond))
	if d := fs.outage - time.Since(kill); d > 0 {
		time.Sleep(d) // the outage window a failover manager would take to decide; not a synchronisation
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	promoteCall := time.Now()
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	promoted := time.Now()
	healthy := waitAll(t, c, 30*time.Second, "200 on /health", func(code int) bool { return code == 200 })
	t.Logf("pg_promote called %v after the kill, returned after %v; /health 200 on every node %v after it returned",
		promoteCall.Sub(kill).Round(time.Millisecond), promoted.Sub(promoteCall).Round(time.Millisecond), healthy.Round(time.Millisecond))

	// The lease taken before the kill is a row on the new primary: its
	// holder can still ack the batch while the lease lasts.
	if left := time.Duration(w.spec.LeaseTime)*time.Second - time.Since(heldAt); left > time.Second {
		ackHeld(t, c, held)
		t.Logf("a batch of %d leased %v before the kill acked on the new primary with its lease (%v of it left)",
			len(held), kill.Sub(heldAt).Round(time.Millisecond), left.Round(time.Millisecond))
	} else {
		t.Logf("the held batch's lease ends before it could be acked; not checked")
	}

	rep := w.Check(fs.name, CheckOptions{})
	if rep.PushRetries == 0 && rep.PopErrors == 0 && rep.AckUnknown == 0 {
		t.Errorf("no request saw the failover: the test did not exercise the gap")
	}

	// Pushes acknowledged before the kill, and how many of them were first
	// delivered only after it (so they came from the promoted standby).
	before, lateFirst := w.rec.pushedBefore(kill, w.spec.Groups[0])
	t.Logf("%d messages answered 201 before the kill; %d of them first delivered (group %s) after it",
		before, lateFirst, w.spec.Groups[0])
	if before == 0 {
		t.Errorf("no push was acknowledged before the kill")
	}
	auditQueue(t, c, w)

	rt.verify(t, c, kill, promoteCall, promoted, fs.maxAnswer)
}

// startReplicatedPG starts a dedicated primary and a synchronous streaming
// standby, creates the test database and returns the multi-host URL.
func startReplicatedPG(t *testing.T) (primary, standby *pgtemp.Server, url string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	primary, err := pgtemp.Start(ctx, pgtemp.DefaultOptions())
	if err != nil {
		t.Fatalf("primary PostgreSQL: %v", err)
	}
	t.Cleanup(func() {
		if err := primary.Stop(); err != nil {
			t.Logf("stop primary: %v", err)
		}
	})
	if _, err := primary.CreateDatabase(ctx, "cluster"); err != nil {
		t.Fatal(err)
	}
	standby, err = primary.StartStandby(ctx, "standby1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := standby.Stop(); err != nil {
			t.Logf("stop standby: %v", err)
		}
	})
	if err := primary.RequireSyncStandby(ctx, "standby1"); err != nil {
		t.Fatal(err)
	}
	url = pgtemp.MultiHostURL("cluster", primary, standby)
	t.Logf("primary :%d, synchronous standby :%d, nodes use %s", primary.Port(), standby.Port(), url)
	return primary, standby, url
}

// pushedBefore counts the messages whose push was answered 201 before t,
// and those of them whose first delivery to group g was answered after t.
func (r *Recorder) pushedBefore(t time.Time, g string) (n, firstAfter int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	first := map[key]time.Time{}
	for _, d := range r.deliveries {
		if d.group != g {
			continue
		}
		for _, s := range d.seqs {
			k := key{d.part, s}
			if f, ok := first[k]; !ok || d.t1.Before(f) {
				first[k] = d.t1
			}
		}
	}
	for k, p := range r.pushes {
		if !p.done.Before(t) {
			continue
		}
		n++
		if f, ok := first[k]; ok && f.After(t) {
			firstAfter++
		}
	}
	return n, firstAfter
}

// auditQueue reads the whole queue with a fresh consumer group (it starts
// at the oldest message) from the promoted standby and requires exactly
// the pushed set: every acknowledged push is stored, including those the
// workload's groups had consumed before the kill.
func auditQueue(t *testing.T, c *Cluster, w *Workload) {
	t.Helper()
	got := map[key]bool{}
	want := w.rec.pushedCount()
	// Until everything pushed was read, or a minute: a 204 only means
	// nothing arrived within the long-poll, so it does not end the audit.
	deadline := time.Now().Add(time.Minute)
	for len(got) < want && time.Now().Before(deadline) {
		q := url.Values{"batch": {"1000"}, "wait": {"true"}, "timeout": {"1000"}, "consumerGroup": {"audit"}}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		code, body, err := c.do(ctx, 0, "GET", "/api/v1/pop/queue/"+url.PathEscape(w.spec.Queue)+"?"+q.Encode(), nil)
		cancel()
		if err != nil || (code != 200 && code != 204) {
			t.Fatalf("audit pop: %d %s %v", code, body, err)
		}
		if code == 204 {
			continue
		}
		var res struct {
			Messages []popMsg `json:"messages"`
		}
		if err := json.Unmarshal(body, &res); err != nil {
			t.Fatalf("audit pop: %v", err)
		}
		acks := make([]map[string]any, 0, len(res.Messages))
		for _, m := range res.Messages {
			var pl payload
			if err := json.Unmarshal(m.Data, &pl); err != nil || pl.R != w.rec.run {
				t.Fatalf("audit: foreign message %s", m.Data)
			}
			k := key{pl.P, pl.S}
			if got[k] {
				t.Errorf("audit: %v delivered twice to a group that acked it", k)
			}
			got[k] = true
			acks = append(acks, map[string]any{"transactionId": m.TransactionID, "partitionId": m.PartitionID,
				"leaseId": m.LeaseID, "status": "completed"})
		}
		ctx, cancel = context.WithTimeout(context.Background(), 20*time.Second)
		code, body, err = c.do(ctx, 0, "POST", "/api/v1/ack/batch", map[string]any{"consumerGroup": "audit", "acknowledgments": acks})
		cancel()
		if err != nil || code != 200 {
			t.Fatalf("audit ack: %d %s %v", code, body, err)
		}
	}
	// Nothing beyond the pushed set (a retried push stored twice would be).
	q := url.Values{"batch": {"10"}, "wait": {"false"}, "consumerGroup": {"audit"}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	code, body, err := c.do(ctx, 0, "GET", "/api/v1/pop/queue/"+url.PathEscape(w.spec.Queue)+"?"+q.Encode(), nil)
	cancel()
	if err != nil || code != 204 {
		t.Errorf("audit: after the %d pushed messages the queue answered %d %.300s %v (want 204)", want, code, body, err)
	}
	w.rec.mu.Lock()
	defer w.rec.mu.Unlock()
	missing := 0
	for k := range w.rec.pushes {
		if !got[k] {
			if missing++; missing <= 10 {
				t.Errorf("audit: %v answered 201 but not in the queue after the failover", k)
			}
		}
	}
	for k := range got {
		if _, ok := w.rec.pushes[k]; !ok {
			t.Errorf("audit: %v stored but never answered 2xx (a retried push stored twice?)", k)
		}
	}
	t.Logf("audit group read %d messages from the promoted standby (%d pushed, %d missing)", len(got), len(w.rec.pushes), missing)
}

// holdBatch pops one batch for the group "holder" (it starts at the
// oldest message) and returns it with the time the pop was sent.
func holdBatch(t *testing.T, c *Cluster, queue string) ([]popMsg, time.Time) {
	t.Helper()
	q := url.Values{"batch": {"10"}, "wait": {"false"}, "consumerGroup": {"holder"}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	t0 := time.Now()
	code, body, err := c.do(ctx, 0, "GET", "/api/v1/pop/queue/"+url.PathEscape(queue)+"?"+q.Encode(), nil)
	var res struct {
		Messages []popMsg `json:"messages"`
	}
	if err != nil || code != 200 || json.Unmarshal(body, &res) != nil || len(res.Messages) == 0 {
		t.Fatalf("holder pop: %d %s %v", code, body, err)
	}
	return res.Messages, t0
}

// ackHeld acks the held batch with its lease and requires success for
// every message.
func ackHeld(t *testing.T, c *Cluster, msgs []popMsg) {
	t.Helper()
	acks := make([]map[string]any, len(msgs))
	for i, m := range msgs {
		acks[i] = map[string]any{"transactionId": m.TransactionID, "partitionId": m.PartitionID,
			"leaseId": m.LeaseID, "status": "completed"}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	code, body, err := c.do(ctx, 1, "POST", "/api/v1/ack/batch", map[string]any{"consumerGroup": "holder", "acknowledgments": acks})
	var res []struct {
		Success bool    `json:"success"`
		Error   *string `json:"error"`
	}
	if err != nil || code != 200 || json.Unmarshal(body, &res) != nil || len(res) != len(msgs) {
		t.Fatalf("ack of the held batch: %d %s %v", code, body, err)
	}
	for i, r := range res {
		if !r.Success {
			t.Errorf("ack of held message %d after the failover refused: %s", i, body)
			break
		}
	}
}

// reqObs is one request through the cluster's client.
type reqObs struct {
	host       string
	kind       string // push, pop, ack, other
	start, end time.Time
	code       int // 0 on a transport error
	err        string
	wait       time.Duration // a long-poll's own timeout
}

// recordingTransport records every request's status and duration, so the
// test can tell what the nodes answered during the gap.
type recordingTransport struct {
	base http.RoundTripper
	mu   sync.Mutex
	obs  []reqObs
}

func (rt *recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	o := reqObs{host: req.URL.Host, kind: "other", start: time.Now()}
	switch p := req.URL.Path; {
	case p == "/api/v1/push":
		o.kind = "push"
	case strings.HasPrefix(p, "/api/v1/pop"):
		o.kind = "pop"
		if req.URL.Query().Get("wait") == "true" {
			var ms int
			fmt.Sscan(req.URL.Query().Get("timeout"), &ms)
			o.wait = time.Duration(ms) * time.Millisecond
		}
	case strings.HasPrefix(p, "/api/v1/ack"):
		o.kind = "ack"
	}
	resp, err := rt.base.RoundTrip(req)
	o.end = time.Now()
	if err != nil {
		o.err = err.Error()
	} else {
		o.code = resp.StatusCode
	}
	rt.mu.Lock()
	rt.obs = append(rt.obs, o)
	rt.mu.Unlock()
	return resp, err
}

// verify checks the answers of the push, pop and ack requests and logs
// the time to recover per node: the first 201 push and the first 200 pop
// sent after the kill, counted from the kill and from the pg_promote call.
// The gap is from the kill to pg_promote's return.
func (rt *recordingTransport) verify(t *testing.T, c *Cluster, kill, promoteCall, promoted time.Time, maxAnswer time.Duration) {
	t.Helper()
	rt.mu.Lock()
	obs := append([]reqObs(nil), rt.obs...)
	rt.mu.Unlock()
	name := map[string]string{}
	for _, nd := range c.Nodes() {
		name[strings.TrimPrefix(nd.HTTP(), "http://")] = nd.Name
	}
	type rec struct{ push, pop time.Duration }
	recovered := map[string]*rec{}
	codes := map[string]map[int]int{} // kind -> code -> count, during the gap
	var gapAnswers []time.Duration
	var slowest reqObs
	bad := 0
	for _, o := range obs {
		if o.kind == "other" {
			continue
		}
		d := o.end.Sub(o.start)
		inGap := o.end.After(kill) && o.start.Before(promoted)
		if inGap {
			if codes[o.kind] == nil {
				codes[o.kind] = map[int]int{}
			}
			codes[o.kind][o.code]++
			gapAnswers = append(gapAnswers, d-o.wait)
			if d-o.wait > slowest.end.Sub(slowest.start)-slowest.wait {
				slowest = o
			}
		}
		switch {
		case o.code == 0:
			bad++
			t.Errorf("%s via %s: transport error after %v: %s", o.kind, name[o.host], d.Round(time.Millisecond), o.err)
		case o.code >= 500 && o.code != 503:
			bad++
			t.Errorf("%s via %s answered %d (want 503 for an unavailable database)", o.kind, name[o.host], o.code)
		case d-o.wait > maxAnswer:
			bad++
			t.Errorf("%s via %s answered %d after %v (bound %v beyond its wait %v)", o.kind, name[o.host], o.code,
				d.Round(time.Millisecond), maxAnswer, o.wait)
		}
		if bad > 20 {
			t.Fatal("too many bad answers")
		}
		if !o.start.After(kill) {
			continue // answered from before the kill: says nothing about recovery
		}
		r := recovered[name[o.host]]
		if r == nil {
			r = &rec{}
			recovered[name[o.host]] = r
		}
		if o.kind == "push" && o.code == 201 && r.push == 0 {
			r.push = o.end.Sub(kill)
		}
		if o.kind == "pop" && o.code == 200 && r.pop == 0 {
			r.pop = o.end.Sub(kill)
		}
	}
	if len(codes["push"])+len(codes["pop"])+len(codes["ack"]) == 0 {
		t.Errorf("no request was answered during the gap")
	}
	n503 := codes["push"][503] + codes["pop"][503] + codes["ack"][503]
	if n503 == 0 {
		t.Errorf("no 503 during the gap: %v", codes)
	}
	_, _, gp99, gmax := percentiles(gapAnswers)
	var b strings.Builder
	fmt.Fprintf(&b, "\nanswers during the gap (kill to promotion, %v): push %v, pop %v, ack %v; answer time beyond the long-poll wait p99 %v, max %v\n",
		promoted.Sub(kill).Round(time.Millisecond), codes["push"], codes["pop"], codes["ack"],
		gp99.Round(time.Millisecond), gmax.Round(time.Millisecond))
	if gmax > 0 {
		fmt.Fprintf(&b, "slowest in the gap: %s via %s sent %v after the kill, answered %d after %v (wait %v)\n",
			slowest.kind, name[slowest.host], slowest.start.Sub(kill).Round(time.Millisecond), slowest.code,
			slowest.end.Sub(slowest.start).Round(time.Millisecond), slowest.wait)
	}
	fmt.Fprintf(&b, "| node | first 201 push, from the kill | first 200 pop, from the kill | push, from the pg_promote call | pop, from the pg_promote call |\n| --- | --- | --- | --- | --- |\n")
	var names []string
	for n := range recovered {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		r := recovered[n]
		pr := promoteCall.Sub(kill)
		fmt.Fprintf(&b, "| %s | %v | %v | %v | %v |\n", n, r.push.Round(time.Millisecond), r.pop.Round(time.Millisecond),
			(r.push - pr).Round(time.Millisecond), (r.pop - pr).Round(time.Millisecond))
		if r.push == 0 || r.pop == 0 {
			t.Errorf("%s: no successful push or pop after the kill (push %v, pop %v)", n, r.push, r.pop)
		}
	}
	if len(names) != len(c.Nodes()) {
		t.Errorf("only %d of %d nodes served a request after the kill", len(names), len(c.Nodes()))
	}
	t.Log(b.String())
}
