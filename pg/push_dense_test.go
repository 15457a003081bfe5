package pg_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"queen-node/pg"
)

// TestDuplicatesTakeNoOffset: a duplicate push must not move the
// partition's watermark. It used to take an offset and leave a hole; at the
// end of a partition that hole kept last_offset past every cursor, so the
// partition looked pending (and was reseeded, and counted as lag) forever
// with nothing to deliver.
func TestDuplicatesTakeNoOffset(t *testing.T) {
	db, url := openDB(t)
	ctx := context.Background()
	row := func(tx, id string) pg.PushRow {
		return pg.PushRow{Queue: "dq", Partition: "p", TxID: tx, ID: id, Payload: `1`}
	}
	push := func(rows ...pg.PushRow) []string {
		t.Helper()
		out, err := db.Push(ctx, "t", rows)
		if err != nil {
			t.Fatal(err)
		}
		var st []string
		for _, o := range out {
			st = append(st, string(o.Status))
		}
		return st
	}
	push(row("a", "0190a0b0-0000-7000-8000-000000000001"))
	if st := push(row("a", "0190a0b0-0000-7000-8000-000000000002")); st[0] != "duplicate" {
		t.Fatalf("second push of a: %v", st)
	}
	// A batch mixing a duplicate, a new message and an in-batch repeat.
	st := push(row("a", "0190a0b0-0000-7000-8000-000000000003"), row("b", "0190a0b0-0000-7000-8000-000000000004"),
		row("b", "0190a0b0-0000-7000-8000-000000000005"), row("c", "0190a0b0-0000-7000-8000-000000000006"))
	if want := []string{"duplicate", "queued", "duplicate", "queued"}; len(st) != 4 || st[0] != want[0] || st[1] != want[1] || st[2] != want[2] || st[3] != want[3] {
		t.Fatalf("mixed batch: %v, want %v", st, want)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var last int64
	var offs []int64
	var txids []string
	if err := conn.QueryRow(ctx, `SELECT p.last_offset, array_agg(m.off ORDER BY m.off), array_agg(m.transaction_id ORDER BY m.off)
		FROM queen.partitions p JOIN queen.messages m ON m.partition_id = p.id GROUP BY p.last_offset`).Scan(&last, &offs, &txids); err != nil {
		t.Fatal(err)
	}
	if last != 3 || len(offs) != 3 || offs[0] != 1 || offs[1] != 2 || offs[2] != 3 || txids[1] != "b" || txids[2] != "c" {
		t.Fatalf("last_offset %d, offsets %v of %v; want 3 and 1,2,3 of a,b,c", last, offs, txids)
	}
}

// skipOffset leaves a hole in a partition's offsets, as a message deleted
// by retention or DELETE /api/v1/messages does: the next push starts one
// offset further. The partition must exist.
func skipOffset(t *testing.T, conn *pgx.Conn, queue, part string) {
	t.Helper()
	tag, err := conn.Exec(context.Background(), `UPDATE queen.partitions p SET last_offset = last_offset + 1
		FROM queen.queues q WHERE q.id = p.queue_id AND q.tenant = 't' AND q.name = $1 AND p.name = $2`, queue, part)
	if err != nil {
		t.Fatal(err)
	}
	if tag.RowsAffected() != 1 {
		t.Fatalf("skipOffset %s/%s: %d partitions", queue, part, tag.RowsAffected())
	}
}
