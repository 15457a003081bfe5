package clustertest

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"queen-node/owner"
)

// 1. A push on node A wakes a consumer parked on node B through a mesh
// hint: B's own re-poll back-off (60 s) and reseed floor (10 min) are far
// too slow to be what delivers.
func TestCrossNodeWake(t *testing.T) {
	const trials = 200
	c := startClusterOpts(t, ClusterOptions{N: 3,
		Env:     map[string]string{"QUEEN_HOTLIST_RESEED_MS": "600000"},
		NodeEnv: map[int]map[string]string{1: {"QUEEN_POP_BACKOFF_MAX_MS": "60000"}},
	})
	const A, B = 0, 1
	rec := newRecorder("xwake", 1)
	c.Configure(A, rec.queue, map[string]any{"leaseTime": 30})
	q := func(wait bool) url.Values {
		v := url.Values{"batch": {"1"}}
		if wait {
			v.Set("wait", "true")
			v.Set("timeout", "10000")
		}
		return v
	}
	// First contact provisions the group; the second pop finds the ring.
	for i := 0; i < 2; i++ {
		if ms := popKeys(t, c, rec, B, "g", q(false)); ms != nil {
			t.Fatalf("warm-up pop returned %d messages", len(ms))
		}
	}
	sa0, sb0 := c.MustStatus(A), c.MustStatus(B)
	start := time.Now()
	lat := make([]time.Duration, 0, trials)     // push sent -> pop returned
	fromAck := make([]time.Duration, 0, trials) // push answered -> pop returned
	for i := 1; i <= trials; i++ {
		type result struct {
			msgs []popMsg
			at   time.Time
			err  error
		}
		done := make(chan result, 1)
		go func() {
			ms, at, err := popRecorded(c, rec, B, "g", q(true))
			done <- result{ms, at, err}
		}()
		waitUntil(t, 5*time.Second, "the pop to park on B", func() bool {
			st, err := c.Status(B)
			return err == nil && st.Requests.Parked >= 1
		})
		time.Sleep(time.Duration(10+mrand.IntN(40)) * time.Millisecond) // well parked, past its first look
		k := key{0, i}
		pushKeys(t, c, rec, A, k)
		var r result
		select {
		case r = <-done:
		case <-time.After(15 * time.Second):
			t.Fatalf("trial %d: the push on A did not wake the pop parked on B", i)
		}
		if r.err != nil || len(r.msgs) != 1 {
			t.Fatalf("trial %d: pop on B: %d messages, %v", i, len(r.msgs), r.err)
		}
		rec.mu.Lock()
		pushedAt, answeredAt := rec.pushes[k].start, rec.pushes[k].done
		rec.mu.Unlock()
		lat = append(lat, r.at.Sub(pushedAt))
		fromAck = append(fromAck, r.at.Sub(answeredAt))
		ackKeys(t, c, rec, B, "g", r.msgs)
	}
	elapsed := time.Since(start)
	sa1, sb1 := c.MustStatus(A), c.MustStatus(B)
	_, _, p99, mx := percentiles(lat)
	t.Logf("cross-node wake (push sent on %s -> pop parked on %s returns): %s", c.Node(A).Name, c.Node(B).Name, fmtDurations(lat))
	t.Logf("cross-node wake (push answered 201 -> pop returns): %s", fmtDurations(fromAck))
	t.Logf("A: marks_local +%d hints_sent +%d frames_sent +%d; B: hints_received +%d marks_remote +%d pop_sql_calls +%d",
		sa1.Hotlist.MarksLocal-sa0.Hotlist.MarksLocal, sa1.Mesh.HintsSent-sa0.Mesh.HintsSent, sa1.Mesh.FramesSent-sa0.Mesh.FramesSent,
		sb1.Mesh.HintsReceived-sb0.Mesh.HintsReceived, sb1.Hotlist.MarksRemote-sb0.Hotlist.MarksRemote,
		sb1.Requests.PopSQLCalls-sb0.Requests.PopSQLCalls)
	if p99 > time.Second {
		t.Errorf("cross-node wake p99 %v > 1s (max %v)", p99, mx)
	}
	if d := sb1.Mesh.HintsReceived - sb0.Mesh.HintsReceived; d < trials {
		t.Errorf("B received %d hints for %d pushes on A", d, trials)
	}
	if d := sb1.Hotlist.MarksRemote - sb0.Hotlist.MarksRemote; d < trials {
		t.Errorf("B made %d remote marks for %d pushes on A", d, trials)
	}
	checkRecorder(t, c, rec, "cross-node wake", []string{"g"}, 30*time.Second, elapsed, CheckOptions{})
}

