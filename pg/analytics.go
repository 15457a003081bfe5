package pg

// Samples for the status and analytics reads (package stats writes them,
// reads/analytics.go reads them; docs/api.md, "Status and analytics").
// No statement here reads queen.messages beyond a primary-key probe per
// partition: queue figures come from partitions.last_offset watermarks and
// consumers.committed_offset cursors.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/jackc/pgx/v5"
)

// NodeSample is one node's figures over one sampling interval: counters
// are deltas since its previous sample, the rest levels.
type NodeSample struct {
	At                                                                    time.Time
	Node                                                                  string
	IntervalMS                                                            int
	Pushes, PushedItems, Duplicates, Pops, PoppedItems, PopsEmpty         int64
	Acks, AcksRefused, DeadLettered, Transactions, CPUUserUS, CPUSystemUS int64
	Parked, PoolMax, PoolTotal, PoolIdle, PoolAcquired, Goroutines        int
	RSSBytes, HeapBytes                                                   int64
	// Mesh and hot-list counters (migration 8), deltas like the above.
	FramesSent, FramesReceived, HintsSent, HintsReceived int64
	Dropped, Gaps, Reseeds                               int64
}

// ParkedSample is the number of long-polls parked on one queue of a node.
type ParkedSample struct {
	Tenant, Queue string
	Parked        int
}

// InsertNodeSample writes a node's sample and its parked long-polls per
// queue, in one transaction.
func (db *DB) InsertNodeSample(ctx context.Context, s NodeSample, parked []ParkedSample) error {
	return db.InTx(ctx, func(t *Tx) error {
		_, err := t.tx.Exec(ctx, `INSERT INTO queen.node_samples (sampled_at, node, interval_ms, pushes,
				pushed_items, duplicates, pops, popped_items, pops_empty, acks, acks_refused, dead_lettered,
				transactions, cpu_user_us, cpu_system_us, parked, pool_max, pool_total, pool_idle,
				pool_acquired, rss_bytes, heap_bytes, goroutines, frames_sent, frames_received, hints_sent,
				hints_received, dropped, gaps, reseeds)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23,
				$24, $25, $26, $27, $28, $29, $30)
			ON CONFLICT DO NOTHING`,
			s.At, s.Node, s.IntervalMS, s.Pushes, s.PushedItems, s.Duplicates, s.Pops, s.PoppedItems, s.PopsEmpty,
			s.Acks, s.AcksRefused, s.DeadLettered, s.Transactions, s.CPUUserUS, s.CPUSystemUS, s.Parked,
			s.PoolMax, s.PoolTotal, s.PoolIdle, s.PoolAcquired, s.RSSBytes, s.HeapBytes, s.Goroutines,
			s.FramesSent, s.FramesReceived, s.HintsSent, s.HintsReceived, s.Dropped, s.Gaps, s.Reseeds)
		if err != nil {
			return fmt.Errorf("insert node sample: %w", err)
		}
		if len(parked) == 0 {
			return nil
		}
		tenants, queues, counts := make([]string, len(parked)), make([]string, len(parked)), make([]int32, len(parked))
		for i, p := range parked {
			tenants[i], queues[i], counts[i] = p.Tenant, p.Queue, int32(p.Parked)
		}
		_, err = t.tx.Exec(ctx, `INSERT INTO queen.parked_samples (tenant, queue, sampled_at, node, parked)
			SELECT t, q, $4, $5, n FROM unnest($1::text[], $2::text[], $3::int[]) AS u(t, q, n)
			ON CONFLICT DO NOTHING`, tenants, queues, counts, s.At, s.Node)
		if err != nil {
			return fmt.Errorf("insert parked samples: %w", err)
		}
		return nil
	})
}

// partitionFigures is one row per partition of the selected queues with
// its watermark and the aggregate of its consumer rows (consumers primary
// key, per partition). $1 is the tenant; callers append their own
// conditions on q and p. pending is what the slowest group has not passed;
// with no group yet, every message.
const partitionFigures = `SELECT q.id AS queue_id, q.tenant, q.name AS queue, q.namespace, q.task, q.priority,
		q.created_at AS queue_created_at, p.id AS partition_id, p.name AS partition, p.created_at,
		p.last_offset, p.last_write_at,
		COALESCE(c.min_committed, 0) AS min_committed, COALESCE(c.sum_committed, 0) AS sum_committed,
		COALESCE(c.processing, 0) AS processing, COALESCE(c.leases, 0) AS leases, c.last_activity,
		greatest(p.last_offset - COALESCE(c.min_committed, 0), 0) AS pending
	FROM queen.queues q
	JOIN queen.partitions p ON p.queue_id = q.id
	LEFT JOIN LATERAL (
		SELECT min(committed_offset) AS min_committed, sum(committed_offset) AS sum_committed,
			sum(CASE WHEN lease_expires_at > now() THEN greatest(batch_end - committed_offset, 0) ELSE 0 END) AS processing,
			count(*) FILTER (WHERE lease_expires_at > now()) AS leases,
			max(updated_at) AS last_activity
		FROM queen.consumers c WHERE c.partition_id = p.id) c ON true`

