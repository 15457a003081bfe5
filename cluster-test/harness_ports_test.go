package clustertest

import (
	"net"
	"testing"
)

// TestHarnessRestartsOnATakenPort: a port handed out to a node and taken
// before the node binds it (here by the test, in a fresh-clone CI run by an
// ephemeral port) must not fail the cluster's start: the node starts again
// on new ports and the cluster forms.
func TestHarnessRestartsOnATakenPort(t *testing.T) {
	var held net.Listener
	taken := ""
	c := startClusterOpts(t, ClusterOptions{N: 2, beforeStart: func(nodes []*Node) {
		taken = nodes[1].MeshAddr()
		l, err := net.Listen("tcp", taken)
		if err != nil {
			t.Fatalf("take %s: %v", taken, err)
		}
		held = l
	}})
	defer held.Close()
	nd := c.Node(1)
	if nd.MeshAddr() == taken || nd.rebinds == 0 {
		t.Fatalf("node 1 on %s after %d rebinds; %s was taken", nd.MeshAddr(), nd.rebinds, taken)
	}
}
