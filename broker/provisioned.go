package broker

import (
	"sync"

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
// (requeue) waits for its next claim. Both maps are bounded; overflowing
// one forgets (part of) it, which costs an INSERT, nothing else.
type provisioned struct {
	mu   sync.Mutex
	sets map[provKey]*provSet
}

type provKey struct{ tenant, queue, group string }

type provSet struct {
	queueID string
	names   map[string]struct{}
}

const (
	provMaxSets  = 4096 // (queue, group) pairs remembered
	provMaxNames = 8192 // partition names per pair
)

func newProvisioned() *provisioned {
	return &provisioned{sets: map[provKey]*provSet{}}
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
			for k := range p.sets { // forget an arbitrary pair
				delete(p.sets, k)
				break
			}
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
			if len(s.names) >= provMaxNames {
				clear(s.names)
			}
			s.names[v.Name] = struct{}{}
		}
	}
}
