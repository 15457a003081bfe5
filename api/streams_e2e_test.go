package api_test

// /streams/v1 through real HTTP and PostgreSQL (docs/api.md, "Streams"):
// each endpoint's answers and errors, and each decision of that section.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"queen-node/broker"
	"queen-node/internal/nodetest"
	"queen-node/node"
)

type popped struct {
	TransactionID string          `json:"transactionId"`
	PartitionID   string          `json:"partitionId"`
	LeaseID       string          `json:"leaseId"`
	Data          json.RawMessage `json:"data"`
}

func streamPush(t *testing.T, n *nodetest.Node, queue, partition string, count int, from int) {
	t.Helper()
	var items []msg
	for i := range count {
		items = append(items, msg{"queue": queue, "partition": partition, "payload": msg{"i": from + i}})
	}
	if r := n.Do(t, "POST", "/api/v1/push", msg{"items": items}); r.Status != 201 {
		t.Fatalf("push: %d %s", r.Status, r.Body)
	}
}

// streamPop pops queue with group (no wait) and returns the messages (nil on 204).
func streamPop(t *testing.T, n *nodetest.Node, queue, group string, batch int) []popped {
	t.Helper()
	r := n.Do(t, "GET", fmt.Sprintf("/api/v1/pop/queue/%s?batch=%d&partitions=10&wait=false&consumerGroup=%s", url.PathEscape(queue), batch, group), nil)
	if r.Status == 204 {
		return nil
	}
	if r.Status != 200 {
		t.Fatalf("pop %s: %d %s", queue, r.Status, r.Body)
	}
	var out struct{ Messages []popped }
	r.JSON(t, &out)
	return out.Messages
}

func register(t *testing.T, n *nodetest.Node, auth string, body msg) (int, msg) {
	t.Helper()
	r := n.DoAuth(t, auth, "POST", "/streams/v1/queries", body)
	return r.Status, r.Obj(t)
}

type stateRow struct {
	Key   string          `json:"key"`
	Value json.RawMessage `json:"value"`
}

func stateGet(t *testing.T, n *nodetest.Node, auth string, body msg) (int, []stateRow) {
	t.Helper()
	r := n.DoAuth(t, auth, "POST", "/streams/v1/state/get", body)
	if r.Status != 200 {
		return r.Status, nil
	}
	var out struct {
		Success bool
		Rows    []stateRow
	}
	r.JSON(t, &out)
	if !out.Success || out.Rows == nil {
		t.Fatalf("state/get: %s", r.Body)
	}
	sort.Slice(out.Rows, func(i, j int) bool { return out.Rows[i].Key < out.Rows[j].Key })
	return r.Status, out.Rows
}

func cycle(t *testing.T, n *nodetest.Node, auth string, body msg) (int, msg) {
	t.Helper()
	for _, k := range []string{"state_ops", "push_items"} {
		if _, ok := body[k]; !ok {
			body[k] = []any{}
		}
	}
	if _, ok := body["release_lease"]; !ok {
		body["release_lease"] = true
	}
	r := n.DoAuth(t, auth, "POST", "/streams/v1/cycle", body)
	return r.Status, r.Obj(t)
}

func keysOf(rows []stateRow) string {
	var ks []string
	for _, r := range rows {
		ks = append(ks, r.Key)
	}
	return strings.Join(ks, ",")
}

