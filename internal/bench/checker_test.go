package bench

import "testing"

// pushAll records n queued messages of producer 0, seq i in partition
// parts[i].
func pushAll(c *Checker, parts []int) {
	for i, p := range parts {
		c.Pushed(0, int64(i), p, true)
	}
}

func deliveries(parts []int, seqs ...int64) []Delivery {
	out := make([]Delivery, len(seqs))
	for i, s := range seqs {
		out[i] = Delivery{Producer: 0, Seq: s, Partition: parts[s]}
	}
	return out
}

func ackAll(c *Checker, g string, seqs ...int64) {
	for _, s := range seqs {
		c.Acked(g, 0, s)
	}
}

func TestCheckerExactlyOnceInOrder(t *testing.T) {
	parts := []int{0, 1, 0, 1}
	c := NewChecker(1, 2, []string{"g"}, false)
	pushAll(c, parts)
	c.Delivered("g", deliveries(parts, 0, 2))
	ackAll(c, "g", 0, 2)
	c.Delivered("g", deliveries(parts, 1, 3))
	ackAll(c, "g", 1, 3)
	res := c.Check()
	if !res.OK || res.Groups["g"].Delivered != 4 {
		t.Fatalf("want OK with 4 delivered, got %+v", res)
	}
}

func TestCheckerDetectsLoss(t *testing.T) {
	parts := []int{0, 0, 0}
	c := NewChecker(1, 1, []string{"g"}, false)
	pushAll(c, parts)
	c.Delivered("g", deliveries(parts, 0, 1))
	ackAll(c, "g", 0, 1)
	res := c.Check()
	if res.OK || res.Lost != 1 {
		t.Fatalf("want 1 lost, got %+v", res)
	}
}

func TestCheckerDetectsDuplicate(t *testing.T) {
	parts := []int{0, 0}
	c := NewChecker(1, 1, []string{"g"}, false)
	pushAll(c, parts)
	c.Delivered("g", deliveries(parts, 0, 1))
	ackAll(c, "g", 0, 1)
	c.Delivered("g", deliveries(parts, 1)) // acked, yet delivered and acked again
	ackAll(c, "g", 1)
	res := c.Check()
	if res.OK || res.Duplicates != 1 {
		t.Fatalf("want 1 duplicate, got %+v", res)
	}
}

func TestCheckerDetectsDuplicateWithAutoAck(t *testing.T) {
	parts := []int{0, 0}
	c := NewChecker(1, 1, []string{"g"}, true)
	pushAll(c, parts)
	c.Delivered("g", deliveries(parts, 0, 1))
	c.Delivered("g", deliveries(parts, 1))
	res := c.Check()
	if res.OK || res.Duplicates != 1 {
		t.Fatalf("want 1 duplicate, got %+v", res)
	}
}

func TestCheckerRedeliveryIsNotAnError(t *testing.T) {
	parts := []int{0, 0}
	c := NewChecker(1, 1, []string{"g"}, false)
	pushAll(c, parts)
	c.Delivered("g", deliveries(parts, 0, 1)) // lease expires, ack never lands
	c.Delivered("g", deliveries(parts, 0, 1))
	ackAll(c, "g", 0, 1)
	res := c.Check()
	if !res.OK || res.Redeliveries != 2 {
		t.Fatalf("want OK with 2 redeliveries, got %+v", res)
	}
}

func TestCheckerDetectsOutOfOrderAcrossBatches(t *testing.T) {
	parts := []int{0, 0, 0}
	c := NewChecker(1, 1, []string{"g"}, false)
	pushAll(c, parts)
	c.Delivered("g", deliveries(parts, 0, 2))
	ackAll(c, "g", 0, 2)
	c.Delivered("g", deliveries(parts, 1))
	ackAll(c, "g", 1)
	res := c.Check()
	if res.OK || res.OutOfOrder != 1 {
		t.Fatalf("want 1 out of order, got %+v", res)
	}
}

func TestCheckerDetectsOutOfOrderInBatch(t *testing.T) {
	parts := []int{0, 0}
	for _, autoAck := range []bool{false, true} {
		c := NewChecker(1, 1, []string{"g"}, autoAck)
		pushAll(c, parts)
		c.Delivered("g", deliveries(parts, 1, 0))
		ackAll(c, "g", 0, 1)
		if res := c.Check(); res.OK || res.OutOfOrder == 0 {
			t.Fatalf("autoAck=%v: want out of order, got %+v", autoAck, res)
		}
	}
}

