package retention_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"queen-node/internal/nodetest"
	"queen-node/node"
	"queen-node/retention"
)

// The always-on rule: a message every group's cursor has passed goes once
// it is older than the dedup window, and nothing else does: not what one
// group still has to read, not what a subscribed group without a cursor
// on the partition would read, not anything of a partition no group reads.
func TestRetentionCompletedPastDedupWindow(t *testing.T) {
	n := startNode(t)
	c := dbConn(t, n)
	const q = "ret-dedup"

	// g3 subscribes from the beginning before any message exists: its
	// marker is written, but it has no cursor on partition p yet.
	if ms := pop(t, n, q, "g3", 1); ms != nil {
		t.Fatalf("pop of an empty queue: %v", ms)
	}
	push(t, n, q, "p", "d", 1, 10)
	g1 := pop(t, n, q, "g1", 10)
	ackOK(t, n, "g1", g1[:6])
	g2 := pop(t, n, q, "g2", 10)
	ackOK(t, n, "g2", g2[:4])
	ageAll(t, c, q, 2*time.Hour) // past the default one-hour dedup window

	// Young, fully consumed: kept. Old, never read by any group: kept.
	push(t, n, "ret-young", "p", "y", 1, 3)
	ackOK(t, n, "g1", pop(t, n, "ret-young", "g1", 3))
	push(t, n, "ret-unread", "p", "u", 1, 3)
	ageAll(t, c, "ret-unread", 2*time.Hour)

	if p := pass(t, n); p.Completed+p.Pending != 0 {
		t.Fatalf("pass with g3 not started deleted %d+%d messages", p.Completed, p.Pending)
	}
	wantOffsets(t, c, q, "p", 1, 2, 3, 4, 5, 6, 7, 8, 9, 10)

	// g3 reads and completes two: the lowest cursor is now 2.
	g3 := pop(t, n, q, "g3", 2)
	if got := indexes(g3); !slices.Equal(got, []int{1, 2}) {
		t.Fatalf("g3 got %v, want [1 2]", got)
	}
	ackOK(t, n, "g3", g3)
	p := pass(t, n)
	if p.Completed != 2 || p.Pending != 0 {
		t.Fatalf("pass deleted %d completed, %d pending; want 2, 0", p.Completed, p.Pending)
	}
	wantOffsets(t, c, q, "p", 3, 4, 5, 6, 7, 8, 9, 10)
	wantOffsets(t, c, "ret-young", "p", 1, 2, 3)
	wantOffsets(t, c, "ret-unread", "p", 1, 2, 3)

	// The groups keep reading over the hole at the front.
	g3 = pop(t, n, q, "g3", 10)
	if got := indexes(g3); !slices.Equal(got, []int{3, 4, 5, 6, 7, 8, 9, 10}) {
		t.Fatalf("g3 after the pass got %v", got)
	}
	ackOK(t, n, "g3", g3)

	// Past the dedup window a transaction id is free again (docs/api.md,
	// "Retention"): the same id is stored as a new message.
	push(t, n, q, "p", "d", 1, 1)

	st := job(n).Stats()
	if st.Runs != 2 || st.DeletedCompleted != 2 || st.DeletedPending != 0 || st.LastDeleted != 2 {
		t.Fatalf("stats %+v", st)
	}
}