// SampleQueues takes one queue-sampling round unless another node took one
// less than minGap ago or is taking one now. It writes a row per queue
// whose figures moved, or that has a backlog; took is false when the round
// was skipped. detachedTenant's queues (being deleted) are left out.
//
// One round at a time: a round holds the lease row 'stats-queues' of
// queen.singletons (as retention does, pg/retention.go) for its length,
// renewed at each page and deleted at its end; a node that died mid-round
// frees it after statsRoundLease. A lease row rather than a lock held in an
// open transaction, which would keep its snapshot's xmin and so hold back
// pruning for the round's length (measured: an idle transaction that only
// took an advisory lock still showed its backend_xmin). The round is then
// claimed in one short transaction on the stats_rounds row (the gap is
// decided there, on the database's clock), and sampled in pages of
// sampleQueuePage queues, each page its own short statement; a page that
// fails ends the round, and the queues after it wait for the next one (each
// row's deltas are against the queue's previous row, so none is lost or
// counted twice). One statement
// over every queue held its snapshot for the whole round: at 100,000
// partitions that was 1.2 s idle and 10 s under load, and while it ran
// PostgreSQL could prune none of the row versions the hot path leaves on
// partitions and consumers, so every push, pop and ack walked longer
// version chains (3 nodes on such a database: 1,440 against 3,670
// delivered msgs/s with sampling off; docs/benchmarks.md).
func (db *DB) SampleQueues(ctx context.Context, node string, minGap time.Duration) (took bool, rows int64, err error) {
	token := uuid.NewString()
	lease := func() (bool, error) {
		rs, err := db.pool.Query(ctx, `INSERT INTO queen.singletons AS l (name, holder, node, until)
			VALUES ('stats-queues', $1, $2, now() + make_interval(secs => $3))
			ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, node = excluded.node, until = excluded.until
			WHERE l.until < now() OR l.holder = excluded.holder
			RETURNING 1`, token, node, statsRoundLease.Seconds())
		if err != nil {
			return false, err
		}
		held := rs.Next()
		rs.Close()
		return held, rs.Err()
	}
	// Registered first: a lease whose reply was lost is ours all the same
	// (the DELETE matches only our token). Bounded, as a shutdown waits for it.
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_, _ = db.pool.Exec(dctx, `DELETE FROM queen.singletons WHERE name = 'stats-queues' AND holder = $1`, token)
	}()
	held, err := lease()
	if err != nil {
		return false, 0, fmt.Errorf("queue samples: round lease: %w", err)
	}
	if !held { // another node's round is running
		return false, 0, nil
	}
	var prevRun, at time.Time
	err = db.InTx(ctx, func(t *Tx) error {
		took = false
		_, err := t.tx.Exec(ctx, `INSERT INTO queen.stats_rounds (name, last_at, node)
			VALUES ('queues', now(), $1) ON CONFLICT DO NOTHING`, node)
		if err != nil {
			return fmt.Errorf("queue samples: round row: %w", err)
		}
		// SKIP LOCKED: a node finding the round being claimed right now leaves it.
		// The gap is measured on the database's clock, the one every node shares.
		var fresh, recent bool
		err = t.tx.QueryRow(ctx, `SELECT last_at, last_at = now(), now() - last_at < make_interval(secs => $1), now()
			FROM queen.stats_rounds WHERE name = 'queues' FOR UPDATE SKIP LOCKED`, minGap.Seconds()).Scan(&prevRun, &fresh, &recent, &at)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("queue samples: round: %w", err)
		}
		if !fresh && recent {
			return nil
		}
		if _, err := t.tx.Exec(ctx, `UPDATE queen.stats_rounds SET last_at = now(), node = $1 WHERE name = 'queues'`, node); err != nil {
			return fmt.Errorf("queue samples: round: %w", err)
		}
		took = true
		return nil
	})
	if err != nil || !took {
		return took, 0, err
	}
	after := "00000000-0000-0000-0000-000000000000"
	for {
		var upper string
		if err := db.pool.QueryRow(ctx, `SELECT s.id::text FROM (SELECT q.id FROM queen.queues q
			WHERE q.id > $1::uuid ORDER BY q.id LIMIT $2) s ORDER BY s.id DESC LIMIT 1`, after, sampleQueuePage).Scan(&upper); err != nil {
			if errors.Is(err, pgx.ErrNoRows) { // past the last queue
				return took, rows, nil
			}
			return took, rows, fmt.Errorf("queue samples: page after %s: %w", after, err)
		}
		// renewed at each page; lost only to a round stalled past statsRoundLease
		if held, err := lease(); err != nil {
			return took, rows, fmt.Errorf("queue samples: round lease: %w", err)
		} else if !held {
			return took, rows, errors.New("queue samples: round lease lost to another node")
		}
		tag, err := db.pool.Exec(ctx, sampleQueuesSQL, detachedTenant, prevRun, after, upper, at)
		if err != nil {
			return took, rows, fmt.Errorf("queue samples: page after %s: %w", after, err)
		}
		rows += tag.RowsAffected()
		after = upper
	}
}

