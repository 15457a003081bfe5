package broker

import (
	"sync"
	"time"

	"queen-node/pg"
	"queen-node/protocol"
)

// provisioned remembers, per (tenant, queue, group), the partition names
// known to have the group's consumer row, so that a claim can tell the
// claim core which candidates may lack one (pg.PopArgs.Unprov) and the
// core skips its provisioning INSERT when none can: with every row present
// that statement was the most expensive of a pop (issue 20).
//
// It learns from verdicts that imply a row (took, leased, and empty on an
// existing partition: the core locked the row, or made it). Knowledge is
// dropped when the queue id changes (deleted and made again) or the group
// marker was made by the call (a new or deleted group). A stale name is
// harmless: the core's claim loop still provisions a missing row on first
// sight, as pop_v1 did; only the row of a candidate left unevaluated
// (requeue) waits for its next claim. Its maps are bounded: past
// provMaxSets pairs, or provMaxTotal names, an arbitrary other pair is
// forgotten, and a full set learns no more names, which costs the claims of
// the names it lacks a claim alone each (pop_v3 where the row is missing).
//
// It also decides when a pair is worth a bulk provisioning (provision.go):
// a claim that meets candidates not known to have their row queues the
// pair, unless a pass is queued or running, or the last one ended less
// than provBulkMinGap ago, or, when it made rows for less than a
// provBulkGapFactor-th of the partitions it read, less than
// provBulkGapFactor times its own length: a queue whose partitions keep
// appearing (a new queue being filled) is passed over again soon, while a
// provisioned queue of 100,000 partitions (about a second a pass) is passed
// over at most every 20 s. The times live apart from the sets (next), so
// forgetting a set does not forget them.
type provisioned struct {
	mu    sync.Mutex
	sets  map[provKey]*provSet
	total int                   // names over all sets, bounded by provMaxTotal
	want  map[provKey]struct{}  // pairs queued for a bulk provisioning or in one, until bulkDone
	took  map[provKey]struct{}  // the pairs of want the loop took
	next  map[provKey]time.Time // a pair may be queued again from then on; at most provMaxSets
	now   func() time.Time
}

type provKey struct{ tenant, queue, group string }

type provSet struct {
	queueID string
	names   map[string]struct{}
}

const (
	provMaxSets       = 4096      // (queue, group) pairs remembered
	provMaxNames      = 100_000   // partition names per pair
	provMaxTotal      = 1_000_000 // partition names over all pairs (100 to 350 MB, by name length)
	provBulkMinGap    = 50 * time.Millisecond
	provBulkGapFactor = 20
	provBulkHold      = time.Minute // while a pass is queued or running (bounds a lost one)
)

func newProvisioned() *provisioned {
	return &provisioned{sets: map[provKey]*provSet{}, want: map[provKey]struct{}{}, took: map[provKey]struct{}{},
		next: map[provKey]time.Time{}, now: time.Now}
}

// unprov returns the candidates of args not known to have a consumer row:
// nil when nothing is known (every candidate, and always for the wildcard
// scan, which finds the missing rows itself), else a non-nil slice.
func (p *provisioned) unprov(args pg.PopArgs) []string {
	if args.Names == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.sets[provKey{args.Tenant, args.Queue, args.Group}]
	if s == nil {
		return nil
	}
	out := []string{}
	for _, n := range args.Names {
		if _, ok := s.names[n]; !ok {
			out = append(out, n)
		}
	}
	return out
}

// queueBulk queues the pair of args for a bulk provisioning when the set
// is known (the group's marker exists) and a pass is due. It reports
// whether it queued it.
func (p *provisioned) queueBulk(args pg.PopArgs) bool {
	key := provKey{args.Tenant, args.Queue, args.Group}
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.sets[key]
	if s == nil {
		return false
	}
	now := p.now()
	if now.Before(p.next[key]) || len(s.names) >= provMaxNames {
		return false // not due, or a pass could record nothing more
	}
	if _, queued := p.want[key]; queued || len(p.want) >= provMaxSets {
		return false
	}
	if _, ok := p.next[key]; !ok && len(p.next) >= provMaxSets {
		for k, t := range p.next { // make room: times that passed say nothing
			if _, busy := p.want[k]; !busy && !now.Before(t) {
				delete(p.next, k)
			}
		}
		if len(p.next) >= provMaxSets {
			return false
		}
	}
	p.next[key] = now.Add(provBulkHold)
	p.want[key] = struct{}{}
	return true
}

// bulkDone records that a pass over the pair ran from start to end, read
// scanned partitions and made rows consumer rows; failed: it ended on an
// error.
func (p *provisioned) bulkDone(key provKey, start, end time.Time, scanned, rows int, failed bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.want, key)
	delete(p.took, key)
	gap := provBulkMinGap
	switch {
	case failed:
		gap = provBulkHold
	case rows*provBulkGapFactor < scanned || rows == 0:
		gap = max(gap, provBulkGapFactor*end.Sub(start))
	}
	p.next[key] = end.Add(gap)
}

// takeWanted returns the pairs queued and not yet taken. They stay in
// want until bulkDone, so a claim cannot queue a pair whose pass is
// waiting or running.
func (p *provisioned) takeWanted() []provKey {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []provKey
	for k := range p.want {
		if _, ok := p.took[k]; !ok {
			out = append(out, k)
			p.took[k] = struct{}{}
		}
	}
	return out
}

// learnNames records the names of one bulk provisioning page, unless the
// pair's knowledge was dropped or is of another queue id meanwhile. It
// stops when the set is full: a pass over a queue larger than the bound
// must not forget what the claims learnt (add).
func (p *provisioned) learnNames(key provKey, queueID string, names []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.sets[key]
	if s == nil || s.queueID != queueID {
		return
	}
	for _, n := range names {
		p.add(s, n)
	}
}

// add records one name in s unless s is full: a full set keeps what it
// holds (a name it lacks costs its claim a call alone) rather than
// starting over and losing what a pass taught it. Past provMaxTotal another
// arbitrary set is forgotten, so pairs that come later can still learn
// (a forgotten pair's pass timing stays in next).
func (p *provisioned) add(s *provSet, name string) {
	if _, ok := s.names[name]; ok || len(s.names) >= provMaxNames {
		return
	}
	for p.total >= provMaxTotal {
		dropped := false
		for k, o := range p.sets {
			if o != s {
				p.total -= len(o.names)
				delete(p.sets, k)
				dropped = true
				break
			}
		}
		if !dropped {
			return
		}
	}
	s.names[name] = struct{}{}
	p.total++
}

// learn records the rows a committed claim showed to exist.
func (p *provisioned) learn(args pg.PopArgs, out *pg.PopOutcome) {
	if out == nil || out.QueueID == "" {
		return
	}
	key := provKey{args.Tenant, args.Queue, args.Group}
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.sets[key]
	if s == nil || s.queueID != out.QueueID || !out.Seeded {
		if s == nil && len(p.sets) >= provMaxSets {
			for k, o := range p.sets { // forget an arbitrary pair
				p.total -= len(o.names)
				delete(p.sets, k)
				break
			}
		}
		if s != nil {
			p.total -= len(s.names)
		}
		s = &provSet{queueID: out.QueueID, names: map[string]struct{}{}}
		p.sets[key] = s
	}
	for _, v := range out.Verdicts {
		if v.PartitionID == "" {
			continue
		}
		switch v.Kind {
		case protocol.VerdictTook, protocol.VerdictLeased, protocol.VerdictEmpty:
			p.add(s, v.Name)
		}
	}
}
