package clustertest

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Rolling restart: every node of three is stopped gracefully (SIGTERM)
// and started again with the same name and ports, one after another,
// while producers and consumers run through random running nodes. A
// client whose request fails with a transport error (refused, reset) or a
// 5xx retries it on another node. Asserts: no client request is answered
// 5xx (a graceful stop drains: parked long-polls answer 204, in-flight
// requests finish), every stop completes within the grace, nothing is lost
// (the checker), and no hint or reseed storm: during the restarts the
// nodes send at most one hint per pushed message and peer, and reseed at
// most a few times per ring and restart. QUEEN_SOAK=1 restarts every node
// five times over (rolling rounds) instead of once.
func TestRollingRestart(t *testing.T) {
	rounds, rate := 1, 500.0
	if os.Getenv("QUEEN_SOAK") == "1" {
		rounds = 5
	}
	const n = 3
	c := startCluster(t, n, nil)
	obs := observeResponses(c)
	// About 4 s of load per restart plus 10 s before and after, so the
	// producers are still pushing when the last node comes back.
	msgs := int(rate) * (10 + 4*n*rounds)
	// Clients know the three addresses, not which node is down: a request
	// to a stopped node is refused and retried on another (the workload's
	// push and pop retry; an ack with an unknown outcome is left to the
	// lease, 5 s, and the checker proves the redelivery waited for it).
	all := func() []int { return []int{0, 1, 2} }
	w := startWorkload(t, c, WorkloadSpec{
		Messages: msgs, Rate: rate, Partitions: 40, Producers: 3, PushBatch: [2]int{1, 20},
		ConsumersPerGroup: 3, PopBatches: []int{1, 10, 50}, LeaseTime: 5,
		ProducerNodes: all, ConsumerNodes: all,
		Timeout: time.Duration(2+rounds) * time.Minute,
	})
	// The drain probe's queue and group exist on every node before the
	// restarts (first contact provisions; later pops park).
	c.Configure(0, "drain-probe", map[string]any{"leaseTime": 30})
	for i := 0; i < n; i++ {
		for k := 0; k < 2; k++ {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			code, body, err := c.do(ctx, i, "GET", "/api/v1/pop/queue/drain-probe?consumerGroup=probe", nil)
			cancel()
			if err != nil || code != 204 {
				t.Fatalf("drain probe warm-up on %s: %d %s %v", c.Node(i).Name, code, body, err)
			}
		}
	}
	burst := newStopBurst(t, c)
	mon := startRateMonitor(c, 200*time.Millisecond)
	defer mon.Close()

	time.Sleep(4 * time.Second) // baseline load on the full cluster
	first := time.Now()
	var stops, cycles []time.Duration
	for r := 0; r < rounds; r++ {
		for i := 0; i < n; i++ {
			// A long-poll parked on the node when it stops must be answered
			// 204 at once (the drain), not held for its 30 s timeout, cut
			// by a SIGKILL or answered 5xx.
			type probeResult struct {
				code int
				err  error
				at   time.Time
			}
			probe := make(chan probeResult, 1)
			parked0 := c.MustStatus(i).Requests.Parked
			sent := time.Now()
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
				defer cancel()
				code, _, err := c.do(ctx, i, "GET", "/api/v1/pop/queue/drain-probe?wait=true&timeout=30000&consumerGroup=probe", nil)
				probe <- probeResult{code, err, time.Now()}
			}()
			// The workload's own long-polls come and go in the count (fewer
			// since claims taken ahead answer most pops at once): one parked
			// at parked0 and gone since hides the probe's. A probe still
			// unanswered after a second, with a long-poll parked, is parked
			// (its pop has nothing to take for 30 s).
			waitUntil(t, 5*time.Second, "the drain probe to park", func() bool {
				st, err := c.Status(i)
				if err != nil || len(probe) > 0 {
					return false
				}
				return st.Requests.Parked > parked0 || time.Since(sent) > time.Second && st.Requests.Parked >= 1
			})
			bursting := burst.start(i)
			t0 := time.Now()
			c.Stop(i)
			stop := time.Since(t0)
			if stop >= stopGrace {
				t.Errorf("round %d: %s needed SIGKILL: the graceful stop took %v", r, c.Node(i).Name, stop.Round(time.Millisecond))
			}
			select {
			case pr := <-probe:
				if pr.err != nil || pr.code != 204 {
					t.Errorf("round %d: the long-poll parked on %s when it stopped got %d %v, want 204", r, c.Node(i).Name, pr.code, pr.err)
				} else if d := pr.at.Sub(t0); d > 2*time.Second {
					t.Errorf("round %d: the long-poll parked on %s was answered %v after the SIGTERM", r, c.Node(i).Name, d.Round(time.Millisecond))
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("round %d: the long-poll parked on %s was not answered 10 s after it stopped", r, c.Node(i).Name)
			}
			c.Restart(i) // start, /health 200, every node lists every node alive
			bursting.Wait()
			cycles = append(cycles, time.Since(t0))
			stops = append(stops, stop)
			t.Logf("round %d: %s stopped in %v, back and alive everywhere %v after the SIGTERM", r, c.Node(i).Name,
				stop.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))
			time.Sleep(2 * time.Second) // the full cluster serves for a while before the next restart
		}
	}
	last := time.Now()
	if w.pushEnd.Load() != 0 {
		t.Errorf("the producers finished before the last restart did: the restarts were not under load (raise Messages)")
	}
	time.Sleep(2 * time.Second)
	after := time.Now()
	rep := w.Check(fmt.Sprintf("rolling restart (3 nodes, %d round(s))", rounds), CheckOptions{})
	burst.check()
	if rep.Messages != msgs {
		t.Errorf("pushed %d of %d messages", rep.Messages, msgs)
	}
	t.Logf("graceful stop: %s; stop to alive everywhere: %s", fmtDurations(stops), fmtDurations(cycles))

	// What the clients saw.
	reqs, fivexx, transport := obs.snapshot()
	t.Logf("client requests %d; transport errors (retried on another node): %s; 5xx: %d", reqs, fmtClasses(transport), len(fivexx))
	for _, s := range fivexx {
		t.Errorf("a client got a 5xx during the rolling restart: %s", s)
	}

	// Hint and reseed rates: before, during and after the restarts.
	mon.poll()
	t.Logf("| window | length | pushed msg/s | hints sent/s | frames sent/s | reseeds/s | reseed rows/s | totals |")
	t.Logf("| --- | --- | --- | --- | --- | --- | --- | --- |")
	bd, bs, bp := mon.window(w.started, first)
	logRates(t, "before (full cluster)", bd, bs, bp)
	d, secs, peak := mon.window(first, last)
	logRates(t, "during the restarts", d, secs, peak)
	ad, as, ap := mon.window(last, after)
	logRates(t, "after", ad, as, ap)
	for i := 0; i < n; i++ {
		p, r, lost := churnCounts(t, c, i)
		t.Logf("%s since its last start: %d churn passes reseeded %d rings; %d lost-hint signals", c.Node(i).Name, p, r, lost)
		// Every node but the last restarted saw a later one leave and come
		// back: its rings were reseeded for the hints lost meanwhile, by a
		// churn pass (the membership change) or by the early reseeds (the
		// restarted sender's new stream). A restart quicker than the churn
		// watcher's check can look like no membership change at all; the
		// sender's new incarnation on the hint stream still says it.
		if i < n-1 && p == 0 && lost == 0 {
			t.Errorf("%s saw %s restart after its own start but reseeded nothing for it (no churn pass, no lost-hint signal)", c.Node(i).Name, c.Node(n-1).Name)
		}
	}
	// A hint names one partition for one peer and comes only from a push
	// (broker/push.go), so more hints than (n-1) x pushed messages would be
	// a storm, e.g. replays to a rejoining peer.
	if lim := int64(n-1)*d.Pushed + 50; d.HintsSent > lim {
		t.Errorf("hint storm: %d hints sent during the restarts for %d pushed messages (at most %d)", d.HintsSent, d.Pushed, lim)
	}
	// Each node has one ring per group. A restart cold-starts the restarted
	// node's rings (one reseed each); the floor reseeds each ring once per
	// QUEEN_HOTLIST_RESEED_MS (30 s); an early reseed after a lost hint or
	// a reconnect may add one per ring and peer. Five times that is the
	// bound: a storm is one reseed per pop or per hint, hundreds per second.
	rings := int64(n * len(w.spec.Groups))
	floors := int64(secs/30) + 1
	restarts := int64(rounds * n)
	if lim := 5 * (rings*floors + restarts*int64(len(w.spec.Groups))*int64(n)); d.Reseeds > lim {
		t.Errorf("reseed storm: %d reseeds in %.1f s of restarts (at most %d)", d.Reseeds, secs, lim)
	}
}

