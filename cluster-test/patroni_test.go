package clustertest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"queen-node/internal/localnet"
	"queen-node/internal/patroni"
)

// Failover under Patroni with etcd (issue 22 item 2; docs/cluster-tests.md,
// "Failover under Patroni"; docs/operations.md, "Running on Patroni"): a
// three-member etcd, three Patroni members with synchronous_mode, each
// with its PostgreSQL, all started here on loopback (package
// internal/patroni), and three queen-node processes given every member in
// one URL with target_session_attrs=read-write. Under a steady workload it
// does three things in turn, each followed by recovery and checks:
//
//  1. SIGKILL to the leader's PostgreSQL: Patroni fails over by itself
//     (primary_start_timeout 0: no restart in place first);
//  2. a planned switchover with patronictl;
//  3. the leader's whole machine stand-in killed at once: its Patroni, its
//     PostgreSQL and its etcd member (nothing is released in etcd, so the
//     others wait for the leader key's TTL).
//
// What it proves and measures:
//   - no acknowledged push is lost and none is stored twice: the checker
//     (delivered set == pushed set, order, lease rules) and a fresh audit
//     group reading the whole queue from the last primary;
//   - during each gap the nodes answer 503 and nothing else: no 500, no
//     transport error, no answer slower than maxHAAnswer beyond a
//     long-poll's own wait (status codes are counted per phase);
//   - the time from each event to Patroni's new leader and to each node's
//     first 201 push and 200 pop;
//   - what the nodes' pools and hot-lists do across each event (/status).
//
// It needs Patroni, etcd and PostgreSQL's binaries (scripts/ensure-ha.sh,
// scripts/ensure-postgres.sh) and runs only with QUEEN_HA=1 (make ha-test).

const (
	haRecovery  = 60 * time.Second  // from an event to every node serving again: fails a hang, survives a loaded machine
	haSettle    = 120 * time.Second // for Patroni to be healthy again (a rejoin may need pg_rewind or a new base backup)
	maxHAAnswer = 15 * time.Second  // bound on any answer beyond a long-poll's wait: the node's own 10 s bound on a push's or ack's database work (broker.dbRequestTimeout) and a margin; the client gives up at 20 s
)

