package pg_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"queen-node/pg"
	"queen-node/protocol"
)

// consumerRow is what a provisioning decides about one (partition, group).
type consumerRow struct {
	Committed, BatchEnd int64
	Acked               []int64
	Leased              bool
}

func consumerRows(t *testing.T, conn *pgx.Conn, queue, group string) map[string]consumerRow {
	t.Helper()
	rs, err := conn.Query(context.Background(), `SELECT p.name, c.committed_offset, c.batch_end, c.acked, c.lease_id IS NOT NULL
		FROM queen.consumers c JOIN queen.partitions p ON p.id = c.partition_id
		JOIN queen.queues q ON q.id = p.queue_id AND q.tenant = 't' AND q.name = $1
		WHERE c.consumer_group = $2`, queue, group)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]consumerRow{}
	for rs.Next() {
		var name string
		var r consumerRow
		if err := rs.Scan(&name, &r.Committed, &r.BatchEnd, &r.Acked, &r.Leased); err != nil {
			t.Fatal(err)
		}
		out[name] = r
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// marker makes the group's marker the way a first pop does, with no
// candidate, so nothing else is written.
func marker(t *testing.T, db *pg.DB, queue, group string, mode protocol.SubMode, from *time.Time) {
	t.Helper()
	if _, err := db.Pop(context.Background(), pg.PopArgs{Tenant: "t", Queue: queue, Group: group, Names: []string{},
		Unprov: []string{}, Budget: 0, MaxParts: 1, LeaseID: "none", SubMode: mode, SubFrom: from}); err != nil {
		t.Fatal(err)
	}
}

// dial opens n connections to url, closed when the test ends: a test of
// lock races runs each party on its own.
func dial(t *testing.T, url string, n int) []*pgx.Conn {
	t.Helper()
	conns := make([]*pgx.Conn, n)
	for i := range conns {
		c, err := pgx.Connect(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(context.Background()) })
		conns[i] = c
	}
	return conns
}

// lockWaiting reports whether a session of this database waits for a lock
// in a statement matching one of the LIKE patterns.
func lockWaiting(t *testing.T, conn *pgx.Conn, patterns ...string) bool {
	t.Helper()
	var n int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE ANY ($1)`, patterns).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// mustWaitForLock polls until a session of this database waits for a lock
// in a statement matching one of the patterns; it fails with what when done
// has an answer first (the writer ended without waiting) or ctx ends.
func mustWaitForLock[T any](ctx context.Context, t *testing.T, watcher *pgx.Conn, done chan T, what string, patterns ...string) {
	t.Helper()
	for !lockWaiting(t, watcher, patterns...) {
		if len(done) > 0 || ctx.Err() != nil {
			t.Fatal(what)
		}
		time.Sleep(5 * time.Millisecond) // polling with a deadline
	}
}

// mayWaitForLock polls until such a session waits, done has an answer or
// ctx ends, and reports whether it saw the wait: for a writer that, with
// the behaviour under test broken, ends without waiting, which the test's
// counts afterwards then show.
func mayWaitForLock[T any](ctx context.Context, t *testing.T, watcher *pgx.Conn, done chan T, patterns ...string) bool {
	t.Helper()
	for len(done) == 0 && ctx.Err() == nil {
		if lockWaiting(t, watcher, patterns...) {
			return true
		}
		time.Sleep(5 * time.Millisecond) // polling with a deadline
	}
	return false
}

// groupLeft counts group g's consumer rows and markers.
func groupLeft(t *testing.T, conn *pgx.Conn) (rows, markers int) {
	t.Helper()
	if err := conn.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM queen.consumers WHERE consumer_group = 'g'),
		(SELECT count(*) FROM queen.consumer_groups_metadata WHERE consumer_group = 'g')`).Scan(&rows, &markers); err != nil {
		t.Fatal(err)
	}
	return rows, markers
}

