package pg_test

// Storage benchmarks behind docs/storage.md: the message log stored one row
// per message (queen.messages, queen.push_v3) against packed per-batch
// segments, with the raw PostgreSQL ceilings (a plain batched INSERT and a
// plain FOR UPDATE SKIP LOCKED claim loop) measured in the same run.
//
//	QUEEN_TEST_PG_URL=postgres://... go test -run '^$' -bench . -benchtime 2s -count 3 ./pg/
//
// Every benchmark moves batches of 100 messages with 256-byte JSON payloads;
// ns/op is per batch and msgs/s is the message rate. Each top-level
// benchmark runs in its own database (named bench_*), dropped at its end.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"queen-node/internal/pgtest"
	"queen-node/pg"
	"queen-node/protocol"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const (
	benchBatch   = 100 // messages per statement / call
	benchPayload = 256 // bytes of JSON per message
	benchTenant  = "bench"
	benchGroup   = "__QUEUE_MODE__" // broker.QueueMode
)

// benchSchema holds the comparison tables and functions. Nothing here is
// part of the product schema.
const benchSchema = `
CREATE SCHEMA bench;

-- The raw ceiling: shaped like queen.messages (same keys), no function.
CREATE TABLE bench.raw_messages (
    partition_id   uuid NOT NULL,
    off            bigint NOT NULL,
    id             uuid NOT NULL,
    transaction_id text NOT NULL,
    trace_id       uuid,
    payload        json,
    producer_sub   text,
    created_at     timestamptz NOT NULL,
    PRIMARY KEY (partition_id, off)
);
CREATE UNIQUE INDEX raw_messages_txid ON bench.raw_messages (partition_id, transaction_id);

-- Cursor per partition for the raw claim loop; hi = last offset present.
CREATE TABLE bench.raw_cursors (
    partition_id uuid PRIMARY KEY,
    cur          bigint NOT NULL DEFAULT 0,
    hi           bigint NOT NULL
);

-- Partition rows (offset watermark) for the minimal push functions below.
CREATE TABLE bench.parts (
    id            uuid PRIMARY KEY,
    last_offset   bigint NOT NULL DEFAULT 0,
    last_write_at timestamptz
);

-- Control: row per message through a minimal function of the same shape as
-- push_seg (lock, dedup, insert, bump watermark), to separate the storage
-- layout from push_v2's name resolution and per-item status report.
CREATE TABLE bench.row_messages (LIKE bench.raw_messages INCLUDING ALL);

-- Packed segments: one row per pushed batch.
CREATE TABLE bench.segments (
    partition_id uuid NOT NULL,
    first_off    bigint NOT NULL,
    last_off     bigint NOT NULL,
    ids          uuid[] NOT NULL,
    txids        text[] NOT NULL,
    payload      json NOT NULL, -- JSON array of the batch's payloads
    created_at   timestamptz NOT NULL,
    PRIMARY KEY (partition_id, first_off)
);
-- Dedup / ack lookup, variant "txidtable": a (partition, txid) -> off table
-- with a unique key (a B-tree entry and a small heap tuple per message).
CREATE TABLE bench.segment_txids (
    partition_id   uuid NOT NULL,
    transaction_id text NOT NULL,
    off            bigint NOT NULL,
    PRIMARY KEY (partition_id, transaction_id)
);
-- Dedup / ack lookup, variant "gin": a GIN index over the segment's txid
-- array (one posting per message, no uniqueness: checked under the lock),
-- created only for that variant: see BenchmarkPushPackedSegment.

CREATE FUNCTION bench.push_rows(p_pid uuid, p_txids text[], p_ids uuid[], p_payloads text[])
RETURNS TABLE (idx int, status text)
LANGUAGE plpgsql AS $$
DECLARE
    v_last bigint;
    v_keep int[];
    v_n    int;
BEGIN
    SELECT p.last_offset INTO v_last FROM bench.parts p WHERE p.id = p_pid FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no partition %', p_pid;
    END IF;
    SELECT COALESCE(array_agg(u.ord ORDER BY u.ord), '{}') INTO v_keep
    FROM (SELECT DISTINCT ON (a.t) a.t, a.ord::int AS ord
          FROM unnest(p_txids) WITH ORDINALITY AS a(t, ord) ORDER BY a.t, a.ord) u
    WHERE NOT EXISTS (SELECT 1 FROM bench.row_messages m
                      WHERE m.partition_id = p_pid AND m.transaction_id = u.t);
    v_n := COALESCE(array_length(v_keep, 1), 0);
    IF v_n > 0 THEN
        INSERT INTO bench.row_messages (partition_id, off, id, transaction_id, payload, created_at)
        SELECT p_pid, v_last + z.i, p_ids[z.k], p_txids[z.k], p_payloads[z.k]::json, clock_timestamp()
        FROM unnest(v_keep) WITH ORDINALITY AS z(k, i);
        UPDATE bench.parts SET last_offset = v_last + v_n, last_write_at = clock_timestamp() WHERE id = p_pid;
    END IF;
    RETURN QUERY
    SELECT (a.ord - 1)::int, CASE WHEN a.ord::int = ANY (v_keep) THEN 'queued' ELSE 'duplicate' END
    FROM unnest(p_txids) WITH ORDINALITY AS a(t, ord);
END;
$$;

CREATE FUNCTION bench.push_seg(p_pid uuid, p_txids text[], p_ids uuid[], p_payloads text[], p_gin boolean)
RETURNS TABLE (idx int, status text)
LANGUAGE plpgsql AS $$
DECLARE
    v_last bigint;
    v_dup  text[];
    v_keep int[];
    v_n    int;
BEGIN
    -- Offsets are allocated under the partition row lock, as in push_v2;
    -- the lock also makes the duplicate check race-free.
    SELECT p.last_offset INTO v_last FROM bench.parts p WHERE p.id = p_pid FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no partition %', p_pid;
    END IF;
    IF p_gin THEN
        SELECT COALESCE(array_agg(DISTINCT e), '{}') INTO v_dup
        FROM bench.segments s, unnest(s.txids) AS e
        WHERE s.txids && p_txids AND s.partition_id = p_pid AND e = ANY (p_txids);
    ELSE
        SELECT COALESCE(array_agg(x.transaction_id), '{}') INTO v_dup
        FROM bench.segment_txids x
        WHERE x.partition_id = p_pid AND x.transaction_id = ANY (p_txids);
    END IF;
    SELECT COALESCE(array_agg(u.ord ORDER BY u.ord), '{}') INTO v_keep
    FROM (SELECT DISTINCT ON (a.t) a.t, a.ord::int AS ord
          FROM unnest(p_txids) WITH ORDINALITY AS a(t, ord) ORDER BY a.t, a.ord) u
    WHERE NOT (u.t = ANY (v_dup));
    v_n := COALESCE(array_length(v_keep, 1), 0);
    IF v_n > 0 THEN
        INSERT INTO bench.segments (partition_id, first_off, last_off, ids, txids, payload, created_at)
        SELECT p_pid, v_last + 1, v_last + v_n,
               array_agg(p_ids[k] ORDER BY k), array_agg(p_txids[k] ORDER BY k),
               json_agg(p_payloads[k]::json ORDER BY k), clock_timestamp()
        FROM unnest(v_keep) AS k;
        IF NOT p_gin THEN
            INSERT INTO bench.segment_txids (partition_id, transaction_id, off)
            SELECT p_pid, p_txids[z.k], v_last + z.i
            FROM unnest(v_keep) WITH ORDINALITY AS z(k, i);
        END IF;
        UPDATE bench.parts SET last_offset = v_last + v_n, last_write_at = clock_timestamp() WHERE id = p_pid;
    END IF;
    RETURN QUERY
    SELECT (a.ord - 1)::int, CASE WHEN a.ord::int = ANY (v_keep) THEN 'queued' ELSE 'duplicate' END
    FROM unnest(p_txids) WITH ORDINALITY AS a(t, ord);
END;
$$;
`