func TestPatroniFailover(t *testing.T) {
	if os.Getenv("QUEEN_HA") != "1" {
		t.Skip("set QUEEN_HA=1 (make ha-test) to run etcd, Patroni and PostgreSQL")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	pc := startPatroni(t, ctx)
	c := startClusterOpts(t, ClusterOptions{N: 3, PGURL: pc.URL("queen")})
	rt := &recordingTransport{base: c.client.Transport}
	c.client.Transport = rt // before any workload request
	smp := startStatusSampler(t, c)

	w := startWorkload(t, c, WorkloadSpec{
		Messages: 10_000_000, Rate: 300, Partitions: 30, Producers: 3, PushBatch: [2]int{1, 20},
		ConsumersPerGroup: 3, PopBatches: []int{1, 10, 50}, LeaseTime: 5, ForgetRate: 0.005,
		WaitTimeoutMS: 1500, Timeout: 12 * time.Minute, RetryUnknownAcks: true,
	})
	steady := func() {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, haSettle)
		defer cancel()
		st, err := pc.WaitHealthy(sctx)
		if err != nil {
			t.Fatal(err)
		}
		n := w.rec.pushedCount()
		waitUntil(t, time.Minute, "steady load", func() bool { return w.rec.pushedCount() >= n+600 })
		t.Logf("patroni: %s", st)
	}

	var phases []*haPhase
	run := func(name string, do func(leader *patroni.Machine) time.Time) {
		t.Helper()
		steady()
		st, err := pc.State(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ph := &haPhase{name: name, from: st.Leader().Name, before: smp.now()}
		ph.event = do(pc.Machine(ph.from))
		ph.to, ph.leaderKey, ph.primary = waitNewLeader(t, ctx, pc, ph.from, ph.event)
		ph.recovered = waitNodesServe(t, c, rt, ph.event.Add(ph.primary))
		ph.after = smp.now()
		phases = append(phases, ph)
		t.Logf("%s: leader %s -> %s: leader key %v after the event, primary %v after it; every node served a 201 push and a 200 pop sent after that %v after the event",
			name, ph.from, ph.to, ph.leaderKey.Round(time.Millisecond), ph.primary.Round(time.Millisecond), ph.recovered.Sub(ph.event).Round(time.Millisecond))
	}

	run("1 SIGKILL the leader's postgres", func(m *patroni.Machine) time.Time {
		if err := pc.KillPostgres(m); err != nil {
			t.Fatal(err)
		}
		// From here the postmaster and its backends are gone: a request
		// sent earlier may still have committed, so this, not the signal,
		// splits before from after.
		return time.Now()
	})
	run("2 patronictl switchover", func(m *patroni.Machine) time.Time {
		at := time.Now()
		out, err := pc.Switchover(ctx, m.Name)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("patronictl switchover returned after %v: %s", time.Since(at).Round(time.Millisecond), lastLine(out))
		return at
	})
	if os.Getenv("QUEEN_HA_FREEZE") == "1" {
		// The machine stops answering without closing anything (a
		// partition, a hung host): docs/operations.md, "Running on
		// Patroni", says what it costs.
		run("3 freeze the leader's machine (SIGSTOP)", func(m *patroni.Machine) time.Time {
			if err := pc.FreezeMachine(m); err != nil {
				t.Fatal(err)
			}
			return time.Now()
		})
	} else {
		run("3 stop the leader's machine", func(m *patroni.Machine) time.Time {
			if err := pc.StopMachine(m); err != nil {
				t.Fatal(err)
			}
			return time.Now()
		})
	}

	w.StopPushing()
	rep := w.Check("Patroni failover, switchover, machine loss", CheckOptions{})
	if rep.PushRetries == 0 && rep.PopErrors == 0 && rep.AckUnknown == 0 {
		t.Errorf("no request saw an event: the test did not exercise the gaps")
	}
	auditQueue(t, c, w)
	smp.stop()
	reportPhases(t, c, rt, smp, phases)
}

// startPatroni starts the Patroni cluster, creates the database "queen"
// and registers its teardown (also when the test fails: the logs' tails
// are printed and the folder kept).
func startPatroni(t *testing.T, ctx context.Context) *patroni.Cluster {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	pc, err := patroni.Start(sctx, patroni.Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, m := range pc.Machines() {
				t.Logf("--- last lines of %s's Patroni log ---\n%s", m.Name, localnet.LogTail(m.PatroniLog(), 30))
			}
			t.Logf("Patroni cluster folder kept: %s", pc.KeepDir())
		}
		if err := pc.Close(); err != nil {
			t.Errorf("stop the Patroni cluster: %v", err)
		}
		if s := pc.Strays(); len(s) > 0 {
			t.Errorf("etcd, Patroni or postgres processes left running: %s", strings.Join(s, "; "))
		}
	})
	if err := pc.CreateDatabase(sctx, "queen"); err != nil {
		t.Fatal(err)
	}
	st, _ := pc.State(sctx)
	t.Logf("Patroni cluster %s: %s; nodes use %s", pc.Scope(), st, pc.URL("queen"))
	return pc
}