func TestCheckerOrderIsPerPartition(t *testing.T) {
	// seq 1 (partition 1) before seq 0 (partition 0) is fine.
	parts := []int{0, 1}
	c := NewChecker(1, 2, []string{"g"}, false)
	pushAll(c, parts)
	c.Delivered("g", deliveries(parts, 1))
	c.Delivered("g", deliveries(parts, 0))
	ackAll(c, "g", 0, 1)
	if res := c.Check(); !res.OK {
		t.Fatalf("want OK, got %+v", res)
	}
}

func TestCheckerDetectsMisroutedAndForeign(t *testing.T) {
	parts := []int{0}
	c := NewChecker(1, 2, []string{"g"}, false)
	pushAll(c, parts)
	c.Delivered("g", []Delivery{{Producer: 0, Seq: 0, Partition: 1}})
	ackAll(c, "g", 0)
	if res := c.Check(); res.OK || res.Groups["g"].Misrouted != 1 {
		t.Fatalf("want misrouted, got %+v", res)
	}
	c = NewChecker(1, 1, []string{"g"}, false)
	c.Delivered("g", []Delivery{{Producer: 7, Seq: 0, Partition: 0}})
	if res := c.Check(); res.OK || res.Groups["g"].Unknown != 1 {
		t.Fatalf("want unknown, got %+v", res)
	}
}

func TestCheckerGroupsAreIndependent(t *testing.T) {
	parts := []int{0}
	c := NewChecker(1, 1, []string{"a", "b"}, false)
	pushAll(c, parts)
	c.Delivered("a", deliveries(parts, 0))
	ackAll(c, "a", 0)
	res := c.Check()
	if res.OK || res.Groups["a"].Lost != 0 || res.Groups["b"].Lost != 1 {
		t.Fatalf("want b to have lost 1, got %+v", res)
	}
	if c.Complete("b") || !c.Complete("a") {
		t.Fatal("Complete: want a complete, b not")
	}
}

func TestCheckerNotQueuedIsNotExpected(t *testing.T) {
	c := NewChecker(1, 1, []string{"g"}, false)
	c.Pushed(0, 0, 0, false) // push failed: may or may not be stored
	c.Pushed(0, 1, 0, true)
	c.Delivered("g", []Delivery{{Producer: 0, Seq: 1, Partition: 0}})
	ackAll(c, "g", 1)
	if res := c.Check(); !res.OK || res.Queued != 1 {
		t.Fatalf("want OK with 1 queued, got %+v", res)
	}
}

func TestPayloadRoundTrip(t *testing.T) {
	for _, size := range []int{0, 64, 256, 1024} {
		b := appendPayload(nil, 3, 12345, 1700000000123456789, size)
		if size > 60 && len(b) != size {
			t.Fatalf("size %d: got %d bytes: %s", size, len(b), b)
		}
		var d decoder
		ms, err := d.pop([]byte(`{"success":true,"messages":[{"transactionId":"t","data":` + string(b) + `}]}`))
		if err != nil || len(ms) != 1 || !ms[0].ok {
			t.Fatalf("size %d: got %+v, %v", size, ms, err)
		}
		if p := ms[0].payload; p.P != 3 || p.S != 12345 || p.T != 1700000000123456789 {
			t.Fatalf("size %d: got %+v", size, p)
		}
	}
	if partitionIndex("p42") != 42 || partitionIndex("Default") != -1 || partitionIndex("p") != -1 {
		t.Fatal("partitionIndex")
	}
}

// TestCompleteCountsOnlyQueued: a delivered message whose push was not
// answered queued does not stand in for a queued one that is missing.
func TestCompleteCountsOnlyQueued(t *testing.T) {
	c := NewChecker(1, 2, []string{"g"}, false)
	c.Pushed(0, 0, 0, true)
	c.Pushed(0, 1, 0, false) // e.g. answered duplicate, yet stored
	c.Delivered("g", []Delivery{{Producer: 0, Seq: 1, Partition: 0}})
	if c.Complete("g") {
		t.Fatal("complete with the queued message 0 never delivered")
	}
	c.Delivered("g", []Delivery{{Producer: 0, Seq: 0, Partition: 0}})
	if !c.Complete("g") {
		t.Fatal("not complete with every queued message delivered")
	}
}
