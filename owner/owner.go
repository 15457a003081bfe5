// Package owner decides which node writes a queue's pushes: rendezvous
// (highest random weight) hashing of (tenant, queue) over the cluster's live
// members. Every node that sees the same members picks the same owner, and
// a member that joins or leaves moves only the queues it wins or held.
// One writer per queue lets a push commit without waiting for another
// node's transaction on its partitions' rows, and lets one node's combiner
// merge all of the queue's pushes into few flushes (docs/api.md,
// "Push ownership").
//
// The package is pure: a Table is an immutable snapshot built from a member
// list, safe to share between goroutines.
package owner

import "sort"

// Node is one member that can own queues.
type Node struct {
	Name string // memberlist name, unique in the cluster: the hash's seed
	Addr string // HTTP host:port peers forward pushes to
	Self bool   // this process
}

// Table is a snapshot of the owning members.
type Table struct {
	nodes []Node
	seeds []uint64
	self  int // index of Self in nodes, -1 if absent
}

// New builds a table from members, in any order; a name listed twice
// counts once (the first). Members with an empty name are ignored.
func New(members []Node) *Table {
	nodes := make([]Node, 0, len(members))
	seen := make(map[string]bool, len(members))
	for _, m := range members {
		if m.Name == "" || seen[m.Name] {
			continue
		}
		seen[m.Name] = true
		nodes = append(nodes, m)
	}
	// Sorted, so two nodes with the same members break a tie (two equal
	// scores) the same way.
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	t := &Table{nodes: nodes, seeds: make([]uint64, len(nodes)), self: -1}
	for i, n := range nodes {
		t.seeds[i] = hashString(fnvOffset, n.Name)
		if n.Self {
			t.self = i
		}
	}
	return t
}

// Len is the number of owning members.
func (t *Table) Len() int {
	if t == nil {
		return 0
	}
	return len(t.nodes)
}

// Nodes returns the members, sorted by name.
func (t *Table) Nodes() []Node {
	if t == nil {
		return nil
	}
	return append([]Node(nil), t.nodes...)
}

// Owner returns the index (into Nodes) of the member that owns the queue,
// or -1 for an empty table.
func (t *Table) Owner(tenant, queue string) int {
	if t.Len() == 0 {
		return -1
	}
	// The tenant's length goes first, so ("ab", "c") and ("a", "bc") hash
	// apart whatever bytes the names hold.
	k := hashByte(fnvOffset, byte(len(tenant)))
	k = hashByte(k, byte(len(tenant)>>8))
	k = hashString(k, tenant)
	k = hashString(k, queue)
	best, bestScore := 0, uint64(0)
	for i, s := range t.seeds {
		if sc := mix(k ^ s); i == 0 || sc > bestScore {
			best, bestScore = i, sc
		}
	}
	return best
}

// Node returns member i of Nodes.
func (t *Table) Node(i int) Node { return t.nodes[i] }

// IsSelf reports whether member i is this process.
func (t *Table) IsSelf(i int) bool { return i == t.self }

// FNV-1a, 64 bits: stable across processes and versions, unlike
// hash/maphash, which is seeded per process.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func hashString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	return h
}

func hashByte(h uint64, b byte) uint64 {
	h ^= uint64(b)
	return h * fnvPrime
}

// mix is splitmix64's finaliser: FNV's low bits are weak, and the score
// must spread well over the whole word for the comparison to be fair.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