// Registration: fresh, idempotent by name, 409 on a hash mismatch, reset
// with the same hash keeps the state, reset with a new hash wipes every
// partition's, and the query_id survives a node restart.
func TestStreamsRegisterResetRestart(t *testing.T) {
	n := nodetest.Start(t)
	streamPush(t, n, "reg.src", "p1", 1, 0)
	streamPush(t, n, "reg.src", "p2", 1, 0)
	pids := map[string]bool{}
	for _, m := range streamPop(t, n, "reg.src", "peek", 10) {
		pids[m.PartitionID] = true
	}
	if len(pids) != 2 {
		t.Fatalf("partitions: %v", pids)
	}
	st, out := register(t, n, "", msg{"name": "q", "source_queue": "reg.src", "sink_queue": "reg.out", "config_hash": "h1", "reset": false})
	qid, _ := out["query_id"].(string)
	if st != 200 || qid == "" || out["success"] != true || out["fresh"] != true || out["reset"] != false || out["name"] != "q" {
		t.Fatalf("fresh registration: %d %v", st, out)
	}
	writeState := func() {
		for pid := range pids {
			if st, out := cycle(t, n, "", msg{"query_id": qid, "partition_id": pid, "consumer_group": "streams.q", "ack": nil,
				"state_ops": []msg{{"type": "upsert", "key": "k", "value": msg{"v": 1}}}}); st != 200 || out["success"] != true {
				t.Fatalf("cycle: %d %v", st, out)
			}
		}
	}
	stateCount := func() int {
		total := 0
		for pid := range pids {
			_, rows := stateGet(t, n, "", msg{"query_id": qid, "partition_id": pid, "keys": nil})
			total += len(rows)
		}
		return total
	}
	writeState()

	st, out = register(t, n, "", msg{"name": "q", "source_queue": "reg.src", "sink_queue": "reg.out", "config_hash": "h1", "reset": false})
	if st != 200 || out["query_id"] != qid || out["fresh"] != false || out["reset"] != false {
		t.Fatalf("same hash: %d %v", st, out)
	}
	st, out = register(t, n, "", msg{"name": "q", "source_queue": "reg.src", "config_hash": "h2", "reset": false})
	if e, _ := out["error"].(string); st != 409 || out["success"] != false || !strings.Contains(e, "reset") {
		t.Fatalf("hash mismatch: %d %v", st, out)
	}
	// Decision: reset with the same hash is not a reset.
	st, out = register(t, n, "", msg{"name": "q", "source_queue": "reg.src", "config_hash": "h1", "reset": true})
	if st != 200 || out["query_id"] != qid || out["reset"] != false || stateCount() != 2 {
		t.Fatalf("reset with the same hash: %d %v, %d state rows", st, out, stateCount())
	}
	// Decision: reset does not rewind the group's cursor. Consume one
	// message with the query's group, reset, and the next pop is empty.
	if ms := streamPop(t, n, "reg.src", "streams.q", 10); len(ms) != 2 {
		t.Fatalf("group pop: %d messages", len(ms))
	} else if r := n.Do(t, "POST", "/api/v1/ack/batch", msg{"acknowledgments": []msg{
		{"transactionId": ms[0].TransactionID, "partitionId": ms[0].PartitionID, "leaseId": ms[0].LeaseID, "status": "completed", "consumerGroup": "streams.q"},
		{"transactionId": ms[1].TransactionID, "partitionId": ms[1].PartitionID, "leaseId": ms[1].LeaseID, "status": "completed", "consumerGroup": "streams.q"},
	}}); r.Status != 200 {
		t.Fatalf("ack: %d %s", r.Status, r.Body)
	}
	st, out = register(t, n, "", msg{"name": "q", "source_queue": "reg.src", "config_hash": "h2", "reset": true})
	if st != 200 || out["query_id"] != qid || out["reset"] != true || out["fresh"] != false {
		t.Fatalf("reset: %d %v", st, out)
	}
	if c := stateCount(); c != 0 {
		t.Fatalf("%d state rows left after reset", c)
	}
	if ms := streamPop(t, n, "reg.src", "streams.q", 10); len(ms) != 0 {
		t.Fatalf("reset rewound the cursor: %d messages", len(ms))
	}
	writeState()

	// A node restart on the same database: same query_id, state kept.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.Node.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	n = nodetest.StartOn(t, n.DBURL)
	st, out = register(t, n, "", msg{"name": "q", "source_queue": "reg.src", "config_hash": "h2", "reset": false})
	if st != 200 || out["query_id"] != qid || out["fresh"] != false || stateCount() != 2 {
		t.Fatalf("after restart: %d %v, %d state rows", st, out, stateCount())
	}
}

