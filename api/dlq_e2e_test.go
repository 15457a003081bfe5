package api_test

// Real node, real PostgreSQL: retrying and dropping a dead letter
// (docs/api.md, "Retry or drop a dead letter").

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"

	"queen-node/broker"
	"queen-node/internal/nodetest"
	"queen-node/protocol"
	"queen-node/retention"
)

// configure creates queue q with options.
func (c rc) configure(q string, options msg) {
	c.t.Helper()
	c.ok(200, "POST", "/api/v1/configure", msg{"queue": q, "options": options})
}

// deadLetter pops the next message of the partition for group and fails
// it; the queue has retryLimit 0, so it is dead-lettered. It returns the
// message's transaction id.
func (c rc) deadLetter(q, p, group, pid string) string {
	c.t.Helper()
	got, lease := c.pop(q, p, group, 1)
	if len(got) != 1 {
		c.t.Fatalf("pop %s for %s: %v", q, group, got)
	}
	var res []msg
	ack := msg{"transactionId": got[0], "partitionId": pid, "status": "failed", "leaseId": lease, "error": "boom"}
	if group != "" {
		ack["consumerGroup"] = group
	}
	c.ok(200, "POST", "/api/v1/ack/batch", msg{"acknowledgments": []msg{ack}}).JSON(c.t, &res)
	if len(res) != 1 || res[0]["success"] != true || res[0]["dlq"] != true {
		c.t.Fatalf("failed ack of %s was not dead-lettered: %v", got[0], res)
	}
	return got[0]
}

// ackAs acks txids completed for group under lease.
func (c rc) ackAs(group, pid, lease string, txids ...string) {
	c.t.Helper()
	acks := make([]msg, len(txids))
	for i, tx := range txids {
		acks[i] = msg{"transactionId": tx, "partitionId": pid, "status": "completed", "leaseId": lease, "consumerGroup": group}
	}
	var res []msg
	c.ok(200, "POST", "/api/v1/ack/batch", msg{"acknowledgments": acks}).JSON(c.t, &res)
	for _, it := range res {
		if it["success"] != true {
			c.t.Fatalf("ack %v for %s: %v", txids, group, res)
		}
	}
}

// dlq lists the queue's dead letters: their "group/transactionId" and the total.
func (c rc) dlq(q string) ([]string, int) {
	c.t.Helper()
	body := c.ok(200, "GET", "/api/v1/dlq?queue="+url.QueryEscape(q), nil).Obj(c.t)
	var out []string
	for _, m := range body["messages"].([]any) {
		mm := m.(msg)
		out = append(out, mm["consumerGroup"].(string)+"/"+mm["transactionId"].(string))
	}
	return out, int(body["total"].(float64))
}

// dlqPath is the drop path of a dead letter, retryPath its retry path.
func dlqPath(pid, txid, group string) string {
	return "/api/v1/dlq/" + pid + "/" + url.PathEscape(txid) + "?consumerGroup=" + url.QueryEscape(group)
}

func retryPath(pid, txid, group string) string {
	return "/api/v1/dlq/" + pid + "/" + url.PathEscape(txid) + "/retry?consumerGroup=" + url.QueryEscape(group)
}

// popFull pops one message of the partition for group and returns it whole.
func (c rc) popFull(q, p, group string) msg {
	c.t.Helper()
	r := c.do("GET", fmt.Sprintf("/api/v1/pop/queue/%s/partition/%s?wait=false&batch=10&consumerGroup=%s", q, p, group), nil)
	if r.Status == 204 {
		return nil
	}
	ms := r.Obj(c.t)["messages"].([]any)
	if r.Status != 200 || len(ms) != 1 {
		c.t.Fatalf("pop for %s: %d %s", group, r.Status, r.Body)
	}
	return ms[0].(msg)
}

// groupLag returns the group's offsetLag on its only partition of q.
func (c rc) groupLag(group, q string) float64 {
	c.t.Helper()
	g := c.ok(200, "GET", "/api/v1/consumer-groups/"+group, nil).Obj(c.t)
	parts := g[q].(msg)["partitions"].([]any)
	return num(c.t, parts[0].(msg), "offsetLag")
}

