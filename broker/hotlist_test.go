package broker_test

import (
	"fmt"
	"testing"
	"time"

	"queen-node/broker"
	"queen-node/hotlist"
	"queen-node/internal/nodetest"
)

func hotOn(reseed time.Duration) nodetest.Option {
	return func(c *broker.Config) {
		c.Hotlist.Enabled = true
		c.Hotlist.ReseedInterval = reseed
	}
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The first pop of a name goes through the SQL path and allocates no ring;
// the ring exists from the second pop on (the group marker is committed).
func TestRingRegisteredAfterGroupSeeded(t *testing.T) {
	t.Parallel()
	n := nodetest.Start(t, hotOn(time.Minute))
	key := hotlist.KeyOf(broker.DefaultTenant, "reg")
	pop(t, n, "reg", "batch=1&consumerGroup=g")
	if n.Broker.Hotlist().Lookup(key, "g") != nil {
		t.Fatal("a ring was registered on the first pop of a name")
	}
	pop(t, n, "reg", "batch=1&consumerGroup=g")
	if n.Broker.Hotlist().Lookup(key, "g") == nil {
		t.Fatal("no ring after the group marker was committed")
	}
}

// An idle queue costs PostgreSQL nothing: a parked long-poll on a warm,
// empty ring issues no claim SQL while it re-polls on its own back-off.
// With the hot-list off, the same park does ask PostgreSQL.
func TestIdleLongPollIssuesNoSQL(t *testing.T) {
	t.Parallel()
	for _, hot := range []bool{true, false} {
		t.Run(fmt.Sprintf("hotlist=%v", hot), func(t *testing.T) {
			t.Parallel()
			n := nodetest.Start(t, func(c *broker.Config) {
				c.Hotlist.Enabled = hot
				c.PopBackoffMax = 100 * time.Millisecond
			})
			pop(t, n, "idle-q", "batch=1")
			pop(t, n, "idle-q", "batch=1") // registers and reseeds the ring
			before := n.Broker.Stats().PopSQLCalls.Load()
			r := n.Do(t, "GET", "/api/v1/pop/queue/idle-q?wait=true&timeout=1500", nil)
			if r.Status != 204 {
				t.Fatalf("want 204, got %d", r.Status)
			}
			calls := n.Broker.Stats().PopSQLCalls.Load() - before
			if hot && calls != 0 {
				t.Fatalf("hot-list on: a parked long-poll on an idle queue made %d claim calls", calls)
			}
			if !hot && calls < 3 {
				t.Fatalf("hot-list off: expected the re-polls to ask PostgreSQL, got %d calls", calls)
			}
		})
	}
}

// A push on another node reaches a consumer parked on this one without any
// hint (there is no mesh here): the reseed floor finds it within one
// interval.
func TestReseedFloorDeliversPushFromAnotherNode(t *testing.T) {
	t.Parallel()
	const interval = 600 * time.Millisecond
	a := nodetest.Start(t, hotOn(interval))
	b := nodetest.StartOn(t, a.DBURL, hotOn(interval))
	pop(t, b, "floor", "batch=1")
	pop(t, b, "floor", "batch=1") // ring registered on B
	done := make(chan time.Time, 1)
	go func() {
		ms, _ := pop(t, b, "floor", "batch=1&wait=true&timeout=10000")
		if len(ms) != 1 {
			t.Errorf("want the message, got %v", ms)
		}
		done <- time.Now()
	}()
	time.Sleep(100 * time.Millisecond)
	pushed := time.Now()
	push(t, a, "floor", "Default", "from A")
	select {
	case at := <-done:
		// bound: one reseed interval, the 2 s floor tick, and a margin
		if d := at.Sub(pushed); d > interval+2*time.Second+time.Second {
			t.Fatalf("delivered after %v", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the reseed floor never delivered the push from node A")
	}
	if st := b.Broker.Hotlist().Stats(); st.ReseedAdded == 0 {
		t.Fatalf("the delivery should be a floor repair: %+v", st)
	}
}

// A backlog consumed in batches: each ack promotes the partition back to
// ready (it is still pending), so a parked consumer gets the next batch at
// once instead of at the lease-park cap or the reseed floor.
func TestPromoteOnAckServesBacklogWithoutStall(t *testing.T) {
	t.Parallel()
	n := nodetest.Start(t, hotOn(time.Minute))
	pop(t, n, "backlog", "batch=1")
	pop(t, n, "backlog", "batch=1")
	for i := 0; i < 10; i++ {
		ps := make([]any, 100)
		for j := range ps {
			ps[j] = i*100 + j
		}
		push(t, n, "backlog", "Default", ps...)
	}
	start := time.Now()
	got := 0
	for got < 1000 {
		ms, _ := pop(t, n, "backlog", "batch=100&wait=true&timeout=5000")
		if ms == nil {
			t.Fatalf("stalled after %d of 1000", got)
		}
		if ms[0]["data"] != float64(got) {
			t.Fatalf("order: got %v at %d", ms[0]["data"], got)
		}
		got += len(ms)
		ackAll(t, n, "", "completed", ms)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("10 batches took %v: the ack promote did not keep the partition ready", d)
	}
	// drained and acked with nothing marked since: the entry is cleared
	waitFor(t, 3*time.Second, "the ring to clear", func() bool {
		st := n.Broker.Hotlist().Stats()
		return st.Ready == 0 && st.Inflight == 0
	})
}

// Ring memory returns to its baseline after a flood of random queue names:
// the idle sweep drops queues nobody touched for a full interval.
func TestIdleSweepBoundsRingMemory(t *testing.T) {
	t.Parallel()
	n := nodetest.Start(t, func(c *broker.Config) {
		c.Hotlist.Enabled = true
		c.Hotlist.IdleSweep = 200 * time.Millisecond
	})
	h := n.Broker.Hotlist()
	for i := 0; i < 30; i++ {
		q := fmt.Sprintf("flood-%d", i)
		pop(t, n, q, "batch=1")
		pop(t, n, q, "batch=1")
	}
	if h.Stats().Rings == 0 {
		t.Fatal("expected rings after the flood")
	}
	waitFor(t, 5*time.Second, "the sweep to drop every idle ring", func() bool {
		return h.Stats().Rings == 0 && h.Stats().Queues == 0
	})
	if h.Stats().Swept < 30 {
		t.Fatalf("swept counter: %+v", h.Stats())
	}
}

// Deleting a group drops its ring, so a re-consume after the delete is not
// hidden by a stale ring until the next floor.
func TestDeleteGroupDropsRing(t *testing.T) {
	t.Parallel()
	n := nodetest.Start(t, hotOn(time.Minute))
	push(t, n, "dg", "Default", 1, 2)
	pop(t, n, "dg", "batch=1&consumerGroup=g")
	ms, _ := pop(t, n, "dg", "batch=10&consumerGroup=g")
	ackAll(t, n, "g", "completed", ms)
	key := hotlist.KeyOf(broker.DefaultTenant, "dg")
	if n.Broker.Hotlist().Lookup(key, "g") == nil {
		t.Fatal("ring missing")
	}
	n.Do(t, "DELETE", "/api/v1/consumer-groups/g?deleteMetadata=true", nil)
	if n.Broker.Hotlist().Lookup(key, "g") != nil {
		t.Fatal("the group's ring survived its deletion")
	}
	ms = popUntil(t, n, "dg", "batch=10&consumerGroup=g", 3*time.Second)
	if len(ms) != 2 {
		t.Fatalf("re-consume after delete: want 2, got %d", len(ms))
	}
}

// Repeated failed acks for an already released lease are no-ops (API 2.6):
// they must not burn retries, dead-letter early, or move the cursor past
// messages nobody resolved.
func TestFailedAcksAfterReleaseAreNoOps(t *testing.T) {
	t.Parallel()
	n := nodetest.Start(t)
	configure(t, n, "fa", msg{"retryLimit": 3})
	push(t, n, "fa", "Default", 1, 2, 3, 4)
	ms, _ := pop(t, n, "fa", "batch=4")
	for i, m := range ms {
		r := n.Do(t, "POST", "/api/v1/ack", msg{"transactionId": m["transactionId"], "partitionId": m["partitionId"], "status": "failed"})
		a := r.Arr(t)[0]
		if a["success"] != true || a["dlq"] != false {
			t.Fatalf("failed ack %d: %v", i, a)
		}
	}
	again, _ := pop(t, n, "fa", "batch=10")
	if len(again) != 4 || again[0]["retryCount"] != 1.0 {
		t.Fatalf("want all 4 redelivered after one retry, got %d: %v (retryCount %v)", len(again), payloads(again), again[0]["retryCount"])
	}
	if r := n.Do(t, "GET", "/api/v1/dlq?queue=fa", nil).Obj(t); r["total"] != 0.0 {
		t.Fatalf("nothing may be dead-lettered: %v", r)
	}
}

// A wait=false pop sees a committed push even when the ring is full of
// lease-held partitions that fill every probe round.
func TestWaitFalseSeesPushBehindManyLeasedCandidates(t *testing.T) {
	t.Parallel()
	n := nodetest.Start(t, hotOn(time.Minute))
	items := make([]msg, 200)
	for i := range items {
		items[i] = msg{"queue": "crowd", "partition": fmt.Sprintf("p%03d", i), "payload": i}
	}
	pushItems(t, n, items)
	pop(t, n, "crowd", "batch=1")
	for i := 0; i < 199; i++ { // 200 live leases, one per partition
		if ms, _ := pop(t, n, "crowd", "batch=1"); ms == nil {
			t.Fatalf("pop %d found nothing", i)
		}
	}
	time.Sleep(1200 * time.Millisecond) // lease parks (capped at 1 s) come back as ready
	push(t, n, "crowd", "zzz", "fresh")
	ms, _ := pop(t, n, "crowd", "batch=1&wait=false")
	if len(ms) != 1 || ms[0]["data"] != "fresh" {
		t.Fatalf("wait=false pop missed a committed push: %v", ms)
	}
}

// TestIdleNodeWakesAtOnce: a pop parked on an idle node is woken by a local
// push at once, not at the next tick of the quiet-mark wake loop. The tick is
// 3 s here and the parked pop's own re-polls are off (10 s back-off), so a
// fixed-cadence loop would answer after up to 3 s.
func TestIdleNodeWakesAtOnce(t *testing.T) {
	n := nodetest.Start(t, func(c *broker.Config) {
		c.Hotlist.WakeTick = 3 * time.Second
		c.PopBackoffMin, c.PopBackoffMax = 10*time.Second, 10*time.Second
	})
	q := "wake-idle"
	push(t, n, q, "p0", 1)
	// Two pops: the first registers the group's ring, the second drains it.
	popUntil(t, n, q, "batch=10&autoAck=true", 5*time.Second)
	if ms, _ := pop(t, n, q, "batch=10&autoAck=true"); ms != nil {
		t.Fatalf("queue not drained: %v", ms)
	}
	for i := 0; i < 3; i++ {
		time.Sleep(3100 * time.Millisecond) // idle for longer than the tick
		got := make(chan time.Time, 1)
		go func() {
			r := n.Do(t, "GET", "/api/v1/pop/queue/"+q+"?batch=10&autoAck=true&wait=true&timeout=8000", nil)
			if r.Status == 200 {
				got <- time.Now()
			}
			close(got)
		}()
		waitFor(t, 5*time.Second, "the pop to park", func() bool { return n.Broker.Parked() == 1 })
		sent := time.Now()
		push(t, n, q, "p0", i)
		at, ok := <-got
		if !ok {
			t.Fatalf("round %d: the parked pop got nothing", i)
		}
		if d := at.Sub(sent); d > time.Second {
			t.Fatalf("round %d: woken %v after the push on an idle node (tick 3 s)", i, d)
		}
	}
}

// Every reseed walk the broker claims is ended: after cold-ring reseeds,
// a seek's forced reseed, floor reseeds and Close, none is open
// (hotlist.Walk; docs/hotlist.md, "Reseed walks").
func TestNoReseedWalkLeftOpen(t *testing.T) {
	t.Parallel()
	n := nodetest.Start(t, hotOn(100*time.Millisecond))
	for _, p := range []string{"a", "b", "c"} {
		push(t, n, "walks", p, msg{"i": p})
	}
	pop(t, n, "walks", "batch=1&consumerGroup=g") // SQL path: registers no ring
	for range 3 {
		pop(t, n, "walks", "batch=1&consumerGroup=g&autoAck=true") // cold reseed, then the ring
	}
	r := n.Do(t, "POST", "/api/v1/consumer-groups/g/queues/walks/seek", msg{"timestamp": "2000-01-01T00:00:00Z"})
	if r.Status != 200 {
		t.Fatalf("seek: %d %s", r.Status, r.Body)
	}
	hot := n.Broker.Hotlist()
	waitFor(t, 5*time.Second, "a floor reseed", func() bool { return hot.Stats().Reseeds >= 3 })
	n.Broker.Close()
	if open := hot.OpenWalks(); open != 0 {
		t.Fatalf("%d reseed walks left open", open)
	}
}
