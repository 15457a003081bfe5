package retention_test

import (
	"slices"
	"testing"
	"time"
)

// TestRetentionAdvanceAfterLease: the pending rules delete messages
// past a group's live lease; the pass cannot move that group's cursor (the
// lease is the client's), and pg.RetentionAdvance says the next pass
// moves it. Once the lease's batch is acked, the next pass must pass the
// holes, or the partition looks pending to the group (cursor below the
// watermark) with nothing to deliver.
func TestRetentionAdvanceAfterLease(t *testing.T) {
	n := startNode(t)
	c := dbConn(t, n)
	const q = "ret-rv-adv"
	configure(t, n, q, msg{"retentionEnabled": true, "retentionSeconds": 60})
	push(t, n, q, "p", "a", 1, 6)
	ms := pop(t, n, q, "g1", 2)
	if got := indexes(ms); !slices.Equal(got, []int{1, 2}) {
		t.Fatalf("pop got %v", got)
	}
	ageAll(t, c, q, 120*time.Second)
	if p := pass(t, n); p.Pending != 4 {
		t.Fatalf("pass deleted %d pending, want 4 (3..6, outside the lease)", p.Pending)
	}
	wantOffsets(t, c, q, "p", 1, 2)
	ackOK(t, n, "g1", ms)
	pass(t, n)
	if committed, acked := consumer(t, c, q, "p", "g1"); committed != 6 || len(acked) != 0 {
		t.Fatalf("cursor %d acked %v after the lease's acks and a second pass, want 6 []", committed, acked)
	}
}