// orphanRows counts group g's consumer rows on a queue where g has no marker.
func orphanRows(t *testing.T, conn *pgx.Conn) int {
	t.Helper()
	var n int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM queen.consumers c JOIN queen.partitions p ON p.id = c.partition_id
		WHERE c.consumer_group = 'g' AND NOT EXISTS (SELECT 1 FROM queen.consumer_groups_metadata m
		                                              WHERE m.queue_id = p.queue_id AND m.consumer_group = 'g')`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestProvisionGroupSeedsAsPopV3 is the bulk provisioning's differential
// test against its general path: on the same partitions, one group gets its
// rows from queen.pop_v3's provisioning of its candidates (a claim with no
// budget, which provisions and then takes nothing), a second group from
// queen.provision_group_v1 in pages, both with the same subscription start.
// The rows must be equal: cursor, batch end, and the dead-letter retry
// copies of other groups counted as resolved, for subscriptions from the
// beginning and from a time between two pushes. A row that exists already
// is left as it is, and the pages cover every partition once, in id order.
func TestProvisionGroupSeedsAsPopV3(t *testing.T) {
	db, url := openDB(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)

	const parts = 23
	names := make([]string, parts)
	for i := range names {
		names[i] = fmt.Sprintf("p%02d", i)
		pushN(t, db, "q", names[i], 1+i%4)
	}
	var mid time.Time
	if err := conn.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&mid); err != nil {
		t.Fatal(err)
	}
	for i, n := range names {
		if i%3 != 0 {
			pushN(t, db, "q", n, 2)
		}
	}
	// Retry copies for another group past the start of a new cursor, on a
	// few partitions: both paths must count them as resolved.
	if _, err := conn.Exec(ctx, `INSERT INTO queen.dlq_copies (partition_id, off, for_group)
		SELECT p.id, p.last_offset, 'someone-else' FROM queen.partitions p WHERE p.name IN ('p04', 'p05', 'p10')`); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		mode protocol.SubMode
		from *time.Time
	}{{protocol.SubAll, nil}, {protocol.SubFrom, &mid}} {
		t.Run(string(c.mode), func(t *testing.T) {
			viaPop, viaBulk := "pop-"+string(c.mode), "bulk-"+string(c.mode)
			marker(t, db, "q", viaPop, c.mode, c.from)
			marker(t, db, "q", viaBulk, c.mode, c.from)
			for i := 0; i < parts; i += 4 { // a claim provisions its candidates
				cand := names[i:min(i+4, parts)]
				if _, err := db.Pop(ctx, pg.PopArgs{Tenant: "t", Queue: "q", Group: viaPop, Names: cand, Unprov: cand,
					Budget: 0, MaxParts: 1, LeaseID: "none", SubMode: c.mode, SubFrom: c.from}); err != nil {
					t.Fatal(err)
				}
			}
			// A row that exists already keeps its cursor.
			out, err := db.Pop(ctx, pg.PopArgs{Tenant: "t", Queue: "q", Group: viaBulk, Names: []string{"p07"},
				Budget: 1, MaxParts: 1, LeaseID: "lease-" + string(c.mode), LeaseSeconds: 60, SubMode: c.mode, SubFrom: c.from})
			if err != nil || len(out.Messages) != 1 {
				t.Fatalf("claim of p07: %+v, %v", out, err)
			}
			before := consumerRows(t, conn, "q", viaBulk)["p07"]

			var seen []string
			var ids []string
			after, created := "", 0
			for page := 0; ; page++ {
				pgp, err := db.ProvisionGroup(ctx, "t", "q", viaBulk, after, 5)
				if err != nil {
					t.Fatal(err)
				}
				if pgp.QueueID != out.QueueID {
					t.Fatalf("page %d: queue id %q, want %q", page, pgp.QueueID, out.QueueID)
				}
				seen = append(seen, pgp.Names...)
				created += pgp.New
				if len(pgp.Names) > 0 {
					ids = append(ids, pgp.LastID)
				}
				if len(pgp.Names) < 5 {
					break
				}
				after = pgp.LastID
			}
			if !slices.IsSorted(ids) {
				t.Fatalf("pages' last ids %v: not in id order", ids)
			}
			slices.Sort(seen)
			if !slices.Equal(seen, names) {
				t.Fatalf("pages named %v, want every partition once: %v", seen, names)
			}
			if created != parts-1 {
				t.Fatalf("created %d rows, want %d (all but the claimed p07)", created, parts-1)
			}

			a, b := consumerRows(t, conn, "q", viaPop), consumerRows(t, conn, "q", viaBulk)
			if len(a) != parts || len(b) != parts {
				t.Fatalf("rows: %d via pop_v3, %d via bulk; want %d each", len(a), len(b), parts)
			}
			if got := b["p07"]; !got.Leased || got.BatchEnd != before.BatchEnd || got.Committed != before.Committed {
				t.Fatalf("p07's claimed row changed: %+v, was %+v", got, before)
			}
			resolved := 0
			for _, n := range names {
				if n == "p07" {
					continue
				}
				if fmt.Sprint(a[n]) != fmt.Sprint(b[n]) {
					t.Errorf("%s: pop_v3 seeded %+v, bulk %+v", n, a[n], b[n])
				}
				resolved += len(b[n].Acked)
			}
			if resolved == 0 {
				t.Fatalf("no retry copy counted as resolved: the test lost its point")
			}
			if c.from != nil && a["p01"].Committed == 0 {
				t.Fatalf("a subscription from a time seeded p01 at 0: the test lost its point")
			}
		})
	}
}

// TestProvisionGroupNeedsItsMarker: without the group's marker (no pop
// yet, so no subscription start) nothing is written; another tenant's queue
// of the same name is not touched; a queue that does not exist answers an
// empty page.
func TestProvisionGroupNeedsItsMarker(t *testing.T) {
	db, url := openDB(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// The other tenant's queue of the same name first, with more
	// partitions: a lookup that ignored the tenant would find it.
	for i := range 3 {
		if _, err := db.Push(ctx, "other", []pg.PushRow{{Queue: "q", Partition: fmt.Sprint("o", i), TxID: fmt.Sprint("x", i),
			ID: fmt.Sprintf("0190a0b0-0000-7000-8000-00000000000%d", i), Payload: "1"}}); err != nil {
			t.Fatal(err)
		}
	}
	pushN(t, db, "q", "p0", 2)
	pushN(t, db, "q", "p1", 2)
	var mine string
	if err := conn.QueryRow(ctx, `SELECT id::text FROM queen.queues WHERE tenant = 't' AND name = 'q'`).Scan(&mine); err != nil {
		t.Fatal(err)
	}

	pgp, err := db.ProvisionGroup(ctx, "t", "q", "g", "", 100)
	if err != nil {
		t.Fatal(err)
	}
	if pgp.QueueID != "" || len(pgp.Names) != 0 || pgp.New != 0 {
		t.Fatalf("without a marker: %+v, want an empty page", pgp)
	}
	if n := len(consumerRows(t, conn, "q", "g")); n != 0 {
		t.Fatalf("without a marker %d rows were made", n)
	}

	marker(t, db, "q", "g", protocol.SubAll, nil)
	if _, err := db.Pop(ctx, pg.PopArgs{Tenant: "other", Queue: "q", Group: "g", Names: []string{}, Unprov: []string{},
		MaxParts: 1, LeaseID: "none", SubMode: protocol.SubAll}); err != nil { // the other tenant's group marker
		t.Fatal(err)
	}
	pgp, err = db.ProvisionGroup(ctx, "t", "q", "g", "", 100)
	if err != nil || pgp.New != 2 || len(pgp.Names) != 2 || pgp.QueueID != mine {
		t.Fatalf("with the marker: %+v, %v; want both partitions of queue %s made", pgp, err, mine)
	}
	var others int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM queen.consumers c JOIN queen.partitions p ON p.id = c.partition_id
		JOIN queen.queues q ON q.id = p.queue_id WHERE q.tenant = 'other'`).Scan(&others); err != nil {
		t.Fatal(err)
	}
	if others != 0 {
		t.Fatalf("another tenant's queue got %d rows", others)
	}
	pgp, err = db.ProvisionGroup(ctx, "t", "q", "g", "", 100)
	if err != nil || pgp.New != 0 || len(pgp.Names) != 2 {
		t.Fatalf("again: %+v, %v; want the same page, nothing made", pgp, err)
	}
	pgp, err = db.ProvisionGroup(ctx, "t", "nope", "g", "", 100)
	if err != nil || pgp.QueueID != "" || len(pgp.Names) != 0 {
		t.Fatalf("a missing queue: %+v, %v", pgp, err)
	}
}

