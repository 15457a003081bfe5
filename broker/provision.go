package broker

import (
	"context"

	"queen-node/pg"
)

// provisionPage is how many partitions one bulk provisioning statement
// covers: a page of queen.provision_group_v1 costs a few ms, against about
// 3 ms of queen.pop_v3 per partition when each is provisioned by its first
// claim.
const provisionPage = 1000

// The bulk provisioning (docs/storage.md, "Bulk provisioning"). A claim
// whose candidates include partitions not known to have the group's
// consumer row runs alone as queen.pop_v3, which creates the rows of its
// few candidates. On a queue of many partitions that is one general claim
// per partition, each ~3 ms of PostgreSQL, before claims can take the
// fast statement and join the pop combiner (issue 20, goal 4: the first
// 15 s of 1,000 partitions spent 3.4 s of PostgreSQL in 1,000 such calls).
// So such a claim also queues its (queue, group) here (when a pass is due,
// provisioned.queueBulk), and one loop creates the missing rows of the whole queue
// page by page and teaches the node their names. The claims go on as
// before meanwhile; only their cost changes.

// kickProvision queues the pair of args when it is due and wakes the loop.
func (b *Broker) kickProvision(args pg.PopArgs) {
	if !b.cfg.BulkProvision || !b.prov.queueBulk(args) {
		return
	}
	select {
	case b.provKick <- struct{}{}:
	default:
	}
}

// provisionLoop runs the queued bulk provisionings, one pair at a time.
func (b *Broker) provisionLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-b.provKick:
		}
		for _, key := range b.prov.takeWanted() {
			if ctx.Err() != nil {
				return
			}
			start := b.prov.now()
			scanned, rows, failed := b.provisionAll(ctx, key)
			b.prov.bulkDone(key, start, b.prov.now(), scanned, rows, failed)
		}
	}
}

// provisionAll creates the group's missing rows on every partition of the
// queue, page by page, and records the names. It returns how many
// partitions it read and rows it made. An error ends the pass (failed):
// the claims keep provisioning their own candidates, and a claim queues
// the pair again a minute later.
func (b *Broker) provisionAll(ctx context.Context, key provKey) (scanned, rows int, failed bool) {
	after := ""
	for {
		page, err := b.db.ProvisionGroup(ctx, key.tenant, key.queue, key.group, after, provisionPage)
		if err != nil {
			if ctx.Err() == nil {
				b.log.Warn("bulk provisioning failed; claims provision their own partitions", "queue", key.queue,
					"group", key.group, "error", err)
			}
			return scanned, rows, true
		}
		b.stats.RowsProvisioned.Add(int64(page.New))
		rows += page.New
		scanned += len(page.Names)
		if page.QueueID == "" {
			return scanned, rows, false // no queue, or no group marker (deleted meanwhile)
		}
		b.prov.learnNames(key, page.QueueID, page.Names)
		if len(page.Names) < provisionPage {
			return scanned, rows, false
		}
		after = page.LastID
	}
}