// TestDLQRetryDeliversToGroupOnly: a retry appends a copy that only the
// group of the entry gets: a group that consumed the partition (cursor at
// the end) and one still holding an open lease (the copy joins its acked
// set) never see it, and their lag does not move.
func TestDLQRetryDeliversToGroupOnly(t *testing.T) {
	c := rc{t: t, n: nodetest.Start(t)}
	c.configure("r", msg{"retryLimit": 0})
	pid := c.push("r", "p", "m1", "m2")

	// g: m1 dead-lettered, m2 completed. done: both completed. open: m1
	// leased and not acked yet.
	if tx := c.deadLetter("r", "p", "g", pid); tx != "m1" {
		t.Fatalf("dead-lettered %s", tx)
	}
	got, lease := c.pop("r", "p", "g", 1)
	c.ackAs("g", pid, lease, got...)
	got, lease = c.pop("r", "p", "done", 10)
	c.ackAs("done", pid, lease, got...)
	openGot, openLease := c.pop("r", "p", "open", 1)
	if len(openGot) != 1 {
		t.Fatalf("open pop: %v", openGot)
	}
	lagDone, lagOpen := c.groupLag("done", "r"), c.groupLag("open", "r")

	if l, total := c.dlq("r"); total != 1 || l[0] != "g/m1" {
		t.Fatalf("dlq before: %v %d", l, total)
	}
	r := c.ok(200, "POST", retryPath(pid, "m1", "g"), nil).Obj(t)
	copyTx, _ := r["retryTransactionId"].(string)
	if r["success"] != true || !strings.HasPrefix(copyTx, "m1"+protocol.DLQRetrySep) || r["queue"] != "r" || r["partition"] != "p" {
		t.Fatalf("retry: %v", r)
	}
	if l, total := c.dlq("r"); total != 0 {
		t.Fatalf("dlq after the retry: %v %d", l, total)
	}
	// a double click makes one copy
	c.ok(404, "POST", retryPath(pid, "m1", "g"), nil)

	if m := c.popFull("r", "p", "done"); m != nil {
		t.Fatalf("group done got %v", m)
	}
	if l := c.groupLag("done", "r"); l != lagDone {
		t.Fatalf("done's lag %v -> %v", lagDone, l)
	}
	if l := c.groupLag("open", "r"); l != lagOpen {
		t.Fatalf("open's lag %v -> %v", lagOpen, l)
	}
	// open finishes its batch and m2: nothing else comes
	c.ackAs("open", pid, openLease, openGot...)
	got, lease = c.pop("r", "p", "open", 10)
	if strings.Join(got, ",") != "m2" {
		t.Fatalf("open's next pop: %v", got)
	}
	c.ackAs("open", pid, lease, got...)
	if m := c.popFull("r", "p", "open"); m != nil {
		t.Fatalf("group open got %v", m)
	}

	m := c.popFull("r", "p", "g")
	if m == nil || m["transactionId"] != copyTx || fmt.Sprint(m["data"]) != fmt.Sprint(msg{"tx": "m1"}) {
		t.Fatalf("g's pop after the retry: %v", m)
	}
	c.ackAs("g", pid, m["leaseId"].(string), copyTx)
	if m := c.popFull("r", "p", "g"); m != nil {
		t.Fatalf("g got a second delivery: %v", m)
	}
	if l := c.groupLag("g", "r"); l != 0 {
		t.Fatalf("g's lag after acking the copy: %v", l)
	}
}

