package streamrun_test

// End to end: the runner (which behaves like Queen's Go streams client)
// against a real node and PostgreSQL, for the behaviours docs/api.md
// "Streams" promises: stateless operators to a sink, tumbling windows with
// idle flush, a token-bucket gate with partial acks and in-order
// redelivery, and exactly-once state across runner kills and a node restart.

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"queen-node/internal/nodetest"
	"queen-node/internal/pgtest"
	"queen-node/internal/streamrun"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// push sends items to queue/partition, failing the test otherwise.
func push(t *testing.T, n *nodetest.Node, queue, partition string, payloads ...map[string]any) {
	t.Helper()
	items := make([]map[string]any, len(payloads))
	for i, p := range payloads {
		items[i] = map[string]any{"queue": queue, "partition": partition, "payload": p}
	}
	if r := n.Do(t, "POST", "/api/v1/push", map[string]any{"items": items}); r.Status != 201 {
		t.Fatalf("push: %d %s", r.Status, r.Body)
	}
}

type sinkMsg struct {
	Partition string
	Data      map[string]any
}

// drain pops queue with a fresh group until want messages arrived or the
// deadline passed, then checks nothing more comes; it returns them in
// arrival order.
func drain(t *testing.T, n *nodetest.Node, queue string, want int, within time.Duration) []sinkMsg {
	t.Helper()
	group := "drain-" + fmt.Sprint(rand.Int64())
	var got []sinkMsg
	deadline := time.Now().Add(within)
	extra := false
	for {
		if len(got) >= want {
			if extra {
				return got
			}
			extra = true // one more short pop: nothing beyond want
		} else if time.Now().After(deadline) {
			t.Fatalf("sink %s: %d of %d messages within %v", queue, len(got), want, within)
		}
		r := n.Do(t, "GET", "/api/v1/pop/queue/"+url.PathEscape(queue)+"?batch=100&wait=true&timeout=300&autoAck=true&consumerGroup="+group, nil)
		if r.Status == 204 {
			continue
		}
		var out struct {
			Messages []struct {
				Partition string         `json:"partition"`
				Data      map[string]any `json:"data"`
			} `json:"messages"`
		}
		r.JSON(t, &out)
		for _, m := range out.Messages {
			got = append(got, sinkMsg{m.Partition, m.Data})
		}
		if extra && len(got) > want {
			t.Fatalf("sink %s: %d messages, want exactly %d", queue, len(got), want)
		}
	}
}

func run(t *testing.T, opt streamrun.Options, p streamrun.Processor) (*streamrun.Runner, func()) {
	t.Helper()
	rn := streamrun.New(opt, p)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rn.Run(ctx) }()
	stop := func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("runner: %v", err)
		}
	}
	t.Cleanup(func() { cancel() })
	return rn, stop
}

func noErrors(t *testing.T, rn *streamrun.Runner) {
	t.Helper()
	if n := rn.Stats.Errors.Load(); n != 0 {
		t.Fatalf("%d runner errors: %v", n, rn.LastErrors())
	}
}

// mapFilter drops heartbeats and marks the rest; fan copies each message.
type mapFilter struct{ fan int }

func (f mapFilter) Process(_ string, _ map[string]json.RawMessage, msgs []streamrun.Message) ([]streamrun.StateOp, []streamrun.PushItem, int) {
	var push []streamrun.PushItem
	for _, m := range msgs {
		if m.Data["type"] == "heartbeat" {
			continue
		}
		for c := 0; c < max(1, f.fan); c++ {
			p := map[string]any{"marked": true, "copy": c}
			for k, v := range m.Data {
				p[k] = v
			}
			push = append(push, streamrun.PushItem{Payload: p})
		}
	}
	return nil, push, len(msgs)
}