// statsRoundLease is how long a queue-sampling round's lease lasts past its
// last renewal (at each page).
const statsRoundLease = 2 * time.Minute

// sampleQueuePage is how many queues one statement of a sampling round
// covers: with 10 partitions each, about 25 ms of PostgreSQL time (a
// variable for the tests).
var sampleQueuePage = 200

// sampleQueuesSQL writes the samples of the queues with an id in
// ($3, $4], all at the round's time $5. Per partition, two primary-key
// probes of queen.messages: the first stored offset (what retention
// trimmed) and the oldest message past the slowest cursor (the lag). A
// queue new since the previous round ($2) counts its whole watermark as
// pushed in this one; an older queue's first row is its baseline.
const sampleQueuesSQL = `WITH f AS (` + partitionFigures + ` WHERE q.tenant <> $1 AND q.id > $3::uuid AND q.id <= $4::uuid),
	per_queue AS (
		SELECT f.queue_id, f.tenant, min(f.queue_created_at) AS created_at,
			sum(f.last_offset)::bigint AS pushed, sum(f.sum_committed)::bigint AS consumed,
			sum(CASE WHEN fo.off IS NULL THEN f.last_offset ELSE fo.off - 1 END)::bigint AS trimmed,
			sum(f.pending)::bigint AS pending, sum(f.processing)::bigint AS processing,
			min(op.created_at) AS oldest_pending_at
		FROM f
		LEFT JOIN LATERAL (SELECT m.off FROM queen.messages m WHERE m.partition_id = f.partition_id
			ORDER BY m.off LIMIT 1) fo ON true
		LEFT JOIN LATERAL (SELECT m.created_at FROM queen.messages m WHERE f.pending > 0
			AND m.partition_id = f.partition_id AND m.off > f.min_committed ORDER BY m.off LIMIT 1) op ON true
		GROUP BY f.queue_id, f.tenant)
	INSERT INTO queen.queue_samples (queue_id, tenant, sampled_at, pushed, consumed, trimmed, pending,
		processing, oldest_pending_at, pushed_delta, consumed_delta, trimmed_delta)
	SELECT a.queue_id, a.tenant, $5::timestamptz, a.pushed, a.consumed, a.trimmed, a.pending, a.processing,
		a.oldest_pending_at,
		CASE WHEN prev.pushed IS NOT NULL THEN greatest(a.pushed - prev.pushed, 0)
			WHEN a.created_at >= $2 THEN a.pushed ELSE 0 END,
		CASE WHEN prev.consumed IS NOT NULL THEN greatest(a.consumed - prev.consumed, 0)
			WHEN a.created_at >= $2 THEN a.consumed ELSE 0 END,
		CASE WHEN prev.trimmed IS NOT NULL THEN greatest(a.trimmed - prev.trimmed, 0)
			WHEN a.created_at >= $2 THEN a.trimmed ELSE 0 END
	FROM per_queue a
	LEFT JOIN LATERAL (SELECT s.pushed, s.consumed, s.trimmed, s.processing FROM queen.queue_samples s
		WHERE s.queue_id = a.queue_id ORDER BY s.sampled_at DESC LIMIT 1) prev ON true
	WHERE prev.pushed IS NULL OR a.pushed <> prev.pushed OR a.consumed <> prev.consumed
		OR a.trimmed <> prev.trimmed OR a.processing <> prev.processing OR a.pending > 0
	ON CONFLICT DO NOTHING`