// 2. Every hint frame is dropped: the reseed floor alone delivers
// everything, each message within the reseed interval + the 2 s floor tick
// + a margin.
func TestAllHintsDropped(t *testing.T) {
	const reseed = time.Second
	c := startCluster(t, 3, map[string]string{
		"QUEEN_MESH_DROP_RATE":    "1",
		"QUEEN_HOTLIST_RESEED_MS": fmt.Sprint(reseed.Milliseconds()),
	})
	w := startWorkload(t, c, WorkloadSpec{
		Messages: 3000, Rate: 300, Partitions: 20, Producers: 2, PushBatch: [2]int{1, 10},
		ConsumersPerGroup: 3, PopBatches: []int{1, 10, 50},
		ProducerNodes: func() []int { return []int{0} },
		ConsumerNodes: func() []int { return []int{1, 2} },
		WaitTimeoutMS: 3000, Timeout: 2 * time.Minute,
	})
	bound := reseed + 2*time.Second + 2*time.Second
	w.Check("all hints dropped (drop rate 1, reseed 1 s)", CheckOptions{MaxLatency: bound})
	st := make([]*Status, 3)
	for i := range st {
		st[i] = c.MustStatus(i)
		t.Logf("%s: frames_dropped %d frames_sent %d hints_received %d marks_remote %d reseeds %d reseed_added %d",
			c.Node(i).Name, st[i].Mesh.FramesDropped, st[i].Mesh.FramesSent, st[i].Mesh.HintsReceived,
			st[i].Hotlist.MarksRemote, st[i].Hotlist.Reseeds, st[i].Hotlist.ReseedAdded)
	}
	if st[0].Mesh.FramesDropped == 0 {
		t.Errorf("producer node %s: frames_dropped = 0", c.Node(0).Name)
	}
	for _, i := range []int{1, 2} {
		if st[i].Mesh.HintsReceived != 0 {
			t.Errorf("%s received %d hints although every frame is dropped", c.Node(i).Name, st[i].Mesh.HintsReceived)
		}
		if st[i].Hotlist.ReseedAdded == 0 {
			t.Errorf("consuming node %s: reseed_added = 0", c.Node(i).Name)
		}
	}
}