// State store: keys byte-exact (U+001F, LIKE metacharacters), values
// returned as stored (epoch-ms and long numbers exact), filters null, [],
// exact keys, literal prefix, ripe, and their AND.
func TestStreamsStateStoreFilters(t *testing.T) {
	n := nodetest.Start(t)
	streamPush(t, n, "st.src", "p", 1, 0)
	pid := streamPop(t, n, "st.src", "peek", 1)[0].PartitionID
	_, out := register(t, n, "", msg{"name": "st", "source_queue": "st.src", "config_hash": "h", "reset": true})
	qid := out["query_id"].(string)
	const us = "\u001f"
	vals := map[string]string{
		"tumb" + us + "2024-05-29T16:26:40.000Z" + us + "eu": `{"acc":{"sum":1.50},"windowStart":1717000000000,"windowEnd":1717000002000}`,
		"tumb" + us + "2024-05-29T16:26:42.000Z" + us + "eu": `{"acc":{"sum":2},"windowStart":1717000002000,"windowEnd":1717000004000}`,
		"tumb" + us + "2024-05-29T16:26:42.000Z" + us + "€":  `{"windowEnd":"1717000000000"}`,
		"sess:5000" + us + "open" + us + "u1":                `{"acc":[],"sessionStart":1717000000001,"lastEventTime":12345678901234567890}`,
		"__wm__":                                             `{"eventTimeMs":1717000000000}`,
		"a%b_c":                                              `"x"`,
		"abc":                                                `[1,2]`,
		"nothing":                                            `null`,
		"nul":                                                `{"s":"a\u0000b","windowEnd":1}`, // a NUL escape must not break the ripe filter
	}
	const noValue = "no-value" // Decision: an upsert without value stores JSON null
	var ops []msg
	for k, v := range vals {
		ops = append(ops, msg{"type": "upsert", "key": k, "value": json.RawMessage(v)})
	}
	// the last op on a key wins: upsert then delete then upsert
	ops = append(ops, msg{"type": "upsert", "key": noValue}, msg{"type": "upsert", "key": "gone", "value": 1}, msg{"type": "delete", "key": "gone"},
		msg{"type": "delete", "key": "never-there"})
	if st, out := cycle(t, n, "", msg{"query_id": qid, "partition_id": pid, "consumer_group": "streams.st", "ack": nil, "state_ops": ops}); st != 200 {
		t.Fatalf("cycle: %d %v", st, out)
	}
	base := func(extra msg) msg {
		b := msg{"query_id": qid, "partition_id": pid}
		for k, v := range extra {
			b[k] = v
		}
		return b
	}
	vals[noValue] = `null`
	for _, keys := range []any{nil, []string{}} {
		_, rows := stateGet(t, n, "", base(msg{"keys": keys}))
		if len(rows) != len(vals) {
			t.Fatalf("keys %v: %d rows (%s), want %d", keys, len(rows), keysOf(rows), len(vals))
		}
		for _, r := range rows {
			if string(r.Value) != vals[r.Key] {
				t.Fatalf("key %q: value %s, want %s", r.Key, r.Value, vals[r.Key])
			}
		}
	}
	check := func(name string, filter msg, want ...string) {
		t.Helper()
		st, rows := stateGet(t, n, "", base(filter))
		sort.Strings(want)
		if st != 200 || keysOf(rows) != strings.Join(want, ",") {
			t.Fatalf("%s: %d %q, want %q", name, st, keysOf(rows), strings.Join(want, ","))
		}
	}
	w1, w2, w3 := "tumb"+us+"2024-05-29T16:26:40.000Z"+us+"eu", "tumb"+us+"2024-05-29T16:26:42.000Z"+us+"eu", "tumb"+us+"2024-05-29T16:26:42.000Z"+us+"€"
	check("prefix", msg{"keys": []string{}, "key_prefix": "tumb" + us + "2024-05-29T16:26:42"}, w2, w3)
	check("literal prefix", msg{"key_prefix": "a%"}, "a%b_c")
	check("literal prefix _", msg{"key_prefix": "a_"})
	check("ripe", msg{"ripe_at_or_before": 1717000002000}, w1, "nul")
	check("ripe later", msg{"ripe_at_or_before": 1717000004000}, w1, w2, "nul")
	check("ripe early", msg{"ripe_at_or_before": 0})
	check("ripe and prefix", msg{"key_prefix": "tumb" + us + "2024-05-29T16:26:42", "ripe_at_or_before": 1717000004000}, w2)
	check("exact keys", msg{"keys": []string{"__wm__", "abc", "missing"}}, "__wm__", "abc")
	// another partition of the source has its own (empty) state
	streamPush(t, n, "st.src", "other", 1, 0)
	var other string
	for _, m := range streamPop(t, n, "st.src", "peek", 10) {
		other = m.PartitionID
	}
	if st, rows := stateGet(t, n, "", msg{"query_id": qid, "partition_id": other}); st != 200 || len(rows) != 0 {
		t.Fatalf("other partition: %d %v", st, rows)
	}
	// Decision: an unknown query, or a partition outside its source queue, is 404.
	streamPush(t, n, "elsewhere", "p", 1, 0)
	foreign := streamPop(t, n, "elsewhere", "peek", 1)[0].PartitionID
	for _, b := range []msg{
		{"query_id": "6f1c2d4e-0000-4000-8000-000000000000", "partition_id": pid},
		{"query_id": qid, "partition_id": foreign},
	} {
		if st, _ := stateGet(t, n, "", b); st != 404 {
			t.Fatalf("%v: %d, want 404", b, st)
		}
		b["consumer_group"] = "g"
		if st, out := cycle(t, n, "", b); st != 404 || out["error"] == nil {
			t.Fatalf("cycle %v: %d %v, want 404", b, st, out)
		}
	}
}