func TestStreamMapFilterSink(t *testing.T) {
	n := nodetest.Start(t)
	var payloads []map[string]any
	for i := range 30 {
		typ := "order"
		if i%3 == 0 {
			typ = "heartbeat"
		}
		payloads = append(payloads, map[string]any{"type": typ, "i": i})
	}
	push(t, n, "mf.src", "Default", payloads...)
	rn, stop := run(t, streamrun.Options{URL: n.URL, Name: "mf", Source: "mf.src", Sink: "mf.out", Reset: true, Batch: 7}, mapFilter{})
	got := drain(t, n, "mf.out", 20, 10*time.Second)
	stop()
	noErrors(t, rn)
	seen := map[float64]bool{}
	for _, m := range got {
		if m.Data["marked"] != true || m.Data["type"] == "heartbeat" || m.Partition != "Default" {
			t.Fatalf("sink message %+v", m)
		}
		seen[m.Data["i"].(float64)] = true
	}
	if len(seen) != 20 {
		t.Fatalf("%d distinct messages in the sink, want 20", len(seen))
	}
}

func TestStreamFlatMapFanout(t *testing.T) {
	n := nodetest.Start(t)
	for i := range 5 {
		push(t, n, "fm.src", "p"+fmt.Sprint(i%2), map[string]any{"i": i})
	}
	rn, stop := run(t, streamrun.Options{URL: n.URL, Name: "fm", Source: "fm.src", Sink: "fm.out", Reset: true}, mapFilter{fan: 4})
	got := drain(t, n, "fm.out", 20, 8*time.Second)
	stop()
	noErrors(t, rn)
	for _, m := range got {
		// the sink partition defaults to the source partition's name
		if want := "p" + fmt.Sprint(int(m.Data["i"].(float64))%2); m.Partition != want {
			t.Fatalf("sink partition %q, want %q", m.Partition, want)
		}
	}
}

// foreach captures every message; it has no sink (no sink_queue, empty
// push_items).
type foreach struct {
	mu  sync.Mutex
	got map[float64]int
}

func (f *foreach) Process(_ string, _ map[string]json.RawMessage, msgs []streamrun.Message) ([]streamrun.StateOp, []streamrun.PushItem, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, m := range msgs {
		f.got[m.Data["i"].(float64)]++
	}
	return nil, nil, len(msgs)
}