// TestProvisionGroupRacingAGroupDelete: a pass that has made rows but not
// committed, and a group delete that starts then, must not leave rows of
// the deleted group: the delete waits for the pass's hold on the marker,
// then deletes what the pass made. (Without the delete's marker lock it
// deleted the rows it saw, waited only at its marker delete, and the
// pass's rows outlived the group.)
func TestProvisionGroupRacingAGroupDelete(t *testing.T) {
	db, url := openDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 5 {
		pushN(t, db, "q", fmt.Sprint("p", i), 1)
	}
	marker(t, db, "q", "g", protocol.SubAll, nil)

	pass, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pass.Close(context.Background())
	watcher, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer watcher.Close(context.Background())
	tx, err := pass.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var made int
	if err := tx.QueryRow(ctx, `SELECT max(o_new) FROM queen.provision_group_v1('t', 'q', 'g', NULL, 100)`).Scan(&made); err != nil || made != 5 {
		t.Fatalf("the pass made %d rows, %v; want 5", made, err)
	}

	done := make(chan error, 1)
	go func() {
		_, err := db.DeleteConsumerGroup(ctx, "t", "g", "q", true)
		done <- err
	}()
	// Wait until the delete waits on a lock the pass holds, whichever
	// statement of it that is.
	mustWaitForLock(ctx, t, watcher, done, "the group delete never waited for the pass", "%consumer_groups_metadata%", "%group_gate%")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	rows, markers := groupLeft(t, watcher)
	if rows != 0 || markers != 0 {
		t.Fatalf("after the group delete: %d consumer rows and %d markers of the group, want none", rows, markers)
	}
}

// TestPopV3ProvisioningRacingAGroupDelete: a claim that makes its
// candidates' consumer rows holds the group's marker until it commits, so a
// group delete that starts meanwhile waits for it and then deletes those
// rows too. With the marker read unlocked, the delete did not see the
// claim's uncommitted rows, ended first, and the rows outlived the group.
// Both ways a claim makes rows: its provisioning of the candidates it is
// told may lack them (unprov), and the first sight of a partition in its
// loop (a node that believed the rows existed: unprov empty).
func TestPopV3ProvisioningRacingAGroupDelete(t *testing.T) {
	for _, unprov := range []bool{true, false} {
		t.Run(fmt.Sprintf("unprov=%v", unprov), func(t *testing.T) { popV3RacingAGroupDelete(t, unprov) })
	}
}