// The cycle's ack: a stale lease, an unknown op, an already-acked
// transactionId each apply nothing; a partial ack passes exactly count
// messages and keeps the lease, the tail comes back after expiry in order;
// a releasing ack passes the whole batch and frees the partition at once;
// an ack-less cycle touches no cursor.
func TestStreamsCycleAck(t *testing.T) {
	n := nodetest.Start(t)
	// retryLimit 0 with the DLQ on: were a lease expiry counted as a
	// failed delivery, the redelivered tail below would be dead-lettered.
	if r := n.Do(t, "POST", "/api/v1/configure", msg{"queue": "cy.src", "options": msg{"leaseTime": 1,
		"retryLimit": 0, "deadLetterQueue": true, "dlqAfterMaxRetries": true}}); r.Status != 200 {
		t.Fatalf("configure: %d %s", r.Status, r.Body)
	}
	streamPush(t, n, "cy.src", "p", 5, 1)
	_, out := register(t, n, "", msg{"name": "cy", "source_queue": "cy.src", "sink_queue": "cy.out", "config_hash": "h"})
	qid := out["query_id"].(string)
	const g = "streams.cy"
	batch := streamPop(t, n, "cy.src", g, 5)
	if len(batch) != 5 {
		t.Fatalf("pop: %d", len(batch))
	}
	pid, lease := batch[0].PartitionID, batch[0].LeaseID
	sinkCount := func() int {
		// a fresh group each time: everything the sink holds
		grp := fmt.Sprintf("sink-%d", time.Now().UnixNano())
		total := 0
		for {
			r := n.Do(t, "GET", "/api/v1/pop/queue/cy.out?batch=100&wait=false&autoAck=true&consumerGroup="+grp, nil)
			if r.Status == 204 {
				return total
			}
			var o struct{ Messages []popped }
			r.JSON(t, &o)
			total += len(o.Messages)
		}
	}
	stateKeys := func() string {
		_, rows := stateGet(t, n, "", msg{"query_id": qid, "partition_id": pid})
		return keysOf(rows)
	}
	body := func(ack msg, release bool, key string) msg {
		return msg{"query_id": qid, "partition_id": pid, "consumer_group": g, "ack": ack, "release_lease": release,
			"state_ops":  []msg{{"type": "upsert", "key": key, "value": msg{"n": 1}}},
			"push_items": []msg{{"queue": "cy.out", "payload": msg{"k": key}}}}
	}
	ack := func(i, count int, leaseID string) msg {
		return msg{"transactionId": batch[i].TransactionID, "leaseId": leaseID, "status": "completed", "count": count}
	}

	// stale lease: nothing applied, 409 success:false
	if st, out := cycle(t, n, "", body(ack(1, 2, "not-the-lease"), false, "stale")); st != 409 || out["success"] != false {
		t.Fatalf("stale lease: %d %v", st, out)
	}
	// an unknown op after a valid one: 400, nothing applied
	b := body(ack(1, 2, lease), false, "bad")
	b["state_ops"] = []msg{{"type": "upsert", "key": "bad", "value": 1}, {"type": "increment", "key": "bad"}}
	if st, out := cycle(t, n, "", b); st != 400 || out["error"] == nil {
		t.Fatalf("unknown op: %d %v", st, out)
	}
	if k, c := stateKeys(), sinkCount(); k != "" || c != 0 {
		t.Fatalf("refused cycles applied something: state %q, sink %d", k, c)
	}
	// partial ack of 2: applied, lease kept
	if st, out := cycle(t, n, "", body(ack(1, 2, lease), false, "partial")); st != 200 || out["success"] != true || out["acked"] != 2.0 {
		t.Fatalf("partial ack: %d %v", st, out)
	}
	if ms := streamPop(t, n, "cy.src", g, 5); len(ms) != 0 {
		t.Fatalf("lease not kept: popped %d", len(ms))
	}
	// Decision: the same partial ack again (a retry whose answer was lost)
	// names an acked message: refused, nothing applied.
	if st, out := cycle(t, n, "", body(ack(1, 2, lease), false, "retry")); st != 409 || out["success"] != false {
		t.Fatalf("retried partial ack: %d %v", st, out)
	}
	if k, c := stateKeys(), sinkCount(); k != "partial" || c != 1 {
		t.Fatalf("after partial ack and refused retry: state %q, sink %d", k, c)
	}
	// Decision: an ack-less cycle has no ownership check; on a partition
	// whose lease another holds it applies and leaves the lease alone.
	if st, out := cycle(t, n, "", body(nil, false, "leasedflush")); st != 200 || out["success"] != true {
		t.Fatalf("flush under a lease: %d %v", st, out)
	}
	if ms := streamPop(t, n, "cy.src", g, 5); len(ms) != 0 {
		t.Fatalf("the flush touched the lease: popped %d", len(ms))
	}
	// After the lease expires the tail (3, 4, 5) comes back, in order.
	var tail []popped
	deadline := time.Now().Add(5 * time.Second)
	for len(tail) == 0 && time.Now().Before(deadline) {
		r := n.Do(t, "GET", "/api/v1/pop/queue/cy.src?batch=10&wait=true&timeout=500&consumerGroup="+g, nil)
		if r.Status == 200 {
			var o struct{ Messages []popped }
			r.JSON(t, &o)
			tail = o.Messages
		}
	}
	if len(tail) != 3 {
		t.Fatalf("redelivered %d messages, want the 3 unacked", len(tail))
	}
	if r := n.Do(t, "GET", "/api/v1/dlq?queue=cy.src", nil); r.Status != 200 || len(r.Obj(t)["messages"].([]any)) != 0 {
		t.Fatalf("a lease expiry dead-lettered: %d %s", r.Status, r.Body)
	}
	for i, m := range tail {
		if m.TransactionID != batch[2+i].TransactionID {
			t.Fatalf("redelivery %d is %s, want %s (order)", i, m.TransactionID, batch[2+i].TransactionID)
		}
	}
	// the old lease is dead now
	if st, _ := cycle(t, n, "", body(ack(4, 3, lease), true, "old")); st != 409 {
		t.Fatalf("expired lease: %d", st)
	}
	lease = tail[0].LeaseID
	// Decision: count beyond the batch is clamped to it; with release_lease
	// the whole batch passes whatever count says. Two more messages pushed
	// now are free for the next pop at once (the lease is released).
	streamPush(t, n, "cy.src", "p", 2, 6)
	if st, out := cycle(t, n, "", body(ack(4, 1, lease), true, "full")); st != 200 || out["acked"] != 3.0 {
		t.Fatalf("releasing ack: %d %v", st, out)
	}
	next := streamPop(t, n, "cy.src", g, 10)
	if len(next) != 2 || string(next[0].Data) != `{"i":6}` {
		t.Fatalf("after release: %d messages %v", len(next), next)
	}
	// count clamp on a partial ack: count 10 of a 2-message batch acks 2
	// (the lease then ends: nothing is left in its batch)
	batch = append(batch, next...)
	if st, out := cycle(t, n, "", body(msg{"transactionId": next[1].TransactionID, "leaseId": next[0].LeaseID, "count": 10}, false, "clamp")); st != 200 || out["acked"] != 2.0 {
		t.Fatalf("clamped partial ack: %d %v", st, out)
	}
	// ack-less cycle on an unleased partition: state and push, no cursor
	// effect. Decision: sent twice (a retry whose answer was lost), it
	// applies twice: there is no idempotency key.
	for range 2 {
		if st, out := cycle(t, n, "", body(nil, false, "flush")); st != 200 || out["acked"] != 0.0 {
			t.Fatalf("flush: %d %v", st, out)
		}
	}
	if k, c := stateKeys(), sinkCount(); k != "clamp,flush,full,leasedflush,partial" || c != 6 {
		t.Fatalf("end: state %q, sink %d", k, c)
	}
	// Concurrent cycles of one (query, partition) are serialised: all
	// commit, none deadlocks, every push lands.
	errs := make(chan string, 20)
	for i := range 20 {
		go func() {
			st, out := cycle(t, n, "", body(nil, false, fmt.Sprintf("c%02d", i)))
			if st != 200 {
				errs <- fmt.Sprintf("%d %v", st, out)
				return
			}
			errs <- ""
		}()
	}
	for range 20 {
		if e := <-errs; e != "" {
			t.Fatalf("concurrent cycle: %s", e)
		}
	}
	if c := sinkCount(); c != 26 {
		t.Fatalf("sink after concurrent cycles: %d, want 26", c)
	}
	streamPush(t, n, "cy.src", "p", 1, 8)
	if ms := streamPop(t, n, "cy.src", g, 10); len(ms) != 1 || string(ms[0].Data) != `{"i":8}` {
		t.Fatalf("cursor after all: %v", ms)
	}
}