func TestStreamForeachCapturesAll(t *testing.T) {
	n := nodetest.Start(t)
	for i := range 12 {
		push(t, n, "fe.src", "p"+fmt.Sprint(i%3), map[string]any{"i": i})
	}
	f := &foreach{got: map[float64]int{}}
	rn, stop := run(t, streamrun.Options{URL: n.URL, Name: "fe", Source: "fe.src", Reset: true, Batch: 5}, f)
	deadline := time.Now().Add(5 * time.Second)
	for {
		f.mu.Lock()
		got := len(f.got)
		f.mu.Unlock()
		if got == 12 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("captured %d of 12 within 5 s", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	noErrors(t, rn)
	for i, c := range f.got {
		if c != 1 {
			t.Fatalf("message %v captured %d times", i, c)
		}
	}
}

// tumbling sums data.v per window of size, keyed as Queen's client keys
// them: "tumb␟<ISO windowStart>␟<key>" → {acc, windowStart, windowEnd}.
type tumbling struct{ size time.Duration }

const sep = "\u001f"

type window struct {
	Acc         struct{ Count, Sum float64 } `json:"acc"`
	WindowStart int64                        `json:"windowStart"`
	WindowEnd   int64                        `json:"windowEnd"`
}

func (w *tumbling) FlushPrefix() string { return "tumb" + sep }

func (w *tumbling) Process(_ string, state map[string]json.RawMessage, msgs []streamrun.Message) ([]streamrun.StateOp, []streamrun.PushItem, int) {
	wins := map[string]*window{}
	for _, m := range msgs {
		start := m.CreatedAt.Truncate(w.size)
		key := "tumb" + sep + start.UTC().Format(time.RFC3339Nano) + sep + "all"
		win := wins[key]
		if win == nil {
			win = &window{WindowStart: start.UnixMilli(), WindowEnd: start.Add(w.size).UnixMilli()}
			if raw, ok := state[key]; ok {
				_ = json.Unmarshal(raw, win)
			}
			wins[key] = win
		}
		win.Acc.Count++
		win.Acc.Sum += m.Data["v"].(float64)
	}
	var ops []streamrun.StateOp
	var push []streamrun.PushItem
	now := time.Now().UnixMilli()
	for key, win := range wins {
		if win.WindowEnd <= now { // closed already: emit now
			push = append(push, w.emit(win))
			ops = append(ops, streamrun.StateOp{Type: "delete", Key: key})
		} else {
			ops = append(ops, streamrun.StateOp{Type: "upsert", Key: key, Value: win})
		}
	}
	return ops, push, len(msgs)
}

func (w *tumbling) Flush(_ string, _ time.Time, ripe map[string]json.RawMessage) ([]streamrun.StateOp, []streamrun.PushItem) {
	var ops []streamrun.StateOp
	var push []streamrun.PushItem
	for key, raw := range ripe {
		var win window
		if err := json.Unmarshal(raw, &win); err != nil {
			continue
		}
		push = append(push, w.emit(&win))
		ops = append(ops, streamrun.StateOp{Type: "delete", Key: key})
	}
	return ops, push
}

func (w *tumbling) emit(win *window) streamrun.PushItem {
	return streamrun.PushItem{Payload: map[string]any{"count": win.Acc.Count, "sum": win.Acc.Sum, "windowStart": win.WindowStart}}
}

// TestTumblingWindowSumIdleFlush: 8 messages 1.1 s apart into 2 s windows
// with an 800 ms idle flush. The last window is closed by an ack-less flush
// cycle only (no message follows it), through the ripe filter.
func TestTumblingWindowSumIdleFlush(t *testing.T) {
	n := nodetest.Start(t)
	w := &tumbling{size: 2 * time.Second}
	rn, stop := run(t, streamrun.Options{URL: n.URL, Name: "tumb", Source: "tumb.src", Sink: "tumb.out",
		Reset: true, FlushEvery: 800 * time.Millisecond}, w)
	tick := time.NewTicker(1100 * time.Millisecond)
	for i := 1; i <= 8; i++ {
		push(t, n, "tumb.src", "one", map[string]any{"v": i})
		if i < 8 {
			<-tick.C // the test's input schedule, not synchronisation
		}
	}
	tick.Stop()
	// Poll the sink until the 8 messages are accounted for.
	group := "check"
	count, sum, emits := 0.0, 0.0, 0
	deadline := time.Now().Add(8 * time.Second)
	for count < 8 && time.Now().Before(deadline) {
		r := n.Do(t, "GET", "/api/v1/pop/queue/tumb.out?batch=100&wait=true&timeout=300&autoAck=true&consumerGroup="+group, nil)
		if r.Status != 200 {
			continue
		}
		var out struct {
			Messages []struct{ Data map[string]any } `json:"messages"`
		}
		r.JSON(t, &out)
		for _, m := range out.Messages {
			count += m.Data["count"].(float64)
			sum += m.Data["sum"].(float64)
			emits++
		}
	}
	stop()
	noErrors(t, rn)
	if count != 8 || sum != 36 || emits < 3 {
		t.Fatalf("windows: count %v sum %v in %d emits; want 8, 36, >= 3", count, sum, emits)
	}
	if rn.Stats.FlushCycles.Load() < 1 {
		t.Fatal("no idle-flush (ack-less) cycle happened")
	}
}

// gate is a token bucket per source partition: capacity tokens, refill per
// second. It admits a prefix of each batch; the rest waits for the lease to
// expire (the partial ack keeps it).
type gate struct {
	capacity, refill float64
	mu               sync.Mutex
	allows           int
}

type bucket struct {
	Tokens float64 `json:"tokens"`
	Last   int64   `json:"last"`
}

func (g *gate) Process(pid string, state map[string]json.RawMessage, msgs []streamrun.Message) ([]streamrun.StateOp, []streamrun.PushItem, int) {
	b := bucket{Tokens: g.capacity, Last: time.Now().UnixMilli()}
	if raw, ok := state[pid]; ok {
		_ = json.Unmarshal(raw, &b)
	}
	now := time.Now().UnixMilli()
	b.Tokens = math.Min(g.capacity, b.Tokens+float64(now-b.Last)*g.refill/1000)
	b.Last = now
	allowed := min(len(msgs), int(b.Tokens))
	if allowed == 0 {
		return nil, nil, 0
	}
	b.Tokens -= float64(allowed)
	var push []streamrun.PushItem
	for _, m := range msgs[:allowed] {
		push = append(push, streamrun.PushItem{Payload: map[string]any{"tenant": m.Data["tenant"], "seq": m.Data["seq"]}})
	}
	g.mu.Lock()
	g.allows += allowed
	g.mu.Unlock()
	return []streamrun.StateOp{{Type: "upsert", Key: pid, Value: b}}, push, allowed
}

// TestGateTokenBucket: 2 partitions × 30 through a token bucket per
// partition, batches of 10, 2 partitions per pop. "queen" is the Queen
// suite's setting (capacity 10, refill 20/s, 2 s lease); "tight" (capacity
// 5, refill 5/s, 1 s lease) makes most cycles partial acks that keep the
// lease, the tail coming back after expiry. Either way every message
// reaches the sink once, in order per partition, and the gate admits
// exactly 60 (no admitted message is redelivered, no cycle fails).
func TestGateTokenBucket(t *testing.T) {
	for _, tc := range []struct {
		name             string
		capacity, refill float64
		lease            int
		mustPartial      bool
	}{
		{"queen", 10, 20, 2, false},
		{"tight", 5, 5, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := nodetest.Start(t)
			if r := n.Do(t, "POST", "/api/v1/configure", map[string]any{"queue": "gate.src",
				"options": map[string]any{"leaseTime": tc.lease, "retryLimit": 100}}); r.Status != 200 {
				t.Fatalf("configure: %d %s", r.Status, r.Body)
			}
			for _, tenant := range []string{"a", "b"} {
				var ps []map[string]any
				for i := 1; i <= 30; i++ {
					ps = append(ps, map[string]any{"tenant": tenant, "seq": i})
				}
				push(t, n, "gate.src", tenant, ps...)
			}
			g := &gate{capacity: tc.capacity, refill: tc.refill}
			rn, stop := run(t, streamrun.Options{URL: n.URL, Name: "gate", Source: "gate.src", Sink: "gate.out",
				Reset: true, Batch: 10, Partitions: 2}, g)
			got := drain(t, n, "gate.out", 60, 20*time.Second)
			stop()
			noErrors(t, rn)
			last := map[string]float64{}
			for _, m := range got {
				tn, seq := m.Data["tenant"].(string), m.Data["seq"].(float64)
				if seq != last[tn]+1 {
					t.Fatalf("tenant %s: seq %v after %v (duplicate or reordering)", tn, seq, last[tn])
				}
				last[tn] = seq
			}
			g.mu.Lock()
			defer g.mu.Unlock()
			if g.allows != 60 {
				t.Fatalf("GateAllowsTotal = %d, want exactly 60", g.allows)
			}
			t.Logf("%d cycles, %d partial acks", rn.Stats.Cycles.Load(), rn.Stats.PartialAcks.Load())
			if tc.mustPartial && rn.Stats.PartialAcks.Load() == 0 {
				t.Fatal("no partial ack happened: the test did not exercise them")
			}
		})
	}
}

// counter keeps, per partition, the count and sum of data.n in state and
// forwards every message to the sink.
type counter struct{}

type tally struct {
	Count int `json:"count"`
	Sum   int `json:"sum"`
}

func (counter) Process(_ string, state map[string]json.RawMessage, msgs []streamrun.Message) ([]streamrun.StateOp, []streamrun.PushItem, int) {
	var c tally
	if raw, ok := state["tally"]; ok {
		_ = json.Unmarshal(raw, &c)
	}
	var push []streamrun.PushItem
	for _, m := range msgs {
		v := int(m.Data["n"].(float64))
		c.Count++
		c.Sum += v
		push = append(push, streamrun.PushItem{Payload: map[string]any{"n": v}})
	}
	return []streamrun.StateOp{{Type: "upsert", Key: "tally", Value: c}}, push, len(msgs)
}

// slowCounter is counter with 3 ms of work per message, as a processor
// that does something would have: no runner can then finish the 200
// messages inside a random kill point (at most 220 ms), so kills and the
// restart land while work remains, on a fast machine too (CI once saw two
// runners finish everything before the restart was due).
type slowCounter struct{ counter }

func (c slowCounter) Process(q string, state map[string]json.RawMessage, msgs []streamrun.Message) ([]streamrun.StateOp, []streamrun.PushItem, int) {
	time.Sleep(time.Duration(len(msgs)) * 3 * time.Millisecond)
	return c.counter.Process(q, state, msgs)
}

// TestStreamExactlyOnceAcrossKillsAndRestart kills the runner again and
// again at random points (including right after a cycle was sent, before
// its answer is read) and restarts the node on the same database midway.
// The state still counts every message exactly once, and the sink holds
// every message exactly once.
func TestStreamExactlyOnceAcrossKillsAndRestart(t *testing.T) {
	n := nodetest.Start(t)
	dbURL := n.DBURL
	if r := n.Do(t, "POST", "/api/v1/configure", map[string]any{"queue": "eo.src",
		"options": map[string]any{"leaseTime": 1}}); r.Status != 200 {
		t.Fatalf("configure: %d %s", r.Status, r.Body)
	}
	const per = 100
	want := map[string]tally{}
	for _, p := range []string{"x", "y"} {
		var ps []map[string]any
		for i := 1; i <= per; i++ {
			v := i
			if p == "y" {
				v = 1000 + i
			}
			ps = append(ps, map[string]any{"n": v})
			w := want[p]
			w.Count++
			w.Sum += v
			want[p] = w
		}
		push(t, n, "eo.src", p, ps...)
	}
	opt := streamrun.Options{URL: n.URL, Name: "eo", Source: "eo.src", Sink: "eo.out", Batch: 3, Partitions: 2}

	// progress reads the tallies through state/get.
	var queryID string
	pids := map[string]string{} // partition name -> id
	progress := func() int {
		total := 0
		for name, pid := range pids {
			r := n.Do(t, "POST", "/streams/v1/state/get", map[string]any{"query_id": queryID, "partition_id": pid, "keys": nil})
			if r.Status != 200 {
				t.Fatalf("state/get %s: %d %s", name, r.Status, r.Body)
			}
			var out struct{ Rows []struct{ Value tally } }
			r.JSON(t, &out)
			if len(out.Rows) == 1 {
				total += out.Rows[0].Value.Count
			}
		}
		return total
	}
	restarted := false
	kills, sentKills, progressed, restartedAt := 0, 0, 0, 0
	deadline := time.Now().Add(40 * time.Second)
	for {
		// The restart comes mid-way, or after a few kills at the latest
		// once some work is done, so it lands while work remains however
		// fast or slow the machine (checked below).
		restartNow := !restarted && (progressed >= per/2 || kills >= 4 && progressed > 0)
		ctx, cancel := context.WithCancel(context.Background())
		var once sync.Once
		var sentKill bool
		o := opt
		o.URL = n.URL
		// Every other runner is killed right after it sent a cycle (a third
		// of its cycles: the answer unread), with a 2 s bound in case it
		// sends none; the others at a random point. So both kinds of kill
		// happen however fast or loaded the machine is (a random point
		// alone came before the first send on a loaded machine).
		randomAt := time.Duration(20+rand.IntN(200)) * time.Millisecond // a random kill point
		killAt := randomAt
		if kills%2 == 0 {
			o.AfterSend = func() {
				if rand.IntN(3) == 0 {
					once.Do(func() { sentKill = true; cancel() })
				}
			}
			killAt = 2 * time.Second
		}
		rn := streamrun.New(o, slowCounter{})
		done := make(chan error, 1)
		go func() { done <- rn.Run(ctx) }()
		if restartNow {
			// Mid-way, the node stops under the running runner (its
			// in-flight pop or cycle is cut or drained), and comes back on
			// the same database; the runner is killed too.
			<-time.After(randomAt)
			stopCtx, c := context.WithTimeout(context.Background(), 10*time.Second)
			if err := n.Node.Stop(stopCtx); err != nil {
				t.Fatalf("stop node: %v", err)
			}
			c()
			once.Do(cancel)
			n = nodetest.StartOn(t, dbURL)
			restarted, restartedAt = true, progressed
		}
		timer := time.AfterFunc(killAt, func() { once.Do(cancel) })
		if err := <-done; err != nil {
			t.Fatalf("runner: %v", err)
		}
		timer.Stop()
		cancel()
		kills++
		if sentKill {
			sentKills++
		}
		if queryID == "" {
			queryID = rn.QueryID
		} else if rn.QueryID != "" && rn.QueryID != queryID {
			t.Fatalf("query_id changed: %s then %s", queryID, rn.QueryID)
		}
		if len(pids) == 0 {
			pids = partitionIDs(t, n, "eo.src")
		}
		if progressed = progress(); progressed == 2*per {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %d kills: %d of %d messages in state", kills, progressed, 2*per)
		}
	}
	if !restarted || restartedAt == 0 || restartedAt >= 2*per || sentKills == 0 || kills-sentKills == 0 {
		t.Fatalf("restarted %v (at %d of %d messages in state), %d kills right after a cycle was sent, %d at random times: not the scenario",
			restarted, restartedAt, 2*per, sentKills, kills-sentKills)
	}
	for name, pid := range pids {
		r := n.Do(t, "POST", "/streams/v1/state/get", map[string]any{"query_id": queryID, "partition_id": pid, "keys": []string{}})
		var out struct{ Rows []struct{ Value tally } }
		r.JSON(t, &out)
		if len(out.Rows) != 1 || out.Rows[0].Value != want[name] {
			t.Fatalf("partition %s: state %+v, want %+v", name, out.Rows, want[name])
		}
	}
	got := drain(t, n, "eo.out", 2*per, 10*time.Second)
	seen := map[int]bool{}
	for _, m := range got {
		v := int(m.Data["n"].(float64))
		if seen[v] {
			t.Fatalf("sink holds %d twice", v)
		}
		seen[v] = true
	}
	t.Logf("%d runner kills (%d right after a cycle was sent), node restarted once at %d of %d messages", kills, sentKills, restartedAt, 2*per)
}

// partitionIDs maps a queue's partition names to ids, through a peek pop
// of a throwaway group (autoAck, so it leaves no lease behind).
func partitionIDs(t *testing.T, n *nodetest.Node, queue string) map[string]string {
	t.Helper()
	out := map[string]string{}
	group := "ids-" + fmt.Sprint(rand.Int64())
	for _, p := range []string{"x", "y"} {
		r := n.Do(t, "GET", "/api/v1/pop/queue/"+queue+"/partition/"+p+"?batch=1&wait=false&autoAck=true&consumerGroup="+group, nil)
		if r.Status != 200 {
			t.Fatalf("pop %s: %d %s", p, r.Status, r.Body)
		}
		var res struct {
			Messages []struct {
				PartitionID string `json:"partitionId"`
			} `json:"messages"`
		}
		r.JSON(t, &res)
		out[p] = res.Messages[0].PartitionID
		if !strings.Contains(out[p], "-") {
			t.Fatalf("partition id %q", out[p])
		}
	}
	return out
}