func popV3RacingAGroupDelete(t *testing.T, unprov bool) {
	db, url := openDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	names := []string{"p0", "p1", "p2", "p3", "p4"}
	for _, p := range names {
		pushN(t, db, "q", p, 1)
	}
	marker(t, db, "q", "g", protocol.SubAll, nil)

	claim, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer claim.Close(context.Background())
	watcher, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer watcher.Close(context.Background())
	tx, err := claim.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	told := names
	if !unprov {
		told = []string{}
	}
	var verdicts []string
	if err := tx.QueryRow(ctx, `SELECT o_verdicts FROM queen.pop_v3('t', 'q', 'g', $1, 0, 10, 5, 'lease-race', 60,
		false, 'test', 'all', NULL, 0, $2)`, names, told).Scan(&verdicts); err != nil {
		t.Fatal(err)
	}
	if slices.Index(verdicts, "took") < 0 {
		t.Fatalf("the claim took nothing: %v", verdicts)
	}

	done := make(chan error, 1)
	go func() {
		_, err := db.DeleteConsumerGroup(ctx, "t", "g", "q", true)
		done <- err
	}()
	// The delete must wait for the claim; without the claim's marker lock
	// it ends at once, which the rows counted below then show.
	waited := mayWaitForLock(ctx, t, watcher, done, "%consumer_groups_metadata%", "%group_gate%")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	rows, markers := groupLeft(t, watcher)
	if rows != 0 || markers != 0 || !waited {
		t.Fatalf("after the group delete: %d consumer rows and %d markers of the group (want none); the delete waited for the claim: %v",
			rows, markers, waited)
	}
}

// TestPopV3RemakesAMarkerDeletedBeforeItsRows: a group deleted after a
// claim read its marker and before it made its rows. Provisioning its
// candidates (unprov), the claim waits for the delete, then makes the
// marker again (as the first pop after a delete does) with its rows. At the
// first sight of a partition in its loop (unprov empty) it may hold other
// candidates' rows, so it does not wait: the candidate is busy and no row
// is made. Either way no row outlives its group.
func TestPopV3RemakesAMarkerDeletedBeforeItsRows(t *testing.T) {
	for _, unprov := range []bool{true, false} {
		t.Run(fmt.Sprintf("unprov=%v", unprov), func(t *testing.T) { popV3AcrossADelete(t, unprov) })
	}
}

