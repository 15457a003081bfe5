package broker_test

import (
	"fmt"
	"strings"
	"testing"

	"queen-node/broker"
	"queen-node/internal/nodetest"
)

// A pop response is bounded in bytes (broker.Config.MaxPopBytes): it returns
// fewer messages, never a partial one, leases only what it returns, and
// always returns at least one message.
func TestPopByteCap(t *testing.T) {
	const capBytes = 64 << 10
	n := nodetest.Start(t, func(c *broker.Config) { c.MaxPopBytes = capBytes })
	q := "popbytes"
	big := strings.Repeat("x", 20<<10) // 3 fit in 64 KiB with their envelopes, 4 do not
	var want []any
	for i := 0; i < 10; i++ {
		want = append(want, fmt.Sprintf("%d-%s", i, big))
	}
	push(t, n, q, "Default", want...)

	var got []any
	for round := 0; len(got) < len(want); round++ {
		if round > 10 {
			t.Fatalf("only %d of %d delivered", len(got), len(want))
		}
		ms, _ := pop(t, n, q, "batch=10")
		if len(ms) > 3 || (len(ms) < 3 && len(got)+len(ms) < len(want)) {
			t.Fatalf("round %d: %d messages of 20 KiB under a 64 KiB cap, want 3", round, len(ms))
		}
		got = append(got, payloads(ms)...)
		// The lease covers exactly the returned messages: acking them
		// releases it.
		for _, r := range ackAll(t, n, "", "completed", ms) {
			if r["success"] != true || r["leaseReleased"] != true {
				t.Fatalf("ack of the returned messages must release the lease: %v", r)
			}
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatal("messages out of order or duplicated")
	}

	// One message larger than the cap still comes, alone.
	huge := strings.Repeat("y", 100<<10)
	push(t, n, q, "Default", huge, "small")
	ms, _ := pop(t, n, q, "batch=10")
	if len(ms) != 1 || ms[0]["data"] != huge {
		t.Fatalf("a message over the cap must come alone, got %d", len(ms))
	}
	ackAll(t, n, "", "completed", ms)
	ms, _ = pop(t, n, q, "batch=10")
	if len(ms) != 1 || ms[0]["data"] != "small" {
		t.Fatalf("then the next: %v", payloads(ms))
	}
}

// A multi-partition pop that fills its byte budget on the first partitions
// leaves the others unleased, so another consumer takes them at once.
func TestPopByteCapLeavesOtherPartitionsFree(t *testing.T) {
	n := nodetest.Start(t, func(c *broker.Config) { c.MaxPopBytes = 64 << 10 })
	q := "popbytesparts"
	big := strings.Repeat("x", 40<<10)
	for i := 0; i < 4; i++ {
		push(t, n, q, fmt.Sprint("p", i), big)
	}
	seen := map[string]bool{}
	for i := 0; i < 4; i++ {
		ms, body := pop(t, n, q, "batch=10&partitions=4")
		if len(ms) != 1 {
			t.Fatalf("pop %d: %d messages of 40 KiB under a 64 KiB cap, want 1", i, len(ms))
		}
		if body["partitionsClaimed"] != float64(1) && fmt.Sprint(body["partitionsClaimed"]) != "1" {
			t.Fatalf("pop %d claimed %v partitions", i, body["partitionsClaimed"])
		}
		seen[ms[0]["partition"].(string)] = true
	}
	if len(seen) != 4 {
		t.Fatalf("four pops must take the four partitions, took %v", seen)
	}
}

// The case at the default cap: 6 MiB messages and batch=50 give a
// response of a few messages, not hundreds of megabytes.
func TestPopDefaultByteCap(t *testing.T) {
	n := nodetest.Start(t)
	q := "popbytesdefault"
	big := strings.Repeat("z", 6<<20)
	for i := 0; i < 5; i++ {
		push(t, n, q, "Default", big)
	}
	r := n.Do(t, "GET", "/api/v1/pop/queue/"+q+"?batch=50", nil)
	if r.Status != 200 {
		t.Fatalf("pop: %d", r.Status)
	}
	if len(r.Body) > broker.DefaultMaxPopBytes+64<<10 {
		t.Fatalf("response of %d bytes, the cap is %d", len(r.Body), broker.DefaultMaxPopBytes)
	}
	if ms := r.Obj(t)["messages"].([]any); len(ms) != 2 {
		t.Fatalf("%d messages of 6 MiB under a 16 MiB cap, want 2", len(ms))
	}
}
