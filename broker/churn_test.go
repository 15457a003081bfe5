package broker

import (
	"strings"
	"testing"
	"time"

	"queen-node/mesh"
	"queen-node/protocol"
)

func TestChurnWatch(t *testing.T) {
	cfg := ChurnConfig{Check: 250 * time.Millisecond, StallAfter: 2 * time.Second, Cooldown: 2 * time.Second}
	w := &churnWatch{cfg: cfg}
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	ms := func(states ...string) []mesh.Member {
		out := []mesh.Member{{Name: "self", State: "alive", Self: true}}
		for i := 0; i+1 < len(states); i += 2 {
			out = append(out, mesh.Member{Name: states[i], State: protocol.MemberState(states[i+1])})
		}
		return out
	}
	step := func(d time.Duration, m []mesh.Member, wantPass bool, wantReason string) {
		t.Helper()
		pass, reason := w.check(at(d), m)
		if pass != wantPass || !strings.Contains(reason, wantReason) {
			t.Fatalf("at %v: pass %v reason %q, want %v %q", d, pass, reason, wantPass, wantReason)
		}
	}
	// The first observation only records: a starting node's rings are cold.
	step(0, ms("a", "alive"), false, "")
	step(250*time.Millisecond, ms("a", "alive"), false, "")
	// A peer joins: a pass at once, a follow-up a cooldown later, then quiet.
	step(500*time.Millisecond, ms("a", "alive", "b", "alive"), true, "b joined")
	step(750*time.Millisecond, ms("a", "alive", "b", "alive"), false, "")
	step(2500*time.Millisecond, ms("a", "alive", "b", "alive"), true, "follow-up: b joined")
	step(2750*time.Millisecond, ms("a", "alive", "b", "alive"), false, "")
	step(4000*time.Millisecond, ms("a", "alive", "b", "alive"), false, "")
	// Flapping: every change is folded into at most one pass per cooldown.
	passes := 0
	for i := 0; i < 40; i++ { // 10 s of a flapping peer, a change every check
		st := "alive"
		if i%2 == 0 {
			st = "dead"
		}
		if pass, _ := w.check(at(4250*time.Millisecond+time.Duration(i)*250*time.Millisecond), ms("a", st, "b", "alive")); pass {
			passes++
		}
	}
	if passes < 4 || passes > 6 {
		t.Fatalf("10 s of flapping gave %d passes, want one per 2 s cooldown", passes)
	}
	// A gone member (absent from the table) counts too.
	w = &churnWatch{cfg: cfg}
	step(0, ms("a", "alive"), false, "")
	step(250*time.Millisecond, ms(), true, "a gone")
	// A freeze: a gap of at least StallAfter between two checks.
	w = &churnWatch{cfg: cfg}
	step(0, nil, false, "")
	step(250*time.Millisecond, nil, false, "")
	step(5*time.Second, nil, true, "stalled 4.75s")
	step(5250*time.Millisecond, nil, false, "")
	step(7*time.Second, nil, true, "follow-up: stalled")
}

func TestChurnConfigValidate(t *testing.T) {
	c := ChurnConfig{Check: time.Second, StallAfter: time.Second}
	if err := c.validate(); err == nil {
		t.Fatalf("stall threshold equal to the check interval accepted")
	}
	c = ChurnConfig{Check: 250 * time.Millisecond}
	if err := c.validate(); err != nil || c.StallAfter != DefaultChurnStallAfter || c.Cooldown != DefaultChurnCooldown {
		t.Fatalf("defaults not filled: %+v %v", c, err)
	}
	c = ChurnConfig{Check: -1}
	if err := c.validate(); err == nil {
		t.Fatalf("negative check accepted")
	}
	if c := (ChurnConfig{}); c.validate() != nil {
		t.Fatalf("zero (off) rejected")
	}
}