func popV3AcrossADelete(t *testing.T, unprov bool) {
	db, url := openDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pushN(t, db, "q", "p0", 1)
	marker(t, db, "q", "g", protocol.SubAll, nil)
	conns := dial(t, url, 3)
	del, claim, watcher := conns[0], conns[1], conns[2]
	// The delete, uncommitted, as DeleteConsumerGroup does it (the gate,
	// then the marker): the claim's first (unlocked) read still sees the
	// marker, so the claim goes on to make its row.
	tx, err := del.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(queen.group_gate_v2('t', 'g'))`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `DELETE FROM queen.consumer_groups_metadata WHERE consumer_group = 'g'`); err != nil {
		t.Fatal(err)
	}
	type result struct {
		verdicts []string
		err      error
	}
	done := make(chan result, 1)
	told := []string{"p0"}
	if !unprov {
		told = []string{}
	}
	go func() {
		var r result
		r.err = claim.QueryRow(ctx, `SELECT o_verdicts FROM queen.pop_v3('t', 'q', 'g', ARRAY['p0'], 0, 10, 1,
			'lease-again', 60, false, 'test', 'all', NULL, 0, $1)`, told).Scan(&r.verdicts)
		done <- r
	}()
	mayWaitForLock(ctx, t, watcher, done, "%pop_v3%")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	rows, markers := groupLeft(t, watcher)
	want, wantRows := "took", 1
	if !unprov {
		want, wantRows = "busy", 0
	}
	if len(r.verdicts) != 1 || r.verdicts[0] != want || rows != wantRows || markers != wantRows {
		t.Fatalf("claim across the delete: verdicts %v, %d rows, %d markers; want %s, %d, %d",
			r.verdicts, rows, markers, want, wantRows, wantRows)
	}
}

// TestGroupDeleteIsNotHeldOffByClaims: claims that keep making a group's
// rows must not keep a group delete waiting. One claim makes p0's row and
// holds the group's gate; a delete waits for it; a second claim meeting p1
// for the first time must then not get in ahead of the delete (busy: a
// share lock on the marker would have been granted at once, and so on for
// every later claim), and the delete ends once the first claim commits.
func TestGroupDeleteIsNotHeldOffByClaims(t *testing.T) {
	db, url := openDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pushN(t, db, "q", "p0", 1)
	pushN(t, db, "q", "p1", 1)
	marker(t, db, "q", "g", protocol.SubAll, nil)
	conns := dial(t, url, 3)
	first, second, watcher := conns[0], conns[1], conns[2]
	claim := func(tx pgx.Tx, part string) string {
		t.Helper()
		var verdicts []string
		if err := tx.QueryRow(ctx, `SELECT o_verdicts FROM queen.pop_v3('t', 'q', 'g', ARRAY[$1], 0, 10, 1,
			'lease-'||$1, 60, false, 'test', 'all', NULL, 0, '{}')`, part).Scan(&verdicts); err != nil {
			t.Fatal(err)
		}
		if len(verdicts) != 1 {
			t.Fatalf("claim of %s: verdicts %v", part, verdicts)
		}
		return verdicts[0]
	}
	tx1, err := first.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx1.Rollback(context.Background())
	if v := claim(tx1, "p0"); v != "took" {
		t.Fatalf("first claim: %s, want took", v)
	}
	done := make(chan error, 1)
	go func() {
		_, err := db.DeleteConsumerGroup(ctx, "t", "g", "q", true)
		done <- err
	}()
	mustWaitForLock(ctx, t, watcher, done, "the group delete did not wait for the first claim", "%consumer_groups_metadata%", "%group_gate%")
	tx2, err := second.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx2.Rollback(context.Background())
	if v := claim(tx2, "p1"); v != "busy" {
		t.Fatalf("second claim while the delete waits: %s, want busy (it got in ahead of the delete)", v)
	}
	if err := tx2.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tx1.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	rows, markers := groupLeft(t, watcher)
	if rows != 0 || markers != 0 {
		t.Fatalf("after the group delete: %d consumer rows and %d markers of the group, want none", rows, markers)
	}
}

// TestGroupDeleteHoldsOffClaimsOnEveryQueue: the gate is the group's on all
// its queues, so a delete of every queue holds off a claim that makes the
// group's rows on a queue whose marker did not exist when the delete began
// (the group's first pop there). Per queue, the delete's set of gates was
// read before that marker existed: the claim went ahead under a gate the
// delete never took, and a second such claim could leave a row after the
// delete removed the marker.
func TestGroupDeleteHoldsOffClaimsOnEveryQueue(t *testing.T) {
	db, url := openDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pushN(t, db, "q1", "p0", 1)
	pushN(t, db, "q2", "a", 1)
	marker(t, db, "q1", "g", protocol.SubAll, nil)
	conns := dial(t, url, 3)
	holder, claimer, watcher := conns[0], conns[1], conns[2]
	// a claim on q1 holding the group's gate
	htx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer htx.Rollback(context.Background())
	if _, err := htx.Exec(ctx, `SELECT pg_advisory_xact_lock_shared(queen.group_gate_v2('t', 'g'))`); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := db.DeleteConsumerGroup(ctx, "t", "g", "", true)
		done <- err
	}()
	mustWaitForLock(ctx, t, watcher, done, "the group delete did not wait for the gate", "%group_gate%")
	// the group's first pop of q2: it makes the marker, then its row
	claimed := make(chan error, 1)
	go func() {
		var v []string
		claimed <- claimer.QueryRow(ctx, `SELECT o_verdicts FROM queen.pop_v3('t', 'q2', 'g', ARRAY['a'], 0, 10, 1,
			'lease-a', 60, false, 'test', 'all', NULL, 0, NULL)`).Scan(&v)
	}()
	waited := mayWaitForLock(ctx, t, watcher, claimed, "%pop_v3%")
	if err := htx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := <-claimed; err != nil {
		t.Fatal(err)
	}
	if !waited {
		t.Fatal("the claim on q2 made the group's rows while its delete was waiting")
	}
	orphans := orphanRows(t, watcher)
	if orphans != 0 {
		t.Fatalf("%d consumer rows of the group without a marker", orphans)
	}
}

// TestOlderNodesDeleteWaitsForNewWriters: during a rolling upgrade a node
// of function set 12 or older deletes a group by locking its markers only,
// without the gate, against the new bodies of provision_group_v1 and
// pop_v3. Those hold the marker as well as the gate, so the older delete
// waits for them and leaves no row; holding only the gate, they let it
// end first and 3 rows outlived the group.
func TestOlderNodesDeleteWaitsForNewWriters(t *testing.T) {
	for _, kind := range []string{"provision_group_v1", "pop_v3"} {
		t.Run(kind, func(t *testing.T) {
			db, url := openDB(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			names := []string{"p0", "p1", "p2"}
			for _, p := range names {
				pushN(t, db, "q", p, 1)
			}
			marker(t, db, "q", "g", protocol.SubAll, nil)
			conns := dial(t, url, 3)
			writer, del, watcher := conns[0], conns[1], conns[2]
			tx, err := writer.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(context.Background())
			if kind == "provision_group_v1" {
				_, err = tx.Exec(ctx, `SELECT * FROM queen.provision_group_v1('t', 'q', 'g', NULL, 100)`)
			} else {
				_, err = tx.Exec(ctx, `SELECT o_verdicts FROM queen.pop_v3('t', 'q', 'g', $1, 0, 0, 5, 'l', 60,
					false, 'test', 'all', NULL, 0, $1)`, names)
			}
			if err != nil {
				t.Fatal(err)
			}
			// set 12's DeleteConsumerGroup: the markers, then the rows and markers
			done := make(chan error, 1)
			go func() {
				done <- func() error {
					dtx, err := del.Begin(ctx)
					if err != nil {
						return err
					}
					defer dtx.Rollback(context.Background())
					for _, q := range []string{
						`SELECT 1 FROM queen.consumer_groups_metadata m JOIN queen.queues q ON q.id = m.queue_id
							WHERE q.tenant = 't' AND m.consumer_group = 'g' ORDER BY m.queue_id FOR NO KEY UPDATE OF m`,
						`DELETE FROM queen.consumers c USING queen.partitions p, queen.queues q
							WHERE c.partition_id = p.id AND p.queue_id = q.id AND q.tenant = 't' AND c.consumer_group = 'g'`,
						`DELETE FROM queen.consumer_groups_metadata m USING queen.queues q
							WHERE m.queue_id = q.id AND q.tenant = 't' AND m.consumer_group = 'g'`,
					} {
						if _, err := dtx.Exec(ctx, q); err != nil {
							return err
						}
					}
					return dtx.Commit(ctx)
				}()
			}()
			waited := mayWaitForLock(ctx, t, watcher, done, "%consumer_groups_metadata%")
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			rows, markers := groupLeft(t, watcher)
			if !waited || rows != 0 || markers != 0 {
				t.Fatalf("the older delete waited: %v; after it %d rows and %d markers of the group, want none", waited, rows, markers)
			}
		})
	}
}

// TestClaimTakesTheGateBeforeItMakesAMarker: a lone claim that may make
// rows takes the group's gate before it makes the group's marker on a new
// queue. Made first, the uncommitted marker closed a cycle: a merged flush
// holding a row of the group waits on it (ON CONFLICT), the claim waits
// for the gate, and a delete holds the gate and waits for the flush's row
// (deadlock detected). Now the claim waits for the gate holding nothing,
// and the flush makes the marker itself and finds the gate taken: busy.
func TestClaimTakesTheGateBeforeItMakesAMarker(t *testing.T) {
	claimAgainstADelete(t, true)
}

// TestClaimTakesTheGateBeforeItMakesAQueue: the same cycle through the
// queue row. A lone claim of a queue that does not exist yet took the gate
// after it made the queue row, so a merged flush whose claim names that
// queue (the node's list of the group's rows is stale for a deleted queue)
// waited on the uncommitted row, and the three closed a cycle. Now the
// claim takes the gate first, and the flush makes the queue itself.
func TestClaimTakesTheGateBeforeItMakesAQueue(t *testing.T) {
	claimAgainstADelete(t, false)
}

// claimAgainstADelete runs a merged flush holding a row of group g, a
// delete of g waiting for that row, and a lone claim of queue q2 (which
// exists when q2Exists, without g's marker) waiting for the delete's gate;
// then the flush claims on q2, which must not wait on the lone claim.
func claimAgainstADelete(t *testing.T, q2Exists bool) {
	db, url := openDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pushN(t, db, "q1", "p0", 1)
	if q2Exists {
		pushN(t, db, "q2", "a", 1)
	}
	marker(t, db, "q1", "g", protocol.SubAll, nil)
	conns := dial(t, url, 3)
	flush, lone, watcher := conns[0], conns[1], conns[2]
	if _, err := watcher.Exec(ctx, `SELECT * FROM queen.provision_group_v1('t', 'q1', 'g', NULL, 100)`); err != nil {
		t.Fatal(err)
	}
	ftx, err := flush.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ftx.Rollback(context.Background())
	if _, err := ftx.Exec(ctx, `SET LOCAL deadlock_timeout = '100ms'`); err != nil {
		t.Fatal(err)
	}
	merged := func(queue, part string) (string, error) {
		var v []string
		err := ftx.QueryRow(ctx, `SELECT o_verdicts FROM queen.pop_v3('t', $1, 'g', ARRAY[$2], 0, 10, 1,
			'lease-f', 60, false, 'test', 'all', NULL, 0, '{}')`, queue, part).Scan(&v)
		if err != nil || len(v) != 1 {
			return fmt.Sprint(v), err
		}
		return v[0], nil
	}
	if v, err := merged("q1", "p0"); err != nil || v != "took" {
		t.Fatalf("the flush's first claim: %s %v, want took", v, err)
	}
	deleted := make(chan error, 1)
	go func() {
		_, err := db.DeleteConsumerGroup(ctx, "t", "g", "", true)
		deleted <- err
	}()
	mustWaitForLock(ctx, t, watcher, deleted, "the delete did not wait for the flush's row", "%DELETE FROM queen.consumers%")
	claimed := make(chan error, 1)
	go func() {
		var v []string
		claimed <- lone.QueryRow(ctx, `SELECT o_verdicts FROM queen.pop_v3('t', 'q2', 'g', ARRAY['a'], 0, 10, 1,
			'lease-l', 60, false, 'test', 'all', NULL, 0, NULL)`).Scan(&v)
	}()
	mustWaitForLock(ctx, t, watcher, claimed, "the lone claim did not wait for the delete", "%pop_v3%")
	v, err := merged("q2", "a")
	if err != nil {
		t.Fatalf("the flush's claim on q2 (exists %v): %v", q2Exists, err)
	}
	if q2Exists && v != "busy" {
		t.Fatalf("the flush's claim on the new queue: %s, want busy", v)
	}
	if err := ftx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-deleted; err != nil {
		t.Fatal(err)
	}
	if err := <-claimed; err != nil {
		t.Fatal(err)
	}
	orphans := orphanRows(t, watcher)
	if orphans != 0 {
		t.Fatalf("%d consumer rows of the group without a marker", orphans)
	}
}

// TestLateAckMakesNoRowOfADeletedGroup: an ack carrying a lease of a
// group deleted since its pop is refused and writes nothing (docs/api.md,
// "Acks", rule 7). ack_v2 made the (partition, group) row before it read
// the lease, so the refused ack left a cursor at 0 of a group without its
// marker, which a group made again with `new` would have read from the
// start. An ack without a lease makes the row only when it resolves a
// message.
func TestLateAckMakesNoRowOfADeletedGroup(t *testing.T) {
	db, url := openDB(t)
	ctx := context.Background()
	pushN(t, db, "q", "p", 2)
	lease := "lease-late"
	out := claim(t, db, pg.PopArgs{Queue: "q", Names: []string{"p"}, Budget: 2, LeaseID: lease, LeaseSeconds: 600})
	if len(out.Messages) != 2 {
		t.Fatalf("pop: %d messages, want 2", len(out.Messages))
	}
	if _, err := db.DeleteConsumerGroup(ctx, "t", "g", "q", true); err != nil {
		t.Fatal(err)
	}
	conn := dial(t, url, 1)[0]
	m0, m1 := out.Messages[0], out.Messages[1]
	for _, st := range []protocol.AckStatus{"completed", "failed", "dlq"} {
		o, err := db.Ack(ctx, "t", []pg.AckRow{
			{Group: "g", PartitionID: m0.PartitionID, TxID: m0.TxID, Status: st, LeaseID: lease},
			{Group: "g", PartitionID: m1.PartitionID, TxID: m1.TxID, Status: st, LeaseID: lease}})
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range o {
			if r.Success || r.Error != "Invalid or expired lease" {
				t.Fatalf("%s ack %d with the deleted group's lease: %+v, want Invalid or expired lease", st, i, r)
			}
		}
		if rows, markers := groupLeft(t, conn); rows != 0 || markers != 0 {
			t.Fatalf("after a refused %s ack: %d consumer rows and %d markers of the deleted group, want none", st, rows, markers)
		}
	}
	var dead int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM queen.dead_letters WHERE consumer_group = 'g' AND NOT superseded`).Scan(&dead); err != nil {
		t.Fatal(err)
	}
	if dead != 0 {
		t.Fatalf("%d dead letters from refused acks", dead)
	}
	// Without a lease, what resolves nothing makes nothing either: a
	// failed or retry is told success, as with a row; an unknown status is
	// refused. Mixed with an item carrying the old lease, too.
	for _, st := range []protocol.AckStatus{"failed", "retry", "bogus"} {
		o, err := db.Ack(ctx, "t", []pg.AckRow{
			{Group: "g", PartitionID: m1.PartitionID, TxID: m1.TxID, Status: st},
			{Group: "g", PartitionID: m0.PartitionID, TxID: m0.TxID, Status: "completed", LeaseID: lease}})
		if err != nil {
			t.Fatal(err)
		}
		if want := st != "bogus"; o[0].Success != want || o[1].Success {
			t.Fatalf("lease-less %s after the delete, with a leased completed: %+v, want success %v and a refusal", st, o, want)
		}
		if rows, _ := groupLeft(t, conn); rows != 0 {
			t.Fatalf("a lease-less %s after the delete made %d consumer rows, want none", st, rows)
		}
	}
	// A lease-less completed ack resolves what it names: it makes the
	// cursor, at the partition's start, as without a delete.
	o, err := db.Ack(ctx, "t", []pg.AckRow{{Group: "g", PartitionID: m1.PartitionID, TxID: m1.TxID, Status: "completed"}})
	if err != nil || !o[0].Success {
		t.Fatalf("a completed ack without a lease: %+v, %v", o, err)
	}
	if rows := consumerRows(t, conn, "q", "g"); rows["p"].Committed != 0 || !slices.Equal(rows["p"].Acked, []int64{m1.Off}) {
		t.Fatalf("after a completed ack without a lease of the second message: %+v, want the cursor at 0 and %d resolved", rows, m1.Off)
	}
}

