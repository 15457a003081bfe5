package broker_test

import (
	"fmt"
	"testing"
	"time"

	"queen-node/broker"
	"queen-node/internal/nodetest"
)

// TestBulkProvisioning: a group's first pops of a queue of many partitions
// queue a bulk provisioning (broker/provision.go), which makes the group's
// consumer rows of every partition in a few statements; the node learns
// their names, so the drain that follows claims through the fast statement
// and not one queen.pop_v3 call per few partitions, as it did before (a
// pop_v3 call provisions its candidates, 16 here: 200 partitions took
// about 13, and a wait=true pop's 4 candidates about 50).
// Every message still arrives exactly once.
func TestBulkProvisioning(t *testing.T) {
	n := nodetest.Start(t)
	const q, parts = "bulkq", 200
	for i := range parts {
		push(t, n, q, fmt.Sprintf("p%03d", i), fmt.Sprintf("m%03d", i))
	}
	seen := map[string]bool{}
	take := func() {
		t.Helper()
		ms, _ := pop(t, n, q, "batch=1&wait=false")
		for _, m := range ms {
			d := m["data"].(string)
			if seen[d] {
				t.Fatalf("%s delivered twice", d)
			}
			seen[d] = true
		}
		if ms != nil {
			ackAll(t, n, "", "completed", ms)
		}
	}
	take()
	take()
	take() // the group's marker exists now: a claim of unknown partitions queues the bulk provisioning
	deadline := time.Now().Add(20 * time.Second)
	for n.Broker.Snapshot().Requests.RowsProvisioned < parts/2 {
		if time.Now().After(deadline) {
			t.Fatalf("bulk provisioning made %d rows, want at least %d", n.Broker.Snapshot().Requests.RowsProvisioned, parts/2)
		}
		time.Sleep(10 * time.Millisecond) // polled with a deadline: the loop runs in the background
	}
	// The pass teaches the node every name (claims alone learn only those
	// they evaluate; since the fast claim is tried whatever the node knows,
	// the pop_v3 count below no longer shows it).
	names := make([]string, parts)
	for i := range names {
		names[i] = fmt.Sprintf("p%03d", i)
	}
	for left := n.Broker.Unlearnt(broker.DefaultTenant, q, broker.QueueMode, names); left == nil || len(left) > 0; left = n.Broker.Unlearnt(broker.DefaultTenant, q, broker.QueueMode, names) {
		if time.Now().After(deadline) {
			t.Fatalf("after the bulk provisioning the node does not know %d of %d partitions' rows", len(left), parts)
		}
		time.Sleep(10 * time.Millisecond) // polled with a deadline: the loop runs in the background
	}
	before := n.Broker.Snapshot().Requests
	for pops := 0; len(seen) < parts; pops++ {
		if pops > 3*parts {
			t.Fatalf("%d pops, %d of %d messages", pops, len(seen), parts)
		}
		take()
	}
	after := n.Broker.Snapshot().Requests
	general := (after.PopSQLCalls - after.ClaimsFast) - (before.PopSQLCalls - before.ClaimsFast)
	t.Logf("bulk made %d rows; the drain of %d partitions took %d claim-core calls, %d of them queen.pop_v3",
		after.RowsProvisioned, len(seen), after.PopSQLCalls-before.PopSQLCalls, general)
	if general > 10 {
		t.Fatalf("the drain made %d queen.pop_v3 calls: the node did not learn the provisioned partitions", general)
	}
}
