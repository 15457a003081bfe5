package api_test

// Third review of issue 14: dead-letter retry copies recorded per group
// (queen.dlq_copies, queen.dlq_copies_past in pop, ack and seek).

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"queen-node/internal/nodetest"
)

// retryRace holds g's retry of m1 just before its commit: g has an older,
// superseded entry of m1 (a seek back), which queen.dlq_retry_v2 deletes
// last; a transaction holding that row (FOR KEY SHARE) keeps the retry
// waiting there, the copy appended and the other cursors updated.
type retryRace struct {
	c       rc
	ctx     context.Context
	tx      pgx.Tx
	watcher *pgx.Conn
}

// deadLetterTwice dead-letters m1 of q/p for g, seeks g back over it (the
// entry becomes superseded) and dead-letters it again.
func (c rc) deadLetterTwice(q, pid, before string) {
	c.t.Helper()
	c.deadLetter(q, "p", "g", pid)
	c.ok(200, "POST", "/api/v1/consumer-groups/g/queues/"+q+"/seek", msg{"timestamp": before})
	c.deadLetter(q, "p", "g", pid)
}

func (c rc) holdRetry(ctx context.Context) *retryRace {
	c.t.Helper()
	holder, err := pgx.Connect(ctx, c.n.DBURL)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { holder.Close(context.Background()) })
	// pg_stat_activity is one snapshot inside a transaction: a second
	// connection watches it.
	watcher, err := pgx.Connect(ctx, c.n.DBURL)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { watcher.Close(context.Background()) })
	tx, err := holder.Begin(ctx)
	if err != nil {
		c.t.Fatal(err)
	}
	tag, err := tx.Exec(ctx, `SELECT 1 FROM queen.dead_letters
		WHERE consumer_group = 'g' AND transaction_id = 'm1' AND superseded FOR KEY SHARE`)
	if err != nil || tag.RowsAffected() != 1 {
		c.t.Fatalf("hold g's superseded entry: %v (%d rows)", err, tag.RowsAffected())
	}
	return &retryRace{c: c, ctx: ctx, tx: tx, watcher: watcher}
}

// post sends a POST off the test goroutine (no t) and answers its status.
func (r *retryRace) post(path, body string) chan string {
	out := make(chan string, 1)
	go func() {
		req, _ := http.NewRequestWithContext(r.ctx, "POST", r.c.n.URL+path, strings.NewReader(body))
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

// blockedBy polls until a backend waits on a lock that backend pid
// holds, and returns its pid.
func (r *retryRace) blockedBy(pid uint32) uint32 {
	r.c.t.Helper()
	for {
		var got []uint32
		if err := r.watcher.QueryRow(r.ctx, `SELECT COALESCE(array_agg(pid), '{}') FROM pg_stat_activity
			WHERE $1 = ANY (pg_blocking_pids(pid))`, pid).Scan(&got); err != nil {
			r.c.t.Fatal(err)
		}
		if len(got) > 0 {
			return got[0]
		}
		if r.ctx.Err() != nil {
			r.c.t.Fatalf("no backend ever waited on backend %d", pid)
		}
		time.Sleep(10 * time.Millisecond) // polling with a deadline
	}
}

// seekDuringRetry runs g's retry of m1, held before its commit, and h's
// seek (path, body) once it waits on h's consumer row (whatever statement
// of the seek does); then lets both finish.
func (c rc) seekDuringRetry(pid, seekPath, seekBody string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := c.holdRetry(ctx)
	defer r.tx.Rollback(context.Background())
	retried := r.post(retryPath(pid, "m1", "g"), "")
	// the retry waits on the holder: copy appended, h's cursor updated,
	// h's row locked
	retry := r.blockedBy(r.tx.Conn().PgConn().PID())
	seeked := r.post(seekPath, seekBody)
	r.blockedBy(retry) // the seek waits on h's row
	if err := r.tx.Rollback(ctx); err != nil {
		c.t.Fatal(err)
	}
	if st := <-retried; st != "200 OK" {
		c.t.Fatalf("retry: %s", st)
	}
	if st := <-seeked; st != "200 OK" {
		c.t.Fatalf("seek: %s", st)
	}
}

// TestDLQSeekRacingRetryServesCopy: group h consumed m1; g's dead
// letter of m1 is retried while h seeks to the end. The seek's UPDATE
// waits on h's consumer row, which the retry locked first; once the retry
// commits, PostgreSQL re-checks the locked row (READ COMMITTED) but keeps
// the statement's snapshot for everything else: the target (the
// watermark before the copy, a FROM subquery) and queen.dlq_copies_past
// (STABLE: the same snapshot, so no record of the copy). h's cursor,
// which the retry had moved past the copy, is put back before it with no
// acked offset, and h, which just sought to the end, is served g's copy.
func TestDLQSeekRacingRetryServesCopy(t *testing.T) {
	c := rc{t: t, n: nodetest.Start(t)}
	c.configure("rz", msg{"retryLimit": 0})
	before := time.Now().UTC().Add(-time.Second).Format("2006-01-02T15:04:05.000Z")
	pid := c.push("rz", "p", "m1")
	got, lease := c.pop("rz", "p", "h", 10)
	c.ackAs("h", pid, lease, got...)
	c.deadLetterTwice("rz", pid, before)

	c.seekDuringRetry(pid, "/api/v1/consumer-groups/h/queues/rz/seek", `{"toEnd": true}`)
	if got, _ := c.pop("rz", "p", "h", 10); len(got) != 0 {
		t.Fatalf("h, sought to the end during g's retry, is served %s (g's copy of m1)", strings.Join(got, ","))
	}
}

// TestDLQPartitionSeekRacingRetryServesCopy: as above, with the
// partition seek (always to the end) and a group h that has not resolved
// m1 (it holds it under a lease), so the retry puts the copy in h's acked
// offsets. The seek's INSERT ... ON CONFLICT DO UPDATE waits on h's row;
// after the retry commits it sets GREATEST(committed, the watermark read
// before the copy) and clears acked: the copy is unresolved for h again
// and h is served g's copy of m1.
func TestDLQPartitionSeekRacingRetryServesCopy(t *testing.T) {
	c := rc{t: t, n: nodetest.Start(t)}
	c.configure("ry", msg{"retryLimit": 0})
	before := time.Now().UTC().Add(-time.Second).Format("2006-01-02T15:04:05.000Z")
	pid := c.push("ry", "p", "m1")
	if got, _ := c.pop("ry", "p", "h", 10); strings.Join(got, ",") != "m1" {
		t.Fatalf("h popped %v", got)
	}
	c.deadLetterTwice("ry", pid, before)

	c.seekDuringRetry(pid, "/api/v1/consumer-groups/h/queues/ry/partitions/p/seek", "{}")
	if got, _ := c.pop("ry", "p", "h", 10); len(got) != 0 {
		t.Fatalf("h, sought to the end of p during g's retry, is served %s (g's copy of m1)", strings.Join(got, ","))
	}
}