// TestSubscriptionUpdateMovesProvisionedCursors: a subscription update
// applies to the partitions the group has not read yet (docs/api.md). A
// cursor the bulk provisioning placed, not read since, moves to the new
// start, as the group's first read would have placed it without the pass.
// Cursors the group moved (a seek, an autoAck pop, a lease-less ack), holds
// under a lease, or placed by its own claim stay; a refused ack reads
// nothing.
func TestSubscriptionUpdateMovesProvisionedCursors(t *testing.T) {
	db, url := openDB(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, p := range []string{"p0", "p1", "p2", "p3", "p5", "p6"} {
		pushN(t, db, "q", p, 2)
	}
	marker(t, db, "q", "g", protocol.SubAll, nil)
	if pgp, err := db.ProvisionGroup(ctx, "t", "q", "g", "", 100); err != nil || pgp.New != 6 {
		t.Fatalf("provision: %+v, %v", pgp, err)
	}
	// p5: a lease-less ack of its first message (a read: its cursor must
	// stay at 1); p6: an ack refused for a stale lease (not a read).
	ack := func(part, lease string, status protocol.AckStatus) bool {
		t.Helper()
		var pid, tx string
		if err := conn.QueryRow(ctx, `SELECT m.partition_id::text, m.transaction_id FROM queen.messages m
			JOIN queen.partitions p ON p.id = m.partition_id WHERE p.name = $1 AND m.off = 1`, part).Scan(&pid, &tx); err != nil {
			t.Fatal(err)
		}
		out, err := db.Ack(ctx, "t", []pg.AckRow{{Group: "g", PartitionID: pid, TxID: tx, Status: status, LeaseID: lease}})
		if err != nil || len(out) != 1 {
			t.Fatalf("ack on %s: %+v, %v", part, out, err)
		}
		return out[0].Success
	}
	if !ack("p5", "", protocol.AckCompleted) {
		t.Fatal("the lease-less ack on p5 was refused")
	}
	if ack("p6", "stale-lease", protocol.AckFailed) {
		t.Fatal("the ack with a stale lease on p6 succeeded")
	}
	if out, err := db.Pop(ctx, pg.PopArgs{Tenant: "t", Queue: "q", Group: "g", Names: []string{"p0"}, Budget: 1,
		MaxParts: 1, LeaseID: "l0", LeaseSeconds: 60, SubMode: protocol.SubAll}); err != nil || len(out.Messages) != 1 {
		t.Fatalf("claim of p0: %+v, %v", out, err)
	}
	if err := db.SeekPartitionToEnd(ctx, "t", "g", "q", "p1"); err != nil {
		t.Fatal(err)
	}
	pushN(t, db, "q", "p1", 1) // before the new start: the seeked cursor must not move to it
	// p3: an autoAck pop takes its first message (a read, with no lease
	// left to protect the row): its cursor must stay at 1.
	if out, err := db.Pop(ctx, pg.PopArgs{Tenant: "t", Queue: "q", Group: "g", Names: []string{"p3"}, Unprov: []string{}, Budget: 1,
		MaxParts: 1, LeaseID: "l3", AutoAck: true, SubMode: protocol.SubAll}); err != nil || len(out.Messages) != 1 {
		t.Fatalf("autoAck pop of p3: %+v, %v", out, err)
	}
	// p4 appears after the pass; the group's claim makes its row (read).
	pushN(t, db, "q", "p4", 2)
	if _, err := db.Pop(ctx, pg.PopArgs{Tenant: "t", Queue: "q", Group: "g", Names: []string{"p4"}, Unprov: []string{"p4"},
		Budget: 0, MaxParts: 1, LeaseID: "none", SubMode: protocol.SubAll}); err != nil {
		t.Fatal(err)
	}
	var mid time.Time
	if err := conn.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&mid); err != nil {
		t.Fatal(err)
	}
	pushN(t, db, "q", "p2", 1) // after the new start: the group must get it
	if n, err := db.UpdateSubscription(ctx, "t", "g", mid); err != nil || n != 1 {
		t.Fatalf("update: %d, %v", n, err)
	}
	rows := consumerRows(t, conn, "q", "g")
	want := map[string]int64{"p0": 0, "p1": 2, "p2": 2, "p3": 1, "p4": 0, "p5": 1, "p6": 2}
	for p, c := range want {
		if rows[p].Committed != c || rows[p].BatchEnd < c {
			t.Errorf("%s: cursor %+v, want %d", p, rows[p], c)
		}
	}
	if !rows["p0"].Leased {
		t.Errorf("p0's lease was dropped: %+v", rows["p0"])
	}
	out, err := db.Pop(ctx, pg.PopArgs{Tenant: "t", Queue: "q", Group: "g", Names: []string{"p2"}, Budget: 10,
		MaxParts: 1, LeaseID: "l2", LeaseSeconds: 60, SubMode: protocol.SubAll})
	if err != nil || len(out.Messages) != 1 || out.Messages[0].Off != 3 {
		t.Fatalf("pop of p2 after the update: %+v, %v; want only offset 3, pushed after the new start", out, err)
	}
}

