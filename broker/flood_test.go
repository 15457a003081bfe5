package broker_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"queen-node/broker"
	"queen-node/coalesce"
	"queen-node/internal/nodetest"
	"queen-node/mesh"
)

// Issue 9, item 11: a flood of remote marks naming partitions that do not
// exist (a peer's fake hints) must not keep a real message from a parked
// consumer: the fakes leave the ring in bulk instead of one empty probe
// each, and the real message arrives within seconds, far below the reseed
// floor (an hour here, so the periodic floor is not what delivers).
func TestFakeRemoteMarksDoNotStallARealMessage(t *testing.T) {
	t.Parallel()
	n := nodetest.Start(t, func(c *broker.Config) { c.Hotlist.ReseedInterval = time.Hour })
	const q, fakes = "flood", 120000
	pop(t, n, q, "batch=1&consumerGroup=g")
	pop(t, n, q, "batch=1&consumerGroup=g") // the ring is registered and warm
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel) // runs before the node stops: the long-poll ends quietly
	done := make(chan nodetest.Response, 1)
	go func() {
		done <- n.DoCtx(ctx, t, "GET", "/api/v1/pop/queue/"+q+"?batch=1&wait=true&timeout=60000&consumerGroup=g", nil)
	}()
	waitFor(t, 5*time.Second, "the consumer to park", func() bool { return n.Broker.Parked() == 1 })

	names := make([]string, fakes)
	for i := range names {
		names[i] = fmt.Sprintf("fake-%06d", i)
	}
	for i := 0; i < fakes; i += 1000 { // as a peer's frames would carry them
		n.Broker.HintsReceived(broker.DefaultTenant, q, names[i:i+1000])
	}
	pushed := time.Now()
	push(t, n, q, "real", "the real one")
	select {
	case r := <-done:
		if r.Status != 200 || !strings.Contains(string(r.Body), "the real one") {
			t.Fatalf("the parked consumer got %d %s", r.Status, r.Body)
		}
		t.Logf("the real message reached the parked consumer %v after the push, behind %d fake marks", time.Since(pushed), fakes)
	case <-time.After(15 * time.Second):
		st := n.Broker.Snapshot()
		t.Fatalf("the real message did not reach the parked consumer within 15 s: hotlist %+v", st.Hotlist)
	}
}

// Issue 9, item 11 (a), end to end: something that is not a member connects
// to a node's hint port and sends a well-formed frame; the stream is
// refused, nothing is marked, and /status counts it.
func TestNonMemberRefusedAtTheHintPort(t *testing.T) {
	t.Parallel()
	nodes := nodetest.StartCluster(t, 2)
	b := nodes[1]
	pop(t, b, "nm", "batch=1")
	pop(t, b, "nm", "batch=1") // b has a ring for the queue
	frames, err := mesh.EncodeFrames("mallory", []coalesce.Batch{{Tenant: broker.DefaultTenant, Queue: "nm", Partitions: []string{"fake"}}})
	if err != nil {
		t.Fatal(err)
	}
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.1.99")}, Timeout: 2 * time.Second}
	c, err := d.Dial("tcp", b.Mesh.HintAddr())
	if err != nil {
		t.Fatalf("dial the hint port: %v", err)
	}
	defer c.Close()
	wire := binary.BigEndian.AppendUint32(nil, uint32(len(frames[0])))
	_, _ = c.Write(append(wire, frames[0]...))
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || os.IsTimeout(err) {
		t.Fatalf("the hint port kept a non-member's stream open: %v", err)
	}
	doc := b.Do(t, "GET", "/status", nil).Obj(t)
	ms, hs := doc["mesh"].(map[string]any), doc["hotlist"].(map[string]any)
	if ms["inbound_refused_not_member"].(float64) != 1 || ms["frames_received"].(float64) != 0 || hs["marks_remote"].(float64) != 0 {
		t.Fatalf("status after a non-member's stream: mesh %v hotlist %v", ms, hs)
	}
}
