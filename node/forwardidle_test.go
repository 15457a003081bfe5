package node

import (
	"testing"
	"time"
)

// The forwarder drops idle connections to peers before a peer with this
// node's API idle timeout closes them (forward/stale.go): at three
// quarters of it, and never later than the forwarder's default.
func TestForwardIdleIsBelowThePeersIdleTimeout(t *testing.T) {
	for _, c := range []struct{ api, def, want time.Duration }{
		{120 * time.Second, 90 * time.Second, 90 * time.Second},
		{60 * time.Second, 90 * time.Second, 45 * time.Second},
		{2 * time.Second, 90 * time.Second, 1500 * time.Millisecond},
		{0, 90 * time.Second, 90 * time.Second},
	} {
		if got := forwardIdle(c.api, c.def); got != c.want {
			t.Errorf("forwardIdle(%v, %v) = %v, want %v", c.api, c.def, got, c.want)
		}
	}
}