// mixedChaos is scenario 3's workload, also run by the soak.
func mixedChaos(t *testing.T, messages int, duration time.Duration, rate float64, timeout time.Duration) {
	c := startCluster(t, 3, map[string]string{"QUEEN_MESH_DROP_RATE": "0.5", "QUEEN_PG_MAX_CONNS": "24"})
	w := startWorkload(t, c, WorkloadSpec{
		Messages: messages, Duration: duration, Rate: rate, Partitions: 200, Producers: 6, PushBatch: [2]int{1, 100},
		ConsumersPerGroup: 6, PopBatches: []int{1, 10, 50, 100, 200}, MultiPartition: 0.2,
		LeaseTime: 10, ForgetRate: 0.002, WaitTimeoutMS: 2000, Timeout: timeout,
	})
	rep := w.Check("mixed chaos (3 nodes, 200 partitions, 2 groups, drop rate 0.5)", CheckOptions{})
	var dropped, sent, recv, marksRemote, gaps, overflow, beats int64
	var reseeds, early, suppressed, darkN, darkMs int64
	for i := range c.Nodes() {
		st := c.MustStatus(i)
		dropped += int64(st.Mesh.FramesDropped)
		sent += int64(st.Mesh.FramesSent)
		recv += int64(st.Mesh.HintsReceived)
		marksRemote += st.Hotlist.MarksRemote
		gaps += int64(st.Mesh.GapsSeen)
		overflow += int64(st.Mesh.OverflowSeen)
		beats += int64(st.Mesh.HeartbeatsSent)
		reseeds += st.Hotlist.Reseeds
		early += st.Hotlist.EarlyReseeds
		suppressed += st.Hotlist.EarlySuppressed
		darkN += int64(st.Hotlist.DarkMs.Count)
		darkMs += st.Hotlist.DarkMs.SumMs
	}
	t.Logf("mesh over all nodes: frames_sent %d frames_dropped %d heartbeats_sent %d hints_received %d marks_remote %d gaps_seen %d overflow_signals_seen %d",
		sent, dropped, beats, recv, marksRemote, gaps, overflow)
	// Every reseed is one keyset walk: one queen.hotlist_reseed_v2 call per
	// page of 10,000 partitions, so one call here (200 partitions).
	secs := rep.Elapsed.Seconds()
	meanDark := 0.0
	if darkN > 0 {
		meanDark = float64(darkMs) / float64(darkN)
	}
	t.Logf("reseeds over all nodes: %d in %.0f s = %.1f PostgreSQL reseed calls/s (%.1f/s per node), of which early %d (%.1f/s), suppressed by the rate limits %d; partitions found dark by early reseeds %d, mean dark time %.0f ms",
		reseeds, secs, float64(reseeds)/secs, float64(reseeds)/secs/float64(len(c.Nodes())), early, float64(early)/secs, suppressed, darkN, meanDark)
	if dropped == 0 {
		t.Errorf("no frame dropped at drop rate 0.5")
	}
	if messages > 0 && rep.Messages != messages {
		t.Errorf("pushed %d of %d messages", rep.Messages, messages)
	}
}

// 3. Mixed chaos load: producers and two groups' consumers on all three
// nodes, 200 partitions, 50,000 messages, half the hint frames dropped.
func TestMixedChaosLoad(t *testing.T) {
	mixedChaos(t, 50000, 0, 0, 5*time.Minute)
}

// TestSoak is the mixed chaos scenario for SOAK_DURATION (default 5m);
// skipped unless QUEEN_SOAK=1.
func TestSoak(t *testing.T) {
	if os.Getenv("QUEEN_SOAK") != "1" {
		t.Skip("set QUEEN_SOAK=1 (make soak) to run the soak")
	}
	d := 5 * time.Minute
	if s := os.Getenv("SOAK_DURATION"); s != "" {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			t.Fatalf("SOAK_DURATION=%q: %v", s, err)
		}
	}
	rate := 1500.0
	if s := os.Getenv("SOAK_RATE"); s != "" {
		// A lighter load separates the hint path's tail from a backlog on a
		// machine that cannot keep up (docs/cluster-tests.md).
		var err error
		if rate, err = strconv.ParseFloat(s, 64); err != nil || rate <= 0 {
			t.Fatalf("SOAK_RATE=%q: want a positive number of messages per second", s)
		}
	}
	t.Logf("soak: mixed chaos for %v at %.0f msg/s", d, rate)
	mixedChaos(t, 0, d, rate, d+5*time.Minute)
}

