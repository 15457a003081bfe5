package node_test

import (
	"context"
	"testing"
	"time"

	"queen-node/broker"
	"queen-node/internal/nodetest"
)

// TestToggleNotUndoneByStaleRefresh: the node answering a toggle
// applies it at once (docs/api.md, "Maintenance modes"); a refresh whose
// read of the switches started before the toggle was stored must not put
// the old value back afterwards (with push maintenance just turned on,
// the node would store pushes directly until its next refresh).
func TestToggleNotUndoneByStaleRefresh(t *testing.T) {
	n := nodetest.Start(t, func(c *broker.Config) { c.Maintenance.RefreshInterval = time.Millisecond })
	ctx := context.Background()
	t.Cleanup(func() { _ = n.Broker.SetPushMaintenance(ctx, false) })
	for i := range 300 {
		on := i%2 == 0
		if err := n.Broker.SetPushMaintenance(ctx, on); err != nil {
			t.Fatal(err)
		}
		until := time.Now().Add(5 * time.Millisecond)
		for time.Now().Before(until) {
			if got := n.Broker.MaintenanceView().Push; got != on {
				t.Fatalf("toggle %d: push maintenance set to %v, the node's view went back to %v", i, on, got)
			}
		}
	}
}