// TrimSamples deletes samples older than before, at most batch rows per
// table per statement and at most rounds statements per table, so a large
// backlog (a long-stopped cluster) is trimmed over several calls without
// long locks. It returns the rows deleted.
func (db *DB) TrimSamples(ctx context.Context, before time.Time, batch, rounds int) (int64, error) {
	var total int64
	// Each table's time index (or primary key) finds the old rows.
	for _, table := range []string{"node_samples", "queue_samples", "parked_samples"} {
		for i := 0; i < rounds; i++ {
			tag, err := db.pool.Exec(ctx, `DELETE FROM queen.`+table+` WHERE ctid = ANY(ARRAY(
				SELECT ctid FROM queen.`+table+` WHERE sampled_at < $1 LIMIT $2))`, before, batch)
			if err != nil {
				return total, fmt.Errorf("trim %s: %w", table, err)
			}
			total += tag.RowsAffected()
			if tag.RowsAffected() < int64(batch) {
				break
			}
		}
	}
	return total, nil
}

// Range is a time window split into buckets of Bucket.
type Range struct {
	From, To time.Time
	Bucket   time.Duration
}

// bucketExpr is the start of the bucket of column col, with param (e.g.
// "$2") the bucket length in seconds; buckets are aligned to the Unix epoch.
func bucketExpr(col, param string) string {
	return `to_timestamp(floor(extract(epoch FROM ` + col + `) / ` + param + `) * ` + param + `)`
}

// StatusFilter selects a tenant's queues; "" fields do not filter.
type StatusFilter struct{ Queue, Namespace, Task string }

// QueueOpsRow is one queue's (or, with Queue "", the tenant's) figures in
// one bucket, from queen.queue_samples.
type QueueOpsRow struct {
	Bucket                    time.Time
	Queue                     string
	Pushed, Consumed, Trimmed int64
	MaxPending, MaxProcessing int64
	MaxLagSeconds             float64
}

// QueueOps aggregates the tenant's queue samples per bucket, per queue
// (perQueue) or summed over queues. queue_samples_tenant serves the range.
// At most limit rows, newest buckets first.
func (db *DB) QueueOps(ctx context.Context, tenant string, f StatusFilter, r Range, perQueue bool, limit int) ([]QueueOpsRow, error) {
	queueCol := `''` // one series for the tenant
	if perQueue {
		queueCol = `q.name`
	}
	// Per queue first (the lag and the levels are per queue), then summed.
	rs, err := db.pool.Query(ctx, `SELECT bucket, queue, sum(pushed)::bigint, sum(consumed)::bigint, sum(trimmed)::bigint,
			sum(max_pending)::bigint, sum(max_processing)::bigint, COALESCE(max(max_lag), 0)
		FROM (SELECT `+bucketExpr("s.sampled_at", "$2")+` AS bucket, `+queueCol+` AS queue, s.queue_id,
				sum(s.pushed_delta) AS pushed, sum(s.consumed_delta) AS consumed, sum(s.trimmed_delta) AS trimmed,
				max(s.pending) AS max_pending, max(s.processing) AS max_processing,
				max(extract(epoch FROM s.sampled_at - s.oldest_pending_at))::float8 AS max_lag
			FROM queen.queue_samples s JOIN queen.queues q ON q.id = s.queue_id
			WHERE s.tenant = $1 AND q.tenant = $1 AND s.sampled_at >= $3 AND s.sampled_at <= $4
				AND ($5 = '' OR q.name = $5) AND ($6 = '' OR q.namespace = $6) AND ($7 = '' OR q.task = $7)
			GROUP BY 1, 2, 3) per_queue
		GROUP BY 1, 2 ORDER BY 1 DESC, 2 LIMIT $8`,
		tenant, r.Bucket.Seconds(), r.From, r.To, f.Queue, f.Namespace, f.Task, limit)
	if err != nil {
		return nil, fmt.Errorf("queue ops: %w", err)
	}
	defer rs.Close()
	out := []QueueOpsRow{}
	for rs.Next() {
		var o QueueOpsRow
		if err := rs.Scan(&o.Bucket, &o.Queue, &o.Pushed, &o.Consumed, &o.Trimmed, &o.MaxPending, &o.MaxProcessing, &o.MaxLagSeconds); err != nil {
			return nil, fmt.Errorf("queue ops: scan: %w", err)
		}
		out = append(out, o)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("queue ops: %w", err)
	}
	return out, nil
}