// churnReseeds reads node i's hotlist.churn_reseeds from /status (0 when
// absent).
func churnReseeds(t *testing.T, c *Cluster, i int) int64 {
	_, r, _ := churnCounts(t, c, i)
	return r
}

// nextFloorIn is how long until the reseed floor of node i's one ring of
// queue (its hot-list view, /api/v1/status/hotlist/{queue}); 0 when the
// node has no such ring.
func nextFloorIn(t *testing.T, c *Cluster, i int, queue string) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	code, body, err := c.do(ctx, i, "GET", "/api/v1/status/hotlist/"+url.PathEscape(queue), nil)
	if err != nil || code != 200 {
		return 0
	}
	var v struct {
		Rings []struct {
			NextReseedInMs int64 `json:"nextReseedInMs"`
		} `json:"rings"`
	}
	if err := json.Unmarshal(body, &v); err != nil || len(v.Rings) != 1 {
		return 0
	}
	return time.Duration(v.Rings[0].NextReseedInMs) * time.Millisecond
}

// churnCounts reads node i's hotlist.churn_passes, churn_reseeds and
// loss_signals.
func churnCounts(t *testing.T, c *Cluster, i int) (passes, reseeds, lossSignals int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	code, body, err := c.do(ctx, i, "GET", "/status", nil)
	if err != nil || code != 200 {
		t.Fatalf("status of %s: %d %v", c.Node(i).Name, code, err)
	}
	var st struct {
		Hotlist struct {
			ChurnPasses  int64 `json:"churn_passes"`
			ChurnReseeds int64 `json:"churn_reseeds"`
			LossSignals  int64 `json:"loss_signals"`
		} `json:"hotlist"`
	}
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatalf("status of %s: %v", c.Node(i).Name, err)
	}
	return st.Hotlist.ChurnPasses, st.Hotlist.ChurnReseeds, st.Hotlist.LossSignals
}

