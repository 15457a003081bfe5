package pg_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"queen-node/pg"
)

// TestDLQRetryV2MatchesV1 calls queen.dlq_retry_v1 (the previous
// release's function, rolled back) and queen.dlq_retry_v2 on the same
// state for every answer a retry has: no such partition, no such entry, a
// superseded entry, a copy whose transaction id is taken, another tenant,
// and a retry that appends. v1 answers no row for "not found" and flag
// columns for the rest; v2 one row with o_outcome. The answers must say the
// same thing and leave the same rows.
func TestDLQRetryV2MatchesV1(t *testing.T) {
	db, url := openDB(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	before := time.Now().Add(-time.Hour)
	pushN(t, db, "q", "p", 4)

	// Dead-letter every message for group g.
	lease := uuid.NewString()
	out := claim(t, db, pg.PopArgs{Queue: "q", Names: []string{"p"}, Budget: 4, LeaseID: lease, LeaseSeconds: 600})
	if len(out.Messages) != 4 {
		t.Fatalf("pop: %d messages", len(out.Messages))
	}
	var acks []pg.AckRow
	for _, m := range out.Messages {
		acks = append(acks, pg.AckRow{Group: "g", PartitionID: m.PartitionID, TxID: m.TxID, Status: "dlq", LeaseID: lease})
	}
	if _, err := db.Ack(ctx, "t", acks); err != nil {
		t.Fatal(err)
	}
	pid := out.Messages[0].PartitionID
	tx := func(i int) string { return out.Messages[i].TxID }

	// Message 1's copy id is taken by a client's push.
	var seq int64
	if err := conn.QueryRow(ctx, `SELECT max(seq) FROM queen.dead_letters WHERE transaction_id = $1`, tx(1)).Scan(&seq); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Push(ctx, "t", []pg.PushRow{{Queue: "q", Partition: "p", TxID: fmt.Sprintf("%s~retry-%d", tx(1), seq),
		ID: uuid.Must(uuid.NewV7()).String(), Payload: "1"}}); err != nil {
		t.Fatal(err)
	}

	state := func(q pgx.Tx) string {
		var s string
		if err := q.QueryRow(ctx, `SELECT concat_ws(' | ',
				(SELECT COALESCE(string_agg(format('%s:%s', off, transaction_id), ' ' ORDER BY off), '') FROM queen.messages),
				(SELECT COALESCE(string_agg(format('%s:%s:%s', consumer_group, transaction_id, superseded), ' ' ORDER BY seq), '') FROM queen.dead_letters),
				(SELECT COALESCE(string_agg(format('%s:%s:%s', consumer_group, committed_offset, acked), ' ' ORDER BY consumer_group), '') FROM queen.consumers))`).
			Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	check := func(name, tenant, pid, txid, group, want string) {
		t.Helper()
		mid := uuid.Must(uuid.NewV7()).String()
		q, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer q.Rollback(ctx)
		if _, err := q.Exec(ctx, "SAVEPOINT v1"); err != nil {
			t.Fatal(err)
		}
		var v1 string
		var qn, pn, ntx *string
		var off *int64
		var taken, superseded bool
		err = q.QueryRow(ctx, `SELECT o_queue, o_partition, o_txid, o_off, o_taken, o_superseded
			FROM queen.dlq_retry_v1($1, $2::uuid, $3, $4, $5::uuid, 200)`, tenant, pid, txid, group, mid).
			Scan(&qn, &pn, &ntx, &off, &taken, &superseded)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			v1 = "not_found"
		case err != nil:
			t.Fatal(err)
		case superseded:
			v1 = "superseded"
		case taken:
			v1 = fmt.Sprintf("taken %s %s %s", *qn, *pn, *ntx)
		default:
			v1 = fmt.Sprintf("retried %s %s %s %d", *qn, *pn, *ntx, *off)
		}
		st1 := state(q)
		if _, err := q.Exec(ctx, "ROLLBACK TO SAVEPOINT v1"); err != nil {
			t.Fatal(err)
		}
		var v2 string
		var outcome string
		if err := q.QueryRow(ctx, `SELECT o_outcome, o_queue, o_partition, o_txid, o_off
			FROM queen.dlq_retry_v2($1, $2::uuid, $3, $4, $5::uuid, 200)`, tenant, pid, txid, group, mid).
			Scan(&outcome, &qn, &pn, &ntx, &off); err != nil {
			t.Fatal(err)
		}
		switch outcome {
		case "taken":
			v2 = fmt.Sprintf("taken %s %s %s", *qn, *pn, *ntx)
		case "retried":
			v2 = fmt.Sprintf("retried %s %s %s %d", *qn, *pn, *ntx, *off)
		default:
			v2 = outcome
		}
		st2 := state(q)
		if v1 != v2 || st1 != st2 {
			t.Fatalf("%s: dlq_retry_v2 differs from v1\nv1: %s\nv2: %s\nv1 state: %s\nv2 state: %s", name, v1, v2, st1, st2)
		}
		if want != "" && outcome != want {
			t.Fatalf("%s: outcome %s, want %s", name, outcome, want)
		}
		if err := q.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	check("no such partition", "t", uuid.NewString(), tx(0), "g", "not_found")
	check("another tenant", "other", pid, tx(0), "g", "not_found")
	check("no such entry", "t", pid, tx(0), "nogroup", "not_found")
	check("taken", "t", pid, tx(1), "g", "taken")
	check("retried", "t", pid, tx(0), "g", "retried")
	check("retried again: gone", "t", pid, tx(0), "g", "not_found")

	// A seek back supersedes the group's remaining entries.
	if _, err := db.Seek(ctx, "t", "g", "q", false, &before); err != nil {
		t.Fatal(err)
	}
	check("superseded", "t", pid, tx(2), "g", "superseded")
}
