package forward

import (
	"context"
	"strings"
	"testing"

	"queen-node/broker"
)

// The header a forwarded ack carries names only the leases of the items
// sent to that owner, once each, at most MaxNextLeases; the owner reads
// back exactly the well-formed pairs, at most MaxNextLeases.
func TestNextLeaseHeader(t *testing.T) {
	const a, b, c = "6f1f1c9e-0000-4000-8000-0000000000a1", "6f1f1c9e-0000-4000-8000-0000000000b1", "6f1f1c9e-0000-4000-8000-0000000000c1"
	const na, nb = "6f1f1c9e-0000-4000-8000-0000000000a2", "6f1f1c9e-0000-4000-8000-0000000000b2"
	ctx := WithNextLeases(context.Background(), map[string]string{a: na, b: nb})
	h := nextLeaseHeader(ctx, []broker.AckItem{{LeaseID: a}, {LeaseID: a}, {LeaseID: c}})
	if got := h.Get(NextLeaseHeader); got != a+"="+na {
		t.Fatalf("header %q", got)
	}
	if h := nextLeaseHeader(context.Background(), []broker.AckItem{{LeaseID: a}}); h != nil {
		t.Fatalf("header without next leases: %v", h)
	}
	if h := nextLeaseHeader(ctx, []broker.AckItem{{LeaseID: c}}); h != nil {
		t.Fatalf("header for items of no asked lease: %v", h)
	}
	got := ParseNextLeases(a + "=" + na + ", x=y," + b + "=" + nb + ",=," + c + "=" + "not-a-uuid")
	want := []broker.PeerClaim{{AckedLease: a, NextLease: na}, {AckedLease: b, NextLease: nb}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("parsed %+v", got)
	}
	// Canonical spelling (as the owner spells a pop's lease); the nil
	// UUID refused.
	up := strings.ToUpper(a) + "=" + "{" + na + "}"
	if got := ParseNextLeases(up + "," + b + "=00000000-0000-0000-0000-000000000000"); len(got) != 1 || got[0] != (broker.PeerClaim{AckedLease: a, NextLease: na}) {
		t.Fatalf("parsed %+v", got)
	}
	var many []string
	for range MaxNextLeases + 1 {
		many = append(many, a+"="+na)
	}
	if got := ParseNextLeases(strings.Join(many, ",")); len(got) != MaxNextLeases {
		t.Fatalf("%d pairs read, want at most %d", len(got), MaxNextLeases)
	}
	if got := ParseNextLeases(strings.Repeat("x", MaxNextLeases*80+1)); got != nil {
		t.Fatalf("an oversized header read: %d pairs", len(got))
	}
}
