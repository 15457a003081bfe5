package api_test

// Second review of issue 14: the dead-letter retry now inserts cursors for
// every group registered on the queue (queen.dlq_retry_v2).

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"queen-node/internal/nodetest"
)

// TestDLQRetryResurrectsDeletedGroup: the retry reads the queue's
// group markers without a lock and inserts a cursor for each group lacking
// one on the partition. A group delete (DELETE /consumer-groups/late/queues/q)
// that has already deleted late's cursors but not yet committed is not seen:
// the retry inserts a cursor for late on p, and after both commit the
// deleted group has a cursor again (no marker). When late later subscribes
// again with subscriptionMode=new it is served p's old message m1 from that
// cursor, which a group subscribing now must never see.
//
// The group delete is held between its statements by a transaction that
// holds late's marker row (FOR KEY SHARE), so its marker delete waits; the
// test waits for that in pg_stat_activity, not with a sleep.
func TestDLQRetryResurrectsDeletedGroup(t *testing.T) {
	c := rc{t: t, n: nodetest.Start(t)}
	c.configure("rg", msg{"retryLimit": 0})
	otherPid := c.push("rg", "other", "o1")
	got, lease := c.pop("rg", "other", "late", 10)
	c.ackAs("late", otherPid, lease, got...)
	pid := c.push("rg", "p", "m1")
	if tx := c.deadLetter("rg", "p", "g", pid); tx != "m1" {
		t.Fatalf("dead-lettered %s", tx)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	holder, err := pgx.Connect(ctx, c.n.DBURL)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(context.Background())
	// A second connection watches pg_stat_activity: inside the holder's
	// transaction that view is one snapshot.
	watcher, err := pgx.Connect(ctx, c.n.DBURL)
	if err != nil {
		t.Fatal(err)
	}
	defer watcher.Close(context.Background())
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM queen.consumer_groups_metadata WHERE consumer_group = 'late' FOR KEY SHARE`); err != nil {
		t.Fatal(err)
	}

	// The group delete and the retry, off the test goroutine: plain
	// requests (no t), answering their status line.
	send := func(method, path string) chan string {
		out := make(chan string, 1)
		go func() {
			req, _ := http.NewRequestWithContext(ctx, method, c.n.URL+path, nil)
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
	// waiting reports how many backends wait on a lock running a
	// statement that contains text.
	waiting := func(text string) int {
		var n int
		if err := watcher.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%'`, text).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	deleted := send("DELETE", "/api/v1/consumer-groups/late/queues/rg")
	// Wait until the delete's marker statement waits on the holder: its
	// cursor delete (an earlier statement of the same transaction) is done.
	for waiting("DELETE FROM queen.consumer_groups_metadata") == 0 {
		if ctx.Err() != nil {
			t.Fatal("the group delete never reached its marker delete")
		}
		time.Sleep(10 * time.Millisecond) // polling with a deadline
	}
	// The retry either completes at once (it does not wait for the group
	// delete) or waits for it (a retry that locks the markers); either way
	// the holder then lets the group delete finish.
	retried := send("POST", retryPath(pid, "m1", "g"))
	var retryStatus string
	for retryStatus == "" {
		select {
		case retryStatus = <-retried:
		default:
			if waiting("dlq_retry_v2") > 0 {
				retryStatus = "waiting"
				break
			}
			if ctx.Err() != nil {
				t.Fatal("the retry neither finished nor waited")
			}
			time.Sleep(10 * time.Millisecond) // polling with a deadline
		}
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if st := <-deleted; st != "200 OK" {
		t.Fatalf("group delete: %s", st)
	}
	if retryStatus == "waiting" {
		retryStatus = <-retried
	}
	if retryStatus != "200 OK" {
		t.Fatalf("retry: %s", retryStatus)
	}

	var cursors int
	if err := holder.QueryRow(ctx, `SELECT count(*) FROM queen.consumers WHERE consumer_group = 'late'`).Scan(&cursors); err != nil {
		t.Fatal(err)
	}
	// late subscribes again, new messages only: m1 is older than that.
	r := c.do("GET", "/api/v1/pop/queue/rg/partition/p?wait=false&batch=10&consumerGroup=late&subscriptionMode=new", nil)
	var served []string
	if r.Status == 200 {
		for _, m := range r.Obj(t)["messages"].([]any) {
			served = append(served, m.(msg)["transactionId"].(string))
		}
	}
	if cursors != 0 || len(served) != 0 {
		t.Fatalf("after the group delete, late has %d cursor(s); re-subscribed with subscriptionMode=new it is served %s from p",
			cursors, strings.Join(served, ","))
	}
}

// subscribeLateAfter moves group late's recorded subscription start to now
// (POST /consumer-groups/late/subscription), pushes m2 to p and returns
// what late's first pop of p serves. late has read the queue (partition
// other) but never p, so by docs/api.md ("Subscription update": the new
// start applies to partitions the group reads for the first time) it must
// be served m2 only, not the older m1.
func (c rc) subscribeLateAfter(q string) []string {
	c.t.Helper()
	// PostgreSQL runs on this machine: one clock.
	now := time.Now().UTC().Format("2006-01-02T15:04:05.000Z")
	c.ok(200, "POST", "/api/v1/consumer-groups/late/subscription", msg{"subscriptionTimestamp": now})
	c.push(q, "p", "m2")
	got, _ := c.pop(q, "p", "late", 10)
	return got
}

// TestDLQRetryDefeatsSubscriptionUpdate: a retry of g's dead
// letter places late's cursor on p at the beginning ("where its first pop
// would start it" at the time of the retry). A subscription update after
// that no longer applies to p, which late has still never read: late is
// served m1, older than its new start.
func TestDLQRetryDefeatsSubscriptionUpdate(t *testing.T) {
	c := rc{t: t, n: nodetest.Start(t)}
	c.configure("rs", msg{"retryLimit": 0})
	otherPid := c.push("rs", "other", "o1")
	got, lease := c.pop("rs", "other", "late", 10)
	c.ackAs("late", otherPid, lease, got...)
	pid := c.push("rs", "p", "m1")
	c.deadLetter("rs", "p", "g", pid)
	c.ok(200, "POST", retryPath(pid, "m1", "g"), nil)

	if got := c.subscribeLateAfter("rs"); strings.Join(got, ",") != "m2" {
		t.Fatalf("late, subscribed after m1 and the copy, never having read p, is served %v from p; want [m2]", got)
	}
}

// TestDLQRefusedRetryChangesCursors: docs/api.md says a retry
// answering 404 or 409 changes nothing, yet queen.dlq_retry_v2 inserts
// the other groups' cursors before it looks for the entry. A retry of a
// transaction id with no entry (404) is enough for late's later
// subscription update to be ignored on p.
func TestDLQRefusedRetryChangesCursors(t *testing.T) {
	c := rc{t: t, n: nodetest.Start(t)}
	c.configure("rf", msg{"retryLimit": 0})
	otherPid := c.push("rf", "other", "o1")
	got, lease := c.pop("rf", "other", "late", 10)
	c.ackAs("late", otherPid, lease, got...)
	pid := c.push("rf", "p", "m1")
	if r := c.do("POST", retryPath(pid, "no-such-entry", "g"), nil); r.Status != 404 {
		t.Fatalf("retry of no entry: %d %s", r.Status, r.Body)
	}

	if got := c.subscribeLateAfter("rf"); strings.Join(got, ",") != "m2" {
		t.Fatalf("after a 404 retry, late (subscribed after m1, never having read p) is served %v from p; want [m2]", got)
	}
}

// TestDLQRetryCopyServedAfterSeekBack: group h consumed m1; g's
// dead letter of m1 is retried, and the copy is counted as resolved for h
// (its cursor passes it). docs/api.md says the other groups "are never
// served it". h then seeks back to a time before m1 (to process p again):
// the seek rewinds h's cursor over the copy and clears its acked offsets,
// so h is served m1 again and also g's copy of m1, a duplicate no push
// made.
func TestDLQRetryCopyServedAfterSeekBack(t *testing.T) {
	c := rc{t: t, n: nodetest.Start(t)}
	c.configure("rk", msg{"retryLimit": 0})
	before := time.Now().UTC().Add(-time.Second).Format("2006-01-02T15:04:05.000Z")
	pid := c.push("rk", "p", "m1")
	got, lease := c.pop("rk", "p", "h", 10)
	c.ackAs("h", pid, lease, got...)
	c.deadLetter("rk", "p", "g", pid)
	c.ok(200, "POST", retryPath(pid, "m1", "g"), nil)

	c.ok(200, "POST", "/api/v1/consumer-groups/h/queues/rk/seek", msg{"timestamp": before})
	if got, _ := c.pop("rk", "p", "h", 10); strings.Join(got, ",") != "m1" {
		t.Fatalf("h, seeked back before m1, is served %v; want [m1] (never g's copy)", got)
	}
}
