package pg_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"

	"queen-node/pg"
	"queen-node/protocol"
)

// TestFastPushMatchesGeneral is the fast push's differential test: the same
// random flushes go to two queues, one through PushSome (the fast push
// where it applies) and one through queen.push_v4 alone, the way the
// combiner sends them: rows that come back deferred are sent again at once
// with wait. The flushes mix new ids, stored duplicates, in-batch copies,
// several partitions, partitions another transaction holds, and queues
// deleted and re-created under the node (stale partition ids). Every row's
// final answer, and every partition's log (offsets, transaction ids, message
// ids) and watermark, must be the same for both; and the fast push must
// have answered most flushes.
func TestFastPushMatchesGeneral(t *testing.T) {
	db, url := openDB(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rng := rand.New(rand.NewSource(11))
	const fastQ, genQ = "df-fast", "df-gen"
	var stored []string // transaction ids pushed so far, per round's pick
	next := 0
	rounds, deletes, holds := 150, 0, 0
	for round := 0; round < rounds; round++ {
		if round > 0 && rng.Intn(25) == 0 {
			// A delete and a re-create under new ids: the fast push's
			// cached ids are stale from here.
			for _, q := range []string{fastQ, genQ} {
				if _, err := db.DeleteQueue(ctx, "t", q); err != nil {
					t.Fatal(err)
				}
			}
			stored, deletes = nil, deletes+1
		}
		n := 1 + rng.Intn(30)
		var rows []pg.PushRow
		wait := make([]bool, n)
		for i := 0; i < n; i++ {
			part := fmt.Sprintf("p%d", rng.Intn(6))
			var tx string
			switch {
			case len(stored) > 0 && rng.Intn(8) == 0:
				tx = stored[rng.Intn(len(stored))] // a duplicate where its partition matches
			case len(rows) > 0 && rng.Intn(10) == 0:
				tx, part = rows[len(rows)-1].TxID, rows[len(rows)-1].Partition // an in-batch copy
			default:
				next++
				tx = fmt.Sprintf("tx%d", next)
			}
			stored = append(stored, tx)
			rows = append(rows, pg.PushRow{Queue: fastQ, Partition: part, TxID: tx,
				ID: fmt.Sprintf("0190a0b0-0000-7000-8000-%012d", round*100+i), Payload: fmt.Sprintf(`{"r":%d,"i":%d}`, round, i)})
			wait[i] = rng.Intn(4) == 0
		}
		var held string
		if round > 0 && rng.Intn(6) == 0 {
			// Another transaction holds a partition: nothing may wait for it
			// in the first attempt.
			held = rows[rng.Intn(n)].Partition
			for i := range rows {
				if rows[i].Partition == held {
					wait[i] = false
				}
			}
			holds++
		}
		gen := make([]pg.PushRow, n)
		for i, r := range rows {
			r.Queue = genQ
			gen[i] = r
		}
		if held == "" && rng.Intn(5) == 0 {
			wait = nil // pg.DB.Push: all or nothing
		}
		got := combinerPush(t, ctx, url, db.PushSome, rows, wait, fastQ, held)
		want := combinerPush(t, ctx, url, db.PushGeneral, gen, wait, genQ, held)
		for i := range rows {
			if got[i].Status != want[i].Status || got[i].MessageID != want[i].MessageID || got[i].TxID != want[i].TxID {
				t.Fatalf("round %d row %d (%s %s): fast %+v, general %+v", round, i, rows[i].Partition, rows[i].TxID, got[i], want[i])
			}
			if got[i].PartitionID == "" || want[i].PartitionID == "" {
				t.Fatalf("round %d row %d: no partition id: fast %+v, general %+v", round, i, got[i], want[i])
			}
		}
		if f, g := queueLog(t, conn, fastQ), queueLog(t, conn, genQ); f != g {
			t.Fatalf("round %d: logs differ\nfast:    %s\ngeneral: %s", round, f, g)
		}
	}
	st := db.Stat()
	if deletes == 0 || holds == 0 || st.PushFastDups == 0 || st.PushFast < int64(rounds)/2 {
		t.Fatalf("the test did not reach what it checks: %d deletes, %d holds, %+v", deletes, holds, st)
	}
}

// combinerPush sends rows as the push combiner does: a first attempt with
// wait, then the deferred rows again with wait true, while the partition
// held (if any) is locked by another transaction for the first attempt only.
func combinerPush(t *testing.T, ctx context.Context, url string,
	push func(context.Context, string, []pg.PushRow, []bool) ([]pg.PushOutcome, error),
	rows []pg.PushRow, wait []bool, q, held string) []pg.PushOutcome {
	t.Helper()
	release := func() {}
	if held != "" {
		// The partition exists unless this is its first push.
		var n int
		_ = pgxQueryInt(ctx, url, `SELECT count(*) FROM queen.partitions p JOIN queen.queues qu ON qu.id = p.queue_id
			WHERE qu.tenant = 't' AND qu.name = $1 AND p.name = $2`, &n, q, held)
		if n == 1 {
			release = holdPartition(t, url, q, held)
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	outs, err := push(cctx, "t", rows, wait)
	release()
	if err != nil {
		t.Fatalf("first attempt: %v", err)
	}
	var again []int
	for i, o := range outs {
		if o.Status == protocol.PushDeferred {
			again = append(again, i)
		}
	}
	if len(again) == 0 {
		return outs
	}
	sub, yes := make([]pg.PushRow, len(again)), make([]bool, len(again))
	for x, i := range again {
		sub[x], yes[x] = rows[i], true
	}
	subOuts, err := push(cctx, "t", sub, yes)
	if err != nil {
		t.Fatalf("second attempt: %v", err)
	}
	for x, i := range again {
		if subOuts[x].Status == protocol.PushDeferred {
			t.Fatalf("row %d deferred by a push that waits", i)
		}
		subOuts[x].Idx = i
		outs[i] = subOuts[x]
	}
	return outs
}

func pgxQueryInt(ctx context.Context, url, sql string, dst *int, args ...any) error {
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	return c.QueryRow(ctx, sql, args...).Scan(dst)
}

// queueLog renders queue q's partitions, watermarks and messages.
func queueLog(t *testing.T, conn *pgx.Conn, q string) string {
	t.Helper()
	var s string
	err := conn.QueryRow(context.Background(), `SELECT COALESCE(string_agg(x, ' ' ORDER BY x), '') FROM (
		SELECT p.name || '@' || p.last_offset || ':' || COALESCE((SELECT string_agg(m.off || '=' || m.transaction_id || '/' || m.id || '/' || m.payload::text, ',' ORDER BY m.off)
			FROM queen.messages m WHERE m.partition_id = p.id), '') AS x
		FROM queen.partitions p JOIN queen.queues qu ON qu.id = p.queue_id
		WHERE qu.tenant = 't' AND qu.name = $1) y`, q).Scan(&s)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestFastPushConcurrentFlushes runs the fast push the way a cluster does:
// three nodes (three pg.DB, each with its own partition-id cache), each
// sending flushes one at a time, as its combiner does, to overlapping
// partitions, sending deferred rows again with wait, and now and then
// sending a whole earlier flush again (a client's retry). Every partition's
// log must then hold each transaction id once, at dense offsets, each
// node's rows in the order it sent them, and every retried row must have
// been answered duplicate.
func TestFastPushConcurrentFlushes(t *testing.T) {
	_, url := openDB(t)
	ctx := context.Background()
	const nodes, flushes, parts, q = 3, 120, 8, "conc"
	dbs := make([]*pg.DB, nodes)
	for i := range dbs {
		db, err := pg.Open(ctx, url, 4, hclog.NewNullLogger())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(db.Close)
		dbs[i] = db
	}
	errs := make(chan error, nodes)
	sentRows, deferred := make([]int, nodes), make([]int, nodes)
	for n := 0; n < nodes; n++ {
		go func(n int) {
			errs <- func() error {
				rng := rand.New(rand.NewSource(int64(n)))
				db := dbs[n]
				var prev []pg.PushRow
				seq := 0
				for f := 0; f < flushes; f++ {
					var rows []pg.PushRow
					retry := prev != nil && rng.Intn(10) == 0
					if retry {
						// a new request: the node gives its rows new ids
						for i, r := range prev {
							r.ID = fmt.Sprintf("0190a0b0-0000-7000-9%03d-%012d", n, f*100+i)
							rows = append(rows, r)
						}
					} else {
						for i := 0; i < 1+rng.Intn(40); i++ {
							seq++
							rows = append(rows, pg.PushRow{Queue: q, Partition: fmt.Sprintf("p%d", rng.Intn(parts)),
								TxID: fmt.Sprintf("n%d-%06d", n, seq), ID: fmt.Sprintf("0190a0b0-0000-7000-8%03d-%012d", n, seq),
								Payload: fmt.Sprintf(`{"n":%d,"s":%d}`, n, seq)})
						}
					}
					wait := make([]bool, len(rows))
					outs, err := db.PushSome(ctx, "t", rows, wait)
					if err != nil {
						return fmt.Errorf("node %d flush %d: %w", n, f, err)
					}
					var again []int
					for i, o := range outs {
						if o.Status == protocol.PushDeferred {
							again = append(again, i)
						}
					}
					if len(again) > 0 {
						deferred[n] += len(again)
						sub, yes := make([]pg.PushRow, len(again)), make([]bool, len(again))
						for x, i := range again {
							sub[x], yes[x] = rows[i], true
						}
						subOuts, err := db.PushSome(ctx, "t", sub, yes)
						if err != nil {
							return fmt.Errorf("node %d flush %d again: %w", n, f, err)
						}
						for x, i := range again {
							outs[i] = subOuts[x]
						}
					}
					for i, o := range outs {
						want, id := protocol.PushQueued, rows[i].ID
						if retry {
							want, id = protocol.PushDuplicate, prev[i].ID
						}
						if o.Status != want || o.MessageID != id {
							return fmt.Errorf("node %d flush %d row %d: %+v, want %s of %s", n, f, i, o, want, id)
						}
					}
					if !retry {
						prev = rows
					}
				}
				sentRows[n] = seq
				return nil
			}()
		}(n)
	}
	for n := 0; n < nodes; n++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rs, err := conn.Query(ctx, `SELECT p.name, p.last_offset, m.off, m.transaction_id FROM queen.messages m
		JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues qu ON qu.id = p.queue_id
		WHERE qu.name = $1 ORDER BY p.name, m.off`, q)
	if err != nil {
		t.Fatal(err)
	}
	lastTx := map[string]string{} // partition/node -> last transaction id seen
	expect := map[string]int64{}  // partition -> next offset
	seen := map[string]bool{}
	total := 0
	for rs.Next() {
		var part, tx string
		var top, off int64
		if err := rs.Scan(&part, &top, &off, &tx); err != nil {
			t.Fatal(err)
		}
		expect[part]++
		if off != expect[part] || top < off {
			t.Fatalf("%s: offset %d (watermark %d), want %d: offsets not dense", part, off, top, expect[part])
		}
		if seen[tx] {
			t.Fatalf("%s stored twice", tx)
		}
		seen[tx] = true
		k := part + "/" + tx[:2]
		if lastTx[k] >= tx {
			t.Fatalf("%s: %s after %s: a node's rows out of order", part, tx, lastTx[k])
		}
		lastTx[k] = tx
		total++
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("rows deferred once per node: %v", deferred)
	var sent, want int
	for n := range dbs {
		want += sentRows[n]
		st := dbs[n].Stat()
		if st.PushFast == 0 {
			t.Fatalf("node %d never took the fast push: %+v", n, st)
		}
	}
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM queen.messages`).Scan(&sent); err != nil || sent != total || total != want {
		t.Fatalf("%d messages stored, %d in the queue, %d sent (%v)", sent, total, want, err)
	}
	for part, next := range expect {
		var top int64
		if err := conn.QueryRow(ctx, `SELECT p.last_offset FROM queen.partitions p JOIN queen.queues qu ON qu.id = p.queue_id
			WHERE qu.name = $1 AND p.name = $2`, q, part).Scan(&top); err != nil || top != next {
			t.Fatalf("%s: watermark %d, last offset %d (%v)", part, top, next, err)
		}
	}
}

// A combined flush's free partitions commit at once; when its rows that
// may not be deferred then fail (their partition stays held past the
// flush's deadline), PushSome says what was stored (PartialPushError), for
// the combiner to hand on and answer. pg.DB.Push instead stores nothing
// when it fails: it waits for every partition in its one statement.
func TestFastPushPartialFailure(t *testing.T) {
	db, url := openDB(t)
	ctx := context.Background()
	const q = "fpfail"
	if _, err := db.Push(ctx, "t", skipRows(q, "a/a0", "b/b0")); err != nil {
		t.Fatal(err)
	}
	release := holdPartition(t, url, q, "a")
	defer release()

	cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	outs, err := db.Push(cctx, "t", skipRows(q, "a/a1", "b/b1"))
	if err == nil {
		t.Fatalf("Push waiting on a held partition succeeded: %+v", outs)
	}
	if got := offsets(t, url, q, "b"); fmt.Sprint(got) != "[1:b0]" {
		t.Fatalf("partition b after a failed Push: %v, want only b0", got)
	}

	cctx, cancel = context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	outs, err = db.PushSome(cctx, "t", skipRows(q, "a/a2", "b/b2", "a/a2"), []bool{true, false, false})
	var partial *pg.PartialPushError
	if !errors.As(err, &partial) || outs != nil {
		t.Fatalf("flush with a held partition it must wait for: %+v, %v; want a PartialPushError", outs, err)
	}
	if got := statuses(partial.Outs); fmt.Sprint(got) != "[deferred queued deferred]" {
		t.Fatalf("partial outcomes %v, want [deferred queued deferred]", got)
	}
	if got := offsets(t, url, q, "b"); fmt.Sprint(got) != "[1:b0 2:b2]" {
		t.Fatalf("partition b after the partial flush: %v", got)
	}
	if got := offsets(t, url, q, "a"); fmt.Sprint(got) != "[1:a0]" {
		t.Fatalf("partition a after the partial flush: %v", got)
	}
}
