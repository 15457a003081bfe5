package pg_test

import (
	"context"
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"queen-node/pg"
)

// TestPushV4MatchesV3 runs random batches through queen.push_v3 (the
// previous release's function, rolled back) and then queen.push_v4 on the
// same state, each in a transaction of its own, and compares the answers
// (v3's rows per item, or its single 'missing' row, against v4's arrays
// and o_missing) and the stored messages and watermarks. Batches mix new
// transaction ids, stored ones (the probing path), partitions that do not
// exist yet, and a write before the push in the same transaction (no fast
// path: the push is not its transaction's first writer).
func TestPushV4MatchesV3(t *testing.T) {
	db, url := openDB(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := db.EnsurePartitions(ctx, "t", []pg.QueuePartition{{Queue: "pv", Partition: "p0"}}); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(11))
	stored := map[string][]string{} // partition -> stored txids
	next := 0
	state := func(tx pgx.Tx) string {
		var s string
		if err := tx.QueryRow(ctx, `SELECT COALESCE(string_agg(format('%s:%s:%s:%s:%s', p.name, p.last_offset, m.off, m.transaction_id, m.id),
				' ' ORDER BY p.name, m.off), '')
			FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id AND q.tenant = 't' AND q.name = 'pv'
			LEFT JOIN queen.messages m ON m.partition_id = p.id`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	var paths [4]int // fast, probing, missing, not first writer
	for round := 0; round < 80; round++ {
		n := 1 + rng.Intn(30)
		nparts := 2 + round/20
		var queues, parts, txids, ids, payloads []string
		var seqs []int32
		seq := map[string]int32{}
		used := map[string]bool{}
		dupRound := rng.Intn(3) == 0
		for i := 0; i < n; i++ {
			part := fmt.Sprintf("p%d", rng.Intn(nparts))
			var tx string
			if old := stored[part]; dupRound && len(old) > 0 && rng.Intn(3) == 0 {
				tx = old[rng.Intn(len(old))]
			} else {
				next++
				tx = fmt.Sprintf("tx%d", next)
			}
			if used[part+"/"+tx] {
				continue // the caller removes in-batch repeats
			}
			used[part+"/"+tx] = true
			seq[part]++
			queues, parts, txids = append(queues, "pv"), append(parts, part), append(txids, tx)
			ids = append(ids, fmt.Sprintf("0190a0b0-0000-7000-8000-%012d", round*100+i))
			payloads, seqs = append(payloads, fmt.Sprintf(`{"i":%d}`, i)), append(seqs, seq[part])
		}
		m := len(queues)
		traces, subs := make([]*string, m), make([]*string, m)
		firstWriter := rng.Intn(4) != 0
		args := []any{"t", queues, parts, seqs, txids, ids, traces, payloads, subs}

		run := func(fn func(tx pgx.Tx) string) (string, string) {
			tx, err := conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			if !firstWriter {
				if _, err := tx.Exec(ctx, `SELECT pg_current_xact_id()`); err != nil {
					t.Fatal(err)
				}
			}
			return fn(tx), state(tx)
		}
		gotV3, stV3 := run(func(tx pgx.Tx) string {
			rs, err := tx.Query(ctx, `SELECT o_idx, o_status, o_mid::text, o_pid::text
				FROM queen.push_v3($1, $2, $3, $4, $5, $6::text[]::uuid[], $7::text[]::uuid[], $8, $9)`, args...)
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for rs.Next() {
				var idx int
				var st string
				var mid, pid *string
				if err := rs.Scan(&idx, &st, &mid, &pid); err != nil {
					t.Fatal(err)
				}
				if idx == -1 {
					out = append(out, "missing")
					continue
				}
				out = append(out, fmt.Sprintf("%d %s %s %s", idx, st, *mid, *pid))
			}
			if rs.Err() != nil {
				t.Fatal(rs.Err())
			}
			return strings.Join(out, "\n")
		})
		var missing bool
		gotV4, stV4 := run(func(tx pgx.Tx) string {
			var miss int
			var sts, mids, pids []string
			if err := tx.QueryRow(ctx, `SELECT o_missing, o_statuses, o_mids::text[], o_pids::text[]
				FROM queen.push_v4($1, $2, $3, $4, $5, $6::text[]::uuid[], $7::text[]::uuid[], $8, $9)`, args...).
				Scan(&miss, &sts, &mids, &pids); err != nil {
				t.Fatal(err)
			}
			if miss > 0 {
				missing = true
				if len(sts)+len(mids)+len(pids) > 0 {
					t.Fatalf("round %d: o_missing %d with answers %v", round, miss, sts)
				}
				return "missing"
			}
			out := make([]string, len(sts))
			for i := range sts {
				out[i] = fmt.Sprintf("%d %s %s %s", i, sts[i], mids[i], pids[i])
			}
			return strings.Join(out, "\n")
		})
		if gotV3 != gotV4 || stV3 != stV4 {
			t.Fatalf("round %d (first writer %v): push_v4 differs from push_v3\nv3:\n%s\nv4:\n%s\nv3 state: %s\nv4 state: %s",
				round, firstWriter, gotV3, gotV4, stV3, stV4)
		}
		switch {
		case missing:
			paths[2]++
			var qp []pg.QueuePartition
			for _, p := range parts {
				qp = append(qp, pg.QueuePartition{Queue: "pv", Partition: p})
			}
			if err := db.EnsurePartitions(ctx, "t", qp); err != nil {
				t.Fatal(err)
			}
			continue
		case !firstWriter:
			paths[3]++
		case strings.Contains(gotV4, "duplicate"):
			paths[1]++
		default:
			paths[0]++
		}
		// Keep push_v4's outcome (committed through the node's own path).
		rows := make([]pg.PushRow, m)
		for i := range rows {
			rows[i] = pg.PushRow{Queue: "pv", Partition: parts[i], TxID: txids[i], ID: ids[i], Payload: payloads[i]}
		}
		out, err := db.Push(ctx, "t", rows)
		if err != nil {
			t.Fatal(err)
		}
		for i, o := range out {
			if o.Status == "queued" {
				stored[parts[i]] = append(stored[parts[i]], txids[i])
			}
		}
	}
	t.Logf("batches by path (fast, probing, missing, not first writer): %v", paths)
	for i, n := range paths {
		if n == 0 {
			t.Fatalf("path %d never ran: %v", i, paths)
		}
	}
}
