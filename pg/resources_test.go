package pg

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"queen-node/internal/pgtest"
)

// TestReadsReadFewMessages: every read behind the resource, message and
// consumer-group endpoints, and the message delete, on a queue of 40,000
// messages, reads a handful of them through indexes and never scans the
// table (docs/api.md, "Resources, messages and consumer groups"). It counts
// with PostgreSQL's own table statistics: the pool has one connection, whose
// pending statistics are flushed before each reading.
func TestReadsReadFewMessages(t *testing.T) {
	ctx := context.Background()
	db, err := Open(ctx, pgtest.NewDatabase(t), 1, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	for _, q := range []string{
		`INSERT INTO queen.queues (id, tenant, name, namespace) VALUES (gen_random_uuid(), 't', 'big', 'ns')`,
		`INSERT INTO queen.partitions (id, queue_id, name, last_offset)
		 SELECT gen_random_uuid(), q.id, n, 20000 FROM queen.queues q, unnest(ARRAY['p1', 'p2']) n`,
		`INSERT INTO queen.messages (partition_id, off, id, transaction_id, payload, created_at)
		 SELECT p.id, g, gen_random_uuid(), 'tx' || g, '{}', now() - interval '2 hours' + g * interval '1 ms'
		 FROM queen.partitions p, generate_series(1, 20000) g`,
		`INSERT INTO queen.consumer_groups_metadata (queue_id, consumer_group) SELECT id, 'g' FROM queen.queues`,
		`INSERT INTO queen.consumers (partition_id, consumer_group, committed_offset, batch_end, acked, lease_id, lease_expires_at)
		 SELECT id, 'g', 10000, 10010, '{10005}', 'L', now() + interval '1 hour' FROM queen.partitions`,
		`ANALYZE queen.messages`, `ANALYZE queen.consumers`, `ANALYZE queen.partitions`,
	} {
		if _, err := db.pool.Exec(ctx, q); err != nil {
			t.Fatalf("seed: %v\n%s", err, q)
		}
	}
	var pid string
	if err := db.pool.QueryRow(ctx, `SELECT id::text FROM queen.partitions WHERE name = 'p1'`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	stat := func() (seqScans, fetched int64) {
		t.Helper()
		if _, err := db.pool.Exec(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
			t.Fatal(err)
		}
		if err := db.pool.QueryRow(ctx, `SELECT COALESCE(seq_scan, 0), COALESCE(idx_tup_fetch, 0)
			FROM pg_stat_user_tables WHERE relid = 'queen.messages'::regclass`).Scan(&seqScans, &fetched); err != nil {
			t.Fatal(err)
		}
		return seqScans, fetched
	}
	check := func(what string, maxFetched int64, op func() error) {
		t.Helper()
		seq0, f0 := stat()
		if err := op(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		seq1, f1 := stat()
		if seq1 != seq0 || f1-f0 > maxFetched {
			t.Fatalf("%s: %d sequential scans and %d messages fetched (max %d)", what, seq1-seq0, f1-f0, maxFetched)
		}
		t.Logf("%s: %d messages fetched", what, f1-f0)
	}

	check("overview", 0, func() error {
		o, err := db.Overview(ctx, "t")
		if err == nil && (o.Counts.Total != 40000 || o.Counts.Processing != 18 || o.Counts.Pending != 19980 || o.Counts.Completed != 20002) {
			t.Errorf("overview counts: %+v", o.Counts)
		}
		return err
	})
	// list queues: per partition the oldest pending message and the group's first unresolved one
	check("list queues", 4, func() error { _, _, err := db.ListQueues(ctx, "t", QueueFilter{Limit: 10}); return err })
	check("namespaces", 0, func() error { _, err := db.ListNamespaces(ctx, "t"); return err })
	check("queue detail", 4, func() error { _, err := db.GetQueue(ctx, "t", "big", DetailOpts{}); return err })
	check("groups", 4, func() error {
		g, err := db.ListGroups(ctx, "t", GroupFilter{Limit: 10})
		if err == nil && (len(g) != 1 || g[0].Lag != 19998 || g[0].MaxLagSeconds < 3600) {
			t.Errorf("groups: %+v", g)
		}
		return err
	})
	check("group cursors", 4, func() error { _, err := db.GroupCursors(ctx, "t", "g"); return err })
	check("lagging", 4, func() error {
		l, err := db.Lagging(ctx, "t", time.Hour, 10)
		if err == nil && len(l) != 2 {
			t.Errorf("lagging: %+v", l)
		}
		return err
	})
	for _, st := range []string{"", "pending", "processing", "completed"} {
		check("messages "+st, 20+5, func() error {
			m, _, err := db.ListMessages(ctx, "t", MessageFilter{Queue: "big", Group: "g", Status: st, Limit: 20, Offset: 5})
			if err == nil && len(m) != 20 && st != "processing" {
				t.Errorf("messages %q: %d rows", st, len(m))
			}
			return err
		})
	}
	check("get message", 1, func() error { _, err := db.GetMessage(ctx, "t", pid, "tx15000", "g"); return err })
	check("delete message", 4, func() error { _, err := db.DeleteMessage(ctx, "t", pid, "tx15000"); return err })
}
