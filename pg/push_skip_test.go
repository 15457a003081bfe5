package pg_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"queen-node/pg"
	"queen-node/protocol"
)

// holdPartition locks partition part of queue q in a transaction of its own
// until the returned release is called, as another node's push flush would.
func holdPartition(t *testing.T, url, q, part string) (release func()) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM queen.partitions p JOIN queen.queues qu ON qu.id = p.queue_id
		WHERE qu.name = $1 AND p.name = $2 FOR NO KEY UPDATE OF p) x`, q, part).Scan(&n); err != nil || n != 1 {
		t.Fatalf("lock %s/%s: %d rows, %v", q, part, n, err)
	}
	done := false
	release = func() {
		if !done {
			done = true
			_ = tx.Rollback(ctx)
			conn.Close(ctx)
		}
	}
	t.Cleanup(release)
	return release
}

func skipRows(q string, specs ...string) []pg.PushRow { // "part/txid"
	rows := make([]pg.PushRow, len(specs))
	for i, s := range specs {
		var part, tx string
		fmt.Sscanf(s, "%1s/%s", &part, &tx)
		rows[i] = pg.PushRow{Queue: q, Partition: part, TxID: tx,
			ID: fmt.Sprintf("0190a0b0-0000-7000-8000-%012d", time.Now().UnixNano()%1e12+int64(i)), Payload: fmt.Sprint(i)}
	}
	return rows
}

func statuses(outs []pg.PushOutcome) []protocol.PushStatus {
	st := make([]protocol.PushStatus, len(outs))
	for i, o := range outs {
		st[i] = o.Status
	}
	return st
}

func offsets(t *testing.T, url, q, part string) []string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rs, err := conn.Query(ctx, `SELECT m.off || ':' || m.transaction_id FROM queen.messages m
		JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues qu ON qu.id = p.queue_id
		WHERE qu.name = $1 AND p.name = $2 ORDER BY m.off`, q, part)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rs, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A push that may not wait leaves the partitions another transaction holds
// unwritten ('deferred', with their in-batch copies) and writes the rest at
// once; the same rows sent again with wait do wait, and then take the next
// offsets. Without the skip the first call would block until the holder
// commits.
func TestPushSomeSkipsHeldPartitions(t *testing.T) {
	db, url := openDB(t)
	ctx := context.Background()
	const q = "skip"
	if _, err := db.Push(ctx, "t", skipRows(q, "a/a0", "b/b0")); err != nil {
		t.Fatal(err)
	}
	release := holdPartition(t, url, q, "a")

	rows := skipRows(q, "a/a1", "b/b1", "a/a2", "a/a1", "b/b2", "c/c1")
	no := make([]bool, len(rows))
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	outs, err := db.PushSome(cctx, "t", rows, no)
	cancel()
	if err != nil {
		t.Fatalf("push without wait: %v", err)
	}
	want := []protocol.PushStatus{protocol.PushDeferred, protocol.PushQueued, protocol.PushDeferred,
		protocol.PushDeferred, protocol.PushQueued, protocol.PushQueued}
	if got := statuses(outs); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("statuses %v, want %v", got, want)
	}
	if got := offsets(t, url, q, "b"); fmt.Sprint(got) != "[1:b0 2:b1 3:b2]" {
		t.Fatalf("partition b: %v", got)
	}
	if got := offsets(t, url, q, "c"); fmt.Sprint(got) != "[1:c1]" { // created by the call
		t.Fatalf("partition c: %v", got)
	}
	if got := offsets(t, url, q, "a"); fmt.Sprint(got) != "[1:a0]" {
		t.Fatalf("partition a while held: %v", got)
	}

	// With wait, the held partition is waited for.
	again := skipRows(q, "a/a1", "a/a2", "a/a1")
	cctx, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = db.PushSome(cctx, "t", again, []bool{true, true, true})
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("push with wait on a held partition: %v, want it to wait past its deadline", err)
	}
	// Only the flag of the copy asks to wait: the partition is waited for.
	cctx, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = db.PushSome(cctx, "t", again, []bool{false, false, true})
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("push whose in-batch copy waits: %v, want a wait", err)
	}

	release()
	outs, err = db.PushSome(ctx, "t", again, []bool{true, true, true})
	if err != nil {
		t.Fatal(err)
	}
	want = []protocol.PushStatus{protocol.PushQueued, protocol.PushQueued, protocol.PushDuplicate}
	if got := statuses(outs); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("statuses after release %v, want %v", got, want)
	}
	if got := offsets(t, url, q, "a"); fmt.Sprint(got) != "[1:a0 2:a1 3:a2]" {
		t.Fatalf("partition a: %v", got)
	}
}

// Every partition held: nothing is written, everything is deferred, and the
// call does not wait. A stored duplicate in a partition it can lock is
// still a duplicate (the probing path, with deferred rows beside it).
func TestPushSomeAllHeldAndDuplicates(t *testing.T) {
	db, url := openDB(t)
	ctx := context.Background()
	const q = "skipall"
	if _, err := db.Push(ctx, "t", skipRows(q, "a/a0", "b/b0")); err != nil {
		t.Fatal(err)
	}
	release := holdPartition(t, url, q, "a")
	defer release()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	outs, err := db.PushSome(cctx, "t", skipRows(q, "a/a1", "a/a2"), []bool{false, false})
	if err != nil {
		t.Fatal(err)
	}
	if got := statuses(outs); fmt.Sprint(got) != "[deferred deferred]" {
		t.Fatalf("all held: %v", got)
	}
	outs, err = db.PushSome(cctx, "t", skipRows(q, "b/b0", "a/a1", "b/b1"), []bool{false, false, false})
	if err != nil {
		t.Fatal(err)
	}
	if got := statuses(outs); fmt.Sprint(got) != "[duplicate deferred queued]" {
		t.Fatalf("duplicate beside a held partition: %v", got)
	}
	if got := offsets(t, url, q, "b"); fmt.Sprint(got) != "[1:b0 2:b1]" {
		t.Fatalf("partition b: %v", got)
	}
}
