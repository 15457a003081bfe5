package broker

import (
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"queen-node/mesh"
	"queen-node/protocol"
)

// Churn reseed (docs/hotlist.md, "Churn: rings after a partition or a
// freeze"). A node's warm rings are only as good as the hints it received.
// Hints are lost, without any later hint saying so, whenever the hint path
// between two nodes was cut:
//
//   - a peer was declared dead (a long network partition, or this process
//     was frozen: SIGSTOP, a VM pause): peers send no hints to a dead
//     member, and what they pushed meanwhile is missing from its rings;
//   - a peer joined or rejoined: what it pushed before it saw us alive was
//     not hinted to us;
//   - a peer left or died: the hints still in its coalescing set are gone.
//
// The reseed floor heals all of them, but only within
// QUEEN_HOTLIST_RESEED_MS (30 s), and a long-poll on such a ring parks
// without SQL meanwhile. So on any of these events the node reseeds every
// ring at once (the pass trusts PostgreSQL, as a cold ring does), and once
// more a cooldown later, for a peer whose view of the membership converged
// after ours. Passes are rate-limited: at most one per cooldown, however
// much the membership flaps.

// Churn reseed defaults.
const (
	DefaultChurnCheck      = 250 * time.Millisecond
	DefaultChurnStallAfter = 2 * time.Second
	DefaultChurnCooldown   = 2 * time.Second
)

// ChurnConfig configures the churn reseed.
type ChurnConfig struct {
	// Check is how often the member table and the clock are looked at,
	// default 250 ms; 0 disables the churn reseed (the floor still heals).
	Check time.Duration
	// StallAfter: a gap at least this long between two checks means the
	// process was frozen (its peers may have declared it dead), default 2 s.
	StallAfter time.Duration
	// Cooldown (QUEEN_HOTLIST_CHURN_COOLDOWN_MS) is the least time between
	// two passes, and the delay of the follow-up pass, default 2 s.
	Cooldown time.Duration
}

// DefaultChurnConfig returns a ChurnConfig with every default filled in.
func DefaultChurnConfig() ChurnConfig {
	return ChurnConfig{Check: DefaultChurnCheck, StallAfter: DefaultChurnStallAfter, Cooldown: DefaultChurnCooldown}
}

func (c *ChurnConfig) validate() error {
	if c.Check < 0 || c.StallAfter < 0 || c.Cooldown < 0 {
		return fmt.Errorf("churn reseed %+v: want durations of 0 or more", *c)
	}
	if c.Check == 0 {
		return nil
	}
	if c.StallAfter == 0 {
		c.StallAfter = DefaultChurnStallAfter
	}
	if c.StallAfter <= c.Check {
		return fmt.Errorf("churn reseed: stall threshold %v must exceed the check interval %v", c.StallAfter, c.Check)
	}
	if c.Cooldown == 0 {
		c.Cooldown = DefaultChurnCooldown // the rate limit is never off
	}
	return nil
}

// churnStats are the churn reseed's counters (/status hotlist.churn_*).
type churnStats struct {
	passes  atomic.Int64 // passes over every ring
	reseeds atomic.Int64 // rings those passes reseeded
}

// churnWatch decides when to reseed every ring. It is a pure state machine
// (no clock, no I/O) so it can be tested with synthetic times.
type churnWatch struct {
	cfg       ChurnConfig
	lastCheck time.Time
	states    map[string]protocol.MemberState // peer name -> state at the last check; nil before the first
	due       time.Time                       // next pass; zero = none
	followUp  bool                            // the pass at due answers a new event: schedule one more after it
	lastPass  time.Time
	reason    string
}

