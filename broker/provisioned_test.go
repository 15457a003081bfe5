package broker

import (
	"fmt"
	"testing"
	"time"

	"queen-node/pg"
	"queen-node/protocol"
)

// provTotal checks the bookkeeping of the names' bound: total is the sum
// of the sets' sizes.
func provTotal(t *testing.T, p *provisioned) {
	t.Helper()
	sum := 0
	for _, s := range p.sets {
		sum += len(s.names)
	}
	if sum != p.total {
		t.Fatalf("total %d, sets hold %d names", p.total, sum)
	}
}

func tookOutcome(qid string, seeded bool, names ...string) *pg.PopOutcome {
	out := &pg.PopOutcome{QueueID: qid, Seeded: seeded}
	for _, n := range names {
		out.Verdicts = append(out.Verdicts, pg.Verdict{Name: n, PartitionID: "id-" + n, Kind: protocol.VerdictTook})
	}
	return out
}

// When a pair may be queued for a bulk provisioning: only once its set is
// known (the group's marker exists), once at a time, then after the gap
// bulkDone sets: provBulkMinGap after a pass that made rows, 20 times the
// pass's length after one that made none.
func TestProvisionedBulkTiming(t *testing.T) {
	now := time.Unix(1000, 0)
	p := newProvisioned()
	p.now = func() time.Time { return now }
	args := pg.PopArgs{Tenant: "t", Queue: "q", Group: "g", Names: []string{"a", "b"}}
	key := provKey{"t", "q", "g"}

	if p.queueBulk(args) {
		t.Fatal("queued a pair the node knows nothing of (no marker yet)")
	}
	p.learn(args, tookOutcome("Q1", false, "a"))
	if got := p.unprov(args); len(got) != 1 || got[0] != "b" {
		t.Fatalf("unprov %v, want [b]", got)
	}
	if !p.queueBulk(args) {
		t.Fatal("not queued: a known pair with an unknown candidate")
	}
	if p.queueBulk(args) {
		t.Fatal("queued twice")
	}
	if w := p.takeWanted(); len(w) != 1 || w[0] != key {
		t.Fatalf("wanted %v", w)
	}
	if p.queueBulk(args) {
		t.Fatal("queued again while the pass runs")
	}
	now = now.Add(provBulkHold + time.Second) // a long pass: the hold passed, the pass still runs
	if p.queueBulk(args) || len(p.takeWanted()) != 0 {
		t.Fatal("queued again while the pass runs, past the hold")
	}
	p.learnNames(key, "Q1", []string{"a", "b", "c"})
	if got := p.unprov(args); len(got) != 0 {
		t.Fatalf("unprov %v after the pass, want none", got)
	}
	p.learnNames(key, "Q2", []string{"x"}) // a page of a re-created queue: not this set's
	if _, ok := p.sets[key].names["x"]; ok {
		t.Fatal("learnt a name of another queue id")
	}
	provTotal(t, p)

	start := now
	now = now.Add(time.Second)
	p.bulkDone(key, start, now, 100, 5, false) // rows for a twentieth: the queue may still be filling
	now = now.Add(provBulkMinGap - time.Millisecond)
	if p.queueBulk(args) {
		t.Fatal("queued before provBulkMinGap")
	}
	now = now.Add(time.Millisecond)
	if !p.queueBulk(args) {
		t.Fatal("not queued after provBulkMinGap, following a pass that made rows")
	}
	p.takeWanted()
	start = now
	now = now.Add(time.Second)
	p.bulkDone(key, start, now, 1000, 1, false) // few rows: wait 20 times the pass
	now = now.Add(provBulkGapFactor*time.Second - time.Millisecond)
	if p.queueBulk(args) {
		t.Fatal("queued before 20 times an idle pass's length")
	}
	now = now.Add(time.Millisecond)
	if !p.queueBulk(args) {
		t.Fatal("not queued after 20 times an idle pass's length")
	}

	p.takeWanted()
	start = now
	p.bulkDone(key, start, now, 0, 0, true) // failed: a minute
	now = now.Add(provBulkHold - time.Millisecond)
	if p.queueBulk(args) {
		t.Fatal("queued again before a minute after a failed pass")
	}
	now = now.Add(time.Millisecond)

	// Forgetting the set (a bound) does not forget when the pair may run.
	p.bulkDone(key, now, now.Add(time.Second), 10, 0, false)
	delete(p.sets, key)
	p.total = 0
	p.learn(args, tookOutcome("Q1", true, "a"))
	now = now.Add(2 * time.Second)
	if p.queueBulk(args) {
		t.Fatal("a forgotten and re-learnt set lost its pair's gap")
	}

	// A new marker (the group was deleted and made again) starts the set
	// over, and the total follows.
	p.learn(args, tookOutcome("Q1", false, "z"))
	if len(p.sets[key].names) != 1 {
		t.Fatalf("names %v after a new marker, want only z", p.sets[key].names)
	}
	provTotal(t, p)
}

// The names' bounds: a pass stops recording at provMaxNames and keeps what
// the set held; so does a claim's verdict past it; a full set queues no
// pass; the total stays the sum of the sets. (Past provMaxTotal another
// set is forgotten: add.)
func TestProvisionedBounds(t *testing.T) {
	p := newProvisioned()
	args := pg.PopArgs{Tenant: "t", Queue: "q", Group: "g", Names: []string{"a"}}
	key := provKey{"t", "q", "g"}
	p.learn(args, tookOutcome("Q", true, "a"))
	other := pg.PopArgs{Tenant: "t", Queue: "q2", Group: "g", Names: []string{"a"}}
	p.learn(other, tookOutcome("Q2", true, "a", "b"))
	names := make([]string, provMaxNames)
	for i := range names {
		names[i] = fmt.Sprint("n", i)
	}
	p.learnNames(key, "Q", names)
	provTotal(t, p)
	if _, ok := p.sets[key].names["a"]; !ok || len(p.sets[key].names) != provMaxNames {
		t.Fatalf("%d names after a pass past the bound (a kept: %v), want %d with a", len(p.sets[key].names), ok, provMaxNames)
	}
	p.learn(args, tookOutcome("Q", true, "new"))
	provTotal(t, p)
	if _, ok := p.sets[key].names["new"]; ok || len(p.sets[key].names) != provMaxNames {
		t.Fatalf("a claim's verdict past the bound: %d names (new learnt: %v), want the full set kept", len(p.sets[key].names), ok)
	}
	if p.queueBulk(pg.PopArgs{Tenant: "t", Queue: "q", Group: "g", Names: []string{"zz"}}) {
		t.Fatal("a pass queued for a full set: it could record nothing")
	}
	if len(p.sets[provKey{"t", "q2", "g"}].names) != 2 {
		t.Fatal("another set lost its names")
	}
}
