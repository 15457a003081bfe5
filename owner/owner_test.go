package owner

import (
	"fmt"
	"testing"
)

func names(ns ...string) []Node {
	out := make([]Node, len(ns))
	for i, n := range ns {
		out[i] = Node{Name: n, Addr: n + ":6632"}
	}
	return out
}

func ownerName(t *Table, tenant, queue string) string {
	i := t.Owner(tenant, queue)
	if i < 0 {
		return ""
	}
	return t.Node(i).Name
}

func TestEmptyTableOwnsNothing(t *testing.T) {
	var nilTable *Table
	for _, tb := range []*Table{nilTable, New(nil), New([]Node{{Name: ""}})} {
		if got := tb.Owner("t", "q"); got != -1 {
			t.Fatalf("Owner on an empty table = %d, want -1", got)
		}
		if tb.Len() != 0 {
			t.Fatalf("Len = %d", tb.Len())
		}
	}
}

// Every node must pick the same owner whatever order it learned the
// members in, or two nodes would both write a partition.
func TestOwnerIgnoresMemberOrder(t *testing.T) {
	a := New(names("n1", "n2", "n3", "n4"))
	b := New(names("n4", "n2", "n1", "n3", "n2"))
	for i := 0; i < 2000; i++ {
		q := fmt.Sprintf("q%d", i)
		if x, y := ownerName(a, "t", q), ownerName(b, "t", q); x != y {
			t.Fatalf("queue %s: %s against %s", q, x, y)
		}
	}
}

// The hash is part of the cluster's contract: nodes of two versions must
// agree during a rolling upgrade. These owners were computed once; a change
// of the hash fails here.
func TestOwnerIsStableAcrossVersions(t *testing.T) {
	tb := New(names("node-a", "node-b", "node-c"))
	got := []string{}
	for _, q := range []string{"bench", "q0", "q1", "q2", "orders-17"} {
		got = append(got, ownerName(tb, "default", q))
	}
	want := goldenOwners
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("owners = %v, want %v", got, want)
	}
}

// Set from a first run of the hash; see TestOwnerIsStableAcrossVersions.
var goldenOwners = []string{"node-a", "node-c", "node-b", "node-c", "node-b"}

// The tenant takes part: a queue name in two tenants must not always land
// on the same node, and the separator keeps ("ab", "c") and ("a", "bc")
// apart.
func TestOwnerUsesTheTenant(t *testing.T) {
	tb := New(names("n1", "n2", "n3"))
	diffT, same := 0, 0
	for i := 0; i < 300; i++ {
		q := fmt.Sprintf("q%d", i)
		if ownerName(tb, "t1", q) != ownerName(tb, "t2", q) {
			diffT++
		}
		if ownerName(tb, "ab", "c"+q) == ownerName(tb, "a", "bc"+q) {
			same++
		}
	}
	// Independent picks among 3 differ two thirds of the time (200 of 300).
	if diffT < 150 || same > 150 {
		t.Fatalf("owners differ for %d of 300 queues across tenants; %d of 300 shifted keys share theirs", diffT, same)
	}
}

func TestOwnerSpreadsQueuesEvenly(t *testing.T) {
	for _, n := range []int{2, 3, 5, 8} {
		var ns []string
		for i := 0; i < n; i++ {
			ns = append(ns, fmt.Sprintf("queen-%d", i))
		}
		tb := New(names(ns...))
		count := map[string]int{}
		const queues = 20000
		for i := 0; i < queues; i++ {
			count[ownerName(tb, "default", fmt.Sprintf("orders-%d", i))]++
		}
		want := queues / n
		for _, name := range ns {
			if c := count[name]; c < want*9/10 || c > want*11/10 {
				t.Fatalf("%d nodes: %s owns %d of %d queues, want %d +-10%%", n, name, c, queues, want)
			}
		}
	}
}

// A departure moves only the queues the departed node owned; an arrival
// moves queues only to the newcomer.
func TestMembershipChangeMovesOnlyWhatItMust(t *testing.T) {
	before := New(names("n1", "n2", "n3", "n4"))
	without := New(names("n1", "n2", "n4"))
	with := New(names("n1", "n2", "n3", "n4", "n5"))
	moved := 0
	for i := 0; i < 5000; i++ {
		q := fmt.Sprintf("q%d", i)
		o := ownerName(before, "t", q)
		if w := ownerName(without, "t", q); o != "n3" && w != o {
			t.Fatalf("queue %s moved from %s to %s when n3 left", q, o, w)
		}
		if w := ownerName(with, "t", q); w != o {
			if w != "n5" {
				t.Fatalf("queue %s moved from %s to %s when n5 joined", q, o, w)
			}
			moved++
		}
	}
	if moved < 800 || moved > 1200 { // a fifth of 5000
		t.Fatalf("%d of 5000 queues moved to the newcomer, want about 1000", moved)
	}
}

func TestSelfIsFound(t *testing.T) {
	ns := names("b", "a", "c")
	ns[0].Self = true
	tb := New(ns)
	for i := 0; i < tb.Len(); i++ {
		if tb.IsSelf(i) != (tb.Node(i).Name == "b") {
			t.Fatalf("IsSelf(%d) wrong for %s", i, tb.Node(i).Name)
		}
	}
	if got := tb.Nodes(); len(got) != 3 || got[0].Name != "a" || got[2].Name != "c" {
		t.Fatalf("Nodes = %v, want sorted by name", got)
	}
}

func BenchmarkOwner(b *testing.B) {
	tb := New(names("n1", "n2", "n3"))
	for i := 0; i < b.N; i++ {
		tb.Owner("default", "orders")
	}
}
