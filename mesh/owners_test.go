package mesh

import (
	"testing"

	"queen-node/protocol"
)

// Only live members with an HTTP address own queues; a leaving, dead or
// left one does not, nor one that advertised no HTTP address.
func TestOwnerTableHoldsLiveMembersOnly(t *testing.T) {
	members := map[string]*Member{
		"self":    {Name: "self", HTTPAddr: "127.0.0.1:1", State: protocol.MemberAlive, Self: true},
		"alive":   {Name: "alive", HTTPAddr: "127.0.0.1:2", State: protocol.MemberAlive},
		"leaving": {Name: "leaving", HTTPAddr: "127.0.0.1:3", State: protocol.MemberAlive, leaving: true},
		"dead":    {Name: "dead", HTTPAddr: "127.0.0.1:4", State: protocol.MemberDead},
		"left":    {Name: "left", HTTPAddr: "127.0.0.1:5", State: protocol.MemberLeft},
		"nohttp":  {Name: "nohttp", State: protocol.MemberAlive},
	}
	tb := ownerTable(members)
	got := map[string]bool{}
	for i, n := range tb.Nodes() {
		got[n.Name] = true
		if tb.IsSelf(i) != (n.Name == "self") {
			t.Fatalf("IsSelf(%s) wrong", n.Name)
		}
		if n.Addr != members[n.Name].HTTPAddr {
			t.Fatalf("%s's address %q", n.Name, n.Addr)
		}
	}
	if len(got) != 2 || !got["self"] || !got["alive"] {
		t.Fatalf("owners %v, want self and alive", got)
	}
}