// retentionEnabled: completed messages go past completedRetentionSeconds,
// pending ones past retentionSeconds; the others stay, and the group reads
// and acks over the holes.
func TestRetentionEnabledRules(t *testing.T) {
	n := startNode(t)
	c := dbConn(t, n)
	const q = "ret-enabled"
	configure(t, n, q, msg{"retentionEnabled": true, "retentionSeconds": 600, "completedRetentionSeconds": 60})
	push(t, n, q, "p", "e", 1, 6)
	ackOK(t, n, "g1", pop(t, n, q, "g1", 2)) // 1, 2 completed; 3..6 pending, not leased
	for off, a := range map[int64]time.Duration{1: 900 * time.Second, 2: 30 * time.Second, 3: 900 * time.Second,
		4: 300 * time.Second, 5: 900 * time.Second, 6: 10 * time.Second} {
		age(t, c, q, "p", off, a)
	}
	p := pass(t, n)
	if p.Completed != 1 || p.Pending != 2 {
		t.Fatalf("pass deleted %d completed, %d pending; want 1, 2", p.Completed, p.Pending)
	}
	wantOffsets(t, c, q, "p", 2, 4, 6)

	ms := pop(t, n, q, "g1", 10)
	if got := indexes(ms); !slices.Equal(got, []int{4, 6}) {
		t.Fatalf("pop over holes got %v, want [4 6]", got)
	}
	ackOK(t, n, "g1", ms)
	if committed, acked := consumer(t, c, q, "p", "g1"); committed != 6 || len(acked) != 0 {
		t.Fatalf("cursor %d acked %v, want 6 []", committed, acked)
	}

	// Without retentionEnabled only the dedup-window rule applies: old
	// pending messages stay.
	const off = "ret-disabled"
	configure(t, n, off, msg{"retentionSeconds": 1, "completedRetentionSeconds": 1})
	push(t, n, off, "p", "x", 1, 2)
	ackOK(t, n, "g1", pop(t, n, off, "g1", 1))
	ageAll(t, c, off, 30*time.Second)
	pass(t, n)
	wantOffsets(t, c, off, "p", 1, 2)
}

// maxWaitTimeSeconds: a pending message waiting longer goes, with or
// without retentionEnabled.
func TestRetentionMaxWait(t *testing.T) {
	n := startNode(t)
	c := dbConn(t, n)
	const q = "ret-maxwait"
	configure(t, n, q, msg{"maxWaitTimeSeconds": 100})
	push(t, n, q, "p", "w", 1, 3)
	age(t, c, q, "p", 1, 200*time.Second)
	age(t, c, q, "p", 2, 50*time.Second)
	age(t, c, q, "p", 3, 200*time.Second)
	if p := pass(t, n); p.Pending != 2 || p.Completed != 0 {
		t.Fatalf("pass deleted %d completed, %d pending; want 0, 2", p.Completed, p.Pending)
	}
	wantOffsets(t, c, q, "p", 2)
	if got := indexes(pop(t, n, q, "g", 10)); !slices.Equal(got, []int{2}) {
		t.Fatalf("pop got %v, want [2]", got)
	}
}

// In-flight messages: the pending rules leave a live lease's messages
// alone; once the lease has expired they go, a late ack of one answers
// "Message not found", and the cursor passes the holes, remembered acks
// included.
func TestRetentionInFlight(t *testing.T) {
	n := startNode(t)
	c := dbConn(t, n)
	const q = "ret-lease"
	configure(t, n, q, msg{"retentionEnabled": true, "retentionSeconds": 60})
	push(t, n, q, "p", "l", 1, 4)
	ms := pop(t, n, q, "g1", 4)
	ageAll(t, c, q, 120*time.Second)
	if p := pass(t, n); p.Completed+p.Pending != 0 {
		t.Fatalf("pass deleted %d messages under a live lease", p.Completed+p.Pending)
	}
	wantOffsets(t, c, q, "p", 1, 2, 3, 4)

	// Message 3 completed past the gap of 1 and 2: remembered in acked.
	ackOK(t, n, "g1", ms[2:3])
	if committed, acked := consumer(t, c, q, "p", "g1"); committed != 0 || !slices.Equal(acked, []int64{3}) {
		t.Fatalf("cursor %d acked %v, want 0 [3]", committed, acked)
	}
	// The lease ends (expiry, without waiting 300 s).
	exec(t, c, `UPDATE queen.consumers SET lease_expires_at = now() - interval '1 second' WHERE consumer_group = 'g1'`)
	if p := pass(t, n); p.Pending != 4 {
		t.Fatalf("pass deleted %d pending, want 4", p.Pending)
	}
	wantOffsets(t, c, q, "p")
	// The cursor passed the holes (and the remembered ack with them): the
	// partition no longer looks pending to the group.
	if committed, acked := consumer(t, c, q, "p", "g1"); committed != 4 || len(acked) != 0 {
		t.Fatalf("cursor %d acked %v after the pass, want 4 []", committed, acked)
	}

	// A late ack of a deleted message, with its stale lease or none.
	for i, a := range ack(t, n, "g1", ms[:2]) {
		if a["success"] != false || a["error"] != "Message not found" {
			t.Fatalf("ack %d of a deleted message: %v", i, a)
		}
	}
	if got := pop(t, n, q, "g1", 10); got != nil {
		t.Fatalf("pop after the pass got %v", indexes(got))
	}
	push(t, n, q, "p", "l", 5, 1)
	ms = pop(t, n, q, "g1", 10)
	if got := indexes(ms); !slices.Equal(got, []int{5}) {
		t.Fatalf("pop of the new message got %v", got)
	}
	ackOK(t, n, "g1", ms)
	if committed, _ := consumer(t, c, q, "p", "g1"); committed != 5 {
		t.Fatalf("cursor %d, want 5", committed)
	}
}