type benchEnv struct {
	db       *pg.DB
	pool     *pgxpool.Pool
	payloads []string
}

var benchSeq atomic.Int64

// benchWorkers is the goroutine count of the parallel variants
// (b.SetParallelism(2): 4 on a 2-core machine).
func benchWorkers() int { return 2 * runtime.GOMAXPROCS(0) }

// newBenchEnv creates a fresh bench_* database on the pgtest server, applies
// the queen schema through pg.Open and the bench schema, and drops the
// database when b ends.
func newBenchEnv(b *testing.B) *benchEnv {
	b.Helper()
	ctx := context.Background()
	admin := pgtest.ServerURL()
	var sb strings.Builder
	for _, r := range strings.ToLower(b.Name()) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			sb.WriteRune(r)
		}
		if sb.Len() >= 24 {
			break
		}
	}
	name := fmt.Sprintf("bench_%s_%d_%d", sb.String(), os.Getpid(), benchSeq.Add(1))
	if err := adminExec(ctx, admin, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE template0"); err != nil {
		b.Fatalf("create database %s: %v", name, err)
	}
	e := &benchEnv{payloads: makePayloads(1024)}
	b.Cleanup(func() {
		if e.db != nil {
			e.db.Close()
		}
		if e.pool != nil {
			e.pool.Close()
		}
		if err := adminExec(context.Background(), admin, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			b.Errorf("drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(admin)
	if err != nil {
		b.Fatal(err)
	}
	u.Path, u.RawPath = "/"+name, ""
	conns := int32(max(8, benchWorkers()+2))
	e.db, err = pg.Open(ctx, u.String(), conns, hclog.NewNullLogger())
	if err != nil {
		b.Fatalf("pg.Open: %v", err)
	}
	cfg, err := pgxpool.ParseConfig(u.String())
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = conns
	e.pool, err = pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatalf("pool: %v", err)
	}
	e.exec(b, benchSchema)
	return e
}

func adminExec(ctx context.Context, admin, sql string) error {
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}

func (e *benchEnv) exec(b *testing.B, sql string, args ...any) {
	b.Helper()
	if _, err := e.pool.Exec(context.Background(), sql, args...); err != nil {
		b.Fatalf("%s: %v", firstLine(sql), err)
	}
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}

// makePayloads returns n distinct JSON documents of exactly benchPayload
// bytes: a few typed fields and a random hex note (so TOAST compression of
// packed segments is not flattered by identical payloads).
func makePayloads(n int) []string {
	rnd := rand.New(rand.NewPCG(1, 2))
	const hexdigits = "0123456789abcdef"
	out := make([]string, n)
	for i := range out {
		head := fmt.Sprintf(`{"event":"order.created","seq":%d,"customer":"c-%06d","amount":%d.%02d,"note":"`,
			i, rnd.IntN(1000000), rnd.IntN(10000), rnd.IntN(100))
		var sb strings.Builder
		sb.WriteString(head)
		for sb.Len() < benchPayload-2 {
			sb.WriteByte(hexdigits[rnd.IntN(16)])
		}
		sb.WriteString(`"}`)
		out[i] = sb.String()
	}
	return out
}

// batchArrays builds one batch's column arrays: fresh UUIDv7 message ids and
// transaction ids (as the clients generate), payloads from the pool.
type batchArrays struct {
	ids, txids, payloads []string
}

func (e *benchEnv) newBatch(b *testing.B, seq int) batchArrays {
	ba := batchArrays{ids: make([]string, benchBatch), txids: make([]string, benchBatch), payloads: make([]string, benchBatch)}
	for i := range benchBatch {
		id, err := uuid.NewV7()
		if err != nil {
			b.Fatal(err)
		}
		tx, err := uuid.NewV7()
		if err != nil {
			b.Fatal(err)
		}
		ba.ids[i], ba.txids[i] = id.String(), tx.String()
		ba.payloads[i] = e.payloads[(seq*benchBatch+i)%len(e.payloads)]
	}
	return ba
}

func reportRate(b *testing.B) {
	b.ReportMetric(float64(b.N*benchBatch)/b.Elapsed().Seconds(), "msgs/s")
}

// Seeding. A push benchmark stores benchSeedBatches*100 messages in each
// partition it will push to, then runs VACUUM ANALYZE, outside the timer:
// the steady state of a long-lived broker whose hot partitions are known to
// the planner statistics. Without it the duplicate checks are planned for a
// partition the statistics have never seen (estimated at one row) and pick a
// merge anti-join that reads the whole partition per push: see
// docs/storage.md.
const benchSeedBatches = 100

// Each statement takes $1 = payload pool, $2 = partition id, $3 = count.
const seedRawSQL = `INSERT INTO bench.raw_messages (partition_id, off, id, transaction_id, payload, created_at)
SELECT $2::uuid, g, gen_random_uuid(), gen_random_uuid()::text, ($1::text[])[1 + g % 1024]::json, clock_timestamp()
FROM generate_series(1, $3::bigint) AS g`

const seedRowsSQL = `INSERT INTO bench.row_messages (partition_id, off, id, transaction_id, payload, created_at)
SELECT $2::uuid, g, gen_random_uuid(), gen_random_uuid()::text, ($1::text[])[1 + g % 1024]::json, clock_timestamp()
FROM generate_series(1, $3::bigint) AS g`

const seedSegmentsSQL = `INSERT INTO bench.segments (partition_id, first_off, last_off, ids, txids, payload, created_at)
SELECT $2::uuid, (s - 1) * 100 + 1, s * 100, x.ids, x.txids, x.payload, clock_timestamp()
FROM generate_series(1, $3::bigint / 100) AS s,
LATERAL (SELECT array_agg(gen_random_uuid() ORDER BY g) AS ids,
                array_agg(gen_random_uuid()::text ORDER BY g) AS txids,
                json_agg(($1::text[])[1 + (s * 100 + g) % 1024]::json ORDER BY g) AS payload
         FROM generate_series(1, 100) AS g) AS x`

const seedSegmentTxidsSQL = `INSERT INTO bench.segment_txids (partition_id, transaction_id, off)
SELECT s.partition_id, u.t, s.first_off + u.o - 1
FROM bench.segments s, unnest(s.txids) WITH ORDINALITY AS u(t, o)
WHERE s.partition_id = $2::uuid AND $1::text[] IS NOT NULL AND $3::bigint > 0`

const seedPartsSQL = `INSERT INTO bench.parts (id, last_offset)
SELECT $2::uuid, $3::bigint WHERE $1::text[] IS NOT NULL`

// seed runs the seeding statements for every partition and VACUUM ANALYZE
// on the tables.
func (e *benchEnv) seed(b *testing.B, tables string, pids []string, sqls ...string) {
	b.Helper()
	for _, pid := range pids {
		for _, q := range sqls {
			e.exec(b, q, e.payloads, pid, benchSeedBatches*benchBatch)
		}
	}
	e.exec(b, "VACUUM ANALYZE "+tables)
}

// runBoth runs fn as sub-benchmark "serial" (one goroutine, one partition)
// and "parallel" (b.RunParallel, benchWorkers goroutines).
func runBoth(b *testing.B, serial, parallel func(b *testing.B)) {
	b.Run("serial", serial)
	b.Run("parallel", func(b *testing.B) {
		b.SetParallelism(2)
		parallel(b)
	})
}

// ---------------------------------------------------------------------------
// Raw ceilings

const rawInsertSQL = `INSERT INTO bench.raw_messages (partition_id, off, id, transaction_id, payload, created_at)
SELECT $1::uuid, t.off, t.id, t.txid, t.payload::json, clock_timestamp()
FROM unnest($2::bigint[], $3::uuid[], $4::text[], $5::text[]) AS t(off, id, txid, payload)`

// BenchmarkRawInsert is the insert ceiling: one plain INSERT ... unnest of
// 100 rows per batch (autocommit), offsets chosen by the client.
func BenchmarkRawInsert(b *testing.B) {
	e := newBenchEnv(b)
	ctx := context.Background()
	insert := func(b *testing.B, pid string, next *int64, seq int) {
		ba := e.newBatch(b, seq)
		offs := make([]int64, benchBatch)
		for i := range offs {
			*next++
			offs[i] = *next
		}
		tag, err := e.pool.Exec(ctx, rawInsertSQL, pid, offs, ba.ids, ba.txids, ba.payloads)
		if err != nil {
			b.Fatalf("raw insert: %v", err)
		}
		if tag.RowsAffected() != benchBatch {
			b.Fatalf("raw insert: %d rows", tag.RowsAffected())
		}
	}
	reset := func(b *testing.B, n int) []string {
		e.exec(b, "TRUNCATE bench.raw_messages")
		pids := make([]string, n)
		for k := range pids {
			pids[k] = uuid.NewString()
		}
		e.seed(b, "bench.raw_messages", pids, seedRawSQL)
		return pids
	}
	runBoth(b, func(b *testing.B) {
		pid := reset(b, 1)[0]
		next := int64(benchSeedBatches * benchBatch)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			insert(b, pid, &next, i)
		}
		b.StopTimer()
		reportRate(b)
	}, func(b *testing.B) {
		pids := reset(b, benchWorkers())
		var nextPart atomic.Int64
		b.ResetTimer()
		b.RunParallel(func(p *testing.PB) {
			pid := pids[int(nextPart.Add(1)-1)%len(pids)] // one partition per goroutine
			next := int64(benchSeedBatches * benchBatch)
			for i := 0; p.Next(); i++ {
				insert(b, pid, &next, i)
			}
		})
		b.StopTimer()
		reportRate(b)
	})
}

// prefillRaw fills nparts partitions with batches*100 messages each and
// resets their cursors.
func (e *benchEnv) prefillRaw(b *testing.B, nparts, batches int) {
	b.Helper()
	e.exec(b, "TRUNCATE bench.raw_messages, bench.raw_cursors")
	n := batches * benchBatch
	for range nparts {
		pid := uuid.NewString()
		e.exec(b, `INSERT INTO bench.raw_messages (partition_id, off, id, transaction_id, payload, created_at)
			SELECT $1::uuid, g, gen_random_uuid(), gen_random_uuid()::text, ($3::text[])[1 + g % 1024]::json, clock_timestamp()
			FROM generate_series(1, $2::bigint) AS g`, pid, n, e.payloads)
		e.exec(b, `INSERT INTO bench.raw_cursors (partition_id, cur, hi) VALUES ($1, 0, $2)`, pid, n)
	}
	e.exec(b, "VACUUM ANALYZE bench.raw_messages, bench.raw_cursors")
}

// BenchmarkRawClaim is the claim ceiling: per batch one transaction that
// locks a cursor row with FOR UPDATE SKIP LOCKED, reads the next 100
// messages after it, advances it and commits.
func BenchmarkRawClaim(b *testing.B) {
	e := newBenchEnv(b)
	ctx := context.Background()
	// claim returns false when every cursor with data left was locked.
	claim := func(b *testing.B) bool {
		tx, err := e.pool.Begin(ctx)
		if err != nil {
			b.Fatalf("begin: %v", err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		var pid string
		var cur int64
		err = tx.QueryRow(ctx, `SELECT partition_id, cur FROM bench.raw_cursors
			WHERE cur < hi ORDER BY partition_id LIMIT 1 FOR UPDATE SKIP LOCKED`).Scan(&pid, &cur)
		if errors.Is(err, pgx.ErrNoRows) {
			return false
		}
		if err != nil {
			b.Fatalf("lock cursor: %v", err)
		}
		rows, err := tx.Query(ctx, `SELECT off, id, transaction_id, payload FROM bench.raw_messages
			WHERE partition_id = $1 AND off > $2 ORDER BY off LIMIT 100`, pid, cur)
		if err != nil {
			b.Fatalf("read: %v", err)
		}
		var (
			n, off  int64
			id, txn string
			payload []byte
		)
		for rows.Next() {
			if err := rows.Scan(&off, &id, &txn, &payload); err != nil {
				b.Fatalf("scan: %v", err)
			}
			n++
		}
		if err := rows.Err(); err != nil {
			b.Fatalf("read: %v", err)
		}
		if n != benchBatch {
			b.Fatalf("read %d messages, want %d", n, benchBatch)
		}
		if _, err := tx.Exec(ctx, `UPDATE bench.raw_cursors SET cur = $2 WHERE partition_id = $1`, pid, off); err != nil {
			b.Fatalf("advance: %v", err)
		}
		if err := tx.Commit(ctx); err != nil {
			b.Fatalf("commit: %v", err)
		}
		return true
	}
	runBoth(b, func(b *testing.B) {
		b.StopTimer()
		e.prefillRaw(b, 1, b.N)
		b.StartTimer()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if !claim(b) {
				b.Fatal("raw claim: nothing to claim")
			}
		}
		b.StopTimer()
		reportRate(b)
	}, func(b *testing.B) {
		b.StopTimer()
		nparts := 2 * benchWorkers()
		e.prefillRaw(b, nparts, b.N/nparts+2)
		b.StartTimer()
		b.ResetTimer()
		b.RunParallel(func(p *testing.PB) {
			for p.Next() {
				for tries := 0; !claim(b); tries++ {
					if tries > 100000 {
						b.Fatal("raw claim: nothing to claim")
					}
				}
			}
		})
		b.StopTimer()
		reportRate(b)
	})
}

// ---------------------------------------------------------------------------
// Row per message (the product design)

// BenchmarkPushRowPerMessage measures pg.DB.Push (queen.push_v3) of 100
// rows to one partition, and as a control the same layout through a minimal
// function shaped like push_seg (bench.push_rows).
func BenchmarkPushRowPerMessage(b *testing.B) {
	e := newBenchEnv(b)
	ctx := context.Background()
	push := func(b *testing.B, queue, part string, seq int) {
		ba := e.newBatch(b, seq)
		rows := make([]pg.PushRow, benchBatch)
		for i := range rows {
			rows[i] = pg.PushRow{Queue: queue, Partition: part, TxID: ba.txids[i], ID: ba.ids[i], Payload: ba.payloads[i]}
		}
		outs, err := e.db.Push(ctx, benchTenant, rows)
		if err != nil {
			b.Fatalf("push: %v", err)
		}
		if len(outs) != benchBatch {
			b.Fatalf("push: %d outcomes", len(outs))
		}
		for _, o := range outs {
			if o.Status != "queued" {
				b.Fatalf("push: item %d %s", o.Idx, o.Status)
			}
		}
	}
	// warm creates the queue and seeded partitions p0.. outside the timer.
	warm := func(b *testing.B, nparts int) {
		e.prefillQueue(b, "q", nparts, benchSeedBatches)
	}
	b.Run("push_v2", func(b *testing.B) {
		runBoth(b, func(b *testing.B) {
			warm(b, 1)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				push(b, "q", "p0", i)
			}
			b.StopTimer()
			reportRate(b)
		}, func(b *testing.B) {
			warm(b, benchWorkers())
			var next atomic.Int64
			b.ResetTimer()
			b.RunParallel(func(p *testing.PB) {
				part := fmt.Sprintf("p%d", next.Add(1)-1) // one partition per goroutine
				for i := 0; p.Next(); i++ {
					push(b, "q", part, i)
				}
			})
			b.StopTimer()
			reportRate(b)
		})
	})
	b.Run("minimal_fn", func(b *testing.B) {
		benchPushFn(b, e, func(b *testing.B, pids []string) {
			e.exec(b, "TRUNCATE bench.row_messages, bench.parts")
			e.seed(b, "bench.row_messages, bench.parts", pids, seedRowsSQL, seedPartsSQL)
		}, `SELECT idx, status FROM bench.push_rows($1, $2, $3::uuid[], $4)`)
	})
}

// ---------------------------------------------------------------------------
// Packed segments (the alternative)

// BenchmarkPushPackedSegment appends each batch as one bench.segments row
// (payloads as one JSON array) with offsets allocated under the partition
// row lock and a dedup check on the transaction ids, in two variants for
// the (partition, txid) lookup that dedup and ack need:
//
//	txidtable: a bench.segment_txids row (PK partition, txid) per message
//	gin:       a GIN index on segments.txids (no separate table)
func BenchmarkPushPackedSegment(b *testing.B) {
	e := newBenchEnv(b)
	for _, v := range []struct {
		name string
		gin  bool
	}{{"txidtable", false}, {"gin", true}} {
		b.Run(v.name, func(b *testing.B) {
			benchPushFn(b, e, func(b *testing.B, pids []string) {
				e.exec(b, "TRUNCATE bench.segments, bench.segment_txids, bench.parts")
				seeds := []string{seedSegmentsSQL, seedPartsSQL}
				if v.gin {
					e.exec(b, "CREATE INDEX IF NOT EXISTS segments_txids ON bench.segments USING gin (txids)")
				} else {
					e.exec(b, "DROP INDEX IF EXISTS bench.segments_txids")
					seeds = append(seeds, seedSegmentTxidsSQL)
				}
				e.seed(b, "bench.segments, bench.segment_txids, bench.parts", pids, seeds...)
			}, fmt.Sprintf(`SELECT idx, status FROM bench.push_seg($1, $2, $3::uuid[], $4, %t)`, v.gin))
		})
	}
}

// benchPushFn runs serial and parallel variants of a bench push function
// called as sql(pid, txids, ids, payloads), after reset (truncate + seed).
func benchPushFn(b *testing.B, e *benchEnv, reset func(b *testing.B, pids []string), sql string) {
	ctx := context.Background()
	newParts := func(b *testing.B, n int) []string {
		pids := make([]string, n)
		for k := range pids {
			pids[k] = uuid.NewString()
		}
		reset(b, pids)
		return pids
	}
	push := func(b *testing.B, pid string, seq int) {
		ba := e.newBatch(b, seq)
		rows, err := e.pool.Query(ctx, sql, pid, ba.txids, ba.ids, ba.payloads)
		if err != nil {
			b.Fatalf("push: %v", err)
		}
		n := 0
		for rows.Next() {
			var idx int
			var status string
			if err := rows.Scan(&idx, &status); err != nil {
				b.Fatalf("push: scan: %v", err)
			}
			if status != "queued" {
				b.Fatalf("push: item %d %s", idx, status)
			}
			n++
		}
		if err := rows.Err(); err != nil {
			b.Fatalf("push: %v", err)
		}
		if n != benchBatch {
			b.Fatalf("push: %d outcomes", n)
		}
	}
	runBoth(b, func(b *testing.B) {
		pid := newParts(b, 1)[0]
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			push(b, pid, i)
		}
		b.StopTimer()
		reportRate(b)
	}, func(b *testing.B) {
		pids := newParts(b, benchWorkers())
		var next atomic.Int64
		b.ResetTimer()
		b.RunParallel(func(p *testing.PB) {
			pid := pids[int(next.Add(1)-1)%len(pids)]
			for i := 0; p.Next(); i++ {
				push(b, pid, i)
			}
		})
		b.StopTimer()
		reportRate(b)
	})
}