// compactNames is names with repeats counted: [p-000 x10 p-001 x10].
func compactNames(names []string) string {
	var out []string
	for i := 0; i < len(names); {
		j := i
		for j < len(names) && names[j] == names[i] {
			j++
		}
		out = append(out, fmt.Sprintf("%s x%d", names[i], j-i))
		i = j
	}
	return "[" + strings.Join(out, " ") + "]"
}

func fmtClasses(m map[string]int) string { return fmtCounts(m, "%s %d", ", ") }

// fmtCounts prints counts in key order, each with item (key, count),
// joined by sep; "none" for none.
func fmtCounts[K cmp.Ordered](m map[K]int, item, sep string) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf(item, k, m[k]))
	}
	return strings.Join(parts, sep)
}

// stopBurst keeps pushes in flight on a node while it stops: 8 pushers,
// one partition each of the stop-burst queue, push one message at a time
// to the stopping node until it refuses, then push that message through
// another node (same transaction id) and end. A graceful stop must answer
// what it accepted (201) and refuse the rest at the connection, never 5xx.
type stopBurst struct {
	t     *testing.T
	c     *Cluster
	rec   *Recorder
	seq   [8]int
	began time.Time
}

func newStopBurst(t *testing.T, c *Cluster) *stopBurst {
	b := &stopBurst{t: t, c: c, rec: newRecorder("stop-burst", 8), began: time.Now()}
	c.Configure(0, b.rec.queue, map[string]any{"leaseTime": 30})
	return b
}