// ParkedRow is the long-polls parked on one queue in one bucket: the sum
// over nodes of each node's largest count, and how many nodes had any.
type ParkedRow struct {
	Bucket        time.Time
	Queue         string
	Parked, Nodes int64
}

// ParkedByQueue aggregates the tenant's parked samples per bucket and queue
// (parked_samples primary key: tenant, sampled_at). At most limit rows.
func (db *DB) ParkedByQueue(ctx context.Context, tenant, queue string, r Range, limit int) ([]ParkedRow, error) {
	rs, err := db.pool.Query(ctx, `SELECT bucket, queue, sum(parked)::bigint, count(*)
		FROM (SELECT `+bucketExpr("sampled_at", "$2")+` AS bucket, queue, node, max(parked) AS parked
			FROM queen.parked_samples
			WHERE tenant = $1 AND sampled_at >= $3 AND sampled_at <= $4 AND ($5 = '' OR queue = $5)
			GROUP BY 1, 2, 3) per_node
		GROUP BY 1, 2 ORDER BY 1 DESC, 2 LIMIT $6`, tenant, r.Bucket.Seconds(), r.From, r.To, queue, limit)
	if err != nil {
		return nil, fmt.Errorf("parked by queue: %w", err)
	}
	defer rs.Close()
	out := []ParkedRow{}
	for rs.Next() {
		var p ParkedRow
		if err := rs.Scan(&p.Bucket, &p.Queue, &p.Parked, &p.Nodes); err != nil {
			return nil, fmt.Errorf("parked by queue: scan: %w", err)
		}
		out = append(out, p)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("parked by queue: %w", err)
	}
	return out, nil
}

// NodeMetric is one figure of queen.node_samples as an SQL expression over
// its columns, named by a dotted path in the answer.
type NodeMetric struct{ Path, Expr string }

// SystemMetrics are the levels GET /api/v1/analytics/system-metrics answers, each answered as
// {avg, min, max, last} per bucket under its dotted path.
var SystemMetrics = []NodeMetric{
	{Path: "cpu.percent", Expr: "(cpu_user_us + cpu_system_us) * 100.0 / (interval_ms * 1000.0)"},
	{Path: "cpu.user_us", Expr: "cpu_user_us"},
	{Path: "cpu.system_us", Expr: "cpu_system_us"},
	{Path: "memory.rss_bytes", Expr: "rss_bytes"},
	{Path: "memory.heap_bytes", Expr: "heap_bytes"},
	{Path: "database.pool_max", Expr: "pool_max"},
	{Path: "database.pool_size", Expr: "pool_total"},
	{Path: "database.pool_idle", Expr: "pool_idle"},
	{Path: "database.pool_active", Expr: "pool_acquired"},
	{Path: "longpoll.parked", Expr: "parked"},
	{Path: "runtime.goroutines", Expr: "goroutines"},
	// Per-second rates of a sample's counter deltas, for the dashboard's
	// charts (docs/operations.md, "Dashboard").
	{Path: "requests.pushed_per_s", Expr: perSecond("pushed_items")},
	{Path: "requests.popped_per_s", Expr: perSecond("popped_items")},
	{Path: "requests.acks_per_s", Expr: perSecond("acks")},
	{Path: "mesh.frames_sent_per_s", Expr: perSecond("frames_sent")},
	{Path: "mesh.frames_received_per_s", Expr: perSecond("frames_received")},
	{Path: "mesh.hints_sent_per_s", Expr: perSecond("hints_sent")},
	{Path: "mesh.hints_received_per_s", Expr: perSecond("hints_received")},
	{Path: "mesh.dropped_per_s", Expr: perSecond("dropped")},
	{Path: "mesh.gaps_per_s", Expr: perSecond("gaps")},
	{Path: "hotlist.reseeds_per_s", Expr: perSecond("reseeds")},
}

// perSecond is a counter column's delta over its sample's interval.
func perSecond(col string) string { return col + " * 1000.0 / interval_ms" }

// WorkerMetrics are the counters GET /api/v1/analytics/worker-metrics answers, summed per bucket.
var WorkerMetrics = []NodeMetric{
	{Path: "pushes", Expr: "pushes"},
	{Path: "pushedMessages", Expr: "pushed_items"},
	{Path: "duplicates", Expr: "duplicates"},
	{Path: "pops", Expr: "pops"},
	{Path: "poppedMessages", Expr: "popped_items"},
	{Path: "emptyPops", Expr: "pops_empty"},
	{Path: "acks", Expr: "acks"},
	{Path: "acksRefused", Expr: "acks_refused"},
	{Path: "deadLettered", Expr: "dead_lettered"},
	{Path: "transactions", Expr: "transactions"},
}

