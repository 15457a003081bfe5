package api_test

// Third review of issue 14: dead-letter retry copies recorded per group
// (queen.dlq_copies, queen.dlq_copies_past in pop, ack and seek).

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"queen-node/internal/nodetest"
)

// TestReview14cDLQSeekRacingRetryServesCopy: group h consumed m1; g's dead
// letter of m1 is retried while h seeks to the end. The seek's UPDATE
// waits on h's consumer row, which the retry locked first; once the retry
// commits, PostgreSQL re-checks the locked row (READ COMMITTED) but keeps
// the statement's snapshot for everything else: the target (the
// watermark before the copy) and queen.dlq_copies_past (STABLE, the same
// snapshot, so no record of the copy). h's cursor, which the retry had
// moved past the copy, is put back before it with no acked offset, and
// h, which just sought to the end, is served g's copy of m1.
//
// The retry is held just before its commit: g has an older, superseded
// entry of m1 (a seek back), which the retry deletes last; a transaction
// holding that row (FOR KEY SHARE) keeps the retry waiting there, its
// cursor updates done. The test waits for each wait in pg_stat_activity.
func TestReview14cDLQSeekRacingRetryServesCopy(t *testing.T) {
	c := rc{t: t, n: nodetest.Start(t)}
	c.configure("rz", msg{"retryLimit": 0})
	before := time.Now().UTC().Add(-time.Second).Format("2006-01-02T15:04:05.000Z")
	pid := c.push("rz", "p", "m1")
	got, lease := c.pop("rz", "p", "h", 10)
	c.ackAs("h", pid, lease, got...)
	c.deadLetter("rz", "p", "g", pid)
	// g reads m1 again (its entry becomes superseded) and fails it again.
	c.ok(200, "POST", "/api/v1/consumer-groups/g/queues/rz/seek", msg{"timestamp": before})
	c.deadLetter("rz", "p", "g", pid)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	holder, err := pgx.Connect(ctx, c.n.DBURL)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(context.Background())
	watcher, err := pgx.Connect(ctx, c.n.DBURL)
	if err != nil {
		t.Fatal(err)
	}
	defer watcher.Close(context.Background())
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	tag, err := tx.Exec(ctx, `SELECT 1 FROM queen.dead_letters
		WHERE consumer_group = 'g' AND transaction_id = 'm1' AND superseded FOR KEY SHARE`)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("hold g's superseded entry: %v (%d rows)", err, tag.RowsAffected())
	}

	send := func(method, path string, body any) chan string {
		out := make(chan string, 1)
		go func() {
			b, _ := json.Marshal(body)
			req, _ := http.NewRequestWithContext(ctx, method, c.n.URL+path, bytes.NewReader(b))
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				out <- err.Error()
				return
			}
			resp.Body.Close()
			out <- resp.Status
		}()
		return out
	}
	waitFor := func(text string) {
		for {
			var n int
			if err := watcher.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%'`, text).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n > 0 {
				return
			}
			if ctx.Err() != nil {
				t.Fatalf("no statement containing %q ever waited on a lock", text)
			}
			time.Sleep(10 * time.Millisecond) // polling with a deadline
		}
	}

	retried := send("POST", retryPath(pid, "m1", "g"), nil)
	waitFor("dlq_retry_v1") // copy appended, h's cursor moved past it
	seeked := send("POST", "/api/v1/consumer-groups/h/queues/rz/seek", msg{"toEnd": true})
	waitFor("dlq_copies_past") // the seek waits on h's row
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if st := <-retried; st != "200 OK" {
		t.Fatalf("retry: %s", st)
	}
	if st := <-seeked; st != "200 OK" {
		t.Fatalf("seek: %s", st)
	}

	if got, _ := c.pop("rz", "p", "h", 10); len(got) != 0 {
		t.Fatalf("h, sought to the end during g's retry, is served %s (g's copy of m1)", strings.Join(got, ","))
	}
}

// TestReview14cDLQPartitionSeekRacingRetryServesCopy: as above, with the
// partition seek (POST .../partitions/p/seek, always to the end) and a
// group h that has not resolved m1 yet (it holds it under a lease), so the
// retry puts the copy in h's acked offsets. The seek's INSERT ... ON
// CONFLICT DO UPDATE waits on h's row; after the retry commits it keeps
// GREATEST(committed, the watermark read before the copy) and clears
// acked: the copy is unresolved for h again and h is served g's copy of
// m1 (besides m1 itself, which the seek passed).
func TestReview14cDLQPartitionSeekRacingRetryServesCopy(t *testing.T) {
	c := rc{t: t, n: nodetest.Start(t)}
	c.configure("ry", msg{"retryLimit": 0})
	before := time.Now().UTC().Add(-time.Second).Format("2006-01-02T15:04:05.000Z")
	pid := c.push("ry", "p", "m1")
	if got, _ := c.pop("ry", "p", "h", 10); strings.Join(got, ",") != "m1" {
		t.Fatalf("h popped %v", got)
	}
	c.deadLetter("ry", "p", "g", pid)
	c.ok(200, "POST", "/api/v1/consumer-groups/g/queues/ry/seek", msg{"timestamp": before})
	c.deadLetter("ry", "p", "g", pid)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	holder, err := pgx.Connect(ctx, c.n.DBURL)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(context.Background())
	watcher, err := pgx.Connect(ctx, c.n.DBURL)
	if err != nil {
		t.Fatal(err)
	}
	defer watcher.Close(context.Background())
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	tag, err := tx.Exec(ctx, `SELECT 1 FROM queen.dead_letters
		WHERE consumer_group = 'g' AND transaction_id = 'm1' AND superseded FOR KEY SHARE`)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("hold g's superseded entry: %v (%d rows)", err, tag.RowsAffected())
	}
	send := func(path string) chan string {
		out := make(chan string, 1)
		go func() {
			req, _ := http.NewRequestWithContext(ctx, "POST", c.n.URL+path, strings.NewReader("{}"))
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				out <- err.Error()
				return
			}
			resp.Body.Close()
			out <- resp.Status
		}()
		return out
	}
	waitFor := func(text string) {
		for {
			var n int
			if err := watcher.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%'`, text).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n > 0 {
				return
			}
			if ctx.Err() != nil {
				t.Fatalf("no statement containing %q ever waited on a lock", text)
			}
			time.Sleep(10 * time.Millisecond) // polling with a deadline
		}
	}

	retried := send(retryPath(pid, "m1", "g"))
	waitFor("dlq_retry_v1") // copy appended and in h's acked offsets
	seeked := send("/api/v1/consumer-groups/h/queues/ry/partitions/p/seek")
	waitFor("INSERT INTO queen.consumers AS c") // the seek waits on h's row
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if st := <-retried; st != "200 OK" {
		t.Fatalf("retry: %s", st)
	}
	if st := <-seeked; st != "200 OK" {
		t.Fatalf("partition seek: %s", st)
	}

	if got, _ := c.pop("ry", "p", "h", 10); len(got) != 0 {
		t.Fatalf("h, sought to the end of p during g's retry, is served %s (g's copy of m1)", strings.Join(got, ","))
	}
}
