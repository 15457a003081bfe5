package broker_test

import (
	"sort"
	"testing"
	"time"

	"queen-node/broker"
	"queen-node/internal/nodetest"
)

// A push on node A wakes a consumer parked on node B through a mesh hint,
// well before B's own back-off or the reseed floor would have.
func TestHintWakesConsumerOnAnotherNode(t *testing.T) {
	t.Parallel()
	nodes := nodetest.StartCluster(t, 2, func(c *broker.Config) {
		c.Hotlist.ReseedInterval = time.Hour // the floor must not be what delivers
		c.PopBackoffMax = 10 * time.Second   // nor the parked pop's own re-poll
		c.PopBackoffMin = 10 * time.Second
	})
	a, b := nodes[0], nodes[1]
	pop(t, b, "xwake", "batch=1&consumerGroup=g")
	pop(t, b, "xwake", "batch=1&consumerGroup=g") // ring registered and warm on B
	var lat []time.Duration
	for i := 0; i < 20; i++ {
		done := make(chan time.Time, 1)
		go func() {
			ms, _ := pop(t, b, "xwake", "batch=1&wait=true&timeout=8000&consumerGroup=g")
			if len(ms) == 1 {
				ackAll(t, b, "g", "completed", ms)
			}
			done <- time.Now()
		}()
		waitFor(t, 5*time.Second, "the pop to park on B", func() bool { return b.Broker.Parked() == 1 })
		pushed := time.Now()
		push(t, a, "xwake", "Default", i)
		select {
		case at := <-done:
			lat = append(lat, at.Sub(pushed))
		case <-time.After(9 * time.Second):
			t.Fatalf("trial %d: the hint did not wake B", i)
		}
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	t.Logf("cross-node wake latency over %d trials: p50 %v p90 %v max %v", len(lat), lat[len(lat)/2], lat[len(lat)*9/10], lat[len(lat)-1])
	if lat[len(lat)-1] > 2*time.Second {
		t.Fatalf("slowest wake %v", lat[len(lat)-1])
	}
	sa := a.Broker.Snapshot()
	sb := b.Broker.Snapshot()
	if sa.Hotlist.MarksLocal < 20 || sa.Mesh.HintsSent < 20 || sb.Mesh.HintsReceived < 20 || sb.Hotlist.MarksRemote < 20 {
		t.Fatalf("status counters: A %+v %+v / B %+v %+v", sa.Hotlist, sa.Mesh, sb.Hotlist, sb.Mesh)
	}
	if sb.Mesh.HintsSent != 0 {
		t.Fatalf("B re-broadcast hints: %+v", sb.Mesh)
	}
}

// After a push on node A and a pop on node B, both /status documents moved
// as they should: marks_local and hints_sent on A, hints_received and
// marks_remote on B (issue 5's multi-node check, through real HTTP).
func TestStatusCountersAcrossTwoNodes(t *testing.T) {
	t.Parallel()
	nodes := nodetest.StartCluster(t, 2)
	a, b := nodes[0], nodes[1]
	pop(t, b, "st", "batch=1")
	pop(t, b, "st", "batch=1") // B has a ring for the queue
	push(t, a, "st", "Default", "x")
	ms := popUntil(t, b, "st", "batch=1&wait=true&timeout=3000", 5*time.Second)
	ackAll(t, b, "", "completed", ms)
	get := func(n *nodetest.Node) map[string]any {
		r := n.Do(t, "GET", "/status", nil)
		if r.Status != 200 {
			t.Fatalf("status: %d", r.Status)
		}
		return r.Obj(t)
	}
	num := func(doc map[string]any, section, field string) float64 {
		return doc[section].(map[string]any)[field].(float64)
	}
	waitFor(t, 5*time.Second, "B's counters", func() bool {
		sb := get(b)
		return num(sb, "mesh", "hints_received") >= 1 && num(sb, "hotlist", "marks_remote") >= 1
	})
	sa, sb := get(a), get(b)
	if num(sa, "hotlist", "marks_local") < 1 || num(sa, "mesh", "hints_sent") < 1 {
		t.Fatalf("A: hotlist %v mesh %v", sa["hotlist"], sa["mesh"])
	}
	if num(sb, "mesh", "hints_sent") != 0 || num(sb, "requests", "pops_with_messages") < 1 {
		t.Fatalf("B: mesh %v requests %v", sb["mesh"], sb["requests"])
	}
	members := sa["mesh"].(map[string]any)["members"].([]any)
	if len(members) != 2 {
		t.Fatalf("A knows %d members: %v", len(members), members)
	}
	for _, m := range members {
		mm := m.(map[string]any)
		for _, f := range []string{"name", "addr", "http_addr", "state"} {
			if s, _ := mm[f].(string); s == "" {
				t.Fatalf("member without %s: %v", f, mm)
			}
		}
	}
}
