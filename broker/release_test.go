package broker_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"queen-node/broker"
)

// A pop claims under the lease id its request names (a forwarded pop's,
// chosen by the forwarding node), and ReleaseForwarded releases it: only
// the tenant's rows, counted only when it found some, and with again once
// more a moment later, which frees a claim made after the first release.
func TestReleaseForwarded(t *testing.T) {
	b := newBroker(t, false)
	ctx := context.Background()
	if _, err := b.Push(ctx, "t", nil, append(goItems("q", "p1", "a"), goItems("q", "p2", "b")...)); err != nil {
		t.Fatal(err)
	}
	dropped := func() int64 { return b.Snapshot().Requests.LeasesDropped }
	pop := func(part, lease string) *broker.PopResult {
		t.Helper()
		res, err := b.Pop(ctx, "t", broker.PopRequest{Queue: "q", Partition: part, Batch: 10, LeaseID: lease})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}

	l1 := uuid.NewString()
	if res := pop("p1", l1); res == nil || res.LeaseID != l1 || res.Messages[0].LeaseID != l1 {
		t.Fatalf("pop under lease %s: %+v", l1, res)
	}
	before := dropped()
	b.ReleaseForwarded("other-tenant", l1, false)
	if res := pop("p1", ""); res != nil {
		t.Fatalf("another tenant released lease %s: p1 popped again %+v", l1, res)
	}
	b.ReleaseForwarded("t", uuid.NewString(), false) // claimed by nobody
	if n := dropped() - before; n != 0 {
		t.Fatalf("%d releases counted, none found a lease", n)
	}
	b.ReleaseForwarded("t", l1, false)
	if n := dropped() - before; n != 1 {
		t.Fatalf("%d releases counted, want 1", n)
	}
	if res := pop("p1", ""); res == nil || res.Messages[0].TransactionID != "a" || res.LeaseID == l1 {
		t.Fatalf("p1 after its lease was released: %+v", res)
	}

	// The owner claims after the first release: the second frees it.
	l2 := uuid.NewString()
	b.ReleaseForwarded("t", l2, true)
	if res := pop("p2", l2); res == nil || res.LeaseID != l2 {
		t.Fatalf("pop under lease %s: %+v", l2, res)
	}
	deadline := time.Now().Add(10 * time.Second)
	for pop("p2", "") == nil {
		if time.Now().After(deadline) {
			t.Fatal("the claim made after the first release was never released")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
