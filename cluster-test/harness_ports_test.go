package clustertest

import (
	"fmt"
	"net"
	"testing"
)

// TestHarnessRestartsOnATakenPort: a port handed out to a node and taken
// before the node binds it (here by the test, in a fresh-clone CI run by an
// ephemeral port) must not fail the cluster's start: the node starts again
// on new ports and the cluster forms.
func TestHarnessRestartsOnATakenPort(t *testing.T) {
	// The HTTP port: a node binds it before it answers /health at all (a
	// taken mesh port fails the start a moment after /health opens).
	taken := ""
	c := startClusterOpts(t, ClusterOptions{N: 2, beforeStart: func(nodes []*Node) {
		taken = net.JoinHostPort(nodes[1].IP, fmt.Sprint(nodes[1].HTTPPort))
		l, err := net.Listen("tcp", taken)
		if err != nil {
			t.Fatalf("take %s: %v", taken, err)
		}
		t.Cleanup(func() { l.Close() })
	}})
	nd := c.Node(1)
	if nd.HTTP() == "http://"+taken || nd.rebinds == 0 {
		t.Fatalf("node 1 on %s after %d rebinds; %s was taken", nd.HTTP(), nd.rebinds, taken)
	}
}