// start launches the pushers on node i; the caller stops the node and
// waits on the returned group.
func (b *stopBurst) start(i int) *sync.WaitGroup {
	var wg sync.WaitGroup
	started := make(chan struct{}, len(b.seq))
	for p := range b.seq {
		wg.Add(1)
		go func() {
			defer wg.Done()
			first := true
			until := time.Now().Add(10 * time.Second) // in case no push of this pusher is ever refused
			for time.Now().Before(until) {
				b.seq[p]++
				k := key{p, b.seq[p]}
				node := i
				for attempt := 0; ; attempt++ {
					code, err := b.push(node, k)
					if first {
						first = false
						started <- struct{}{}
					}
					if err == nil && code == 201 {
						break
					}
					if err == nil && code < 500 {
						b.t.Errorf("stop burst: push %v via %s: %d", k, b.c.Node(node).Name, code)
						return
					}
					if attempt > 100 {
						b.t.Errorf("stop burst: push %v never got a 201: %d %v", k, code, err)
						return
					}
					node = (i + 1 + attempt%2) % len(b.c.Nodes()) // another node
					time.Sleep(50 * time.Millisecond)
				}
				if node != i {
					return // the stopping node refused: its part is over
				}
			}
		}()
	}
	for range b.seq {
		<-started // every pusher has a first push through before the stop
	}
	return &wg
}

func (b *stopBurst) push(node int, k key) (int, error) {
	pl, _ := json.Marshal(payload{P: k.p, S: k.s, R: b.rec.run})
	body := map[string]any{"items": []map[string]any{{"queue": b.rec.queue, "partition": b.rec.partName(k.p),
		"payload": json.RawMessage(pl), "transactionId": b.rec.txID(k)}}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	code, resp, err := b.c.do(ctx, node, "POST", "/api/v1/push", body)
	if err == nil && code == 201 {
		var res []struct {
			Status string `json:"status"`
		}
		if json.Unmarshal(resp, &res) != nil || len(res) != 1 || (res[0].Status != "queued" && res[0].Status != "duplicate") {
			return 0, fmt.Errorf("push: bad 201 body %s", resp)
		}
		b.rec.pushed([]key{k}, pushRec{start: start, done: time.Now(), node: node, attempts: 1})
	}
	return code, err
}

// check consumes the burst queue through node 0 and runs the checker: no
// push answered 201 is lost, none is duplicated.
func (b *stopBurst) check() {
	b.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for b.rec.ackedCount("bg") < b.rec.pushedCount() && time.Now().Before(deadline) {
		if ms := popKeys(b.t, b.c, b.rec, 0, "bg", map[string][]string{"batch": {"100"}, "partitions": {"8"}}); ms != nil {
			ackKeys(b.t, b.c, b.rec, 0, "bg", ms)
		}
	}
	b.t.Logf("stop burst: %d messages pushed one at a time through each node as it stopped (a refused one again elsewhere); no 5xx among them (counted with the rest)", b.rec.pushedCount())
	checkRecorder(b.t, b.c, b.rec, "pushes in flight while a node stops", []string{"bg"}, 30*time.Second, time.Since(b.began), CheckOptions{})
}

// freeze stops node i's process with SIGSTOP (it keeps its sockets, so
// peers see a node that stopped answering, as in a long network
// partition or a VM pause) and returns the function that resumes it.
func (c *Cluster) freeze(i int) (resume func()) {
	c.t.Helper()
	nd := c.Node(i)
	nd.mu.Lock()
	p := nd.proc
	nd.mu.Unlock()
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		c.t.Fatalf("SIGSTOP %s: %v", nd.Name, err)
	}
	resumed := false
	resume = func() {
		if !resumed {
			resumed = true
			if err := p.Signal(syscall.SIGCONT); err != nil {
				c.t.Errorf("SIGCONT %s: %v", nd.Name, err)
			}
		}
	}
	// Registered after the cluster's teardown, so it runs first (LIFO): a
	// stopped process would ignore the teardown's SIGTERM.
	c.t.Cleanup(resume)
	return resume
}