// waitNewLeader polls Patroni until a member other than old holds the
// leader key and runs, and until a member other than old answers GET
// /primary 200 (promoted: it takes writes); it returns that member and
// both times since the event.
func waitNewLeader(t *testing.T, ctx context.Context, pc *patroni.Cluster, old string, event time.Time) (string, time.Duration, time.Duration) {
	t.Helper()
	var key, primary time.Duration
	var name string
	for key == 0 || primary == 0 {
		// A slow member's answer is not waited for long: these are polls.
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := pc.State(sctx)
		cancel()
		if err == nil && key == 0 {
			if l := st.Leader(); l.Name != "" && l.Name != old && l.State == "running" {
				key = time.Since(event)
			}
		}
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		if p := pc.Primary(pctx); primary == 0 && p != "" && p != old {
			name, primary = p, time.Since(event)
		}
		cancel()
		if time.Since(event) > haRecovery {
			t.Fatalf("Patroni has no new leader (%v) or primary (%v) within %v of the event (last state: %v %v)", key, primary, haRecovery, st, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return name, key, primary
}

// waitNodesServe waits until every node answered a push 201 and a pop 200
// that were sent after since (the new primary), and returns when the
// last of those answers came; it fails the test after haRecovery.
func waitNodesServe(t *testing.T, c *Cluster, rt *recordingTransport, since time.Time) time.Time {
	t.Helper()
	var last time.Time
	waitUntil(t, haRecovery, "every node serving a 201 push and a 200 pop after the new primary", func() bool {
		obs := rt.snapshot()
		for _, nd := range c.Nodes() {
			for _, k := range []string{"push", "pop"} {
				at := firstOK(obs, hostOf(nd), k, since)
				if at.IsZero() {
					return false
				}
				if at.After(last) {
					last = at
				}
			}
		}
		return true
	})
	return last
}

// okCode is the answer of a successful push or pop with messages.
var okCode = map[string]int{"push": 201, "pop": 200}

// firstOK is the end of the first successful answer of kind through host
// among the requests sent after t (zero if none).
func firstOK(obs []reqObs, host, kind string, t time.Time) time.Time {
	var first time.Time
	for _, o := range obs {
		if o.host == host && o.kind == kind && o.code == okCode[kind] && o.start.After(t) && (first.IsZero() || o.end.Before(first)) {
			first = o.end
		}
	}
	return first
}

// failed tells whether an answer is a failure: a 5xx or a transport error.
func failed(o reqObs) bool { return o.code == 0 || o.code >= 500 }

// gapStart is when the first failed answer of any request came after the
// event (the event itself when none did): a switchover's old primary
// serves for a moment after the call, so the outage starts later than the
// event.
func gapStart(obs []reqObs, event, until time.Time) time.Time {
	var first time.Time
	for _, o := range obs {
		if o.kind != "other" && failed(o) && o.end.After(event) && !o.end.After(until) && (first.IsZero() || o.end.Before(first)) {
			first = o.end
		}
	}
	if first.IsZero() {
		return event
	}
	return first
}

// recoveredAt is a node's recovery for kind after an event: the end of its
// first successful answer sent after both the gap's start and the node's
// last failed answer of that kind in [event, until].
func recoveredAt(obs []reqObs, host, kind string, event, until time.Time) time.Time {
	after := gapStart(obs, event, until)
	for _, o := range obs {
		if o.host == host && o.kind == kind && failed(o) && o.end.After(event) && !o.end.After(until) && o.start.After(after) {
			after = o.start
		}
	}
	return firstOK(obs, host, kind, after)
}

func (rt *recordingTransport) snapshot() []reqObs {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return append([]reqObs(nil), rt.obs...)
}

func hostOf(nd *Node) string { return strings.TrimPrefix(nd.HTTP(), "http://") }

func lastLine(s string) string {
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		if strings.Contains(l, "witch") { // "Successfully switched over", "Switchover ..."
			return strings.TrimSpace(l)
		}
	}
	return strings.TrimSpace(s)
}

// ---------------------------------------------------------------------------
// The nodes' /status across the events

// haStatus is the part of /status this test reads: the pool and the
// hot-list (docs/operations.md, "GET /status").
type haStatus struct {
	PG struct {
		Total    int32 `json:"total_conns"`
		Idle     int32 `json:"idle_conns"`
		Acquired int32 `json:"acquired_conns"`
		Acquires int64 `json:"acquire_count"`
		Empty    int64 `json:"empty_acquire_count"`
		New      int64 `json:"new_conns_count"`
	} `json:"pg"`
	Hotlist struct {
		Reseeds     int64 `json:"reseeds"`
		ReseedAdded int64 `json:"reseed_added"`
		Churn       int64 `json:"churn_passes"`
		Early       int64 `json:"early_reseeds"`
	} `json:"hotlist"`
}

type statusSample struct {
	at     time.Time
	health int // /health's code, 0 on a transport error
	st     *haStatus
}

// statusSampler reads every node's /health and /status every 250 ms.
type statusSampler struct {
	c      *Cluster
	mu     sync.Mutex
	byNode map[string][]statusSample
	done   chan struct{}
	wg     sync.WaitGroup
}

func startStatusSampler(t *testing.T, c *Cluster) *statusSampler {
	s := &statusSampler{c: c, byNode: map[string][]statusSample{}, done: make(chan struct{})}
	for _, nd := range c.Nodes() {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			for {
				s.sample(nd)
				select {
				case <-s.done:
					return
				case <-time.After(250 * time.Millisecond):
				}
			}
		}()
	}
	t.Cleanup(s.stop)
	return s
}

func (s *statusSampler) stop() {
	select {
	case <-s.done:
	default:
		close(s.done)
	}
	s.wg.Wait()
}

func (s *statusSampler) sample(nd *Node) statusSample {
	sm := statusSample{at: time.Now(), health: s.c.Health(nd.Idx)}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	code, body, err := s.c.do(ctx, nd.Idx, "GET", "/status", nil)
	if err == nil && code == 200 {
		var st haStatus
		if json.Unmarshal(body, &st) == nil {
			sm.st = &st
		}
	}
	s.mu.Lock()
	s.byNode[nd.Name] = append(s.byNode[nd.Name], sm)
	s.mu.Unlock()
	return sm
}

// now samples every node at once and returns the samples by node name.
func (s *statusSampler) now() map[string]statusSample {
	out := map[string]statusSample{}
	for _, nd := range s.c.Nodes() {
		out[nd.Name] = s.sample(nd)
	}
	return out
}

// between returns node's samples taken in [t0, t1].
func (s *statusSampler) between(node string, t0, t1 time.Time) []statusSample {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []statusSample
	for _, sm := range s.byNode[node] {
		if !sm.at.Before(t0) && !sm.at.After(t1) {
			out = append(out, sm)
		}
	}
	return out
}

// ---------------------------------------------------------------------------
// The report

// haPhase is one event and what followed it.
type haPhase struct {
	name          string
	from, to      string        // Patroni leader before and after
	event         time.Time     // see run in TestPatroniFailover
	leaderKey     time.Duration // from the event to a new member holding Patroni's leader key
	primary       time.Duration // from the event to the new primary answering Patroni's GET /primary 200
	recovered     time.Time     // the end of the gap: every node answered a 201 push and a 200 pop sent after the new leader
	before, after map[string]statusSample
}

// reportPhases checks every answer (only 2xx, 204 and 503; no transport
// error; none slower than maxHAAnswer beyond its long-poll wait), and logs
// per phase the answers during the gap (from the event to the last node's
// recovery), each node's time to serve again (recoveredAt: a 201 push and
// a 200 pop), and its pool and hot-list figures before, during and after.
func reportPhases(t *testing.T, c *Cluster, rt *recordingTransport, smp *statusSampler, phases []*haPhase) {
	t.Helper()
	obs := rt.snapshot()
	name := map[string]string{}
	for _, nd := range c.Nodes() {
		name[hostOf(nd)] = nd.Name
	}
	bad := 0
	for _, o := range obs {
		if o.kind == "other" {
			continue
		}
		d := o.end.Sub(o.start)
		var why string
		switch {
		case o.code == 0:
			why = "transport error: " + o.err
		case o.code >= 500 && o.code != 503:
			why = fmt.Sprintf("answered %d (want 503 for an unavailable database)", o.code)
		case d-o.wait > maxHAAnswer:
			why = fmt.Sprintf("answered %d after %v (bound %v beyond its wait %v)", o.code, d.Round(time.Millisecond), maxHAAnswer, o.wait)
		}
		if why != "" {
			if bad++; bad <= 20 {
				t.Errorf("%s via %s sent %s: %s", o.kind, name[o.host], o.start.Format("15:04:05.000"), why)
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nPatroni failover summary (%d requests checked, %d bad answers)\n", len(obs), bad)
	for _, ph := range phases {
		codes := map[string]map[int]int{}
		var beyond []time.Duration
		for _, o := range obs {
			if o.kind == "other" || !o.end.After(ph.event) || !o.start.Before(ph.recovered) {
				continue
			}
			if codes[o.kind] == nil {
				codes[o.kind] = map[int]int{}
			}
			codes[o.kind][o.code]++
			beyond = append(beyond, o.end.Sub(o.start)-o.wait)
		}
		_, _, p99, mx := percentiles(beyond)
		gs := gapStart(obs, ph.event, ph.recovered)
		fmt.Fprintf(&b, "\n### %s: leader %s -> %s; new leader key after %v, new primary (GET /primary 200) after %v; first failed answer after %v; gap (event to the last node's recovery) %v\n",
			ph.name, ph.from, ph.to, ph.leaderKey.Round(time.Millisecond), ph.primary.Round(time.Millisecond),
			gs.Sub(ph.event).Round(time.Millisecond), ph.recovered.Sub(ph.event).Round(time.Millisecond))
		fmt.Fprintf(&b, "answers in the gap: push %s, pop %s, ack %s; time beyond a long-poll's wait p99 %v, max %v\n",
			fmtCodes(codes["push"]), fmtCodes(codes["pop"]), fmtCodes(codes["ack"]), p99.Round(time.Millisecond), mx.Round(time.Millisecond))
		n503 := codes["push"][503] + codes["pop"][503] + codes["ack"][503]
		if n503 == 0 {
			t.Errorf("%s: no 503 in the gap: the test did not see it", ph.name)
		}
		fmt.Fprintf(&b, "| node | 201 push again, from the event | 200 pop again, from the event | the same from the new primary (push / pop) | /health 503 seen | pool total before / min during / after | acquired max during | new conns | reseeds (churn passes, added) |\n")
		fmt.Fprintf(&b, "| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
		for _, nd := range c.Nodes() {
			push := recoveredAt(obs, hostOf(nd), "push", ph.event, ph.recovered).Sub(ph.event)
			pop := recoveredAt(obs, hostOf(nd), "pop", ph.event, ph.recovered).Sub(ph.event)
			during := smp.between(nd.Name, ph.event, ph.recovered)
			h503 := 0
			minTotal, maxAcq := int32(-1), int32(0)
			for _, sm := range during {
				if sm.health == 503 {
					h503++
				}
				if sm.st != nil {
					if minTotal < 0 || sm.st.PG.Total < minTotal {
						minTotal = sm.st.PG.Total
					}
					maxAcq = max(maxAcq, sm.st.PG.Acquired)
				}
			}
			bs, as := ph.before[nd.Name].st, ph.after[nd.Name].st
			pool, newConns, reseeds := "?", "?", "?"
			if bs != nil && as != nil {
				pool = fmt.Sprintf("%d / %d / %d", bs.PG.Total, minTotal, as.PG.Total)
				newConns = fmt.Sprint(as.PG.New - bs.PG.New)
				reseeds = fmt.Sprintf("%d (%d, %d)", as.Hotlist.Reseeds-bs.Hotlist.Reseeds, as.Hotlist.Churn-bs.Hotlist.Churn,
					as.Hotlist.ReseedAdded-bs.Hotlist.ReseedAdded)
			}
			fmt.Fprintf(&b, "| %s | %v | %v | %v / %v | %d of %d samples | %s | %d | %s | %s |\n", nd.Name,
				push.Round(time.Millisecond), pop.Round(time.Millisecond),
				(push - ph.primary).Round(time.Millisecond), (pop - ph.primary).Round(time.Millisecond),
				h503, len(during), pool, maxAcq, newConns, reseeds)
		}
	}
	t.Log(b.String())
}

// fmtCodes prints status code counts in code order, e.g. "201×120 503×14".
func fmtCodes(m map[int]int) string { return fmtCounts(m, "%d×%d", " ") }