// Tenants: the same query name in two tenants is two queries; one tenant
// cannot read or write the other's state. A read-only token may read state
// but not register or cycle.
func TestStreamsTenantIsolation(t *testing.T) {
	const secret = "streams-test-secret"
	n := nodetest.StartConfig(t, func(c *node.Config) {
		c.Auth.Enabled = true
		c.Auth.Secret = secret
	})
	tok := func(tenant, role string) string {
		c := jwt.MapClaims{"sub": tenant + "-user", "role": role, "tenant": tenant, "exp": time.Now().Add(time.Hour).Unix()}
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString([]byte(secret))
		if err != nil {
			t.Fatal(err)
		}
		return "Bearer " + s
	}
	acme, globex, acmeRO := tok("acme", "read-write"), tok("globex", "read-write"), tok("acme", "read-only")
	pidOf := func(auth string) string {
		if r := n.DoAuth(t, auth, "POST", "/api/v1/push", msg{"items": []msg{{"queue": "src", "partition": "p", "payload": msg{}}}}); r.Status != 201 {
			t.Fatalf("push: %d %s", r.Status, r.Body)
		}
		r := n.DoAuth(t, auth, "GET", "/api/v1/pop/queue/src?wait=false&autoAck=true&consumerGroup=peek", nil)
		var o struct{ Messages []popped }
		r.JSON(t, &o)
		return o.Messages[0].PartitionID
	}
	pa, pg := pidOf(acme), pidOf(globex)
	q := msg{"name": "q", "source_queue": "src", "config_hash": "h"}
	_, oa := register(t, n, acme, q)
	_, og := register(t, n, globex, q)
	qa, qg := oa["query_id"], og["query_id"]
	if qa == nil || qg == nil || qa == qg || og["fresh"] != true {
		t.Fatalf("registrations: %v %v", oa, og)
	}
	// a different hash in globex does not conflict with acme's
	if st, _ := register(t, n, globex, msg{"name": "q", "source_queue": "src", "config_hash": "other"}); st != 409 {
		t.Fatalf("globex mismatch: %d", st)
	}
	if st, out := cycle(t, n, acme, msg{"query_id": qa, "partition_id": pa, "consumer_group": "streams.q", "ack": nil,
		"state_ops": []msg{{"type": "upsert", "key": "k", "value": "acme"}}}); st != 200 {
		t.Fatalf("acme cycle: %d %v", st, out)
	}
	// globex with acme's query id, on acme's or its own partition: 404, nothing written
	for _, p := range []string{pa, pg} {
		if st, _ := stateGet(t, n, globex, msg{"query_id": qa, "partition_id": p}); st != 404 {
			t.Fatalf("globex reads acme's state: %d", st)
		}
		if st, _ := cycle(t, n, globex, msg{"query_id": qa, "partition_id": p, "consumer_group": "streams.q", "ack": nil,
			"state_ops": []msg{{"type": "upsert", "key": "k", "value": "globex"}}}); st != 404 {
			t.Fatalf("globex writes acme's state: %d", st)
		}
	}
	// globex's own query cannot name acme's partition either
	if st, _ := stateGet(t, n, globex, msg{"query_id": qg, "partition_id": pa}); st != 404 {
		t.Fatalf("globex query on acme's partition: %d", st)
	}
	st, rows := stateGet(t, n, acmeRO, msg{"query_id": qa, "partition_id": pa})
	if st != 200 || len(rows) != 1 || string(rows[0].Value) != `"acme"` {
		t.Fatalf("acme's state (read-only token): %d %v", st, rows)
	}
	if r := n.DoAuth(t, acmeRO, "POST", "/streams/v1/cycle", msg{}); r.Status != 403 {
		t.Fatalf("read-only cycle: %d", r.Status)
	}
	if r := n.DoAuth(t, acmeRO, "POST", "/streams/v1/queries", q); r.Status != 403 {
		t.Fatalf("read-only register: %d", r.Status)
	}
	if r := n.DoAuth(t, "", "POST", "/streams/v1/state/get", msg{}); r.Status != 401 {
		t.Fatalf("no token: %d", r.Status)
	}
}

