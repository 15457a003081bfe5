package pg_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"queen-node/pg"
)

// A large set of acks remembered past a gap (docs/api.md, "Acks"): every pop
// skips them by a linear merge. Before, a filter `off <> ALL(acked)` turned
// quadratic once PostgreSQL switched the function to a generic plan (after
// five calls on a connection): 2.5-3.4 s per pop at 9,999 entries, now about
// 60 ms. The figures are logged; the test checks what each pop returns.
func TestAckedSetLargeGap(t *testing.T) {
	db, url := openDB(t)
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		pushN(t, db, "q", "p", 4000)
	}
	out := claim(t, db, pg.PopArgs{Queue: "q", Names: []string{"p"}, Budget: 10000, LeaseID: uuid.NewString(), LeaseSeconds: 600})
	if len(out.Messages) != 10000 {
		t.Fatalf("popped %d", len(out.Messages))
	}
	first := out.Messages[0].TxID
	var rows []pg.AckRow
	for _, m := range out.Messages[1:] {
		rows = append(rows, pg.AckRow{Group: "g", PartitionID: m.PartitionID, TxID: m.TxID, Status: "completed"})
	}
	res, err := db.Ack(ctx, "t", rows)
	if err != nil || !res[0].Success || !res[len(res)-1].Success {
		t.Fatalf("ack: %v %+v", err, res[0])
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	expire := func() {
		if _, err := conn.Exec(ctx, `UPDATE queen.consumers SET lease_expires_at = clock_timestamp() - interval '1 second'
			WHERE lease_id IS NOT NULL`); err != nil {
			t.Fatal(err)
		}
	}
	for k := 0; k < 8; k++ {
		expire()
		t0 := time.Now()
		o := claim(t, db, pg.PopArgs{Queue: "q", Names: []string{"p"}, Budget: 10000, LeaseID: uuid.NewString(), LeaseSeconds: 600})
		t.Logf("pop %d with 9,999 remembered acks: %d messages in %v", k, len(o.Messages), time.Since(t0))
		if len(o.Messages) != 2001 || o.Messages[0].TxID != first || o.Messages[1].Off != out.Messages[9999].Off+1 {
			t.Fatalf("pop %d: %d messages; want the unacked first one, then the 2,000 never popped", k, len(o.Messages))
		}
	}
}

// In a transaction, a failed ack dead-letters its message without ending
// the lease, so a completed ack of the next message under the same lease
// succeeds (before, the lease was released and the transaction aborted).
func TestTxFailedThenCompletedSameLease(t *testing.T) {
	db, _ := openDB(t)
	ctx := context.Background()
	pushN(t, db, "q", "p", 2)
	lease := uuid.NewString()
	out := claim(t, db, pg.PopArgs{Queue: "q", Names: []string{"p"}, Budget: 2, LeaseID: lease, LeaseSeconds: 600})
	if len(out.Messages) != 2 {
		t.Fatalf("got %d", len(out.Messages))
	}
	m1, m2 := out.Messages[0], out.Messages[1]
	err := db.InTx(ctx, func(tx *pg.Tx) error {
		o1, err := tx.Ack(ctx, "t", []pg.AckRow{{Group: "g", PartitionID: m1.PartitionID, TxID: m1.TxID, Status: "failed", LeaseID: lease}})
		if err != nil {
			return err
		}
		if !o1[0].Success || !o1[0].DLQ || o1[0].Released {
			t.Errorf("failed ack in a transaction: %+v, want dead-lettered, lease kept", o1[0])
		}
		o2, err := tx.Ack(ctx, "t", []pg.AckRow{{Group: "g", PartitionID: m2.PartitionID, TxID: m2.TxID, Status: "completed", LeaseID: lease}})
		if err != nil {
			return err
		}
		if !o2[0].Success || !o2[0].Released {
			t.Errorf("completed ack of the rest: %+v, want success and the lease released", o2[0])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if o := claim(t, db, pg.PopArgs{Queue: "q", Names: []string{"p"}, Budget: 2, LeaseID: uuid.NewString()}); len(o.Messages) != 0 {
		t.Fatalf("both resolved, yet a pop got %d", len(o.Messages))
	}
}
