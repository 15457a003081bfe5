package pg_test

import (
	"context"
	"fmt"
	"math/rand"
	"testing"

	"github.com/jackc/pgx/v5"

	"queen-node/pg"
)

// TestPushModel drives push_v4's two paths (no duplicate: offsets from the
// caller's numbering, the unique index as the check; a duplicate: the
// probing statement) with random batches against a model: every batch
// mixes new ids, ids stored earlier, in-batch repeats and several
// partitions, and after each one the answers and every partition's
// messages (dense offsets, in push order) and watermark must match.
func TestPushModel(t *testing.T) {
	db, url := openDB(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rng := rand.New(rand.NewSource(7))
	model := map[string][]string{} // partition -> transaction ids in offset order
	stored := map[string]bool{}    // partition/txid
	next := 0
	for round := 0; round < 60; round++ {
		n := 1 + rng.Intn(40)
		dupRound := rng.Intn(3) == 0 // a third of the batches repeat stored ids
		var rows []pg.PushRow
		var want []string
		inBatch := map[string]bool{}
		for i := 0; i < n; i++ {
			part := fmt.Sprintf("p%d", rng.Intn(5))
			tx := ""
			switch {
			case dupRound && len(model[part]) > 0 && rng.Intn(3) == 0:
				tx = model[part][rng.Intn(len(model[part]))]
			case len(rows) > 0 && rng.Intn(10) == 0 && rows[len(rows)-1].Partition == part:
				tx = rows[len(rows)-1].TxID
			default:
				next++
				tx = fmt.Sprintf("tx%d", next)
			}
			k := part + "/" + tx
			switch {
			case stored[k] || inBatch[k]:
				want = append(want, "duplicate")
			default:
				want = append(want, "queued")
				inBatch[k] = true
				model[part] = append(model[part], tx)
			}
			rows = append(rows, pg.PushRow{Queue: "pm", Partition: part, TxID: tx,
				ID: fmt.Sprintf("0190a0b0-0000-7000-8000-%012d", round*100+i), Payload: fmt.Sprintf(`{"i":%d}`, i)})
		}
		for k := range inBatch {
			stored[k] = true
		}
		out, err := db.Push(ctx, "t", rows)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		for i, o := range out {
			if string(o.Status) != want[i] {
				t.Fatalf("round %d item %d (%s %s): %s, want %s", round, i, rows[i].Partition, rows[i].TxID, o.Status, want[i])
			}
		}
		for part, txs := range model {
			var last int64
			var offs []int64
			var got []string
			if err := conn.QueryRow(ctx, `SELECT p.last_offset, array_agg(m.off ORDER BY m.off), array_agg(m.transaction_id ORDER BY m.off)
				FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id AND q.tenant = 't' AND q.name = 'pm'
				JOIN queen.messages m ON m.partition_id = p.id WHERE p.name = $1 GROUP BY p.last_offset`, part).Scan(&last, &offs, &got); err != nil {
				t.Fatalf("round %d %s: %v", round, part, err)
			}
			if last != int64(len(txs)) || len(got) != len(txs) {
				t.Fatalf("round %d %s: last_offset %d, %d messages; want %d", round, part, last, len(got), len(txs))
			}
			for i := range txs {
				if offs[i] != int64(i+1) || got[i] != txs[i] {
					t.Fatalf("round %d %s: offsets %v txids %v, want 1..%d of %v", round, part, offs, got, len(txs), txs)
				}
			}
		}
	}
}

// TestTxPushesTakeNoSubtransaction: pushes inside a transaction request
// (Tx.Push) skip the fast path's subtransaction, which would take one
// transaction id per push: past 64 open subtransactions every snapshot in
// the cluster has to look them up in pg_subtrans. 100 pushes in one
// transaction must consume about no transaction ids (the margin is for other
// tests sharing the server).
func TestTxPushesTakeNoSubtransaction(t *testing.T) {
	db, url := openDB(t)
	ctx := context.Background()
	parts := []pg.QueuePartition{{Queue: "txq", Partition: "p"}}
	if err := db.EnsurePartitions(ctx, "t", parts); err != nil {
		t.Fatal(err)
	}
	err := db.InPushTx(ctx, "t", pg.TxLocks{Parts: parts}, func(tx *pg.Tx) error {
		for i := 0; i < 100; i++ {
			if _, err := tx.Push(ctx, "t", []pg.PushRow{{Queue: "txq", Partition: "p", TxID: fmt.Sprintf("x%d", i),
				ID: fmt.Sprintf("0190a0b0-0000-7000-8000-%012d", i), Payload: `1`}}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// A row's xmin is the (sub)transaction that inserted it: one id for all
	// 100 rows means no subtransaction. (Counting the server's transaction
	// ids instead counted other tests' too on a shared server.)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var rows, xids int
	if err := conn.QueryRow(ctx, `SELECT count(*), count(DISTINCT m.xmin::text) FROM queen.messages m
		JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id
		WHERE q.name = 'txq'`).Scan(&rows, &xids); err != nil {
		t.Fatal(err)
	}
	if rows != 100 || xids != 1 {
		t.Fatalf("100 pushes in one transaction: %d rows written by %d transaction ids, want 100 by 1 (one subtransaction each otherwise)", rows, xids)
	}
}

// TestReplayedPushIsQueued: a push whose earlier attempt committed unseen
// (a combined flush that timed out during its commit is replayed) finds its
// own rows, with its own message ids: it is answered queued, not
// duplicate, while another push of the same transaction id (a client's
// retry gets a new id) still reads duplicate.
func TestReplayedPushIsQueued(t *testing.T) {
	db, _ := openDB(t)
	ctx := context.Background()
	rows := []pg.PushRow{
		{Queue: "rq", Partition: "p", TxID: "a", ID: "0190a0b0-0000-7000-8000-00000000000a", Payload: `1`},
		{Queue: "rq", Partition: "p", TxID: "b", ID: "0190a0b0-0000-7000-8000-00000000000b", Payload: `2`},
	}
	for round := 0; round < 2; round++ {
		out, err := db.Push(ctx, "t", rows)
		if err != nil {
			t.Fatal(err)
		}
		for i, o := range out {
			if o.Status != "queued" || o.MessageID != rows[i].ID {
				t.Fatalf("attempt %d item %d: %s %s, want queued %s", round+1, i, o.Status, o.MessageID, rows[i].ID)
			}
		}
	}
	retry := rows[0]
	retry.ID = "0190a0b0-0000-7000-8000-0000000000aa"
	out, err := db.Push(ctx, "t", []pg.PushRow{retry})
	if err != nil {
		t.Fatal(err)
	}
	if out[0].Status != "duplicate" || out[0].MessageID != rows[0].ID {
		t.Fatalf("client retry: %s %s, want duplicate of %s", out[0].Status, out[0].MessageID, rows[0].ID)
	}
}