// ---------------------------------------------------------------------------
// Claim + ack through the product functions

// prefillQueue creates queue q with nparts partitions of batches*100
// messages each (directly in SQL, as push_v2 would have stored them), and
// the group's marker and cursor rows, so the timed loop is steady state.
func (e *benchEnv) prefillQueue(b *testing.B, q string, nparts, batches int) []string {
	b.Helper()
	e.exec(b, "TRUNCATE queen.queues CASCADE")
	var qid string
	if err := e.pool.QueryRow(context.Background(), `INSERT INTO queen.queues (id, tenant, name)
		VALUES (gen_random_uuid(), $1, $2) RETURNING id`, benchTenant, q).Scan(&qid); err != nil {
		b.Fatalf("queue: %v", err)
	}
	e.exec(b, `INSERT INTO queen.consumer_groups_metadata (queue_id, consumer_group) VALUES ($1, $2)`, qid, benchGroup)
	n := batches * benchBatch
	names := make([]string, nparts)
	for k := range names {
		names[k] = fmt.Sprintf("p%d", k)
		pid := uuid.NewString()
		e.exec(b, `INSERT INTO queen.partitions (id, queue_id, name, last_offset, last_write_at)
			VALUES ($1, $2, $3, $4, now())`, pid, qid, names[k], n)
		e.exec(b, `INSERT INTO queen.messages (partition_id, off, id, transaction_id, payload, created_at)
			SELECT $1::uuid, g, gen_random_uuid(), gen_random_uuid()::text, ($3::text[])[1 + g % 1024]::json, clock_timestamp()
			FROM generate_series(1, $2::bigint) AS g`, pid, n, e.payloads)
		e.exec(b, `INSERT INTO queen.consumers (partition_id, consumer_group) VALUES ($1, $2)`, pid, benchGroup)
	}
	e.exec(b, "VACUUM ANALYZE queen.queues, queen.partitions, queen.messages, queen.consumers, queen.consumer_groups_metadata")
	return names
}