// TestDLQRetryAfterRetention: the entry keeps its own copy of the payload,
// so a retry still works once retention deleted the original.
func TestDLQRetryAfterRetention(t *testing.T) {
	n := nodetest.Start(t)
	c := rc{t: t, n: n}
	c.configure("ret", msg{"retryLimit": 0, "dedupWindowSeconds": 0}) // completed messages go at the next pass
	pid := c.push("ret", "p", "gone")
	c.deadLetter("ret", "p", "", pid)
	job, err := retention.New(n.Broker.Store(), retention.DefaultConfig(), hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for c.do("GET", "/api/v1/messages/"+pid+"/gone", nil).Status != 404 {
		if time.Now().After(deadline) {
			t.Fatal("retention never deleted the original")
		}
		if _, err := job.RunOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	c.ok(200, "POST", retryPath(pid, "gone", protocol.QueueMode), nil)
	m := c.popFull("ret", "p", "")
	if m == nil || fmt.Sprint(m["data"]) != fmt.Sprint(msg{"tx": "gone"}) {
		t.Fatalf("pop after the retry: %v", m)
	}
	// The copy, once completed, goes at a pass like any message, and its
	// record in queen.dlq_copies with it.
	c.ackAs(protocol.QueueMode, pid, m["leaseId"].(string), m["transactionId"].(string))
	db, err := pgx.Connect(context.Background(), n.DBURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	copies := func() (k int) {
		if err := db.QueryRow(context.Background(), `SELECT count(*) FROM queen.dlq_copies WHERE partition_id = $1`, pid).Scan(&k); err != nil {
			t.Fatal(err)
		}
		return k
	}
	if k := copies(); k != 1 {
		t.Fatalf("the retry recorded %d copies", k)
	}
	deadline = time.Now().Add(10 * time.Second)
	for copies() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("retention never deleted the copy's record")
		}
		if _, err := job.RunOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDLQDrop: a drop removes the entry (and the group's superseded entries
// of the same message) from the list; other entries stay.
func TestDLQDrop(t *testing.T) {
	c := rc{t: t, n: nodetest.Start(t)}
	c.configure("d", msg{"retryLimit": 0})
	pid := c.push("d", "p", "a", "b")
	c.deadLetter("d", "p", "g", pid)
	// a seek back supersedes a's entry; a is dead-lettered again
	c.ok(200, "POST", "/api/v1/consumer-groups/g/queues/d/seek", msg{"timestamp": "2000-01-01T00:00:00Z"})
	c.deadLetter("d", "p", "g", pid)
	c.deadLetter("d", "p", "g", pid) // b
	if l, total := c.dlq("d"); total != 3 {
		t.Fatalf("dlq: %v", l)
	}
	r := c.ok(200, "DELETE", dlqPath(pid, "a", "g"), nil).Obj(t)
	if r["success"] != true || r["dropped"] != 2.0 {
		t.Fatalf("drop: %v", r)
	}
	if l, total := c.dlq("d"); total != 1 || l[0] != "g/b" {
		t.Fatalf("dlq after the drop: %v %d", l, total)
	}
	c.ok(404, "DELETE", dlqPath(pid, "a", "g"), nil)
	c.ok(404, "POST", retryPath(pid, "a", "g"), nil)
	// nothing was redelivered: g's cursor is past both
	if m := c.popFull("d", "p", "g"); m != nil {
		t.Fatalf("pop after the drop: %v", m)
	}
}

// TestDLQActionsErrorsAndRoles: bad input is a 400, an unknown or other
// tenant's entry a 404, both actions need admin; the reference's
// unimplemented message routes still answer 404.
func TestDLQActionsErrorsAndRoles(t *testing.T) {
	n, tok := startJWT(t, "dlq-secret-0123456789")
	acme := rc{t: t, n: n, auth: tok("acme", "admin")}
	acme.configure("e", msg{"retryLimit": 0})
	pid := acme.push("e", "p", "x")
	acme.deadLetter("e", "p", "g", pid)
	for _, method := range []string{"POST", "DELETE"} {
		at := dlqPath // path of a (partition, transaction id, group) for this method
		if method == "POST" {
			at = retryPath
		}
		p := at(pid, "x", "g")
		rc{t: t, n: n}.ok(401, method, p, nil)
		rc{t: t, n: n, auth: tok("acme", "read-write")}.ok(403, method, p, nil)
		// another tenant with the admin role: not found
		if r := (rc{t: t, n: n, auth: tok("globex", "admin")}).do(method, p, nil); r.Status != 404 || r.Obj(t)["error"] != "Dead letter not found" {
			t.Fatalf("globex %s %s: %d %s", method, p, r.Status, r.Body)
		}
		for _, bad := range []string{
			at("not-a-uuid", "x", "g"),
			strings.TrimSuffix(at(pid, "x", ""), "?consumerGroup="), // no group
			at(pid, "x", ""),
			at(pid, "x", strings.Repeat("g", broker.MaxNameBytes+1)),
			at(pid, strings.Repeat("x", broker.MaxNameBytes+1), "g"),
		} {
			r := acme.do(method, bad, nil)
			if r.Status != 400 || r.Obj(t)["error"] == nil {
				t.Fatalf("%s %s: %d %s, want 400 with an error", method, bad, r.Status, r.Body)
			}
		}
		for _, missing := range []string{
			at(pid, "y", "g"),     // no such message
			at(pid, "x", "other"), // not dead-lettered by that group
			at("00000000-0000-0000-0000-000000000000", "x", "g"), // no such partition
		} {
			if r := acme.do(method, missing, nil); r.Status != 404 || r.Obj(t)["error"] != "Dead letter not found" {
				t.Fatalf("%s %s: %d %s", method, missing, r.Status, r.Body)
			}
		}
	}
	// the reference's routes stay unimplemented (docs/api.md, "Not implemented")
	acme.ok(404, "POST", "/api/v1/messages/"+pid+"/x/retry", nil)
	acme.ok(404, "POST", "/api/v1/messages/"+pid+"/x/dlq", nil)
	// the entry survived all of that; admin retries it
	if _, total := acme.dlq("e"); total != 1 {
		t.Fatalf("dlq: %d", total)
	}
	acme.ok(200, "POST", retryPath(pid, "x", "g"), nil)
}

// TestDLQRetryConcurrent: retries of one entry racing from several
// goroutines make exactly one copy.
func TestDLQRetryConcurrent(t *testing.T) {
	c := rc{t: t, n: nodetest.Start(t)}
	c.configure("cc", msg{"retryLimit": 0})
	const entries, racers = 5, 4
	txs := make([]string, entries)
	for i := range txs {
		txs[i] = fmt.Sprintf("c%d", i)
	}
	pid := c.push("cc", "p", txs...)
	for range txs {
		c.deadLetter("cc", "p", "g", pid)
	}
	for _, tx := range txs {
		var wg sync.WaitGroup
		codes := make(chan int, racers)
		for range racers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				codes <- c.n.Do(t, "POST", retryPath(pid, tx, "g"), nil).Status
			}()
		}
		wg.Wait()
		close(codes)
		ok := 0
		for code := range codes {
			switch code {
			case 200:
				ok++
			case 404:
			default:
				t.Fatalf("retry of %s answered %d", tx, code)
			}
		}
		if ok != 1 {
			t.Fatalf("retry of %s: %d successes of %d", tx, ok, racers)
		}
	}
	// one copy of each, nothing more
	got := map[string]int{}
	for {
		ms, lease := c.pop("cc", "p", "g", 100)
		if len(ms) == 0 {
			break
		}
		for _, tx := range ms {
			got[strings.SplitN(tx, protocol.DLQRetrySep, 2)[0]]++
		}
		c.ackAs("g", pid, lease, ms...)
	}
	for _, tx := range txs {
		if got[tx] != 1 {
			t.Fatalf("copies delivered: %v", got)
		}
	}
	if len(got) != entries {
		t.Fatalf("copies delivered: %v", got)
	}
}

// TestDLQRetryWakesParkedPopOnAnotherNode: the retry is announced like a
// push (mesh hint), so a long-poll of the group parked on another node gets
// the copy well before its own re-poll.
func TestDLQRetryWakesParkedPopOnAnotherNode(t *testing.T) {
	nodes := nodetest.StartCluster(t, 2, func(bc *broker.Config) {
		bc.Hotlist.ReseedInterval = time.Hour // the reseed floor must not be what delivers
		bc.PopBackoffMin, bc.PopBackoffMax = 10*time.Second, 10*time.Second
	})
	a, b := rc{t: t, n: nodes[0]}, rc{t: t, n: nodes[1]}
	a.configure("xw", msg{"retryLimit": 0})
	pid := a.push("xw", "p", "w1")
	b.deadLetter("xw", "p", "g", pid)
	if m := b.popFull("xw", "p", "g"); m != nil { // B's ring for g is warm and empty
		t.Fatalf("pop: %v", m)
	}
	// Plain net/http: the nodetest helpers may t.Fatal, which only the
	// test goroutine may call.
	done := make(chan nodetest.Response, 1)
	go func() {
		r, err := http.Get(b.n.URL + "/api/v1/pop/queue/xw/partition/p?wait=true&timeout=9000&consumerGroup=g")
		if err != nil {
			done <- nodetest.Response{Body: []byte(err.Error())}
			return
		}
		defer r.Body.Close()
		body, _ := io.ReadAll(r.Body)
		done <- nodetest.Response{Status: r.StatusCode, Body: body}
	}()
	deadline := time.Now().Add(5 * time.Second)
	for b.n.Broker.Parked() < 1 {
		if time.Now().After(deadline) {
			t.Fatal("the pop never parked")
		}
		time.Sleep(5 * time.Millisecond)
	}
	retried := time.Now()
	a.ok(200, "POST", retryPath(pid, "w1", "g"), nil)
	select {
	case r := <-done:
		if r.Status != 200 || !strings.Contains(string(r.Body), `"transactionId":"w1`+protocol.DLQRetrySep) {
			t.Fatalf("parked pop: %d %s", r.Status, r.Body)
		}
		if d := time.Since(retried); d > 3*time.Second {
			t.Fatalf("the parked pop answered %v after the retry: not woken", d)
		}
	case <-time.After(12 * time.Second):
		t.Fatal("the parked pop never answered")
	}
}

// TestDLQRetryTxIDTaken: when a client already pushed the copy's
// transaction id to the partition, the retry changes nothing and answers
// 409. Entries are numbered from 1 in a fresh database, so the first
// entry's copy would be "z~retry-1".
func TestDLQRetryTxIDTaken(t *testing.T) {
	c := rc{t: t, n: nodetest.Start(t)}
	c.configure("tk", msg{"retryLimit": 0})
	pid := c.push("tk", "p", "z", "z"+protocol.DLQRetrySep+"1")
	c.deadLetter("tk", "p", "g", pid)
	r := c.do("POST", retryPath(pid, "z", "g"), nil)
	if r.Status != 409 || r.Obj(t)["error"] == nil {
		t.Fatalf("retry: %d %s", r.Status, r.Body)
	}
	if l, total := c.dlq("tk"); total != 1 || l[0] != "g/z" {
		t.Fatalf("dlq after the refused retry: %v %d", l, total)
	}
	// nothing new for g: its next message is the one pushed by the client
	got, _ := c.pop("tk", "p", "g", 10)
	if strings.Join(got, ",") != "z"+protocol.DLQRetrySep+"1" {
		t.Fatalf("g's pop: %v", got)
	}
}

// TestDLQRetryLongTxID: a copy's transaction id stays within the 255-byte
// bound, so its consumer can ack it.
func TestDLQRetryLongTxID(t *testing.T) {
	c := rc{t: t, n: nodetest.Start(t)}
	c.configure("long", msg{"retryLimit": 0})
	long := strings.Repeat("é", 125) // 250 bytes
	pid := c.push("long", "p", long)
	c.deadLetter("long", "p", "g", pid)
	copyTx := c.ok(200, "POST", retryPath(pid, long, "g"), nil).Obj(t)["retryTransactionId"].(string)
	if len(copyTx) > broker.MaxNameBytes || !strings.Contains(copyTx, protocol.DLQRetrySep) {
		t.Fatalf("copy's transaction id %q (%d bytes)", copyTx, len(copyTx))
	}
	got, lease := c.pop("long", "p", "g", 10)
	if len(got) != 1 || got[0] != copyTx {
		t.Fatalf("g's pop: %v", got)
	}
	c.ackAs("g", pid, lease, copyTx)
}

// TestDLQRetryRefusedDuringPushMaintenance: a retry commits its copy with
// the entry's delete, so it cannot be buffered; while pushes are buffered it
// is refused (503, entry kept), as a transaction with pushes is, and works
// once maintenance is off.
func TestDLQRetryRefusedDuringPushMaintenance(t *testing.T) {
	c := rc{t: t, n: nodetest.Start(t)}
	c.configure("dm", msg{"retryLimit": 0})
	pid := c.push("dm", "p", "a")
	c.deadLetter("dm", "p", "g", pid)
	c.ok(200, "POST", "/api/v1/system/maintenance", msg{"enabled": true})
	r := c.do("POST", retryPath(pid, "a", "g"), nil)
	if r.Status != 503 || !strings.Contains(string(r.Body), "maintenance") {
		t.Fatalf("retry during push maintenance: %d %s", r.Status, r.Body)
	}
	if l, total := c.dlq("dm"); total != 1 {
		t.Fatalf("the refused retry changed the DLQ: %v", l)
	}
	c.ok(200, "POST", "/api/v1/system/maintenance", msg{"enabled": false})
	c.ok(200, "POST", retryPath(pid, "a", "g"), nil)
	if m := c.popFull("dm", "p", "g"); m == nil {
		t.Fatal("the copy was not delivered after maintenance ended")
	}
}

// TestDLQCopySkippedByCursorAnAckCreates: an ack can create a group's cursor
// on a partition (a group acking before it ever popped there); that cursor
// too counts another group's retried copy as resolved (30_ack.sql,
// queen.dlq_copies_past), so the group's later pops serve the original
// only.
func TestDLQCopySkippedByCursorAnAckCreates(t *testing.T) {
	c := rc{t: t, n: nodetest.Start(t)}
	c.configure("ac", msg{"retryLimit": 0})
	pid := c.push("ac", "p", "m1")
	c.deadLetter("ac", "p", "g", pid)
	c.ok(200, "POST", retryPath(pid, "m1", "g"), nil)
	// h's first touch of p is an ack (of a message it never leased).
	var res []msg
	c.ok(200, "POST", "/api/v1/ack/batch", msg{"acknowledgments": []msg{{"transactionId": "m1", "partitionId": pid,
		"status": "completed", "leaseId": "no-such-lease", "consumerGroup": "h"}}}).JSON(t, &res)
	var got []string
	for {
		m := c.popFull("ac", "p", "h")
		if m == nil {
			break
		}
		got = append(got, m["transactionId"].(string))
		c.ackAs("h", pid, m["leaseId"].(string), m["transactionId"].(string))
	}
	if strings.Join(got, ",") != "m1" {
		t.Fatalf("group h was served %v, want the original m1 only (not g's copy)", got)
	}
}
