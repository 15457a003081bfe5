package api

import (
	"sync"
	"time"

	"github.com/google/uuid"

	"queen-node/broker"
	"queen-node/forward"
)

// The forwarding side of claims taken ahead (docs/api.md, "Claims taken
// ahead"). A consumer of a queue another node owns has its pops and acks
// forwarded there (api/forward.go), each pop under a lease this node
// chose. When such a consumer acks, this node picks the lease id of its
// next pop now and sends it with the forwarded ack
// (forward.NextLeaseHeader); the owner takes that pop's claim ahead under
// it, in the ack's flight. The next pop of the same line (queue, group,
// batch, partitions, lease time, subscription) is forwarded under that
// lease and the owner answers it with the claim. A lease not used within
// aheadTTL is dropped here (the owner releases its claim a little later,
// prefetchTTL in broker/prefetch.go); if it is used later after all, the
// owner claims under it as for any lease. Each line keeps a score as the
// owner's lines do, so consumers that do not pop again at once cost a
// claim and a release now and then, not every cycle.
type aheadLeases struct {
	mu     sync.Mutex
	served map[string]aheadServed // lease of a forwarded pop -> its line
	lines  map[aheadKey]*aheadLine
}

// aheadKey is a pop's line: what the owner's claim shares with it.
type aheadKey struct {
	tenant, queue, group         string
	batch, partitions, leaseSecs int
	subMode                      string
}

type aheadServed struct {
	key aheadKey
	at  time.Time
}

type aheadLine struct {
	next  []aheadNext // oldest first
	score int
}

type aheadNext struct {
	lease string
	until time.Time
}

// Bounds: the leases kept per line, the forwarded pops remembered, and
// how long an asked lease is used. aheadTTL counts from the ack's answer
// here, the owner's prefetchTTL (250 ms) from its claim's answer, a
// little earlier: aheadTTL is shorter so that a lease is seldom used
// while the owner releases its claim (a pop under it then waits for the
// release, broker/prefetch.go).
const (
	aheadPerLine   = 64
	aheadMaxServed = 100_000
	aheadMaxLines  = 4096
	aheadTTL       = 200 * time.Millisecond
	aheadScoreMax  = 8
	aheadScoreLost = 8
)

func newAheadLeases() *aheadLeases {
	return &aheadLeases{served: map[string]aheadServed{}, lines: map[aheadKey]*aheadLine{}}
}

// aheadKeyOf is the line of a forwarded pop; false for a pop of a named
// partition or an autoAck pop (never taken ahead).
func aheadKeyOf(tenant string, req *broker.PopRequest) (aheadKey, bool) {
	if req.Partition != "" || req.AutoAck {
		return aheadKey{}, false
	}
	return aheadKey{tenant: tenant, queue: req.Queue, group: req.Group, batch: req.Batch,
		partitions: req.Partitions, leaseSecs: req.LeaseSeconds, subMode: req.SubscriptionMode}, true
}

// leaseFor is the lease to forward a pop of key under: one asked for with
// an earlier ack, or "" (the caller picks a fresh one).
func (a *aheadLeases) leaseFor(key aheadKey, now time.Time) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	l := a.lines[key]
	if l == nil {
		return ""
	}
	a.expireLocked(l, now)
	l.score = min(l.score+1, aheadScoreMax) // a pop came: asking ahead pays
	if len(l.next) == 0 {
		return ""
	}
	n := l.next[0]
	l.next = l.next[1:]
	return n.lease
}

// expireLocked drops a line's leases past their time, each lowering its
// score: a claim the owner took for nobody.
func (a *aheadLeases) expireLocked(l *aheadLine, now time.Time) {
	for len(l.next) > 0 && !now.Before(l.next[0].until) {
		l.next = l.next[1:]
		l.score -= aheadScoreLost
	}
}

// servedPop records that a pop of key was forwarded and answered under
// lease, so that its ack can ask for the next.
func (a *aheadLeases) servedPop(lease string, key aheadKey, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.served) >= aheadMaxServed {
		// Leases never acked (their clients left, or acked elsewhere):
		// those older than a minute go, and others until a tenth is free,
		// so that a full map costs one pass per many pops.
		for l, s := range a.served {
			if now.Sub(s.at) > time.Minute || len(a.served) >= aheadMaxServed*9/10 {
				delete(a.served, l)
			}
		}
	}
	a.served[lease] = aheadServed{key: key, at: now}
}

// aheadAsk is what ask picked: the pairs to send (acked lease -> next)
// and each next lease's line, for commit.
type aheadAsk struct {
	next  map[string]string
	lines map[string]aheadKey // by acked lease
}

// ask picks the next lease of each line whose pop the items ack. The
// leases are used only once commit saw their ack answered: the owner
// takes a claim ahead while it handles the ack, and a pop forwarded
// under the lease before that (another client of the line) would claim
// under it first.
func (a *aheadLeases) ask(items []broker.AckItem, now time.Time) aheadAsk {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out aheadAsk
	for _, it := range items {
		s, ok := a.served[it.LeaseID]
		if !ok || len(out.next) == forward.MaxNextLeases {
			continue
		}
		delete(a.served, it.LeaseID) // one ask per pop
		if l := a.lines[s.key]; l != nil {
			a.expireLocked(l, now)
			if l.score <= 0 || len(l.next) >= aheadPerLine {
				continue
			}
		}
		if out.next == nil {
			out.next, out.lines = map[string]string{}, map[string]aheadKey{}
		}
		out.next[it.LeaseID] = uuid.NewString()
		out.lines[it.LeaseID] = s.key
	}
	return out
}

// commit makes the leases of ask usable whose acked items were all
// answered success (each then surely reached the owner's CAS ack, which
// took the claim ahead, if any, before answering).
func (a *aheadLeases) commit(ask aheadAsk, items []broker.AckItem, res []broker.AckResult, now time.Time) {
	if len(ask.next) == 0 {
		return
	}
	ok := map[string]bool{}
	for i, it := range items {
		if _, asked := ask.next[it.LeaseID]; !asked {
			continue
		}
		good := i < len(res) && res[i].Success
		if prev, seen := ok[it.LeaseID]; !seen || prev {
			ok[it.LeaseID] = good
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for acked, next := range ask.next {
		if !ok[acked] {
			continue
		}
		key := ask.lines[acked]
		l := a.lines[key]
		if l == nil {
			if len(a.lines) >= aheadMaxLines {
				for k, x := range a.lines {
					if len(x.next) == 0 {
						delete(a.lines, k)
					}
				}
				if len(a.lines) >= aheadMaxLines {
					continue
				}
			}
			l = &aheadLine{score: 1}
			a.lines[key] = l
		}
		if len(l.next) < aheadPerLine {
			l.next = append(l.next, aheadNext{lease: next, until: now.Add(aheadTTL)})
		}
	}
}

// prefetching tells whether this node takes claims ahead (and so asks
// owners to).
func (s *Server) prefetching() bool { return s.b.Prefetching() }