// BenchmarkPopAck measures pg.DB.Pop (queen.pop_v1) of 100 messages
// followed by pg.DB.Ack (queen.ack_v1) of those 100, on a pre-filled queue.
// The parallel variant offers every partition as candidate (rotated per
// goroutine), so a goroutine skips partitions leased or locked by others,
// like the raw claim's SKIP LOCKED.
func BenchmarkPopAck(b *testing.B) {
	e := newBenchEnv(b)
	ctx := context.Background()
	// popAck returns false when no candidate had messages to give.
	popAck := func(b *testing.B, names []string) bool {
		lease := uuid.NewString()
		out, err := e.db.Pop(ctx, pg.PopArgs{Tenant: benchTenant, Queue: "q", Group: benchGroup, Names: names,
			ScanLimit: 16, Budget: benchBatch, MaxParts: 1, LeaseID: lease, LeaseSeconds: 60,
			Owner: "bench", SubMode: protocol.SubAll})
		if err != nil {
			b.Fatalf("pop: %v", err)
		}
		if len(out.Messages) == 0 {
			return false
		}
		if len(out.Messages) != benchBatch {
			b.Fatalf("pop: %d messages, want %d", len(out.Messages), benchBatch)
		}
		acks := make([]pg.AckRow, len(out.Messages))
		for i, m := range out.Messages {
			acks[i] = pg.AckRow{Group: benchGroup, PartitionID: m.PartitionID, TxID: m.TxID, Status: "completed", LeaseID: lease}
		}
		res, err := e.db.Ack(ctx, benchTenant, acks)
		if err != nil {
			b.Fatalf("ack: %v", err)
		}
		released := false
		for _, r := range res {
			if !r.Success {
				b.Fatalf("ack: item %d: %s", r.Idx, r.Error)
			}
			released = released || r.Released
		}
		if !released {
			b.Fatal("ack: lease not released")
		}
		return true
	}
	runBoth(b, func(b *testing.B) {
		b.StopTimer()
		names := e.prefillQueue(b, "q", 1, b.N)
		b.StartTimer()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if !popAck(b, names) {
				b.Fatal("pop: nothing to claim")
			}
		}
		b.StopTimer()
		reportRate(b)
	}, func(b *testing.B) {
		b.StopTimer()
		nparts := 2 * benchWorkers()
		names := e.prefillQueue(b, "q", nparts, b.N/nparts+2)
		var next atomic.Int64
		b.StartTimer()
		b.ResetTimer()
		b.RunParallel(func(p *testing.PB) {
			k := int(next.Add(1) - 1)
			mine := append(append([]string{}, names[k%nparts:]...), names[:k%nparts]...)
			for p.Next() {
				for tries := 0; !popAck(b, mine); tries++ {
					if tries > 100000 {
						b.Fatal("pop: nothing to claim")
					}
				}
			}
		})
		b.StopTimer()
		reportRate(b)
	})
}
