package broker_test

import (
	"fmt"
	"testing"

	"queen-node/internal/nodetest"
)

// Through HTTP, a consumer's claims after its group's first go to the fast
// claim statement (pg/claimfast.go), and everything pushed arrives once, in
// order per partition, with failed acks redelivered in between.
func TestConsumerClaimsTakeTheFastPath(t *testing.T) {
	n := nodetest.Start(t)
	const q, per = "fastq", 30
	for _, p := range []string{"p0", "p1"} {
		var pl []any
		for i := 0; i < per; i++ {
			pl = append(pl, fmt.Sprintf("%s-%02d", p, i))
		}
		push(t, n, q, p, pl...)
	}
	got := map[string][]string{}
	seen := map[string]bool{}
	failed := 0
	for pops := 0; len(seen) < 2*per; pops++ {
		if pops > 200 {
			t.Fatalf("%d pops, %d of %d messages", pops, len(seen), 2*per)
		}
		ms, _ := pop(t, n, q, "batch=4&wait=false")
		if ms == nil {
			continue
		}
		status := "completed"
		if pops%5 == 3 && failed < 3 {
			status, failed = "failed", failed+1 // redelivered by a later claim
		}
		for _, m := range ms {
			d := m["data"].(string)
			if status == "completed" {
				if seen[d] {
					t.Fatalf("%s delivered again after its completed ack", d)
				}
				seen[d] = true
				got[m["partition"].(string)] = append(got[m["partition"].(string)], d)
			}
		}
		ackAll(t, n, "", status, ms)
	}
	for p, ds := range got {
		for i := range ds {
			if want := fmt.Sprintf("%s-%02d", p, i); ds[i] != want {
				t.Fatalf("partition %s: message %d is %s, want %s", p, i, ds[i], want)
			}
		}
	}
	st := n.Broker.Snapshot()
	if st.Requests.ClaimsFast == 0 || st.Requests.ClaimsFast >= st.Requests.PopSQLCalls {
		t.Fatalf("%d of %d claim-core calls were fast claims: want some, not all (the first provisions)",
			st.Requests.ClaimsFast, st.Requests.PopSQLCalls)
	}
	t.Logf("%d of %d claim-core calls were fast claims", st.Requests.ClaimsFast, st.Requests.PopSQLCalls)
}
