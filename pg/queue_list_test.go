package pg

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/hashicorp/go-hclog"

	"queen-node/internal/pgtest"
)

// TestQueueListReadsFewRows: a page of 50 queues with the list's figures
// (oldest pending, groups with their lag, throughput) and a search read a
// bounded number of messages and samples through indexes, never a scan,
// whatever the number of messages (docs/api.md, "Resources, messages and
// consumer groups"). Counted with PostgreSQL's own table statistics, as in
// TestReadsReadFewMessages; the figures themselves are checked too.
func TestQueueListReadsFewRows(t *testing.T) {
	ctx := context.Background()
	db, err := Open(ctx, pgtest.NewDatabase(t), 1, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	// 60 queues of 2 partitions of 1,000 messages; groups g1 (cursor 600,
	// 605 acked) and g2 (cursor 100); 100 samples per queue, the last two a
	// minute apart; the last round is the last sample's.
	for _, q := range []string{
		`INSERT INTO queen.queues (id, tenant, name, namespace)
		 SELECT gen_random_uuid(), 't', 'q' || lpad(i::text, 3, '0'), 'ns' FROM generate_series(1, 57) i`,
		`INSERT INTO queen.queues (id, tenant, name, namespace) VALUES
		 (gen_random_uuid(), 't', 'Needle_a', 'ns'), (gen_random_uuid(), 't', 'needlexb', 'ns'),
		 (gen_random_uuid(), 't', 'plain', 'Hay%Stack'), (gen_random_uuid(), 'other', 'needle_other', 'ns')`,
		`INSERT INTO queen.partitions (id, queue_id, name, last_offset)
		 SELECT gen_random_uuid(), q.id, n, 1000 FROM queen.queues q, unnest(ARRAY['p1', 'p2']) n`,
		`INSERT INTO queen.messages (partition_id, off, id, transaction_id, payload, created_at)
		 SELECT p.id, g, gen_random_uuid(), 'tx' || g, '{}', now() - interval '2 hours' + g * interval '1 s'
		 FROM queen.partitions p, generate_series(1, 1000) g`,
		`INSERT INTO queen.consumer_groups_metadata (queue_id, consumer_group)
		 SELECT id, g FROM queen.queues, unnest(ARRAY['g1', 'g2']) g`,
		`INSERT INTO queen.consumers (partition_id, consumer_group, committed_offset, batch_end, acked)
		 SELECT id, 'g1', 600, 605, '{605}' FROM queen.partitions`,
		`INSERT INTO queen.consumers (partition_id, consumer_group, committed_offset, batch_end)
		 SELECT id, 'g2', 100, 100 FROM queen.partitions`,
		`INSERT INTO queen.queue_samples (queue_id, tenant, sampled_at, pushed, consumed, trimmed, pending,
		     processing, pushed_delta, consumed_delta, trimmed_delta)
		 SELECT q.id, q.tenant, date_trunc('minute', now()) - i * interval '1 minute', 0, 0, 0, 0, 0, 120, 60, 0
		 FROM queen.queues q, generate_series(0, 99) i`,
		`INSERT INTO queen.stats_rounds (name, last_at, node) VALUES ('queues', date_trunc('minute', now()), 'n')`,
		`ANALYZE queen.messages`, `ANALYZE queen.consumers`, `ANALYZE queen.partitions`, `ANALYZE queen.queues`,
		`ANALYZE queen.queue_samples`, `ANALYZE queen.consumer_groups_metadata`,
	} {
		if _, err := db.pool.Exec(ctx, q); err != nil {
			t.Fatalf("seed: %v\n%s", err, q)
		}
	}
	stat := func(table string) (seqScans, fetched int64) {
		t.Helper()
		if _, err := db.pool.Exec(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
			t.Fatal(err)
		}
		if err := db.pool.QueryRow(ctx, `SELECT COALESCE(seq_scan, 0), COALESCE(idx_tup_fetch, 0)
			FROM pg_stat_user_tables WHERE relid = $1::regclass`, table).Scan(&seqScans, &fetched); err != nil {
			t.Fatal(err)
		}
		return seqScans, fetched
	}
	// max fetched per table: a probe per partition (oldest pending) and a
	// walk per (partition, group) that reads one message here; two samples
	// per queue.
	bounds := map[string]int64{"queen.messages": 50 * 2 * 3, "queen.queue_samples": 50 * 2}
	list := func(f QueueFilter) ([]QueueRow, int) {
		t.Helper()
		before := map[string][2]int64{}
		for table := range bounds {
			s, f := stat(table)
			before[table] = [2]int64{s, f}
		}
		rows, total, err := db.ListQueues(ctx, "t", f)
		if err != nil {
			t.Fatalf("list %+v: %v", f, err)
		}
		for table, max := range bounds {
			s, f := stat(table)
			if s != before[table][0] || f-before[table][1] > max {
				t.Fatalf("list: %s: %d sequential scans and %d rows fetched (max %d)", table, s-before[table][0], f-before[table][1], max)
			}
			t.Logf("list %d queues: %s: %d rows fetched", len(rows), table, f-before[table][1])
		}
		return rows, total
	}

	rows, total := list(QueueFilter{Limit: 50})
	if total != 60 || len(rows) != 50 || rows[0].Name != "Needle_a" {
		t.Fatalf("page 1: total %d, %d rows, first %q", total, len(rows), rows[0].Name)
	}
	q := rows[0]
	// the oldest message some group has not passed: offset 101 (g2's cursor + 1)
	if q.OldestPendingAt == nil || q.OldestPendingAgeSeconds < 2*3600-101-60 || q.OldestPendingAgeSeconds > 2*3600-101+60 {
		t.Errorf("oldest pending: %v, %.0f s", q.OldestPendingAt, q.OldestPendingAgeSeconds)
	}
	want := []QueueGroupLag{{Group: "g1", Lag: 2 * (1000 - 600 - 1)}, {Group: "g2", Lag: 2 * (1000 - 100)}}
	ages := []float64{2*3600 - 601, 2*3600 - 101}
	if q.GroupCount != 2 || len(q.Groups) != 2 {
		t.Fatalf("groups: %d, %+v", q.GroupCount, q.Groups)
	}
	for i, g := range q.Groups {
		if g.Group != want[i].Group || g.Lag != want[i].Lag || math.Abs(g.TimeLagSeconds-ages[i]) > 60 {
			t.Errorf("group %d: %+v, want %+v and %.0f s", i, g, want[i], ages[i])
		}
	}
	if tp := q.Throughput; tp == nil || tp.PushedPerSecond != 2 || tp.ConsumedPerSecond != 1 || tp.WindowSeconds != 60 {
		t.Errorf("throughput: %+v", tp)
	}
	if rows, total = list(QueueFilter{Limit: 50, Offset: 50}); total != 60 || len(rows) != 10 {
		t.Fatalf("page 2: total %d, %d rows", total, len(rows))
	}

	// A round after the last sample found nothing moved: zero rates since.
	if _, err := db.pool.Exec(ctx, `UPDATE queen.stats_rounds SET last_at = last_at + interval '2 minutes'`); err != nil {
		t.Fatal(err)
	}
	rows, _ = list(QueueFilter{Limit: 1})
	if tp := rows[0].Throughput; tp == nil || tp.PushedPerSecond != 0 || tp.WindowSeconds != 120 {
		t.Errorf("throughput after an idle round: %+v", tp)
	}

	// Search: a case-insensitive substring of the name or the namespace, in
	// the tenant; LIKE's metacharacters match themselves.
	for _, c := range []struct {
		search string
		want   []string
	}{
		{"NEEDLE", []string{"Needle_a", "needlexb"}},
		{"e_", []string{"Needle_a"}},
		{"%st", []string{"plain"}},
		{`\`, nil},
		{"q05", []string{"q050", "q051", "q052", "q053", "q054", "q055", "q056", "q057"}},
	} {
		rows, total := list(QueueFilter{Search: c.search, Limit: 5})
		var got []string
		for _, r := range rows {
			got = append(got, r.Name)
		}
		if total != len(c.want) || fmt.Sprint(got) != fmt.Sprint(c.want[:min(5, len(c.want))]) {
			t.Errorf("search %q: total %d, %v; want %v", c.search, total, got, c.want)
		}
	}
}