// TestSubscriptionUpdateWaitsForAPage: an update that starts while a
// provisioning page is uncommitted moves that page's rows too (it waits for
// the page's hold on the marker, then reads the rows in a statement of its
// own).
func TestSubscriptionUpdateWaitsForAPage(t *testing.T) {
	db, url := openDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 3 {
		pushN(t, db, "q", fmt.Sprint("p", i), 2)
	}
	marker(t, db, "q", "g", protocol.SubAll, nil)
	page, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer page.Close(context.Background())
	watcher, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer watcher.Close(context.Background())
	var mid time.Time
	if err := watcher.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&mid); err != nil {
		t.Fatal(err)
	}
	tx, err := page.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var made int
	if err := tx.QueryRow(ctx, `SELECT max(o_new) FROM queen.provision_group_v1('t', 'q', 'g', NULL, 100)`).Scan(&made); err != nil || made != 3 {
		t.Fatalf("the page made %d rows, %v; want 3", made, err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := db.UpdateSubscription(ctx, "t", "g", mid)
		done <- err
	}()
	mustWaitForLock(ctx, t, watcher, done, "the subscription update did not wait for the page", "%consumer_groups_metadata%", "%group_gate%")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for p, r := range consumerRows(t, watcher, "q", "g") {
		if r.Committed != 2 {
			t.Errorf("%s: cursor %+v, want 2 (the new start)", p, r)
		}
	}
}