// 4. Node loss: consumers hold leases through node C, C is killed -9; the
// other nodes deliver everything, the held batches only after their
// leases expired, and C leaves the others' membership. A push to a queue C
// owned, right after the kill, is stored by the node it reached.
func TestNodeLoss(t *testing.T) {
	const lease = 3
	// A sealed mesh: pushes go to their queue's owner (docs/api.md, "Push
	// ownership"), and one owner is about to die.
	c := startCluster(t, 3, map[string]string{"QUEEN_MESH_SECRET": base64.StdEncoding.EncodeToString([]byte("node-loss-test-key-0123456789abc"))})
	const A, B, C = 0, 1, 2
	w := startWorkload(t, c, WorkloadSpec{
		Messages: 6000, Rate: 1500, Partitions: 30, Producers: 3, PushBatch: [2]int{1, 20},
		ConsumersPerGroup: 3, PopBatches: []int{1, 10, 50}, LeaseTime: lease,
		ConsumerNodes: func() []int { return []int{A, B} },
		Timeout:       2 * time.Minute,
	})
	time.Sleep(time.Second)
	held := 0
	for _, g := range w.spec.Groups {
		for i := 0; i < 3; i++ {
			ms, _, err := popRecorded(c, w.rec, C, g, url.Values{"batch": {"20"}, "partitions": {"2"}})
			if err != nil {
				t.Fatalf("holder pop via C: %v", err)
			}
			held += len(ms) // never acked
		}
	}
	if held == 0 {
		t.Fatal("the holders got no messages through C")
	}
	// C owns some queues' pushes (docs/api.md, "Push ownership"); the push
	// right after the kill finds C unreachable before memberlist declares
	// it dead, and A stores the items itself.
	ownedByC := queueOwnedBy(c, C)
	before := c.MustStatus(A)
	c.Kill(C)
	t.Logf("killed %s -9 holding %d leased messages", c.Node(C).Name, held)
	pushAfterKill(t, c, A, C, ownedByC, before)
	gone := waitUntil(t, 10*time.Second, "the others to see C dead", func() bool {
		for _, i := range []int{A, B} {
			st, err := c.Status(i)
			if err != nil {
				return false
			}
			if s := st.memberState(c.Node(C).Name); s != "dead" && s != "left" && s != "" {
				return false
			}
		}
		return true
	})
	t.Logf("A and B report %s dead %v after the kill", c.Node(C).Name, gone.Round(time.Millisecond))
	rep := w.Check("node loss (kill -9 of a lease holder, lease 3 s)", CheckOptions{})
	if rep.Redeliveries < held {
		t.Errorf("%d redeliveries, but %d messages were held through the killed node", rep.Redeliveries, held)
	}
	// C comes back on the same address and ports (with other chaos
	// settings) and is a live member again.
	back := time.Now()
	c.RestartWithEnv(C, map[string]string{"QUEEN_MESH_DROP_RATE": "0.1"})
	t.Logf("%s restarted and alive in every membership %v later", c.Node(C).Name, time.Since(back).Round(time.Millisecond))
}