// A cycle's sink push wakes, at commit, consumers parked on the sink on
// this node and, through the mesh hint, on another node, as a push would.
func TestStreamsCycleWakesParkedPops(t *testing.T) {
	// Parked pops re-poll only every 15 s here, so only a wake answers them sooner.
	nodes := nodetest.StartCluster(t, 2, func(c *broker.Config) { c.PopBackoffMin, c.PopBackoffMax = 15*time.Second, 15*time.Second })
	streamPush(t, nodes[0], "wk.src", "p", 1, 0)
	pid := streamPop(t, nodes[0], "wk.src", "peek", 1)[0].PartitionID
	_, out := register(t, nodes[0], "", msg{"name": "wk", "source_queue": "wk.src", "sink_queue": "wk.out", "config_hash": "h"})
	qid := out["query_id"].(string)
	// First contact registers the groups, so the parked pops below take
	// the hot-list path a running consumer takes.
	for i, n := range nodes {
		if r := n.Do(t, "GET", "/api/v1/pop/queue/wk.out?wait=false&consumerGroup=g"+fmt.Sprint(i), nil); r.Status != 204 {
			t.Fatalf("first pop: %d %s", r.Status, r.Body)
		}
	}
	type result struct {
		status int
		at     time.Time
	}
	chs := make([]chan result, len(nodes))
	for i, n := range nodes {
		chs[i] = make(chan result, 1)
		go func() {
			r := n.Do(t, "GET", "/api/v1/pop/queue/wk.out?wait=true&timeout=20000&autoAck=true&consumerGroup=g"+fmt.Sprint(i), nil)
			chs[i] <- result{r.Status, time.Now()}
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for nodes[0].Broker.Parked() < 1 || nodes[1].Broker.Parked() < 1 {
		if time.Now().After(deadline) {
			t.Fatal("the pops never parked")
		}
		time.Sleep(5 * time.Millisecond)
	}
	sent := time.Now()
	if st, out := cycle(t, nodes[0], "", msg{"query_id": qid, "partition_id": pid, "consumer_group": "streams.wk", "ack": nil,
		"push_items": []msg{{"queue": "wk.out", "partition": "x", "payload": msg{"v": 1}}}}); st != 200 {
		t.Fatalf("cycle: %d %v", st, out)
	}
	for i, ch := range chs {
		select {
		case got := <-ch:
			t.Logf("node %d's parked pop answered %d after %v", i, got.status, got.at.Sub(sent))
			if got.status != 200 || got.at.Sub(sent) > time.Second { // unwoken, about 2 s
				t.Fatalf("node %d's parked pop: %d after %v", i, got.status, got.at.Sub(sent))
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("node %d's parked pop never returned", i)
		}
	}
}