// A message deleted while its lease lives (a pop racing the pass): the
// rest of the batch acks across the hole and the cursor passes it.
func TestRetentionHoleInsideLiveLease(t *testing.T) {
	n := startNode(t)
	c := dbConn(t, n)
	const q = "ret-hole"
	push(t, n, q, "p", "h", 1, 5)
	ms := pop(t, n, q, "g1", 5)
	// What the pass would have deleted had it read the consumer row just
	// before this lease was taken.
	exec(t, c, `DELETE FROM queen.messages m USING queen.partitions p, queen.queues q
		WHERE p.id = m.partition_id AND q.id = p.queue_id AND q.name = $1 AND m.off IN (2, 5)`, q)
	res := ack(t, n, "g1", ms)
	for i, a := range res {
		deleted := i == 1 || i == 4
		if deleted && a["error"] != "Message not found" || !deleted && a["success"] != true {
			t.Fatalf("ack %d: %v", i, a)
		}
	}
	// 1, 3, 4 resolved, 2 gone: the cursor passes all four offsets; the
	// lease (batch end 5) lives on until it expires, and after that the
	// group reads on.
	if committed, acked := consumer(t, c, q, "p", "g1"); committed != 4 || len(acked) != 0 {
		t.Fatalf("cursor %d acked %v, want 4 []", committed, acked)
	}
	exec(t, c, `UPDATE queen.consumers SET lease_expires_at = now() - interval '1 second' WHERE consumer_group = 'g1'`)
	push(t, n, q, "p", "h", 6, 1)
	ms = pop(t, n, q, "g1", 5)
	if got := indexes(ms); !slices.Equal(got, []int{6}) {
		t.Fatalf("pop after the hole got %v", got)
	}
	ackOK(t, n, "g1", ms)
}

