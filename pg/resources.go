package pg

import (
	"context"
	"errors"
	"fmt"
	"queen-node/protocol"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Reads and edits behind the EXTENDED resource, message and consumer-group
// endpoints (docs/api.md, "Resources, messages and consumer groups"). None
// of them counts messages: counts come from the partition watermark
// (partitions.last_offset) and the group cursors (consumers.committed_offset
// and acked), and the only message reads are primary-key probes or ranges
// with a LIMIT.

// ErrNotFound is returned when the named queue, partition or message does
// not exist in the caller's tenant.
var ErrNotFound = errors.New("not found")

// Counts are a set of partitions' message counts, from watermarks and
// cursors (offsets, so upper bounds where duplicates or deletes left holes).
// Per partition they are those of its most-behind consumer group; a
// partition no group has a cursor on counts every message pending.
type Counts struct {
	Total, Pending, Processing, Completed, DeadLetter int64
}

// partCountsJoin joins, to a partition aliased p, its most-behind group's
// unresolved and in-lease counts (consumers primary key, partition_id
// prefix) and its dead-letter count (dead_letters_message, partition_id
// prefix). partCountsCols turns them into the five Counts columns.
const partCountsJoin = `
	LEFT JOIN LATERAL (
		SELECT max(GREATEST(0, p.last_offset - c.committed_offset - cardinality(c.acked))) AS unresolved,
		       max(CASE WHEN c.lease_expires_at > clock_timestamp()
		                THEN GREATEST(0, LEAST(c.batch_end, p.last_offset) - c.committed_offset
		                     - (SELECT count(*) FROM unnest(c.acked) x WHERE x <= c.batch_end))
		                ELSE 0 END) AS processing
		FROM queen.consumers c WHERE c.partition_id = p.id) g ON true
	LEFT JOIN LATERAL (
		SELECT count(*) AS dead FROM queen.dead_letters d
		WHERE d.partition_id = p.id AND NOT d.superseded) dl ON true`

const partCountsCols = `p.last_offset AS total,
	COALESCE(g.unresolved, p.last_offset) - LEAST(COALESCE(g.processing, 0), COALESCE(g.unresolved, p.last_offset)) AS pending,
	LEAST(COALESCE(g.processing, 0), COALESCE(g.unresolved, p.last_offset)) AS processing,
	p.last_offset - COALESCE(g.unresolved, p.last_offset) AS completed,
	dl.dead AS dead_letter`

// sumCounts sums the five columns of a subquery s built from partCountsCols.
const sumCounts = `COALESCE(sum(s.total), 0)::bigint, COALESCE(sum(s.pending), 0)::bigint,
	COALESCE(sum(s.processing), 0)::bigint, COALESCE(sum(s.completed), 0)::bigint,
	COALESCE(sum(s.dead_letter), 0)::bigint`

// firstUnresolvedJoin finds, for a consumer row c of a partition p, the
// creation time of the first message past its cursor that it has not
// resolved: one walk of the messages primary key from the cursor that skips
// only the offsets in c.acked, and only when the watermark is past the
// cursor.
const firstUnresolvedJoin = `
	LEFT JOIN LATERAL (
		SELECT m.created_at FROM queen.messages m
		WHERE c.partition_id IS NOT NULL AND p.last_offset > c.committed_offset
		  AND m.partition_id = c.partition_id AND m.off > c.committed_offset AND NOT (m.off = ANY (c.acked))
		ORDER BY m.off LIMIT 1) f ON true`

// Overview is the tenant's totals.
type Overview struct {
	Queues, Partitions, Namespaces, Tasks int64
	Counts                                Counts
}

// Overview sums every partition of the tenant's queues (queues (tenant,
// name) unique index, then partitions_queue_id).
func (db *DB) Overview(ctx context.Context, tenant string) (Overview, error) {
	var o Overview
	c := &o.Counts
	err := db.pool.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM queen.queues WHERE tenant = $1),
			(SELECT count(DISTINCT namespace) FROM queen.queues WHERE tenant = $1 AND namespace <> ''),
			(SELECT count(DISTINCT task) FROM queen.queues WHERE tenant = $1 AND task <> ''),
			count(*), `+sumCounts+`
		FROM (SELECT `+partCountsCols+`
		      FROM queen.queues q JOIN queen.partitions p ON p.queue_id = q.id `+partCountsJoin+`
		      WHERE q.tenant = $1) s`, tenant).
		Scan(&o.Queues, &o.Namespaces, &o.Tasks, &o.Partitions, &c.Total, &c.Pending, &c.Processing, &c.Completed, &c.DeadLetter)
	if err != nil {
		return Overview{}, fmt.Errorf("overview: %w", err)
	}
	return o, nil
}

// QueueRow is a queue with its partition count and counts.
type QueueRow struct {
	ID, Name, Namespace, Task string
	Priority                  int
	CreatedAt                 time.Time
	Partitions                int64
	Counts                    Counts

	// Filled by ListQueues only (the dashboard's queue list).
	OldestPendingAt         *time.Time // the oldest message past the slowest cursor of some partition; nil = none
	OldestPendingAgeSeconds float64    // its age on the database's clock, 0 when none
	GroupCount              int64      // consumer groups on the queue
	Groups                  []QueueGroupLag
	Throughput              *Throughput // nil until the queue-sampling rounds wrote two rows for it
}

// QueueGroupLag is one consumer group's lag on a queue, as ListGroups
// computes it.
type QueueGroupLag struct {
	Group          string
	Lag            int64
	TimeLagSeconds float64
}

// Throughput is a queue's rates over the window between its last two
// queue samples (queen.queue_samples), or since its last sample up to the
// last round when that round found nothing moved.
type Throughput struct {
	PushedPerSecond, ConsumedPerSecond, WindowSeconds float64
	SampledAt                                         time.Time // the end of the window
}

// QueueFilter selects and pages ListQueues.
type QueueFilter struct {
	Namespace, Task string // "" = any
	Search          string // "" = any; else a case-insensitive substring of the name or the namespace
	Limit, Offset   int
}

// MaxListGroups bounds the groups ListQueues returns per queue.
const MaxListGroups = 10

// likePattern makes s a LIKE pattern matching any text containing s: the
// metacharacters of s (and the escape character) are escaped with \.
func likePattern(s string) string {
	return "%" + strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(s) + "%"
}

// ListQueues returns one page of the tenant's queues in name (byte) order,
// and how many match in all.
func (db *DB) ListQueues(ctx context.Context, tenant string, f QueueFilter) ([]QueueRow, int, error) {
	// The search reads the tenant's queue rows (the queues table, never a
	// message); no index serves a substring, and the tenant's queues are
	// what the list pages through anyway.
	search := ""
	if f.Search != "" {
		search = likePattern(f.Search)
	}
	var total int
	if err := db.pool.QueryRow(ctx, `SELECT count(*) FROM queen.queues
		WHERE tenant = $1 AND ($2 = '' OR namespace = $2) AND ($3 = '' OR task = $3)
		  AND ($4 = '' OR name ILIKE $4 OR namespace ILIKE $4)`,
		tenant, f.Namespace, f.Task, search).Scan(&total); err != nil {
		return nil, 0, fmt.Errorf("count queues: %w", err)
	}
	rs, err := db.pool.Query(ctx, `WITH qs AS (
			SELECT q.id, q.name, q.namespace, q.task, q.priority, q.created_at FROM queen.queues q
			WHERE q.tenant = $1 AND ($2 = '' OR q.namespace = $2) AND ($3 = '' OR q.task = $3)
			  AND ($6 = '' OR q.name ILIKE $6 OR q.namespace ILIKE $6)
			ORDER BY q.name COLLATE "C" LIMIT $4 OFFSET $5)
		SELECT qs.id::text, qs.name, qs.namespace, qs.task, qs.priority, qs.created_at,
		       count(s.total), `+sumCounts+`
		FROM qs LEFT JOIN LATERAL (SELECT `+partCountsCols+`
		      FROM queen.partitions p `+partCountsJoin+` WHERE p.queue_id = qs.id) s ON true
		GROUP BY qs.id, qs.name, qs.namespace, qs.task, qs.priority, qs.created_at
		ORDER BY qs.name COLLATE "C"`, tenant, f.Namespace, f.Task, f.Limit, f.Offset, search)
	if err != nil {
		return nil, 0, fmt.Errorf("list queues: %w", err)
	}
	out, err := pgx.CollectRows(rs, func(r pgx.CollectableRow) (QueueRow, error) {
		var q QueueRow
		c := &q.Counts
		err := r.Scan(&q.ID, &q.Name, &q.Namespace, &q.Task, &q.Priority, &q.CreatedAt, &q.Partitions,
			&c.Total, &c.Pending, &c.Processing, &c.Completed, &c.DeadLetter)
		return q, err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("list queues: %w", err)
	}
	if err := db.queueListFigures(ctx, out); err != nil {
		return nil, 0, err
	}
	return out, total, nil
}

// queueListFigures fills the list-only fields of a page of queues. Per
// partition it probes the messages primary key once (the message past the
// slowest cursor), per (partition, listed group) it walks it from the cursor
// skipping only that group's acked offsets (firstUnresolvedJoin); the
// samples come from the queue_samples primary key (queue_id, sampled_at),
// one row each (the row comparisons spell the key: with "queue_id = x" the
// planner may walk queue_samples_time backwards instead, filtering out every
// other queue's rows, as EXPLAIN showed), the last round from stats_rounds. So a page reads messages in proportion
// to its partitions, never to their messages.
func (db *DB) queueListFigures(ctx context.Context, qs []QueueRow) error {
	if len(qs) == 0 {
		return nil
	}
	ids := make([]string, len(qs))
	at := make(map[string]*QueueRow, len(qs))
	for i := range qs {
		ids[i] = qs[i].ID
		at[qs[i].ID] = &qs[i]
	}
	rs, err := db.pool.Query(ctx, `SELECT u.id::text, o.oldest,
			COALESCE(EXTRACT(EPOCH FROM clock_timestamp() - o.oldest), 0)::float8,
			(SELECT count(*) FROM queen.consumer_groups_metadata md WHERE md.queue_id = u.id),
			l.sampled_at, l.pushed_delta, l.consumed_delta, pv.sampled_at, r.last_at
		FROM unnest($1::uuid[]) u(id)
		LEFT JOIN LATERAL (
			SELECT min(op.created_at) AS oldest FROM queen.partitions p
			LEFT JOIN LATERAL (SELECT COALESCE(min(c.committed_offset), 0) AS cur
				FROM queen.consumers c WHERE c.partition_id = p.id) s ON true
			LEFT JOIN LATERAL (SELECT m.created_at FROM queen.messages m
				WHERE p.last_offset > s.cur AND m.partition_id = p.id AND m.off > s.cur
				ORDER BY m.off LIMIT 1) op ON true
			WHERE p.queue_id = u.id) o ON true
		LEFT JOIN LATERAL (SELECT * FROM (SELECT s.queue_id, s.sampled_at, s.pushed_delta, s.consumed_delta
			FROM queen.queue_samples s WHERE (s.queue_id, s.sampled_at) <= (u.id, 'infinity')
			ORDER BY s.queue_id DESC, s.sampled_at DESC LIMIT 1) x WHERE x.queue_id = u.id) l ON true
		LEFT JOIN LATERAL (SELECT * FROM (SELECT s.queue_id, s.sampled_at FROM queen.queue_samples s
			WHERE (s.queue_id, s.sampled_at) < (u.id, l.sampled_at)
			ORDER BY s.queue_id DESC, s.sampled_at DESC LIMIT 1) x WHERE x.queue_id = u.id) pv ON true
		LEFT JOIN queen.stats_rounds r ON r.name = 'queues'`, ids)
	if err != nil {
		return fmt.Errorf("list queues: figures: %w", err)
	}
	for rs.Next() {
		var id string
		var oldest, last, prev, round *time.Time
		var age float64
		var groups int64
		var pushed, consumed *int64
		if err := rs.Scan(&id, &oldest, &age, &groups, &last, &pushed, &consumed, &prev, &round); err != nil {
			rs.Close()
			return fmt.Errorf("list queues: figures: %w", err)
		}
		q := at[id]
		q.OldestPendingAt, q.OldestPendingAgeSeconds, q.GroupCount = oldest, age, groups
		q.Throughput = throughputOf(last, prev, round, pushed, consumed)
	}
	rs.Close()
	if err := rs.Err(); err != nil {
		return fmt.Errorf("list queues: figures: %w", err)
	}

	// The first MaxListGroups groups of each queue by name (the metadata
	// primary key, queue_id prefix), with ListGroups' lag.
	rs, err = db.pool.Query(ctx, `SELECT u.id::text, gm.grp,
			COALESCE(sum(GREATEST(0, p.last_offset - c.committed_offset - cardinality(c.acked))), 0)::bigint,
			COALESCE(max(EXTRACT(EPOCH FROM clock_timestamp() - f.created_at)), 0)::float8
		FROM unnest($1::uuid[]) u(id)
		CROSS JOIN LATERAL (SELECT md.consumer_group AS grp FROM queen.consumer_groups_metadata md
			WHERE md.queue_id = u.id ORDER BY md.consumer_group COLLATE "C" LIMIT $2) gm
		LEFT JOIN queen.partitions p ON p.queue_id = u.id
		LEFT JOIN queen.consumers c ON c.partition_id = p.id AND c.consumer_group = gm.grp `+firstUnresolvedJoin+`
		GROUP BY u.id, gm.grp
		ORDER BY u.id, gm.grp COLLATE "C"`, ids, MaxListGroups)
	if err != nil {
		return fmt.Errorf("list queues: groups: %w", err)
	}
	for rs.Next() {
		var id string
		var g QueueGroupLag
		if err := rs.Scan(&id, &g.Group, &g.Lag, &g.TimeLagSeconds); err != nil {
			rs.Close()
			return fmt.Errorf("list queues: groups: %w", err)
		}
		at[id].Groups = append(at[id].Groups, g)
	}
	rs.Close()
	if err := rs.Err(); err != nil {
		return fmt.Errorf("list queues: groups: %w", err)
	}
	return nil
}

// throughputOf turns a queue's last sample (at last, with its deltas since
// the sample before, at prev) and the last queue-sampling round into rates.
// A round after the last sample wrote no row for the queue because nothing
// moved (pg/analytics.go, SampleQueues): the rates since are zero. Without
// a previous sample the deltas have no known window: nil.
func throughputOf(last, prev, round *time.Time, pushed, consumed *int64) *Throughput {
	switch {
	case last == nil:
		return nil
	case round != nil && round.After(*last):
		return &Throughput{WindowSeconds: round.Sub(*last).Seconds(), SampledAt: *round}
	case prev == nil || !last.After(*prev):
		return nil
	}
	w := last.Sub(*prev).Seconds()
	return &Throughput{PushedPerSecond: float64(*pushed) / w, ConsumedPerSecond: float64(*consumed) / w,
		WindowSeconds: w, SampledAt: *last}
}

// QueueDetail is one queue with its options, partitions and groups.
type QueueDetail struct {
	QueueRow
	LeaseTime, RetryLimit, RetryDelay, TTL, MaxSize, DelayedProcessing, WindowBuffer int
	DeadLetterQueue                                                                  bool
	PartitionList                                                                    []PartitionRow // as DetailOpts asked
	Groups                                                                           []GroupRow     // at most MaxDetailGroups
}

// PartitionRow is one partition with its counts.
type PartitionRow struct {
	ID, Name    string
	CreatedAt   time.Time
	LastWriteAt *time.Time
	LastOffset  int64
	Counts      Counts
}

// Bounds of a queue's detail.
const (
	MaxDetailPartitions = 1000
	MaxDetailGroups     = 1000
)

// DetailOpts chooses which partitions a queue's detail lists.
type DetailOpts struct {
	Busiest bool // by pending, then watermark, both descending (then name); false = by name
	Limit   int  // at most this many, 1..MaxDetailPartitions; 0 = MaxDetailPartitions
}

// GetQueue returns the tenant's queue, ErrNotFound when it has none of that
// name. Listing the busiest partitions costs what the totals already cost
// (every partition's counts) plus a sort of the partitions.
func (db *DB) GetQueue(ctx context.Context, tenant, name string, o DetailOpts) (QueueDetail, error) {
	var d QueueDetail
	err := db.pool.QueryRow(ctx, `SELECT q.id::text, q.name, q.namespace, q.task, q.priority, q.created_at,
			q.lease_time, q.retry_limit, q.retry_delay, q.ttl, q.max_size, q.delayed_processing,
			q.window_buffer, q.dead_letter_queue
		FROM queen.queues q WHERE q.tenant = $1 AND q.name = $2`, tenant, name).
		Scan(&d.ID, &d.Name, &d.Namespace, &d.Task, &d.Priority, &d.CreatedAt, &d.LeaseTime, &d.RetryLimit,
			&d.RetryDelay, &d.TTL, &d.MaxSize, &d.DelayedProcessing, &d.WindowBuffer, &d.DeadLetterQueue)
	if errors.Is(err, pgx.ErrNoRows) {
		return QueueDetail{}, ErrNotFound
	}
	if err != nil {
		return QueueDetail{}, fmt.Errorf("get queue %s: %w", name, err)
	}
	if err := db.pool.QueryRow(ctx, `SELECT count(*), `+sumCounts+`
		FROM (SELECT `+partCountsCols+` FROM queen.partitions p `+partCountsJoin+`
		      WHERE p.queue_id = $1) s`, d.ID).
		Scan(&d.Partitions, &d.Counts.Total, &d.Counts.Pending, &d.Counts.Processing, &d.Counts.Completed,
			&d.Counts.DeadLetter); err != nil {
		return QueueDetail{}, fmt.Errorf("get queue %s: totals: %w", name, err)
	}
	limit, order := o.Limit, `p.name COLLATE "C"`
	if limit <= 0 || limit > MaxDetailPartitions {
		limit = MaxDetailPartitions
	}
	if o.Busiest {
		order = `pending DESC, p.last_offset DESC, p.name COLLATE "C"`
	}
	rs, err := db.pool.Query(ctx, `SELECT p.id::text, p.name, p.created_at, p.last_write_at, p.last_offset, `+partCountsCols+`
		FROM queen.partitions p `+partCountsJoin+`
		WHERE p.queue_id = $1 ORDER BY `+order+` LIMIT $2`, d.ID, limit)
	if err != nil {
		return QueueDetail{}, fmt.Errorf("get queue %s: partitions: %w", name, err)
	}
	d.PartitionList, err = pgx.CollectRows(rs, func(r pgx.CollectableRow) (PartitionRow, error) {
		var p PartitionRow
		c := &p.Counts
		err := r.Scan(&p.ID, &p.Name, &p.CreatedAt, &p.LastWriteAt, &p.LastOffset,
			&c.Total, &c.Pending, &c.Processing, &c.Completed, &c.DeadLetter)
		return p, err
	})
	if err != nil {
		return QueueDetail{}, fmt.Errorf("get queue %s: partitions: %w", name, err)
	}
	d.Groups, err = db.ListGroups(ctx, tenant, GroupFilter{Queue: name, Limit: MaxDetailGroups})
	if err != nil {
		return QueueDetail{}, err
	}
	return d, nil
}

// CountRow is a namespace's or task's totals.
type CountRow struct {
	Name               string
	Queues, Partitions int64
	Counts             Counts
}

// MaxGroupings bounds ListNamespaces and ListTasks.
const MaxGroupings = 10000

// ListNamespaces sums the tenant's queues by namespace (queues without one
// are left out), in name order.
func (db *DB) ListNamespaces(ctx context.Context, tenant string) ([]CountRow, error) {
	return db.listBy(ctx, tenant, "namespace")
}

// ListTasks sums the tenant's queues by task, like ListNamespaces.
func (db *DB) ListTasks(ctx context.Context, tenant string) ([]CountRow, error) {
	return db.listBy(ctx, tenant, "task")
}

// listBy groups by col, which is "namespace" or "task" (never user input).
func (db *DB) listBy(ctx context.Context, tenant, col string) ([]CountRow, error) {
	rs, err := db.pool.Query(ctx, `SELECT q.`+col+`, count(DISTINCT q.id), count(s.total), `+sumCounts+`
		FROM queen.queues q
		LEFT JOIN LATERAL (SELECT `+partCountsCols+` FROM queen.partitions p `+partCountsJoin+`
		                   WHERE p.queue_id = q.id) s ON true
		WHERE q.tenant = $1 AND q.`+col+` <> ''
		GROUP BY q.`+col+` ORDER BY q.`+col+` COLLATE "C" LIMIT $2`, tenant, MaxGroupings)
	if err != nil {
		return nil, fmt.Errorf("list by %s: %w", col, err)
	}
	out, err := pgx.CollectRows(rs, func(r pgx.CollectableRow) (CountRow, error) {
		var n CountRow
		c := &n.Counts
		err := r.Scan(&n.Name, &n.Queues, &n.Partitions, &c.Total, &c.Pending, &c.Processing, &c.Completed, &c.DeadLetter)
		return n, err
	})
	if err != nil {
		return nil, fmt.Errorf("list by %s: %w", col, err)
	}
	return out, nil
}

// GroupRow is one consumer group on one queue.
type GroupRow struct {
	Group, Queue       string
	SubscriptionFrom   *time.Time // the recorded subscription start; nil = from the beginning
	SubscribedAt       time.Time  // when the group first popped the queue
	Partitions         int64      // partitions where the group has a cursor
	Lag                int64      // messages past its cursors it has not resolved (offsets: an upper bound)
	MaxLagSeconds      float64    // age of its oldest unresolved message, 0 when none
	LastActivity       *time.Time // newest cursor or lease change
	LeasedPartitions   int64      // partitions it holds a live lease on
	OldestUnresolvedAt *time.Time
}

// GroupFilter selects and pages ListGroups.
type GroupFilter struct {
	Group, Queue  string // "" = any
	Limit, Offset int
}

// ListGroups returns one page of the tenant's (group, queue) pairs, in
// group then queue name order. A group exists on a queue from its first pop
// there (its marker in consumer_groups_metadata, primary key (queue_id,
// consumer_group)) until it is deleted with its metadata. The lag comes from
// one primary-key walk per (partition, group) (firstUnresolvedJoin).
func (db *DB) ListGroups(ctx context.Context, tenant string, f GroupFilter) ([]GroupRow, error) {
	rs, err := db.pool.Query(ctx, `WITH gq AS (
			SELECT md.consumer_group AS grp, q.id AS qid, q.name AS qname, md.subscription_from, md.created_at
			FROM queen.queues q JOIN queen.consumer_groups_metadata md ON md.queue_id = q.id
			WHERE q.tenant = $1 AND ($2 = '' OR md.consumer_group = $2) AND ($3 = '' OR q.name = $3)
			ORDER BY md.consumer_group COLLATE "C", q.name COLLATE "C" LIMIT $4 OFFSET $5)
		SELECT gq.grp, gq.qname, gq.subscription_from, gq.created_at, count(c.partition_id),
		       COALESCE(sum(GREATEST(0, p.last_offset - c.committed_offset - cardinality(c.acked))), 0)::bigint,
		       COALESCE(max(EXTRACT(EPOCH FROM clock_timestamp() - f.created_at)), 0)::float8,
		       max(c.updated_at), count(*) FILTER (WHERE c.lease_expires_at > clock_timestamp()),
		       min(f.created_at)
		FROM gq
		LEFT JOIN queen.partitions p ON p.queue_id = gq.qid
		LEFT JOIN queen.consumers c ON c.partition_id = p.id AND c.consumer_group = gq.grp `+firstUnresolvedJoin+`
		GROUP BY gq.grp, gq.qname, gq.subscription_from, gq.created_at
		ORDER BY gq.grp COLLATE "C", gq.qname COLLATE "C"`, tenant, f.Group, f.Queue, f.Limit, f.Offset)
	if err != nil {
		return nil, fmt.Errorf("list groups: %w", err)
	}
	out, err := pgx.CollectRows(rs, func(r pgx.CollectableRow) (GroupRow, error) {
		var g GroupRow
		err := r.Scan(&g.Group, &g.Queue, &g.SubscriptionFrom, &g.SubscribedAt, &g.Partitions, &g.Lag,
			&g.MaxLagSeconds, &g.LastActivity, &g.LeasedPartitions, &g.OldestUnresolvedAt)
		return g, err
	})
	if err != nil {
		return nil, fmt.Errorf("list groups: %w", err)
	}
	return out, nil
}

// CursorRow is one (partition, group) cursor.
type CursorRow struct {
	Group, Queue, Partition, PartitionID string
	LastOffset, Committed, Lag           int64
	LeaseOwner                           *string
	LeaseExpiresAt                       *time.Time
	UpdatedAt                            time.Time
	OldestUnresolvedAt                   *time.Time // nil = nothing unresolved
}

// MaxGroupCursors bounds GroupCursors.
const MaxGroupCursors = 10000

const cursorCols = `c.consumer_group, q.name, p.name, p.id::text, p.last_offset, c.committed_offset,
	GREATEST(0, p.last_offset - c.committed_offset - cardinality(c.acked)),
	c.lease_owner, c.lease_expires_at, c.updated_at, f.created_at`

func scanCursor(r pgx.CollectableRow) (CursorRow, error) {
	var c CursorRow
	err := r.Scan(&c.Group, &c.Queue, &c.Partition, &c.PartitionID, &c.LastOffset, &c.Committed, &c.Lag,
		&c.LeaseOwner, &c.LeaseExpiresAt, &c.UpdatedAt, &c.OldestUnresolvedAt)
	return c, err
}

// GroupCursors returns the group's cursors on the tenant's queues, by queue
// then partition name (consumers_group index), at most MaxGroupCursors.
func (db *DB) GroupCursors(ctx context.Context, tenant, group string) ([]CursorRow, error) {
	rs, err := db.pool.Query(ctx, `SELECT `+cursorCols+`
		FROM queen.consumers c
		JOIN queen.partitions p ON p.id = c.partition_id
		JOIN queen.queues q ON q.id = p.queue_id AND q.tenant = $1 `+firstUnresolvedJoin+`
		WHERE c.consumer_group = $2
		ORDER BY q.name COLLATE "C", p.name COLLATE "C" LIMIT $3`, tenant, group, MaxGroupCursors)
	if err != nil {
		return nil, fmt.Errorf("group %s cursors: %w", group, err)
	}
	out, err := pgx.CollectRows(rs, scanCursor)
	if err != nil {
		return nil, fmt.Errorf("group %s cursors: %w", group, err)
	}
	return out, nil
}

// QueueCursors is one group's cursors on one queue: the most lagging
// first, bounded, with counts over all of them.
type QueueCursors struct {
	Cursors           []CursorRow // at most the limit asked for
	Total             int         // the group's cursors on the queue
	PendingPartitions int         // cursors with messages left
	LeasedPartitions  int         // cursors under a live lease
}

// GroupQueueCursors returns group's cursors on one queue of the tenant,
// most lagging first (then live leases, then by partition name), at most
// limit, and counts over all of them. The counts and the order are
// arithmetic on the cursor rows (queues (tenant, name), partitions_queue_id,
// consumers primary key); only the limit rows returned probe queen.messages
// for their oldest unresolved message. A queue the tenant does not have
// gives no cursors.
func (db *DB) GroupQueueCursors(ctx context.Context, tenant, group, queue string, limit int) (QueueCursors, error) {
	var out QueueCursors
	rs, err := db.pool.Query(ctx, `WITH s AS (
			SELECT c.consumer_group, q.name AS qname, p.name AS pname, p.id AS pid, p.last_offset,
			       c.partition_id, c.committed_offset, c.acked, c.lease_owner, c.lease_expires_at, c.updated_at,
			       GREATEST(0, p.last_offset - c.committed_offset - cardinality(c.acked)) AS lag,
			       COALESCE(c.lease_expires_at > clock_timestamp(), false) AS leased
			FROM queen.queues q
			JOIN queen.partitions p ON p.queue_id = q.id
			JOIN queen.consumers c ON c.partition_id = p.id AND c.consumer_group = $2
			WHERE q.tenant = $1 AND q.name = $3),
		counts AS (SELECT count(*) AS total, count(*) FILTER (WHERE lag > 0) AS pending,
		                  count(*) FILTER (WHERE leased) AS leased FROM s),
		top AS (SELECT * FROM s ORDER BY lag DESC, leased DESC, pname COLLATE "C" LIMIT $4)
		SELECT t.consumer_group, t.qname, t.pname, t.pid::text, t.last_offset, t.committed_offset, t.lag,
		       t.lease_owner, t.lease_expires_at, t.updated_at, f.created_at,
		       n.total, n.pending, n.leased
		FROM counts n
		LEFT JOIN top t ON true
		LEFT JOIN LATERAL (
			SELECT m.created_at FROM queen.messages m
			WHERE t.last_offset > t.committed_offset
			  AND m.partition_id = t.partition_id AND m.off > t.committed_offset AND NOT (m.off = ANY (t.acked))
			ORDER BY m.off LIMIT 1) f ON true
		ORDER BY t.lag DESC, t.leased DESC, t.pname COLLATE "C"`, tenant, group, queue, limit)
	if err != nil {
		return out, fmt.Errorf("group %s cursors on %s: %w", group, queue, err)
	}
	defer rs.Close()
	for rs.Next() {
		var c CursorRow
		var g, qn, pn, pid *string
		var last, committed, lag *int64
		var updated *time.Time
		if err := rs.Scan(&g, &qn, &pn, &pid, &last, &committed, &lag, &c.LeaseOwner, &c.LeaseExpiresAt,
			&updated, &c.OldestUnresolvedAt, &out.Total, &out.PendingPartitions, &out.LeasedPartitions); err != nil {
			return out, fmt.Errorf("group %s cursors on %s: %w", group, queue, err)
		}
		if g == nil { // no cursor: the counts row alone
			continue
		}
		c.Group, c.Queue, c.Partition, c.PartitionID = *g, *qn, *pn, *pid
		c.LastOffset, c.Committed, c.Lag, c.UpdatedAt = *last, *committed, *lag, *updated
		out.Cursors = append(out.Cursors, c)
	}
	if err := rs.Err(); err != nil {
		return out, fmt.Errorf("group %s cursors on %s: %w", group, queue, err)
	}
	return out, nil
}

// Lagging returns the tenant's cursors whose oldest unresolved message is
// more than minLag old, oldest first, at most limit. It probes every cursor
// with messages past it (one primary-key walk each).
func (db *DB) Lagging(ctx context.Context, tenant string, minLag time.Duration, limit int) ([]CursorRow, error) {
	rs, err := db.pool.Query(ctx, `SELECT `+cursorCols+`
		FROM queen.queues q
		JOIN queen.partitions p ON p.queue_id = q.id
		JOIN queen.consumers c ON c.partition_id = p.id `+firstUnresolvedJoin+`
		WHERE q.tenant = $1 AND p.last_offset > c.committed_offset
		  AND f.created_at < clock_timestamp() - make_interval(secs => $2)
		ORDER BY f.created_at, c.consumer_group COLLATE "C", q.name COLLATE "C", p.name COLLATE "C"
		LIMIT $3`, tenant, minLag.Seconds(), limit)
	if err != nil {
		return nil, fmt.Errorf("lagging: %w", err)
	}
	out, err := pgx.CollectRows(rs, scanCursor)
	if err != nil {
		return nil, fmt.Errorf("lagging: %w", err)
	}
	return out, nil
}

// MessageFilter selects and pages ListMessages.
type MessageFilter struct {
	Queue     string
	Partition string // "" = every partition of the queue
	Group     string // whose status the rows carry
	Status    string // "" = any; pending, processing, completed or dead_letter
	Limit     int
	Offset    int
}

// MessageRow is a message as the message endpoints show it. Payload and
// the queue options are filled by GetMessage only.
type MessageRow struct {
	ID, TransactionID, PartitionID, Queue, Partition, Namespace, Task string
	Priority                                                          int
	Offset                                                            int64
	TraceID, ProducerSub                                              *string
	CreatedAt                                                         time.Time
	Status                                                            string
	LeaseExpiresAt                                                    *time.Time

	Payload                                []byte
	ErrorMessage                           *string
	RetryCount                             *int
	LeaseTime, RetryLimit, RetryDelay, TTL int
	BusGroups, BusConsumed                 int64 // named groups with a cursor on the partition, and those past this message
	HasQueueMode                           bool
}

// Mode tells which kinds of groups read a queue (markers of
// consumer_groups_metadata, primary key (queue_id, consumer_group)).
type Mode struct {
	HasQueueMode bool
	BusGroups    int64
}

// ListMessages returns one page of a queue's messages with their status for
// f.Group (queen.list_messages_v1, which reads at most Offset+Limit
// messages), and the queue's mode. ErrNotFound when the tenant has no such
// queue.
func (db *DB) ListMessages(ctx context.Context, tenant string, f MessageFilter) ([]MessageRow, Mode, error) {
	var qid, ns, task string
	var prio int
	var mode Mode
	err := db.pool.QueryRow(ctx, `SELECT q.id::text, q.namespace, q.task, q.priority,
			EXISTS (SELECT 1 FROM queen.consumer_groups_metadata md WHERE md.queue_id = q.id AND md.consumer_group = '__QUEUE_MODE__'),
			(SELECT count(*) FROM queen.consumer_groups_metadata md WHERE md.queue_id = q.id AND md.consumer_group <> '__QUEUE_MODE__')
		FROM queen.queues q WHERE q.tenant = $1 AND q.name = $2`, tenant, f.Queue).
		Scan(&qid, &ns, &task, &prio, &mode.HasQueueMode, &mode.BusGroups)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, Mode{}, ErrNotFound
	}
	if err != nil {
		return nil, Mode{}, fmt.Errorf("list messages of %s: %w", f.Queue, err)
	}
	rs, err := db.pool.Query(ctx, `SELECT o_pid::text, o_pname, o_off, o_mid::text, o_txid, o_trace::text,
			o_created, o_sub, o_status, o_lease_until
		FROM queen.list_messages_v1($1::uuid, NULLIF($2, ''), $3, NULLIF($4, ''), $5, $6)`,
		qid, f.Partition, f.Group, f.Status, f.Limit, f.Offset)
	if err != nil {
		return nil, Mode{}, fmt.Errorf("list messages of %s: %w", f.Queue, err)
	}
	out, err := pgx.CollectRows(rs, func(r pgx.CollectableRow) (MessageRow, error) {
		m := MessageRow{Queue: f.Queue, Namespace: ns, Task: task, Priority: prio}
		err := r.Scan(&m.PartitionID, &m.Partition, &m.Offset, &m.ID, &m.TransactionID, &m.TraceID,
			&m.CreatedAt, &m.ProducerSub, &m.Status, &m.LeaseExpiresAt)
		return m, err
	})
	if err != nil {
		return nil, Mode{}, fmt.Errorf("list messages of %s: %w", f.Queue, err)
	}
	return out, mode, nil
}

// GetMessage returns one message of the tenant with its status for group,
// found through messages_txid (partition_id, transaction_id); ErrNotFound
// when there is none.
func (db *DB) GetMessage(ctx context.Context, tenant, partitionID, txid, group string) (MessageRow, error) {
	var m MessageRow
	err := db.pool.QueryRow(ctx, `SELECT m.id::text, m.transaction_id, m.partition_id::text, q.name, p.name,
			q.namespace, q.task, q.priority, m.off, m.trace_id::text, m.producer_sub, m.created_at,
			CASE WHEN d.error_message IS NOT NULL THEN 'dead_letter'
			     ELSE queen.message_status(m.off, c.committed_offset, c.acked, c.batch_end,
			                               c.lease_expires_at > clock_timestamp()) END,
			c.lease_expires_at, m.payload::text, d.error_message, d.retry_count,
			q.lease_time, q.retry_limit, q.retry_delay, q.ttl,
			(SELECT count(*) FROM queen.consumers c2
			 WHERE c2.partition_id = m.partition_id AND c2.consumer_group <> '__QUEUE_MODE__'),
			(SELECT count(*) FROM queen.consumers c2
			 WHERE c2.partition_id = m.partition_id AND c2.consumer_group <> '__QUEUE_MODE__'
			   AND (m.off <= c2.committed_offset OR m.off = ANY (c2.acked))),
			EXISTS (SELECT 1 FROM queen.consumers c3
			        WHERE c3.partition_id = m.partition_id AND c3.consumer_group = '__QUEUE_MODE__')
		FROM queen.messages m
		JOIN queen.partitions p ON p.id = m.partition_id
		JOIN queen.queues q ON q.id = p.queue_id AND q.tenant = $1
		LEFT JOIN queen.consumers c ON c.partition_id = m.partition_id AND c.consumer_group = $4
		LEFT JOIN LATERAL (
			SELECT dd.error_message, dd.retry_count FROM queen.dead_letters dd
			WHERE dd.partition_id = m.partition_id AND dd.consumer_group = $4 AND dd.off = m.off
			  AND NOT dd.superseded
			ORDER BY dd.seq DESC LIMIT 1) d ON true
		WHERE m.partition_id = $2::uuid AND m.transaction_id = $3`, tenant, partitionID, txid, group).
		Scan(&m.ID, &m.TransactionID, &m.PartitionID, &m.Queue, &m.Partition, &m.Namespace, &m.Task,
			&m.Priority, &m.Offset, &m.TraceID, &m.ProducerSub, &m.CreatedAt, &m.Status, &m.LeaseExpiresAt,
			&m.Payload, &m.ErrorMessage, &m.RetryCount, &m.LeaseTime, &m.RetryLimit, &m.RetryDelay, &m.TTL,
			&m.BusGroups, &m.BusConsumed, &m.HasQueueMode)
	if errors.Is(err, pgx.ErrNoRows) {
		return MessageRow{}, ErrNotFound
	}
	if err != nil {
		return MessageRow{}, fmt.Errorf("get message %s/%s: %w", partitionID, txid, err)
	}
	if m.Status != string(protocol.MsgProcessing) {
		m.LeaseExpiresAt = nil
	}
	// Scanned into []byte: the payload (up to the request body limit) is
	// held once.
	if m.Payload == nil {
		m.Payload = []byte("null")
	}
	return m, nil
}

// DeletedCursor is a group cursor a message delete changed.
type DeletedCursor struct {
	Group    string
	Released bool // its live lease ended: the batch is fully resolved
	Pending  bool // messages remain past its cursor
}

// DeleteResult is what DeleteMessage did.
type DeleteResult struct {
	Queue, Partition string
	Cursors          []DeletedCursor
}

// DeleteMessage deletes one message of the tenant and moves the cursors it
// leaves a hole in (queen.delete_message_v1, one statement, retried on a
// deadlock). ErrNotFound when the tenant has no such message.
func (db *DB) DeleteMessage(ctx context.Context, tenant, partitionID, txid string) (DeleteResult, error) {
	var res DeleteResult
	err := db.retry(ctx, true, func() error {
		res = DeleteResult{}
		rs, err := db.pool.Query(ctx, `SELECT o_queue, o_partition, o_group, o_released, o_pending
			FROM queen.delete_message_v1($1, $2::uuid, $3)`, tenant, partitionID, txid)
		if err != nil {
			return err
		}
		found := false
		for rs.Next() {
			var grp *string
			var c DeletedCursor
			if err := rs.Scan(&res.Queue, &res.Partition, &grp, &c.Released, &c.Pending); err != nil {
				rs.Close()
				return err
			}
			found = true
			if grp != nil {
				c.Group = *grp
				res.Cursors = append(res.Cursors, c)
			}
		}
		if err := rs.Err(); err != nil {
			return err
		}
		if !found {
			return ErrNotFound
		}
		return nil
	})
	if errors.Is(err, ErrNotFound) {
		return DeleteResult{}, ErrNotFound
	}
	if err != nil {
		return DeleteResult{}, fmt.Errorf("delete message %s/%s: %w", partitionID, txid, err)
	}
	return res, nil
}

// UpdateSubscription moves the recorded subscription start of the group on
// every queue of the tenant where it has one; it returns how many. Cursors
// already placed stay where they are: the start applies to partitions the
// group reads for the first time (docs/api.md).
func (db *DB) UpdateSubscription(ctx context.Context, tenant, group string, from time.Time) (int, error) {
	var n int
	// The new start applies to the partitions the group has not read yet
	// (docs/api.md). A cursor the bulk provisioning placed before the group
	// read its partition is marked provisional (migration 11, cleared by a
	// claim that takes from it, an ack that moves it and a seek): it is
	// placed again at the new start, as the group's first read would have
	// placed it. The
	// markers first, in queue order, in a statement of their own: a
	// provisioning page holds the gate and its marker until it commits, so the row
	// update after it sees the page's rows (a group delete does the same).
	err := db.InTxRetry(ctx, func(t *Tx) error {
		// The gate first, as a group delete takes it: claims and bulk
		// provisioning that make the group's rows hold it shared.
		if err := lockGroupGates(ctx, t, tenant, group); err != nil {
			return err
		}
		if _, err := t.tx.Exec(ctx, `SELECT 1 FROM queen.consumer_groups_metadata m
			JOIN queen.queues q ON q.id = m.queue_id
			WHERE q.tenant = $1 AND m.consumer_group = $2
			ORDER BY m.queue_id FOR NO KEY UPDATE OF m`, tenant, group); err != nil {
			return err
		}
		tag, err := t.tx.Exec(ctx, `UPDATE queen.consumer_groups_metadata md SET subscription_from = $3
			FROM queen.queues q WHERE md.queue_id = q.id AND q.tenant = $1 AND md.consumer_group = $2`,
			tenant, group, from)
		if err != nil {
			return err
		}
		n = int(tag.RowsAffected())
		// The rows to move, locked in a statement of their own: the update
		// below then reads each row's acked, and the retry copies that
		// queen.dlq_copies_past finds, after whatever it waited for (a DLQ
		// retry for another group adds its copy to this row's acked), as
		// Seek does.
		rs, err := t.tx.Query(ctx, `SELECT c.partition_id::text FROM queen.consumer_groups_metadata md
				JOIN queen.queues q ON q.id = md.queue_id AND q.tenant = $1
				JOIN queen.partitions p ON p.queue_id = md.queue_id
				JOIN queen.consumers c ON c.partition_id = p.id AND c.consumer_group = md.consumer_group
				WHERE md.consumer_group = $2 AND c.provisional AND c.lease_id IS NULL
				ORDER BY c.partition_id
				FOR UPDATE OF c`, tenant, group)
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rs, pgx.RowTo[string])
		if err != nil || len(ids) == 0 {
			return err
		}
		_, err = t.tx.Exec(ctx, `UPDATE queen.consumers c
			SET committed_offset = s.seed, batch_end = s.seed, acked = queen.dlq_copies_past(c.partition_id, $2, s.seed),
			    updated_at = clock_timestamp()
			FROM (SELECT r.pid, COALESCE((SELECT max(x.off) FROM queen.messages x
			             WHERE x.partition_id = r.pid AND x.created_at <= $3), 0) AS seed
			      FROM unnest($1::text[]::uuid[]) AS r(pid)) s
			WHERE c.partition_id = s.pid AND c.consumer_group = $2 AND c.provisional AND c.lease_id IS NULL`,
			ids, group, from)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("update subscription of %s: %w", group, err)
	}
	return n, nil
}

// SeekPartitionToEnd moves the group's cursor on one partition of the
// tenant's queue to the partition's watermark, creating the cursor when the
// group has none there, and ends its lease. ErrNotFound when the queue or
// the partition does not exist.
func (db *DB) SeekPartitionToEnd(ctx context.Context, tenant, group, queue, partition string) error {
	err := db.retry(ctx, true, func() error {
		tag, err := db.pool.Exec(ctx, `INSERT INTO queen.consumers AS c
				(partition_id, consumer_group, committed_offset, batch_end)
			SELECT p.id, $2, p.last_offset, p.last_offset
			FROM queen.queues q JOIN queen.partitions p ON p.queue_id = q.id AND p.name = $4
			WHERE q.tenant = $1 AND q.name = $3
			ON CONFLICT (partition_id, consumer_group) DO UPDATE
			SET committed_offset = GREATEST(c.committed_offset, EXCLUDED.committed_offset),
			    batch_end = GREATEST(c.committed_offset, EXCLUDED.committed_offset),
			    -- Resolved offsets past the new cursor stay: a dead-letter
			    -- retry committed while this waited on the row may have
			    -- put its copy there, past the watermark read before it.
			    acked = ARRAY(SELECT x FROM unnest(c.acked) x
			                  WHERE x > GREATEST(c.committed_offset, EXCLUDED.committed_offset) ORDER BY x),
			    lease_id = NULL, lease_owner = NULL, lease_expires_at = NULL,
			    retry_count = 0, provisional = false, updated_at = clock_timestamp()`, tenant, group, queue, partition)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return ErrNotFound
		}
		return nil
	})
	if errors.Is(err, ErrNotFound) {
		return ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("seek %s/%s/%s to end: %w", group, queue, partition, err)
	}
	return nil
}