// NodeSeriesRow is one node's aggregates in one bucket: for each metric
// asked, (avg, min, max, last) when stats, else its sum.
type NodeSeriesRow struct {
	Bucket  time.Time
	Node    string
	Samples int64
	Values  [][4]float64 // per metric: avg, min, max, last; sums use [0]
}

// NodeSeries aggregates node samples per bucket and node (node_samples
// primary key serves the range). With stats each metric gives avg, min,
// max and last; without, its sum (counter deltas).
func (db *DB) NodeSeries(ctx context.Context, metrics []NodeMetric, stats bool, r Range) ([]NodeSeriesRow, error) {
	var cols []string
	for _, m := range metrics {
		if stats {
			cols = append(cols, fmt.Sprintf(`avg(%[1]s)::float8, min(%[1]s)::float8, max(%[1]s)::float8,
				((array_agg((%[1]s)::float8 ORDER BY sampled_at DESC))[1])`, m.Expr))
		} else {
			cols = append(cols, fmt.Sprintf(`sum(%s)::float8`, m.Expr))
		}
	}
	rs, err := db.pool.Query(ctx, `SELECT `+bucketExpr("sampled_at", "$1")+` AS bucket, node, count(*), `+strings.Join(cols, ", ")+`
		FROM queen.node_samples WHERE sampled_at >= $2 AND sampled_at <= $3
		GROUP BY 1, 2 ORDER BY 2, 1`, r.Bucket.Seconds(), r.From, r.To)
	if err != nil {
		return nil, fmt.Errorf("node series: %w", err)
	}
	defer rs.Close()
	out := []NodeSeriesRow{}
	per := 1
	if stats {
		per = 4
	}
	for rs.Next() {
		row := NodeSeriesRow{Values: make([][4]float64, len(metrics))}
		dst := []any{&row.Bucket, &row.Node, &row.Samples}
		for i := range metrics {
			for j := 0; j < per; j++ {
				dst = append(dst, &row.Values[i][j])
			}
		}
		if err := rs.Scan(dst...); err != nil {
			return nil, fmt.Errorf("node series: scan: %w", err)
		}
		out = append(out, row)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("node series: %w", err)
	}
	return out, nil
}

// PartitionFigures is one partition's figures from its watermark and cursors.
type PartitionFigures struct {
	QueueID, Queue, Namespace, Task        string
	Priority                               int
	QueueCreatedAt                         time.Time
	PartitionID, Partition                 string
	CreatedAt                              time.Time
	LastOffset, MinCommitted, SumCommitted int64
	Pending, Processing, Leases            int64
	LastWriteAt, LastActivity              *time.Time
}

// TenantPartitions returns the figures of every partition of the tenant's
// queues matching f, in queue then partition name order, at most limit.
// partitions_queue_id and the consumers primary key serve it; its cost is
// the number of partitions, never of messages.
func (db *DB) TenantPartitions(ctx context.Context, tenant string, f StatusFilter, limit int) ([]PartitionFigures, error) {
	rs, err := db.pool.Query(ctx, `SELECT queue_id::text, queue, namespace, task, priority, queue_created_at,
			partition_id::text, partition, created_at, last_offset, min_committed, sum_committed::bigint,
			pending, processing::bigint, leases, last_write_at, last_activity
		FROM (`+partitionFigures+` WHERE q.tenant = $1 AND ($2 = '' OR q.name = $2)
			AND ($3 = '' OR q.namespace = $3) AND ($4 = '' OR q.task = $4)) f
		ORDER BY queue, partition LIMIT $5`, tenant, f.Queue, f.Namespace, f.Task, limit)
	if err != nil {
		return nil, fmt.Errorf("partition figures: %w", err)
	}
	defer rs.Close()
	out := []PartitionFigures{}
	for rs.Next() {
		var p PartitionFigures
		if err := rs.Scan(&p.QueueID, &p.Queue, &p.Namespace, &p.Task, &p.Priority, &p.QueueCreatedAt,
			&p.PartitionID, &p.Partition, &p.CreatedAt, &p.LastOffset, &p.MinCommitted, &p.SumCommitted,
			&p.Pending, &p.Processing, &p.Leases, &p.LastWriteAt, &p.LastActivity); err != nil {
			return nil, fmt.Errorf("partition figures: scan: %w", err)
		}
		out = append(out, p)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("partition figures: %w", err)
	}
	return out, nil
}