// Tenants: a pass applies each queue's own options and cursors. The same
// queue and group names in another tenant, with retention on there, lose
// their old pending messages; this tenant's queue (retention off) keeps
// its pending ones and loses only what its group completed.
func TestRetentionTenants(t *testing.T) {
	n := startNode(t)
	c := dbConn(t, n)
	const q = "ret-tenant"
	push(t, n, q, "p", "a", 1, 4)
	ackOK(t, n, "g", pop(t, n, q, "g", 2))
	// Tenant "other", written directly (this node's requests all land in
	// its one tenant): retention on, its group g has read nothing.
	exec(t, c, `INSERT INTO queen.queues (id, tenant, name, retention_enabled, retention_seconds)
		VALUES (gen_random_uuid(), 'other', $1, true, 60)`, q)
	exec(t, c, `INSERT INTO queen.partitions (id, queue_id, name, last_offset)
		SELECT gen_random_uuid(), id, 'p', 2 FROM queen.queues WHERE tenant = 'other' AND name = $1`, q)
	exec(t, c, `INSERT INTO queen.messages (partition_id, off, id, transaction_id, created_at)
		SELECT p.id, o, gen_random_uuid(), 'b-' || o, now()
		FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id, generate_series(1, 2) o
		WHERE q.tenant = 'other' AND q.name = $1`, q)
	exec(t, c, `INSERT INTO queen.consumers (partition_id, consumer_group, committed_offset, batch_end)
		SELECT p.id, 'g', 0, 0 FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
		WHERE q.tenant = 'other' AND q.name = $1`, q)
	ageAll(t, c, q, 2*time.Hour)
	if p := pass(t, n); p.Completed != 2 || p.Pending != 2 {
		t.Fatalf("pass deleted %d completed, %d pending; want 2, 2", p.Completed, p.Pending)
	}
	var mine, other []int64
	for _, x := range []struct {
		tenant string
		dst    *[]int64
	}{{"default", &mine}, {"other", &other}} {
		rows, err := c.Query(context.Background(), `SELECT m.off FROM queen.messages m
			JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id
			WHERE q.tenant = $1 AND q.name = $2 ORDER BY m.off`, x.tenant, q)
		if err != nil {
			t.Fatal(err)
		}
		if *x.dst, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(mine, []int64{3, 4}) || len(other) != 0 {
		t.Fatalf("left: this tenant %v (want [3 4]), other %v (want [])", mine, other)
	}
}

// Two nodes on one database: while one holds a pass, the other's pass is
// skipped; once it ends, the other runs. /status and /metrics report it.
func TestRetentionOneNodeAtATime(t *testing.T) {
	a := startNode(t)
	b := nodetest.StartConfigOn(t, a.DBURL, "ret-b", func(c *node.Config) { c.Retention.Interval = 0 })

	entered, release := make(chan struct{}), make(chan struct{})
	retention.SetLockedHook(job(a), func() {
		close(entered)
		<-release
	})
	done := make(chan retention.Pass)
	go func() {
		p, err := job(a).RunOnce(context.Background())
		if err != nil {
			t.Errorf("node a pass: %v", err)
		}
		done <- p
	}()
	<-entered
	pb, err := job(b).RunOnce(context.Background())
	if err != nil || pb.Ran {
		t.Fatalf("node b ran %v (%v) while node a held the pass", pb.Ran, err)
	}
	close(release)
	if pa := <-done; !pa.Ran {
		t.Fatal("node a's pass did not run")
	}
	retention.SetLockedHook(job(a), nil)
	pass(t, b) // the lock is free again

	if st := job(b).Stats(); st.Runs != 1 || st.Skipped != 1 {
		t.Fatalf("node b stats %+v, want 1 run, 1 skipped", st)
	}
	r := b.Do(t, "GET", "/status", nil)
	ret, _ := r.Obj(t)["retention"].(map[string]any)
	if ret["runs"] != 1.0 || ret["skipped"] != 1.0 || ret["enabled"] != false {
		t.Fatalf("/status retention = %v", ret)
	}
	m := b.Do(t, "GET", "/metrics", nil)
	for _, line := range []string{"queen_retention_runs_total 1", "queen_retention_runs_skipped_total 1",
		`queen_retention_deleted_messages_total{reason="completed"} 0`} {
		if !containsLine(string(m.Body), line) {
			t.Fatalf("/metrics lacks %q", line)
		}
	}
}

func containsLine(body, line string) bool {
	for len(body) > 0 {
		i := 0
		for i < len(body) && body[i] != '\n' {
			i++
		}
		if body[:i] == line {
			return true
		}
		if i == len(body) {
			break
		}
		body = body[i+1:]
	}
	return false
}

// Passes run again and again while producers push and two groups pop and
// ack: with a dedup window of 0 every consumed message is deleted at the
// next pass, and yet each group receives every message pushed.
func TestRetentionUnderLoad(t *testing.T) {
	n := startNode(t)
	c := dbConn(t, n)
	const q = "ret-load"
	const parts, perPart = 4, 300
	configure(t, n, q, msg{"dedupWindowSeconds": 0})
	cl := &http.Client{Timeout: 30 * time.Second}
	// Both groups subscribe (their first pop writes the group marker)
	// before any pass: a group's very first pop racing a pass is the
	// documented race of docs/api.md "Retention", not what this test is
	// about.
	for _, g := range []string{"g1", "g2"} {
		resp, err := cl.Get(fmt.Sprintf("%s/api/v1/pop/queue/%s?consumerGroup=%s&wait=false", n.URL, q, g))
		if err != nil || resp.StatusCode != 204 {
			t.Fatalf("first pop of %s: %v %v", g, resp, err)
		}
		resp.Body.Close()
	}

	// Passes back to back until the load ends; a pass is never cut (a
	// cancelled statement closes the connection, and PostgreSQL frees the
	// lock only once it notices).
	var stop atomic.Bool
	var passes sync.WaitGroup
	passes.Add(1)
	var ran int
	go func() {
		defer passes.Done()
		for !stop.Load() {
			p, err := job(n).RunOnce(context.Background())
			if err != nil {
				t.Errorf("pass: %v", err)
				return
			}
			if p.Ran {
				ran++
			}
		}
	}()

	// Goroutines report with t.Errorf and return; the checks below fail.
	var wg sync.WaitGroup
	for pi := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < perPart; k += 20 {
				items := make([]msg, 20)
				for j := range items {
					i := pi*perPart + k + j
					items[j] = msg{"queue": q, "partition": fmt.Sprintf("p%d", pi), "payload": msg{"i": i},
						"transactionId": fmt.Sprintf("t-%d", i)}
				}
				if status, body, err := post(cl, n.URL+"/api/v1/push", msg{"items": items}); err != nil || status != 201 {
					t.Errorf("push: %d %v %s", status, err, body)
					return
				}
			}
		}()
	}
	got := map[string]map[int]bool{"g1": {}, "g2": {}}
	for _, g := range []string{"g1", "g2"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			deadline := time.Now().Add(60 * time.Second)
			batch := map[string]int{"g1": 7, "g2": 31}[g]
			for len(got[g]) < parts*perPart && time.Now().Before(deadline) {
				resp, err := cl.Get(fmt.Sprintf("%s/api/v1/pop/queue/%s?consumerGroup=%s&batch=%d&leaseSeconds=300", n.URL, q, g, batch))
				if err != nil {
					t.Errorf("pop: %v", err)
					return
				}
				var res struct{ Messages []msg }
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == 204 {
					time.Sleep(5 * time.Millisecond) // a poll's back-off, not a synchronisation
					continue
				}
				if resp.StatusCode != 200 || json.Unmarshal(body, &res) != nil {
					t.Errorf("pop: %d %s", resp.StatusCode, body)
					return
				}
				acks := make([]msg, len(res.Messages))
				for i, m := range res.Messages {
					acks[i] = msg{"transactionId": m["transactionId"], "partitionId": m["partitionId"],
						"leaseId": m["leaseId"], "status": "completed"}
				}
				status, out, err := post(cl, n.URL+"/api/v1/ack/batch", msg{"consumerGroup": g, "acknowledgments": acks})
				if err != nil || status != 200 || bytes.Contains(out, []byte(`"success":false`)) {
					t.Errorf("ack: %d %v %s", status, err, out)
					return
				}
				for _, i := range indexes(res.Messages) {
					got[g][i] = true // one goroutine per group: no lock needed
				}
			}
		}()
	}
	wg.Wait()
	stop.Store(true)
	passes.Wait()
	for g, seen := range got {
		if len(seen) != parts*perPart {
			t.Fatalf("group %s received %d distinct messages, want %d", g, len(seen), parts*perPart)
		}
	}
	if ran < 2 {
		t.Fatalf("only %d passes ran during the load", ran)
	}
	// Everything consumed by both: the next pass empties the table.
	pass(t, n)
	var left int
	if err := c.QueryRow(context.Background(), "SELECT count(*) FROM queen.messages").Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d messages left after the final pass (%v)", left, err)
	}
	if st := job(n).Stats(); st.DeletedCompleted != parts*perPart || st.DeletedPending != 0 {
		t.Fatalf("stats %+v, want %d completed deleted", st, parts*perPart)
	}
}

// The node's own loop (QUEEN_RETENTION_INTERVAL_MS): with a short interval
// it deletes without anyone calling it, and /status says so.
func TestRetentionLoop(t *testing.T) {
	n := nodetest.StartConfig(t, func(c *node.Config) { c.Retention.Interval = 50 * time.Millisecond })
	c := dbConn(t, n)
	const q = "ret-loop"
	push(t, n, q, "p", "o", 1, 3)
	ackOK(t, n, "g", pop(t, n, q, "g", 3))
	ageAll(t, c, q, 2*time.Hour)
	deadline := time.Now().Add(10 * time.Second)
	for len(offsets(t, c, q, "p")) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the loop did not delete within 10 s: %+v", job(n).Stats())
		}
		time.Sleep(20 * time.Millisecond) // polling with a deadline
	}
	ret, _ := n.Do(t, "GET", "/status", nil).Obj(t)["retention"].(map[string]any)
	if ret["enabled"] != true || ret["deleted_completed"] != 3.0 || ret["runs"].(float64) < 1 {
		t.Fatalf("/status retention = %v", ret)
	}
}