// 5. Late joiner: a fourth node joins mid-run and serves pops correctly
// from its first request.
func TestLateJoiner(t *testing.T) {
	c := startCluster(t, 3, nil)
	w := startWorkload(t, c, WorkloadSpec{
		Messages: 8000, Rate: 1000, Partitions: 40, Producers: 3, PushBatch: [2]int{1, 20},
		ConsumersPerGroup: 3, PopBatches: []int{1, 10, 50}, Timeout: 2 * time.Minute,
	})
	// Messages on another queue, pushed before the joiner exists.
	late := newRecorder("late", 4)
	c.Configure(0, late.queue, map[string]any{"leaseTime": 30})
	for p := 0; p < 4; p++ {
		var ks []key
		for s := 1; s <= 25; s++ {
			ks = append(ks, key{p, s})
		}
		pushKeys(t, c, late, mrand.IntN(3), ks...)
	}
	time.Sleep(2 * time.Second)
	d := c.AddNode(nil)
	joined := time.Now()
	// The first request after /health: a pop with wait=false.
	ms := popKeys(t, c, late, d.Idx, "lg", url.Values{"batch": {"100"}})
	if len(ms) == 0 {
		t.Fatalf("the late joiner's first pop (wait=false) returned nothing")
	}
	t.Logf("late joiner %s: first pop returned %d messages", d.Name, len(ms))
	ackKeys(t, c, late, d.Idx, "lg", ms)
	for late.ackedCount("lg") < 100 {
		ms := popKeys(t, c, late, d.Idx, "lg", url.Values{"batch": {"30"}})
		if ms == nil {
			t.Fatalf("late joiner: pop empty with %d of 100 acked", late.ackedCount("lg"))
		}
		ackKeys(t, c, late, d.Idx, "lg", ms)
	}
	c.waitMembership(convergeTimeout)
	t.Logf("membership with %s converged (checked %v after its /health)", d.Name, time.Since(joined).Round(time.Millisecond))
	// Once a member, pushes elsewhere wake pops parked on it.
	var lat []time.Duration
	for i := 1; i <= 5; i++ {
		type result struct {
			msgs []popMsg
			at   time.Time
			err  error
		}
		done := make(chan result, 1)
		go func() {
			ms, at, err := popRecorded(c, late, d.Idx, "lg", url.Values{"batch": {"1"}, "wait": {"true"}, "timeout": {"10000"}})
			done <- result{ms, at, err}
		}()
		waitUntil(t, 5*time.Second, "a pop parked on the joiner", func() bool {
			st, err := c.Status(d.Idx)
			return err == nil && st.Requests.Parked >= 1
		})
		time.Sleep(20 * time.Millisecond)
		k := key{0, 25 + i}
		pushKeys(t, c, late, 0, k)
		r := <-done
		if r.err != nil || len(r.msgs) != 1 {
			t.Fatalf("wake trial %d on the joiner: %d messages, %v", i, len(r.msgs), r.err)
		}
		ackKeys(t, c, late, d.Idx, "lg", r.msgs)
		late.mu.Lock()
		lat = append(lat, r.at.Sub(late.pushes[k].start))
		late.mu.Unlock()
	}
	t.Logf("push on %s -> pop parked on the joiner: %s", c.Node(0).Name, fmtDurations(lat))
	if _, _, _, mx := percentiles(lat); mx > 2*time.Second {
		t.Errorf("wake on the joiner took up to %v", mx)
	}
	checkRecorder(t, c, late, "late joiner: queue pushed before it started", []string{"lg"}, 30*time.Second, time.Since(joined), CheckOptions{})
	w.Check("late joiner: workload across the join", CheckOptions{})
	st := c.MustStatus(d.Idx)
	t.Logf("joiner %s: pops %d popped_messages %d pushed_messages %d hints_received %d", d.Name,
		st.Requests.Pops, st.Requests.PoppedItems, st.Requests.PushedItems, st.Mesh.HintsReceived)
	if st.Requests.PoppedItems == 0 {
		t.Errorf("the joiner served no messages")
	}
}

