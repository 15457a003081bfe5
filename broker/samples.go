package broker

// The node core's side of the stats sampler (docs/operations.md,
// "Samples"): the parked long-polls only the broker knows, and the sample
// writes. The reads of the samples are package reads'. The row types are
// package pg's, re-exported: they are plain data and have one definition.

import (
	"context"
	"sort"
	"time"

	"queen-node/hotlist"
	"queen-node/pg"
)

// Row types of the sampler.
type (
	NodeSample   = pg.NodeSample
	ParkedSample = pg.ParkedSample
)

// NodeName is the name this node writes its samples under.
func (b *Broker) NodeName() string { return b.cfg.NodeName }

// ParkedQueues returns the queues with long-polls parked on this node now,
// busiest first, at most limit. It takes the gates' lock once, like
// Snapshot's parked count.
func (b *Broker) ParkedQueues(limit int) []ParkedSample {
	b.gates.mu.Lock()
	type parked struct {
		key  hotlist.Key
		refs int
	}
	keys := make([]parked, 0, len(b.gates.m))
	for key, g := range b.gates.m {
		if g.refs > 0 {
			keys = append(keys, parked{key, g.refs})
		}
	}
	b.gates.mu.Unlock()
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].refs != keys[j].refs {
			return keys[i].refs > keys[j].refs
		}
		return keys[i].key.Less(keys[j].key)
	})
	out := make([]ParkedSample, len(keys))
	for i, p := range keys {
		tenant, queue := p.key.Split()
		out[i] = ParkedSample{Tenant: tenant, Queue: queue, Parked: p.refs}
	}
	if len(out) > limit {
		out = out[:limit]
	}
	return out
}

// WriteNodeSample stores this node's sample and its parked long-polls.
func (b *Broker) WriteNodeSample(ctx context.Context, s NodeSample, parked []ParkedSample) error {
	return wrap(b.db.InsertNodeSample(ctx, s, parked))
}

// SampleQueues takes a queue-sampling round unless another node took one
// less than minGap ago.
func (b *Broker) SampleQueues(ctx context.Context, minGap time.Duration) (took bool, rows int64, err error) {
	took, rows, err = b.db.SampleQueues(ctx, b.cfg.NodeName, minGap)
	return took, rows, wrap(err)
}

// TrimSamples deletes samples older than before in bounded batches.
func (b *Broker) TrimSamples(ctx context.Context, before time.Time, batch, rounds int) (int64, error) {
	n, err := b.db.TrimSamples(ctx, before, batch, rounds)
	return n, wrap(err)
}

// MaxPopBytes is the bound of one pop response's payload bytes
// (Config.MaxPopBytes; 0: none).
func (b *Broker) MaxPopBytes() int64 { return b.cfg.MaxPopBytes }