// check records one observation at now (members nil: no mesh) and reports
// whether a pass over every ring is due now, and why.
func (w *churnWatch) check(now time.Time, members []mesh.Member) (pass bool, reason string) {
	if ev := w.detect(now, members); ev != "" {
		at := now
		if !w.lastPass.IsZero() && w.lastPass.Add(w.cfg.Cooldown).After(at) {
			at = w.lastPass.Add(w.cfg.Cooldown)
		}
		if w.due.IsZero() || at.Before(w.due) {
			w.due = at
		}
		w.followUp, w.reason = true, ev
	}
	if w.due.IsZero() || now.Before(w.due) {
		return false, ""
	}
	reason, w.lastPass = w.reason, now
	if w.followUp {
		w.due, w.followUp = now.Add(w.cfg.Cooldown), false
		w.reason = "follow-up: " + strings.TrimPrefix(reason, "follow-up: ")
	} else {
		w.due = time.Time{}
	}
	return true, reason
}

// detect names what happened since the last check ("" = nothing).
func (w *churnWatch) detect(now time.Time, members []mesh.Member) string {
	var evs []string
	if !w.lastCheck.IsZero() && now.Sub(w.lastCheck) >= w.cfg.StallAfter {
		evs = append(evs, fmt.Sprintf("stalled %v", now.Sub(w.lastCheck).Round(time.Millisecond)))
	}
	w.lastCheck = now
	if members != nil {
		cur := make(map[string]protocol.MemberState, len(members))
		for _, m := range members {
			if !m.Self {
				cur[m.Name] = m.State
			}
		}
		if w.states != nil {
			names := make([]string, 0, len(cur))
			for name := range cur {
				names = append(names, name)
			}
			sort.Strings(names)
			for _, name := range names {
				prev, now := w.states[name], cur[name]
				switch {
				case now == protocol.MemberAlive && prev != protocol.MemberAlive:
					evs = append(evs, name+" joined")
				case prev == protocol.MemberAlive && now != protocol.MemberAlive:
					evs = append(evs, name+" "+string(now))
				}
			}
			for name, prev := range w.states {
				if _, ok := cur[name]; !ok && prev == protocol.MemberAlive {
					evs = append(evs, name+" gone")
				}
			}
		}
		w.states = cur
	}
	return strings.Join(evs, ", ")
}

// startChurnWatch starts the churn reseed loop (hot-list on, Check > 0).
func (b *Broker) startChurnWatch() {
	if b.hot == nil || b.cfg.Churn.Check <= 0 {
		return
	}
	// A freeze before the first tick is a stall too.
	w := &churnWatch{cfg: b.cfg.Churn, lastCheck: time.Now()}
	log := b.hotLog.Named("churn")
	b.every(b.cfg.Churn.Check, func(time.Time) {
		// The tick's own time is when the runtime sent it, which after a
		// freeze can be the moment the process stopped: read the clock.
		var members []mesh.Member
		if ref := b.mesh.Load(); ref != nil {
			members = ref.h.Members()
		}
		pass, reason := w.check(time.Now(), members)
		if !pass {
			return
		}
		start := time.Now()
		hc := b.hot.Config()
		// DueReseedsBy claims every ring due by then: with the floor interval
		// plus the largest phase ahead, that is every ring not reseeding
		// already (a reseed that began before the event is covered by the
		// follow-up pass). Each keeps its floor phase (Walk.End).
		walks := b.hot.DueReseedsBy(start, start.Add(hc.ReseedInterval+hc.MaxPhase))
		for i, w := range walks {
			select {
			case <-b.life.Done():
				// Closing: release the claims not run, without a pass.
				for _, rest := range walks[i:] {
					rest.End(false, false, time.Now())
				}
				return
			default:
			}
			b.runReseed(w)
			if r := w.Ring(); r.Ready(time.Now()) {
				// Long-polls parked on the stale ring take what it found now
				// rather than at their next re-poll.
				b.gates.notify(r.Key())
			}
		}
		b.churn.passes.Add(1)
		b.churn.reseeds.Add(int64(len(walks)))
		log.Info("reseeded every ring after churn", "reason", reason, "rings", len(walks),
			"took", time.Since(start).Round(time.Millisecond))
		// The pass's own time is not a stall.
		w.lastCheck = time.Now()
	})
}