// 6. PostgreSQL restart mid-load: the nodes report 503 on /health while it
// is down and 200 again by themselves; nothing is lost.
func TestPostgresRestart(t *testing.T) {
	pgs, pgURL := startPG(t)
	c := startClusterOpts(t, ClusterOptions{N: 3, PGURL: pgURL})
	w := startWorkload(t, c, WorkloadSpec{
		Messages: 8000, Rate: 800, Partitions: 30, Producers: 3, PushBatch: [2]int{1, 20},
		ConsumersPerGroup: 3, PopBatches: []int{1, 10, 50}, LeaseTime: 5, Timeout: 3 * time.Minute,
	})
	time.Sleep(3 * time.Second)
	down := time.Now()
	if err := pgs.StopKeepData(); err != nil {
		t.Fatal(err)
	}
	stopped := time.Since(down)
	waitAll(t, c, 20*time.Second, "503 on /health", func(code int) bool { return code == 503 })
	t.Logf("PostgreSQL stopped in %v; /health 503 on every node %v after the stop began",
		stopped.Round(time.Millisecond), time.Since(down).Round(time.Millisecond))
	time.Sleep(3 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := pgs.StartAgain(ctx); err != nil {
		t.Fatal(err)
	}
	up := time.Now()
	healthy := waitAll(t, c, 30*time.Second, "200 on /health", func(code int) bool { return code == 200 })
	t.Logf("PostgreSQL down %v; /health 200 again %v after it came back", up.Sub(down).Round(time.Millisecond), healthy.Round(time.Millisecond))
	rep := w.Check("PostgreSQL restart mid-load", CheckOptions{})
	if rep.PushRetries == 0 && rep.PopErrors == 0 {
		t.Logf("note: no request saw the outage")
	}
}

// waitAll polls every running node's /health until ok holds for each (a
// node counts once it has been seen ok) and returns how long it took.
func waitAll(t *testing.T, c *Cluster, within time.Duration, what string, ok func(int) bool) time.Duration {
	t.Helper()
	seen := map[int]bool{}
	return waitUntil(t, within, what, func() bool {
		all := true
		for _, i := range c.Running() {
			if !seen[i] && ok(c.Health(i)) {
				seen[i] = true
			}
			all = all && seen[i]
		}
		return all
	})
}

// 7. Name flood: pops on 300 random queue names register rings; the idle
// sweep (500 ms) brings ring memory back to its baseline within two sweep
// intervals plus a margin, and the node still serves a workload correctly.
func TestNameFlood(t *testing.T) {
	t.Parallel()
	const sweep = 500 * time.Millisecond
	const names = 300
	c := startCluster(t, 1, map[string]string{"QUEEN_HOTLIST_IDLE_SWEEP_MS": fmt.Sprint(sweep.Milliseconds())})
	base := c.MustStatus(0)
	var peakMu sync.Mutex
	peakRings := 0
	stopPoll := make(chan struct{})
	var pollWG sync.WaitGroup
	pollWG.Add(1)
	go func() { // the peak, seen while the sweep already runs
		defer pollWG.Done()
		for {
			select {
			case <-stopPoll:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if st, err := c.Status(0); err == nil {
				peakMu.Lock()
				peakRings = max(peakRings, st.Hotlist.Rings)
				peakMu.Unlock()
			}
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, names)
	sem := make(chan struct{}, 16)
	for i := 0; i < names; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			var b [6]byte
			_, _ = rand.Read(b[:])
			name := "flood-" + base64.RawURLEncoding.EncodeToString(b[:])
			for j := 0; j < 2; j++ { // the second pop finds and registers the ring
				code, body, err := c.do(context.Background(), 0, "GET", "/api/v1/pop/queue/"+name+"?batch=1&consumerGroup=fg", nil)
				if err != nil || code != 204 {
					errs <- fmt.Errorf("pop %s: %d %s %v", name, code, body, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	lastPop := time.Now()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var st *Status
	waitUntil(t, 2*sweep+1500*time.Millisecond, "rings and queues back to the baseline", func() bool {
		st = c.MustStatus(0)
		return st.Hotlist.Rings <= base.Hotlist.Rings && st.Hotlist.Queues <= base.Hotlist.Queues
	})
	close(stopPoll)
	pollWG.Wait()
	back := time.Since(lastPop)
	t.Logf("name flood: %d names x 2 pops; rings baseline %d, peak seen %d, back to %d rings / %d queues %v after the last pop (sweep %v); swept +%d",
		names, base.Hotlist.Rings, peakRings, st.Hotlist.Rings, st.Hotlist.Queues, back.Round(time.Millisecond), sweep, st.Hotlist.Swept-base.Hotlist.Swept)
	if d := st.Hotlist.Swept - base.Hotlist.Swept; d < names*9/10 {
		t.Errorf("the sweep dropped %d queues for %d flooded names", d, names)
	}
	if peakRings <= base.Hotlist.Rings {
		t.Errorf("no ring registered during the flood (peak %d, baseline %d)", peakRings, base.Hotlist.Rings)
	}
	// The node still serves correctly with a sweep this aggressive.
	w := startWorkload(t, c, WorkloadSpec{Messages: 2000, Rate: 500, Partitions: 10, Producers: 2, PushBatch: [2]int{1, 10},
		ConsumersPerGroup: 2, PopBatches: []int{1, 10}, Timeout: time.Minute})
	w.Check("after the name flood (sweep 500 ms)", CheckOptions{})
}

// 8. Wrong secret: a node with another QUEEN_MESH_SECRET (same database)
// never joins, its pushes never mark the members' rings, and it sees
// itself alone.
func TestWrongSecret(t *testing.T) {
	t.Parallel()
	newSecret := func() string {
		var b [16]byte
		_, _ = rand.Read(b[:])
		return base64.StdEncoding.EncodeToString(b[:])
	}
	c := startCluster(t, 3, map[string]string{"QUEEN_MESH_SECRET": newSecret()})
	out := c.AddNode(map[string]string{"QUEEN_MESH_SECRET": newSecret()})
	rec := newRecorder("secret", 1)
	c.Configure(0, rec.queue, map[string]any{"leaseTime": 30})
	// Rings on the members for the queue the outsider pushes to.
	for _, i := range []int{0, 1, 2} {
		for j := 0; j < 2; j++ {
			if ms := popKeys(t, c, rec, i, fmt.Sprintf("m%d", i), url.Values{"batch": {"1"}}); ms != nil {
				t.Fatalf("unexpected messages")
			}
		}
	}
	// Let the outsider try to join for a while (it retries with back-off).
	time.Sleep(3 * time.Second)
	before := make([]*Status, 3)
	for i := range before {
		before[i] = c.MustStatus(i)
	}
	for s := 1; s <= 20; s++ {
		pushKeys(t, c, rec, out.Idx, key{0, s})
	}
	time.Sleep(2 * time.Second)
	for i := 0; i < 3; i++ {
		st := c.MustStatus(i)
		if s := st.memberState(out.Name); s != "" {
			t.Errorf("%s lists the outsider as %q", c.Node(i).Name, s)
		}
		if len(st.Mesh.Members) != 3 {
			t.Errorf("%s lists %d members: %+v", c.Node(i).Name, len(st.Mesh.Members), st.Mesh.Members)
		}
		if d := st.Mesh.HintsReceived - before[i].Mesh.HintsReceived; d != 0 {
			t.Errorf("%s received %d hints while only the outsider pushed", c.Node(i).Name, d)
		}
		if d := st.Hotlist.MarksRemote - before[i].Hotlist.MarksRemote; d != 0 {
			t.Errorf("%s: marks_remote moved by %d while only the outsider pushed", c.Node(i).Name, d)
		}
		t.Logf("%s: members %d, frames_rejected %d, hints_received %d", c.Node(i).Name, len(st.Mesh.Members), st.Mesh.FramesRejected, st.Mesh.HintsReceived)
	}
	if b, err := os.ReadFile(out.LogPath); err == nil {
		t.Logf("outsider log: %d lines mention a refused join (\"cannot join\")", strings.Count(string(b), "cannot join"))
	}
	ost := c.MustStatus(out.Idx)
	if len(ost.Mesh.Members) != 1 || ost.Mesh.Members[0].Name != out.Name {
		t.Errorf("the outsider sees %+v, want itself alone", ost.Mesh.Members)
	}
	if ost.Mesh.HintsSent != 0 {
		t.Errorf("the outsider sent %d hints", ost.Mesh.HintsSent)
	}
	// Control: the same pushes through a member do mark the other members.
	// Through the queue's owner, which stores them and hints the others
	// (a push to another member is forwarded to it: docs/api.md, "Push
	// ownership").
	own := ownerAmong(c, []int{0, 1, 2}, rec.queue)
	for s := 21; s <= 40; s++ {
		pushKeys(t, c, rec, own, key{0, s})
	}
	waitUntil(t, 5*time.Second, "hints from a member to mark the others", func() bool {
		for _, i := range []int{0, 1, 2} {
			if i == own {
				continue
			}
			st, err := c.Status(i)
			if err != nil || st.Hotlist.MarksRemote == before[i].Hotlist.MarksRemote {
				return false
			}
		}
		return true
	})
	// Everything pushed (outsider included: same database) is delivered to
	// a member's group.
	start := time.Now()
	for rec.ackedCount("m1") < 40 && time.Since(start) < 30*time.Second {
		ms := popKeys(t, c, rec, 1, "m1", url.Values{"batch": {"15"}, "wait": {"true"}, "timeout": {"2000"}})
		if ms != nil {
			ackKeys(t, c, rec, 1, "m1", ms)
		}
	}
	checkRecorder(t, c, rec, "wrong secret: pushes via outsider and member, consumed on a member", []string{"m1"}, 30*time.Second, time.Since(start), CheckOptions{})
}

// queueOwnedBy names a queue whose pushes node i owns in a cluster of all
// of c's nodes (the owner package's rule, which every node applies).
func queueOwnedBy(c *Cluster, i int) string {
	all := make([]int, len(c.Nodes()))
	for j := range all {
		all[j] = j
	}
	for k := 0; ; k++ {
		q := fmt.Sprintf("owned-%d", k)
		if ownerAmong(c, all, q) == i {
			return q
		}
	}
}

// ownerAmong is the index of the node that owns queue's pushes when the
// nodes members (indexes into c's nodes) form the mesh.
func ownerAmong(c *Cluster, members []int, queue string) int {
	var ns []owner.Node
	for _, i := range members {
		ns = append(ns, owner.Node{Name: c.Node(i).Name})
	}
	tb := owner.New(ns)
	name := tb.Node(tb.Owner("default", queue)).Name
	for _, i := range members {
		if c.Node(i).Name == name {
			return i
		}
	}
	return -1
}

// pushAfterKill pushes 50 items through node a to queue q, whose owner
// (node dead) was just killed: every item is stored (201, queued), and
// when a still listed the owner alive before the kill, through a's own
// fallback (a failed forward, or a cooling owner). A pop then reads all 50 back.
func pushAfterKill(t *testing.T, c *Cluster, a, dead int, q string, before *Status) {
	t.Helper()
	items := make([]map[string]any, 50)
	for i := range items {
		items[i] = map[string]any{"queue": q, "partition": fmt.Sprintf("p%d", i%5), "transactionId": fmt.Sprintf("after-kill-%d", i), "payload": map[string]int{"i": i}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	alive := before.memberState(c.Node(dead).Name) == "alive" && before.Forward.Owners == int64(len(c.Nodes()))
	code, body, err := c.do(ctx, a, "POST", "/api/v1/push", map[string]any{"items": items})
	if err != nil || code != 201 {
		t.Fatalf("push through %s after the kill: %d %s %v", c.Node(a).Name, code, body, err)
	}
	var res []struct{ Status string }
	if err := json.Unmarshal(body, &res); err != nil || len(res) != len(items) {
		t.Fatalf("push answer %s: %v", body, err)
	}
	for i, r := range res {
		if r.Status != "queued" {
			t.Fatalf("item %d after the kill: %s", i, r.Status)
		}
	}
	after := c.MustStatus(a)
	// Fallback, not failures: the owner may already be cooling down from a
	// failed forwarded pop or ack (one cool-down per peer, shared with the
	// consumer side), and then the items are stored here without a push
	// forward being tried (seen once in CI).
	if alive && after.Forward.Fallback < before.Forward.Fallback+int64(len(items)) {
		t.Fatalf("%s forwarded to the killed owner without falling back: before %+v, after %+v", c.Node(a).Name, before.Forward, after.Forward)
	}
	t.Logf("push to %s's queue through %s after the kill: stored; forward failures %d -> %d", c.Node(dead).Name, c.Node(a).Name, before.Forward.Failures, after.Forward.Failures)
	got := 0
	for tries := 0; got < len(items) && tries < 50; tries++ {
		code, body, err := c.do(ctx, a, "GET", "/api/v1/pop/queue/"+q+"?batch=100&wait=false&autoAck=true", nil)
		if err != nil {
			t.Fatal(err)
		}
		if code == 204 {
			continue
		}
		var pr struct{ Messages []json.RawMessage }
		if err := json.Unmarshal(body, &pr); err != nil {
			t.Fatalf("pop %d %s: %v", code, body, err)
		}
		got += len(pr.Messages)
	}
	if got != len(items) {
		t.Fatalf("read %d of the %d items pushed after the kill", got, len(items))
	}
}