// StatusQueue is a queue of the tenant with its options.
type StatusQueue struct {
	ID, Name  string
	CreatedAt time.Time
	Config    QueueConfig
}

// TenantQueues returns a page of the tenant's queues matching f, newest
// first (queues (tenant, name) unique index narrows to the tenant).
func (db *DB) TenantQueues(ctx context.Context, tenant string, f StatusFilter, limit, offset int) ([]StatusQueue, error) {
	rs, err := db.pool.Query(ctx, `SELECT id::text, name, created_at, namespace, task, lease_time, retry_limit,
			retry_delay, priority, delayed_processing, window_buffer, max_size, ttl, dead_letter_queue,
			dlq_after_max_retries, retention_seconds, completed_retention_seconds, retention_enabled,
			encryption_enabled, max_wait_time_seconds, dedup_window_seconds
		FROM queen.queues WHERE tenant = $1 AND ($2 = '' OR name = $2)
			AND ($3 = '' OR namespace = $3) AND ($4 = '' OR task = $4)
		ORDER BY created_at DESC, name LIMIT $5 OFFSET $6`, tenant, f.Queue, f.Namespace, f.Task, limit, offset)
	if err != nil {
		return nil, fmt.Errorf("tenant queues: %w", err)
	}
	defer rs.Close()
	out := []StatusQueue{}
	for rs.Next() {
		var q StatusQueue
		c := &q.Config
		if err := rs.Scan(&q.ID, &q.Name, &q.CreatedAt, &c.Namespace, &c.Task, &c.LeaseTime, &c.RetryLimit,
			&c.RetryDelay, &c.Priority, &c.DelayedProcessing, &c.WindowBuffer, &c.MaxSize, &c.TTL,
			&c.DeadLetterQueue, &c.DLQAfterMaxRetries, &c.RetentionSeconds, &c.CompletedRetentionSeconds,
			&c.RetentionEnabled, &c.EncryptionEnabled, &c.MaxWaitTimeSeconds, &c.DedupWindowSeconds); err != nil {
			return nil, fmt.Errorf("tenant queues: scan: %w", err)
		}
		out = append(out, q)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("tenant queues: %w", err)
	}
	return out, nil
}

// DeadLetterCounts returns, per partition of the tenant's queues matching
// f, the dead letters no seek has superseded. dead_letters_message
// (partition_id first) serves the per-partition lookups.
func (db *DB) DeadLetterCounts(ctx context.Context, tenant string, f StatusFilter) (map[string]int64, error) {
	rs, err := db.pool.Query(ctx, `SELECT p.id::text, count(*)
		FROM queen.queues q JOIN queen.partitions p ON p.queue_id = q.id
		JOIN queen.dead_letters d ON d.partition_id = p.id AND NOT d.superseded
		WHERE q.tenant = $1 AND ($2 = '' OR q.name = $2) AND ($3 = '' OR q.namespace = $3) AND ($4 = '' OR q.task = $4)
		GROUP BY p.id`, tenant, f.Queue, f.Namespace, f.Task)
	if err != nil {
		return nil, fmt.Errorf("dead letter counts: %w", err)
	}
	defer rs.Close()
	out := map[string]int64{}
	for rs.Next() {
		var id string
		var n int64
		if err := rs.Scan(&id, &n); err != nil {
			return nil, fmt.Errorf("dead letter counts: scan: %w", err)
		}
		out[id] = n
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("dead letter counts: %w", err)
	}
	return out, nil
}

// QueueMessage is a message of a queue with its state for one group.
type QueueMessage struct {
	ID, TransactionID, PartitionID, Partition, Status string
	CreatedAt                                         time.Time
}

