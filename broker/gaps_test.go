package broker_test

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"queen-node/internal/nodetest"
	"queen-node/node"
)

// Half the hint frames dropped (QUEEN_MESH_DROP_RATE 0.5), the reseed floor
// and the parked pop's own re-poll pushed out of the way: every push on A
// still reaches the consumer parked on B within a second or two, because B
// learns of each lost frame (the next frame's number or a heartbeat) and
// reseeds its parked ring early (docs/hotlist.md, "Early reseeds after lost
// hints").
func TestLostHintsHealedByEarlyReseed(t *testing.T) {
	t.Parallel()
	nodes := nodetest.StartClusterConfig(t, 2, func(c *node.Config) {
		c.Mesh.DropRate = 0.5
		c.Broker.Hotlist.ReseedInterval = time.Hour // the floor must not be what delivers
		c.Broker.PopBackoffMax = 10 * time.Second   // nor the parked pop's own re-poll
		c.Broker.PopBackoffMin = 10 * time.Second
	})
	a, b := nodes[0], nodes[1]
	pop(t, b, "xlost", "batch=1&consumerGroup=g")
	pop(t, b, "xlost", "batch=1&consumerGroup=g") // ring registered and warm on B
	var lat []time.Duration
	for i := 0; i < 20; i++ {
		done := make(chan time.Time, 1)
		go func() {
			ms, _ := pop(t, b, "xlost", "batch=1&wait=true&timeout=8000&consumerGroup=g")
			if len(ms) == 1 {
				ackAll(t, b, "g", "completed", ms)
			}
			done <- time.Now()
		}()
		waitFor(t, 5*time.Second, "the pop to park on B", func() bool { return b.Broker.Parked() == 1 })
		pushed := time.Now()
		push(t, a, "xlost", fmt.Sprintf("p%d", i), i)
		select {
		case at := <-done:
			lat = append(lat, at.Sub(pushed))
		case <-time.After(9 * time.Second):
			t.Fatalf("trial %d: the message did not reach B", i)
		}
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	sa, sb := a.Broker.Snapshot(), b.Broker.Snapshot()
	t.Logf("cross-node delivery over %d trials at drop rate 0.5: p50 %v p90 %v max %v; A dropped %d frames; B saw %d gaps, ran %d early reseeds (%d suppressed), dark time count %d sum %d ms",
		len(lat), lat[len(lat)/2], lat[len(lat)*9/10], lat[len(lat)-1], sa.Mesh.FramesDropped,
		sb.Mesh.GapsSeen, sb.Hotlist.EarlyReseeds, sb.Hotlist.EarlySuppressed, sb.Hotlist.DarkTime.Count, sb.Hotlist.DarkTime.SumMs)
	if lat[len(lat)-1] > 3*time.Second {
		t.Errorf("slowest delivery %v: a lost hint waited for something other than an early reseed", lat[len(lat)-1])
	}
	if sa.Mesh.FramesDropped == 0 || sb.Mesh.GapsSeen == 0 || sb.Hotlist.EarlyReseeds == 0 || sb.Hotlist.DarkTime.Count == 0 {
		t.Errorf("no loss healed by an early reseed: A %+v / B %+v %+v", sa.Mesh, sb.Mesh, sb.Hotlist)
	}
}
