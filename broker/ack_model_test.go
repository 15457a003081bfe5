package broker_test

import (
	"context"
	"fmt"
	"math/rand"
	"net/url"
	"slices"
	"sort"
	"testing"

	"github.com/jackc/pgx/v5"

	"queen-node/internal/nodetest"
)

// The ack rules of docs/api.md ("Acks"), checked against a seeded random
// model through real HTTP and PostgreSQL: random pushes (duplicates
// included, and holes in the offsets as deletes leave), partition pops, acks in random order
// with random statuses, split into batch and single requests, repeated,
// with and without lease ids, and leases expired at random. Every ack item's
// answer and every pop's messages must match the model; at the end every
// message must be completed or dead-lettered, and none acked completed may
// ever be delivered again.

// ackModel is the reference model of one (partition, group) cursor, in
// message positions (the model's messages are dense; PostgreSQL's offsets
// may have holes, which the rules must not notice).
type ackModel struct {
	cursor   int          // positions < cursor are resolved
	resolved map[int]bool // resolved positions >= cursor
	dead     map[int]bool // positions dead-lettered (resolved, but not completed)
	lease    string       // "" = no lease
	live     bool         // the lease has not expired
	batchEnd int          // last position served under the lease (or cursor-1)
	retries  int
}

type modelMsg struct {
	txid string
	pid  string // partition id, learnt from the push answer
}

type ackItem struct {
	pos    int
	status string
	lease  string
	unk    bool // an unknown transaction id
}

type ackWant struct {
	success  bool
	err      string
	dlq      bool
	released bool
}

func TestAckModel(t *testing.T) {
	seeds := 20
	steps := 200
	if testing.Short() {
		seeds, steps = 4, 80
	}
	n := nodetest.Start(t)
	conn, err := pgx.Connect(context.Background(), n.DBURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for seed := 1; seed <= seeds; seed++ {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			runAckModel(t, n, conn, int64(seed), steps)
		})
	}
}