// QueueMessages returns the newest messages of the tenant's queue, newest
// first, with their state for group. Each partition contributes at most
// limit+offset rows, read backwards on the messages primary key from its
// watermark; found is false when the tenant has no such queue.
func (db *DB) QueueMessages(ctx context.Context, tenant, queue, group string, limit, offset int) (msgs []QueueMessage, found bool, err error) {
	var qid string
	err = db.pool.QueryRow(ctx, `SELECT id::text FROM queen.queues WHERE tenant = $1 AND name = $2`, tenant, queue).Scan(&qid)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("queue messages: %w", err)
	}
	rs, err := db.pool.Query(ctx, `SELECT m.id::text, m.transaction_id, p.id::text, p.name, m.created_at,
			CASE WHEN EXISTS (SELECT 1 FROM queen.dead_letters d WHERE d.partition_id = p.id
					AND d.consumer_group = $2 AND d.off = m.off AND NOT d.superseded) THEN 'dead_letter'
				WHEN c.committed_offset IS NOT NULL AND (m.off <= c.committed_offset OR m.off = ANY(c.acked)) THEN 'completed'
				WHEN c.lease_expires_at > now() AND m.off <= c.batch_end THEN 'processing'
				ELSE 'pending' END
		FROM queen.partitions p
		LEFT JOIN queen.consumers c ON c.partition_id = p.id AND c.consumer_group = $2
		CROSS JOIN LATERAL (SELECT * FROM queen.messages m WHERE m.partition_id = p.id
			ORDER BY m.off DESC LIMIT $3) m
		WHERE p.queue_id = $1
		ORDER BY m.created_at DESC, m.off DESC LIMIT $4 OFFSET $5`, qid, group, limit+offset, limit, offset)
	if err != nil {
		return nil, true, fmt.Errorf("queue messages: %w", err)
	}
	defer rs.Close()
	msgs = []QueueMessage{}
	for rs.Next() {
		var m QueueMessage
		if err := rs.Scan(&m.ID, &m.TransactionID, &m.PartitionID, &m.Partition, &m.CreatedAt, &m.Status); err != nil {
			return nil, true, fmt.Errorf("queue messages: scan: %w", err)
		}
		msgs = append(msgs, m)
	}
	if err := rs.Err(); err != nil {
		return nil, true, fmt.Errorf("queue messages: %w", err)
	}
	return msgs, true, nil
}

// PostgresStats is the server's figures for the queen schema, as JSON
// built by PostgreSQL (pg_stat_database, pg_statio_user_tables,
// pg_stat_user_tables, table sizes). Catalog views only: no table is read.
func (db *DB) PostgresStats(ctx context.Context) ([]byte, error) {
	var doc []byte
	err := db.pool.QueryRow(ctx, `SELECT jsonb_build_object(
		'timestamp', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
		'database', current_database(),
		'databaseCache', (SELECT jsonb_build_object('database', datname, 'diskReads', blks_read, 'cacheHits', blks_hit,
				'cacheHitRatio', round(blks_hit::numeric / NULLIF(blks_hit + blks_read, 0) * 100, 2),
				'commits', xact_commit, 'rollbacks', xact_rollback, 'deadlocks', deadlocks,
				'connections', numbackends)
			FROM pg_stat_database WHERE datname = current_database()),
		'tableCache', COALESCE((SELECT jsonb_agg(jsonb_build_object('table', relname, 'diskReads', heap_blks_read,
				'cacheHits', heap_blks_hit,
				'cacheHitRatio', round(heap_blks_hit::numeric / NULLIF(heap_blks_hit + heap_blks_read, 0) * 100, 2))
				ORDER BY relname)
			FROM pg_statio_user_tables WHERE schemaname = 'queen'), '[]'::jsonb),
		'deadTuples', COALESCE((SELECT jsonb_agg(jsonb_build_object('table', relname, 'deadTuples', n_dead_tup,
				'liveTuples', n_live_tup,
				'deadPercentage', round(n_dead_tup::numeric / NULLIF(n_live_tup, 0) * 100, 2),
				'lastVacuum', last_vacuum, 'lastAutovacuum', last_autovacuum,
				'autovacuumCount', autovacuum_count) ORDER BY n_dead_tup DESC, relname)
			FROM pg_stat_user_tables WHERE schemaname = 'queen'), '[]'::jsonb),
		'hotUpdates', COALESCE((SELECT jsonb_agg(jsonb_build_object('table', relname, 'totalUpdates', n_tup_upd,
				'hotUpdates', n_tup_hot_upd,
				'hotUpdatePercentage', round(n_tup_hot_upd::numeric / NULLIF(n_tup_upd, 0) * 100, 2))
				ORDER BY n_tup_upd DESC, relname)
			FROM pg_stat_user_tables WHERE schemaname = 'queen' AND n_tup_upd > 0), '[]'::jsonb),
		'tableSizes', COALESCE((SELECT jsonb_agg(jsonb_build_object('table', c.relname,
				'totalSizeBytes', pg_total_relation_size(c.oid), 'tableSizeBytes', pg_relation_size(c.oid),
				'indexSizeBytes', pg_indexes_size(c.oid)) ORDER BY pg_total_relation_size(c.oid) DESC, c.relname)
			FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = 'queen' AND c.relkind = 'r'), '[]'::jsonb)
	)::text`).Scan(&doc)
	if err != nil {
		return nil, fmt.Errorf("postgres stats: %w", err)
	}
	return doc, nil
}