// Long mesh partition: node C is frozen with SIGSTOP until its peers
// declare it dead (memberlist's suspicion timeout, about 1 s with the
// harness's 200 ms probes), messages are pushed through A and B while it is
// away (their hints cannot reach it: a dead member gets none), and it is
// resumed after at least 4 s. Its rings were warm before the freeze and
// know nothing of those messages, so they must not be trusted: C's first
// pop, a long-poll (wait=true, which parks on an empty ring with no SQL),
// must return messages pushed while it was away within 3 s, far below the
// 30 s reseed floor. Then everything drains through C, and once C is alive
// in everyone's list again, pushes on A and B wake pops parked on C.
// TestLateJoiner covers the other way in: a fresh node joining a cluster
// that ran a while.
func TestLongPartition(t *testing.T) {
	const A, B, C = 0, 1, 2
	const parts = 4
	const firstPopBound = 3 * time.Second
	// A 10-minute floor: only the churn reseed can bring the partitions
	// back in time, not a floor pass that happens to fall due.
	c := startCluster(t, 3, map[string]string{"QUEEN_HOTLIST_RESEED_MS": "600000"})
	rec := newRecorder("away", parts)
	c.Configure(A, rec.queue, map[string]any{"leaseTime": 30})
	seq := make([]int, parts)
	pushAll := func(node, k int) { // k more messages in every partition
		for p := 0; p < parts; p++ {
			ks := make([]key, k)
			for j := range ks {
				seq[p]++
				ks[j] = key{p, seq[p]}
			}
			pushKeys(t, c, rec, node, ks...)
		}
	}
	total := func() int {
		s := 0
		for _, v := range seq {
			s += v
		}
		return s
	}
	drainOn := func(node int, q map[string]string, within time.Duration) {
		t.Helper()
		deadline := time.Now().Add(within)
		for rec.ackedCount("ag") < total() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d of %d acked after %v", c.Node(node).Name, rec.ackedCount("ag"), total(), within)
			}
			v := map[string][]string{"batch": {"100"}}
			for k, x := range q {
				v[k] = []string{x}
			}
			if ms := popKeys(t, c, rec, node, "ag", v); ms != nil {
				ackKeys(t, c, rec, node, "ag", ms)
			}
		}
	}

	// Warm C's ring: the first pops provision the group and register the
	// ring, a later one reseeds it; C then consumes a first round.
	start := time.Now()
	for i := 0; i < 2; i++ {
		if ms := popKeys(t, c, rec, C, "ag", map[string][]string{"batch": {"1"}}); ms != nil {
			t.Fatalf("warm-up pop returned %d messages", len(ms))
		}
	}
	pushAll(A, 1)
	drainOn(C, map[string]string{"wait": "true", "timeout": "2000"}, 20*time.Second)
	if st := c.MustStatus(C); st.Hotlist.Rings != 1 || st.Hotlist.Reseeds < 1 {
		t.Fatalf("C's ring is not warm before the freeze: rings %d reseeds %d", st.Hotlist.Rings, st.Hotlist.Reseeds)
	}
	// A new ring's first floor pass comes at a random phase within 15 s
	// (docs/hotlist.md), whatever the interval: wait for it (the cold
	// reseed is the first pass, the floor the second, churn passes aside),
	// so that no floor pass can fall due during the test. When the phase
	// fell before the cold reseed ended, that reseed took the floor's slot
	// and the next floor is an interval away: nothing to wait for (a fresh
	// clone's CI run hit a phase that short once).
	floorWait := waitUntil(t, 20*time.Second, "the first floor pass of C's ring", func() bool {
		st, err := c.Status(C)
		if err != nil {
			return false
		}
		return st.Hotlist.Reseeds-churnReseeds(t, c, C) >= 2 || nextFloorIn(t, c, C, rec.queue) > 5*time.Minute
	})
	t.Logf("C's ring had its first floor pass %v after the warm-up", floorWait.Round(time.Millisecond))

	resume := c.freeze(C)
	frozen := time.Now()
	name := c.Node(C).Name
	dead := waitUntil(t, 15*time.Second, "A and B to declare the frozen node dead", func() bool {
		for _, i := range []int{A, B} {
			st, err := c.Status(i)
			if err != nil || st.memberState(name) == "alive" {
				return false
			}
		}
		return true
	})
	t.Logf("%s frozen (SIGSTOP); A and B list it dead after %v", name, dead.Round(time.Millisecond))
	pushAll(A, 5)
	pushAll(B, 5)
	if away := 4*time.Second - time.Since(frozen); away > 0 {
		time.Sleep(away) // a partition of at least 4 s, several suspicion timeouts
	}
	resume()
	resumed := time.Now()
	t.Logf("%s resumed (SIGCONT) after %v away; %d messages pushed meanwhile", name, resumed.Sub(frozen).Round(time.Millisecond), parts*10)

	// The pops after the partition: long-polls (wait=true), which park on a
	// ring that looks empty without asking PostgreSQL.
	pops := 0
	for rec.ackedCount("ag") < total() {
		if time.Since(resumed) > 30*time.Second {
			t.Fatalf("C: %d of %d acked 30 s after SIGCONT", rec.ackedCount("ag"), total())
		}
		ms, at, err := popRecorded(c, rec, C, "ag", map[string][]string{"batch": {"100"}, "partitions": {"4"}, "wait": {"true"}, "timeout": {"10000"}})
		if err != nil {
			t.Fatal(err)
		}
		pops++
		var got []string
		for _, m := range ms {
			got = append(got, m.Partition)
		}
		t.Logf("C's pop %d after the partition (wait=true): %d messages %v after SIGCONT (partitions %v)", pops, len(ms), at.Sub(resumed).Round(time.Millisecond), compactNames(got))
		if pops == 1 && len(ms) == 0 {
			t.Errorf("C's first pop after the partition (wait=true, 10 s) returned nothing: its stale ring was trusted")
		}
		if ms != nil {
			ackKeys(t, c, rec, C, "ag", ms)
		}
	}
	all := time.Since(resumed)
	t.Logf("everything pushed while C was away was delivered through C %v after SIGCONT, in %d pops", all.Round(time.Millisecond), pops)
	if all > firstPopBound {
		t.Errorf("C took %v after SIGCONT to deliver what was pushed while it was away (bound %v): its stale ring was trusted until a reseed", all.Round(time.Millisecond), firstPopBound)
	}
	c.waitMembership(convergeTimeout)
	t.Logf("%s alive in every list again %v after SIGCONT", name, time.Since(resumed).Round(time.Millisecond))

	// Pushes on A and B wake pops parked on C.
	var lat []time.Duration
	for i := 0; i < 6; i++ {
		type result struct {
			msgs []popMsg
			at   time.Time
			err  error
		}
		done := make(chan result, 1)
		go func() {
			ms, at, err := popRecorded(c, rec, C, "ag", map[string][]string{"batch": {"1"}, "wait": {"true"}, "timeout": {"10000"}})
			done <- result{ms, at, err}
		}()
		waitUntil(t, 5*time.Second, "a pop parked on C", func() bool {
			st, err := c.Status(C)
			return err == nil && st.Requests.Parked >= 1
		})
		time.Sleep(20 * time.Millisecond) // past its first look at the ring
		p := i % parts
		seq[p]++
		k := key{p, seq[p]}
		via := []int{A, B}[i%2]
		pushKeys(t, c, rec, via, k)
		r := <-done
		if r.err != nil || len(r.msgs) != 1 {
			t.Fatalf("wake trial %d on C (push via %s): %d messages, %v", i, c.Node(via).Name, len(r.msgs), r.err)
		}
		ackKeys(t, c, rec, C, "ag", r.msgs)
		rec.mu.Lock()
		lat = append(lat, r.at.Sub(rec.pushes[k].start))
		rec.mu.Unlock()
	}
	t.Logf("push on A or B -> pop parked on C after the partition: %s", fmtDurations(lat))
	if _, _, _, mx := percentiles(lat); mx > 2*time.Second {
		t.Errorf("a wake on C after the partition took %v (bound 2 s)", mx)
	}
	if b, err := os.ReadFile(c.Node(C).LogPath); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, "churn") {
				t.Logf("C's log: %s", l)
			}
		}
	}
	checkRecorder(t, c, rec, "long partition: consumed on the frozen node", []string{"ag"}, 30*time.Second, time.Since(start), CheckOptions{})
}