func runAckModel(t *testing.T, n *nodetest.Node, conn *pgx.Conn, seed int64, steps int) {
	rng := rand.New(rand.NewSource(seed))
	queue := fmt.Sprintf("ackmodel-%d", seed)
	limit := rng.Intn(3)
	configure(t, n, queue, msg{"retryLimit": limit, "leaseTime": 600})
	parts := []string{"p0", "p1"}
	groups := []string{"", "g2"}
	msgs := map[string][]modelMsg{}
	type key struct{ part, group string }
	state := map[key]*ackModel{}
	for _, p := range parts {
		for _, g := range groups {
			state[key{p, g}] = &ackModel{resolved: map[int]bool{}, dead: map[int]bool{}, batchEnd: -1}
		}
	}
	// What each (partition, group)'s client has been handed: position -> the
	// lease it came with (the newest delivery wins).
	var nRetry, nDLQ, nGap, nIdem int // what the run exercised, logged at the end
	seen := map[key]map[int]string{}
	completed := map[key]map[int]bool{}
	dlq := map[key]map[int]bool{}
	for k := range state {
		seen[k], completed[k], dlq[k] = map[int]string{}, map[int]bool{}, map[int]bool{}
	}
	groupQuery := func(g string) string {
		if g == "" {
			return ""
		}
		return "&consumerGroup=" + g
	}
	pos := func(part, txid string) int {
		for i, m := range msgs[part] {
			if m.txid == txid {
				return i
			}
		}
		t.Fatalf("unknown txid %s", txid)
		return -1
	}

	doPop := func(part, group string, batch int) {
		k := key{part, group}
		st := state[k]
		// the model's answer
		var want []int
		if !(st.lease != "" && st.live) {
			for i := st.cursor; i < len(msgs[part]) && len(want) < batch; i++ {
				if !st.resolved[i] {
					want = append(want, i)
				}
			}
		}
		var ms []msg
		r := n.Do(t, "GET", "/api/v1/pop/queue/"+url.PathEscape(queue)+"/partition/"+part+
			fmt.Sprintf("?batch=%d&wait=false", batch)+groupQuery(group), nil)
		switch r.Status {
		case 204:
		case 200:
			for _, m := range r.Obj(t)["messages"].([]any) {
				ms = append(ms, m.(map[string]any))
			}
		default:
			t.Fatalf("pop: %d %s", r.Status, r.Body)
		}
		got := make([]int, len(ms))
		for i, m := range ms {
			got[i] = pos(part, m["transactionId"].(string))
		}
		if !slices.Equal(got, want) {
			t.Fatalf("pop %s/%q batch %d: got positions %v, model %v (state %+v)", part, group, batch, got, want, *st)
		}
		if len(want) == 0 {
			if st.lease != "" && !st.live {
				st.lease, st.batchEnd = "", max(st.batchEnd, st.cursor-1)
			}
			return
		}
		lease := ms[0]["leaseId"].(string)
		st.lease, st.live, st.batchEnd = lease, true, want[len(want)-1]
		for _, p := range got {
			if completed[k][p] {
				t.Fatalf("position %d of %s/%q delivered again after a successful completed ack", p, part, group)
			}
			seen[k][p] = lease
		}
	}

	// applyModel answers one ack request of one group the way docs/api.md
	// says, updating the model; items are in input order.
	applyModel := func(part, group string, items []ackItem) []ackWant {
		k := key{part, group}
		st := state[k]
		out := make([]ackWant, len(items))
		order := make([]int, len(items))
		for i := range order {
			order[i] = i
		}
		sort.SliceStable(order, func(a, b int) bool { return items[order[a]].pos < items[order[b]].pos })
		live, lease0 := st.lease != "" && st.live, st.lease
		var decision string
		release := false
		newly := map[int]bool{}
		touched := false
		for _, i := range order {
			it := items[i]
			if it.unk {
				out[i] = ackWant{err: "Message not found"}
				continue
			}
			touched = true
			if it.status != "completed" && it.status != "failed" {
				out[i] = ackWant{err: "Invalid status"}
				continue
			}
			resolved := it.pos < st.cursor || st.resolved[it.pos] || newly[it.pos]
			stale := it.lease != "" && !(live && it.lease == lease0)
			if resolved && it.status == "completed" && !(stale && st.dead[it.pos]) {
				nIdem++
				out[i] = ackWant{success: true}
				continue
			}
			if stale {
				out[i] = ackWant{err: "Invalid or expired lease"}
				continue
			}
			out[i] = ackWant{success: true}
			if resolved {
				continue
			}
			if it.status == "completed" {
				newly[it.pos] = true
				continue
			}
			if decision == "" && live && it.pos <= st.batchEnd {
				if st.retries < limit {
					decision, release = "retry", true
					st.retries++
					nRetry++
				} else {
					decision = "dlq"
				}
			}
			if decision == "dlq" {
				newly[it.pos] = true
				st.dead[it.pos] = true
				out[i].dlq = true
				nDLQ++
			}
		}
		if !touched {
			return out
		}
		for p := range newly {
			st.resolved[p] = true
		}
		if len(newly) > 0 && !st.resolved[st.cursor] {
			nGap++
		}
		for st.resolved[st.cursor] {
			delete(st.resolved, st.cursor)
			st.cursor++
		}
		released := false
		if release && st.lease != "" {
			released, st.lease = live, ""
			st.batchEnd = st.cursor - 1
		} else if st.lease != "" && st.cursor > st.batchEnd {
			released, st.lease = live, ""
			if decision != "retry" {
				st.retries = 0
			}
		}
		st.batchEnd = max(st.batchEnd, st.cursor-1)
		for i := range out {
			if out[i].success {
				out[i].released = released
			}
		}
		return out
	}

	doAck := func(part, group string) {
		k := key{part, group}
		if len(seen[k]) == 0 {
			return
		}
		var known []int
		for p := range seen[k] {
			known = append(known, p)
		}
		sort.Ints(known)
		var items []ackItem
		for _, p := range known {
			if rng.Intn(3) == 0 || (p < state[k].cursor && rng.Intn(6) != 0) {
				continue
			}
			it := ackItem{pos: p, status: "completed", lease: seen[k][p]}
			switch x := rng.Intn(100); {
			case x < 35:
				it.status = "failed"
			case x < 37:
				it.status = "bogus"
			}
			if rng.Intn(10) == 0 {
				it.lease = ""
			}
			items = append(items, it)
			if rng.Intn(12) == 0 {
				items = append(items, it) // the same item twice
			}
		}
		if rng.Intn(15) == 0 {
			items = append(items, ackItem{unk: true, status: "completed"})
		}
		if len(msgs[part]) > 0 && rng.Intn(15) == 0 {
			// a message this client was never handed, without a lease
			items = append(items, ackItem{pos: rng.Intn(len(msgs[part])), status: "completed"})
		}
		if len(items) == 0 {
			return
		}
		rng.Shuffle(len(items), func(i, j int) { items[i], items[j] = items[j], items[i] })
		// Send as one batch, as singles, or as two batches; some requests
		// are repeated (a client retrying after a lost answer).
		var reqs [][]ackItem
		switch rng.Intn(3) {
		case 0:
			reqs = [][]ackItem{items}
		case 1:
			for _, it := range items {
				reqs = append(reqs, []ackItem{it})
			}
		default:
			cut := rng.Intn(len(items) + 1)
			reqs = [][]ackItem{items[:cut], items[cut:]}
		}
		for _, req := range reqs {
			repeats := 1
			if rng.Intn(8) == 0 {
				repeats = 2
			}
			for ; repeats > 0; repeats-- {
				if len(req) == 0 {
					continue
				}
				want := applyModel(part, group, req)
				got := sendAcks(t, n, group, req, func(it ackItem) (string, string) {
					if it.unk {
						return "no-such-tx", msgs[part][0].pid
					}
					return msgs[part][it.pos].txid, msgs[part][it.pos].pid
				}, len(req) == 1 && rng.Intn(2) == 0)
				for i := range req {
					if got[i] != want[i] {
						t.Fatalf("ack %s/%q item %+v: got %+v, model %+v (request %+v, state %+v)",
							part, group, req[i], got[i], want[i], req, *state[k])
					}
					if got[i].success && req[i].status == "completed" && !req[i].unk {
						completed[k][req[i].pos] = true
					}
					if got[i].dlq {
						dlq[k][req[i].pos] = true
					}
				}
			}
		}
	}

	pushN := func(part string, count int) {
		items := make([]msg, 0, count+1)
		for i := 0; i < count; i++ {
			items = append(items, msg{"queue": queue, "partition": part, "payload": i,
				"transactionId": fmt.Sprintf("s%d-%s-%d", seed, part, len(msgs[part])+i)})
		}
		hole := len(msgs[part]) > 0 && rng.Intn(3) == 0
		if hole {
			// a duplicate, which takes no offset
			items = append(items, msg{"queue": queue, "partition": part, "payload": "dup",
				"transactionId": msgs[part][rng.Intn(len(msgs[part]))].txid})
		}
		res := pushItems(t, n, items)
		if hole {
			// a hole in the offsets after this batch, as a deleted message leaves
			if _, err := conn.Exec(context.Background(), `UPDATE queen.partitions SET last_offset = last_offset + 1 WHERE id = $1`,
				res[0]["partitionId"]); err != nil {
				t.Fatal(err)
			}
		}
		for i := 0; i < count; i++ {
			msgs[part] = append(msgs[part], modelMsg{txid: items[i]["transactionId"].(string), pid: res[i]["partitionId"].(string)})
		}
	}

	expire := func(part, group string) {
		st := state[key{part, group}]
		g := group
		if g == "" {
			g = "__QUEUE_MODE__"
		}
		_, err := conn.Exec(context.Background(), `UPDATE queen.consumers c
			SET lease_expires_at = clock_timestamp() - interval '1 second'
			FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
			WHERE c.partition_id = p.id AND q.name = $1 AND p.name = $2 AND c.consumer_group = $3
			  AND c.lease_id IS NOT NULL`, queue, part, g)
		if err != nil {
			t.Fatal(err)
		}
		if st.lease != "" {
			st.live = false
		}
	}

	for _, p := range parts {
		pushN(p, 3)
	}
	for step := 0; step < steps; step++ {
		part := parts[rng.Intn(len(parts))]
		group := groups[rng.Intn(len(groups))]
		switch x := rng.Intn(100); {
		case x < 15:
			pushN(part, 1+rng.Intn(4))
		case x < 50:
			doPop(part, group, 1+rng.Intn(5))
		case x < 92:
			doAck(part, group)
		default:
			expire(part, group)
		}
	}

	// Drain: every message ends completed or dead-lettered, never dropped.
	for k, st := range state {
		for round := 0; ; round++ {
			if round > 4*(limit+2)*len(msgs[k.part]) {
				t.Fatalf("%s/%q does not drain (state %+v)", k.part, k.group, *st)
			}
			expire(k.part, k.group)
			doPop(k.part, k.group, 100)
			if st.lease == "" {
				break
			}
			var items []ackItem
			for p := st.cursor; p <= st.batchEnd; p++ {
				if !st.resolved[p] {
					items = append(items, ackItem{pos: p, status: "completed", lease: st.lease})
				}
			}
			want := applyModel(k.part, k.group, items)
			got := sendAcks(t, n, k.group, items, func(it ackItem) (string, string) {
				return msgs[k.part][it.pos].txid, msgs[k.part][it.pos].pid
			}, false)
			for i := range items {
				if got[i] != want[i] || !got[i].success {
					t.Fatalf("drain ack %+v: got %+v, model %+v", items[i], got[i], want[i])
				}
				completed[k][items[i].pos] = true
			}
		}
		for p := range msgs[k.part] {
			if !completed[k][p] && !dlq[k][p] {
				t.Fatalf("%s/%q position %d was neither completed nor dead-lettered: lost", k.part, k.group, p)
			}
		}
		if st.cursor != len(msgs[k.part]) {
			t.Fatalf("%s/%q cursor at %d of %d after the drain", k.part, k.group, st.cursor, len(msgs[k.part]))
		}
	}
	t.Logf("retryLimit %d: %d retries, %d dead-lettered, %d acks left a gap, %d repeated completed acks",
		limit, nRetry, nDLQ, nGap, nIdem)
	// The DLQ holds exactly the dead-lettered messages.
	var inDLQ int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM queen.dead_letters d
		JOIN queen.partitions p ON p.id = d.partition_id JOIN queen.queues q ON q.id = p.queue_id
		WHERE q.name = $1`, queue).Scan(&inDLQ); err != nil {
		t.Fatal(err)
	}
	want := 0
	for _, m := range dlq {
		want += len(m)
	}
	if inDLQ != want {
		t.Fatalf("dead_letters has %d rows, the model %d", inDLQ, want)
	}
}

// sendAcks sends items as one /api/v1/ack/batch request, or (single) as one
// /api/v1/ack, and returns the per-item answers in input order.
func sendAcks(t *testing.T, n *nodetest.Node, group string, items []ackItem, ids func(ackItem) (string, string), single bool) []ackWant {
	t.Helper()
	if len(items) == 0 {
		return nil
	}
	body := make([]msg, len(items))
	for i, it := range items {
		txid, pid := ids(it)
		body[i] = msg{"transactionId": txid, "partitionId": pid, "status": it.status, "error": "model"}
		if it.lease != "" {
			body[i]["leaseId"] = it.lease
		}
		if group != "" {
			body[i]["consumerGroup"] = group
		}
	}
	var r nodetest.Response
	if single && len(items) == 1 {
		r = n.Do(t, "POST", "/api/v1/ack", body[0])
	} else {
		r = n.Do(t, "POST", "/api/v1/ack/batch", msg{"acknowledgments": body})
	}
	if r.Status != 200 {
		t.Fatalf("ack: %d %s", r.Status, r.Body)
	}
	res := r.Arr(t)
	if len(res) != len(items) {
		t.Fatalf("ack: %d results for %d items: %s", len(res), len(items), r.Body)
	}
	out := make([]ackWant, len(res))
	for i, x := range res {
		out[i].success, _ = x["success"].(bool)
		out[i].err, _ = x["error"].(string)
		out[i].dlq, _ = x["dlq"].(bool)
		out[i].released, _ = x["leaseReleased"].(bool)
	}
	return out
}
