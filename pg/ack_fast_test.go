package pg_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"queen-node/pg"
	"queen-node/protocol"
)

// generalAckSQL is pg/sql/functions/31_ack_v2.sql with its fast path cut out and the
// function renamed queen.ack_v2_general: the general loop alone, exactly as
// ack_v2 runs it when the fast path declines.
func generalAckSQL(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile("sql/functions/31_ack_v2.sql")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	const begin, end = "    -- BEGIN fast path\n", "    -- END fast path\n\n"
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i < 0 || j < i || strings.Count(s, begin) != 1 || strings.Count(s, end) != 1 {
		t.Fatal("31_ack_v2.sql: fast path markers not found")
	}
	s = s[:i] + s[j+len(end):]
	const head = "CREATE OR REPLACE FUNCTION queen.ack_v2("
	if strings.Count(s, head) != 1 {
		t.Fatal("31_ack_v2.sql: function head not found")
	}
	s = strings.Replace(s, head, "CREATE OR REPLACE FUNCTION queen.ack_v2_general(", 1)
	if strings.Contains(s, "fast path") || strings.Contains(s, "f_offs") {
		t.Fatal("31_ack_v2.sql: fast path left in the general function")
	}
	return s
}

const ackCallSQL = `SELECT o_idx, o_success, o_error, o_queue, o_partition, o_released, o_dlq,
	o_pending, o_pid::text, o_group, o_off
	FROM queen.%s($1, $2, $3::uuid[], $4, $5, $6, $7, $8)`

// TestAckFastPathMatchesGeneral runs random ack batches, each three times in
// one transaction: through the general loop alone (queen.ack_v2_general,
// rolled back), through queen.ack_v1 (the previous release's function,
// rolled back) and through queen.ack_v2, then compares the rows answered
// (all columns, in order, between ack_v2 and its general loop; ack_v1's
// with its summary rows folded into its items, by input position) and the
// resulting consumers and dead-letter rows. It also checks that ack_v1 and
// ack_v2 took their fast path exactly when the batch
// qualified: completed acks of one (partition, group) carrying its live
// lease, covering every message from the cursor to an offset within the
// leased batch, with no acks remembered past a gap.
func TestAckFastPathMatchesGeneral(t *testing.T) {
	db, url := openDB(t)
	ctx := context.Background()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rnd := rand.New(rand.NewPCG(seed, 7))

	var fastHits, fastHitsV1 int
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		switch n.Message {
		case "queen.ack_v2: fast path":
			fastHits++
		case "queen.ack_v1: fast path":
			fastHitsV1++
		}
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, generalAckSQL(t), pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "SET client_min_messages = debug1"); err != nil {
		t.Fatal(err)
	}

	parts := []string{"p0", "p1"}
	groups := []string{"g", "__QUEUE_MODE__"}
	pids := map[string]string{}
	var txSeq int
	pushed := map[string][]string{} // partition name -> txids pushed
	push := func(part string, n int, dup bool) {
		var rows []pg.PushRow
		for i := 0; i < n; i++ {
			txSeq++
			tx := fmt.Sprintf("tx-%d", txSeq)
			if dup && i == n/2 && len(pushed[part]) > 0 {
				tx = pushed[part][rnd.IntN(len(pushed[part]))] // a duplicate (takes no offset)
				skipOffset(t, conn, "q", part)                 // a hole, as a deleted message leaves
			}
			rows = append(rows, pg.PushRow{Queue: "q", Partition: part, TxID: tx,
				ID: uuid.Must(uuid.NewV7()).String(), Payload: fmt.Sprint(txSeq)})
		}
		out, err := db.Push(ctx, "t", rows)
		if err != nil {
			t.Fatal(err)
		}
		for i, o := range out {
			if o.Status == "queued" {
				pushed[part] = append(pushed[part], rows[i].TxID)
			}
			pids[part] = o.PartitionID
		}
	}
	for _, p := range parts {
		push(p, 5, false)
	}

	type popped struct {
		lease string
		msgs  []pg.PopMessage
	}
	last := map[string]popped{} // partition/group -> last pop that took messages
	prev := map[string]popped{} // partition/group -> the one before
	key := func(part, group string) string { return part + "/" + group }

	type consumerRow struct {
		committed, batchEnd int64
		acked               []int64
		lease               *string
		expires             *time.Time
	}
	readConsumer := func(pid, group string) (consumerRow, bool) {
		var c consumerRow
		err := conn.QueryRow(ctx, `SELECT committed_offset, batch_end, acked, lease_id, lease_expires_at
			FROM queen.consumers WHERE partition_id = $1 AND consumer_group = $2`, pid, group).
			Scan(&c.committed, &c.batchEnd, &c.acked, &c.lease, &c.expires)
		if err == pgx.ErrNoRows {
			return c, false
		}
		if err != nil {
			t.Fatal(err)
		}
		return c, true
	}
	// state is what an ack can change: every consumers row (updated_at as
	// changed or not) and every dead letter.
	state := func(before map[string]time.Time) []string {
		rows, err := conn.Query(ctx, `SELECT partition_id::text, consumer_group, committed_offset, batch_end,
				acked::text, lease_id, lease_owner, lease_expires_at, retry_count, updated_at
			FROM queen.consumers ORDER BY 1, 2`)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for rows.Next() {
			v, err := rows.Values()
			if err != nil {
				t.Fatal(err)
			}
			k := fmt.Sprint(v[0], v[1])
			changed := true
			if ts, ok := before[k]; ok {
				changed = !ts.Equal(v[9].(time.Time))
			}
			out = append(out, fmt.Sprintf("%v updated=%v", v[:9], changed))
		}
		if rows.Err() != nil {
			t.Fatal(rows.Err())
		}
		rows, err = conn.Query(ctx, `SELECT partition_id::text, consumer_group, off, message_id::text, transaction_id,
				payload::text, producer_sub, error_message, retry_count, created_at
			FROM queen.dead_letters ORDER BY seq`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			v, err := rows.Values()
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, fmt.Sprint("dlq ", v))
		}
		if rows.Err() != nil {
			t.Fatal(rows.Err())
		}
		return out
	}
	callValues := func(fn string, rows []pg.AckRow) [][]any {
		n := len(rows)
		gs, ps, txs, sts, ls, es := make([]string, n), make([]string, n), make([]string, n),
			make([]string, n), make([]string, n), make([]string, n)
		for i, r := range rows {
			gs[i], ps[i], txs[i], sts[i], ls[i], es[i] = r.Group, r.PartitionID, r.TxID, string(r.Status), r.LeaseID, r.Error
		}
		rs, err := conn.Query(ctx, fmt.Sprintf(ackCallSQL, fn), "t", gs, ps, txs, sts, ls, es, false)
		if err != nil {
			t.Fatalf("%s: %v", fn, err)
		}
		var out [][]any
		for rs.Next() {
			v, err := rs.Values()
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, v)
		}
		if rs.Err() != nil {
			t.Fatalf("%s: %v", fn, rs.Err())
		}
		return out
	}
	call := func(fn string, rows []pg.AckRow) []string {
		var out []string
		for _, v := range callValues(fn, rows) {
			out = append(out, fmt.Sprint(v))
		}
		return out
	}
	// byIdx puts an answer in input order; with v1, ack_v1's summary rows
	// (o_idx -1) are folded into the successful items of their (partition,
	// group) as ack_v2 answers them. Columns: o_idx 0, o_success 1,
	// o_released 5, o_pending 7, o_pid 8, o_group 9.
	byIdx := func(rows [][]any, v1 bool) []string {
		type key struct{ pid, group any }
		sum := map[key][]any{}
		var items [][]any
		for _, v := range rows {
			if v1 && v[0].(int32) == -1 {
				sum[key{v[8], v[9]}] = v
				continue
			}
			items = append(items, append([]any(nil), v...))
		}
		if v1 {
			for _, v := range items {
				if s, ok := sum[key{v[8], v[9]}]; ok && v[1].(bool) {
					v[5], v[7] = s[5], s[7]
				}
			}
		}
		sort.Slice(items, func(a, b int) bool { return items[a][0].(int32) < items[b][0].(int32) })
		out := make([]string, len(items))
		for i, v := range items {
			out[i] = fmt.Sprint(v)
		}
		return out
	}
	// qualifies tells, from the state before the call, whether the batch is
	// the fast path's case.
	qualifies := func(rows []pg.AckRow) bool {
		if len(rows) == 0 {
			return false
		}
		r0 := rows[0]
		offs := map[int64]bool{}
		lo, hi := int64(1<<62), int64(0)
		for _, r := range rows {
			if r.PartitionID != r0.PartitionID || r.Group != r0.Group || r.LeaseID == "" || r.LeaseID != r0.LeaseID {
				return false
			}
			if r.Status != "completed" && r.Status != "success" && r.Status != "" {
				return false
			}
			var off int64
			err := conn.QueryRow(ctx, `SELECT m.off FROM queen.messages m
				JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id AND q.tenant = 't'
				WHERE m.partition_id = $1 AND m.transaction_id = $2`, r.PartitionID, r.TxID).Scan(&off)
			if err == pgx.ErrNoRows || offs[off] {
				return false
			}
			if err != nil {
				t.Fatal(err)
			}
			offs[off] = true
			lo, hi = min(lo, off), max(hi, off)
		}
		group := r0.Group
		if group == "" {
			group = "__QUEUE_MODE__"
		}
		c, ok := readConsumer(r0.PartitionID, group)
		if !ok || c.lease == nil || *c.lease != r0.LeaseID || !c.expires.After(time.Now().Add(time.Second)) ||
			len(c.acked) > 0 || lo <= c.committed || hi > c.batchEnd {
			return false
		}
		var inRange int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM queen.messages WHERE partition_id = $1 AND off > $2 AND off <= $3`,
			r0.PartitionID, c.committed, hi).Scan(&inRange); err != nil {
			t.Fatal(err)
		}
		return inRange == len(rows)
	}

	kinds := []string{"whole", "whole", "whole", "prefix", "prefix", "subset", "shuffled", "wronglease",
		"expired", "repeat", "mixed", "fail", "fail", "straddle", "straddle", "beyond", "dup", "twoparts", "nolease", "unknown", "groupspell", "upper"}
	statusOf := func() string { return []string{"completed", "success", ""}[rnd.IntN(3)] }
	byKind := map[string][2]int{} // kind -> {calls, fast}
	fastRetried := 0              // fast calls on a row whose retry counter was up
	const rounds = 1000
	for round := 0; round < rounds; round++ {
		part := parts[rnd.IntN(len(parts))]
		group := groups[rnd.IntN(len(groups))]
		pid := pids[part]
		if rnd.IntN(3) == 0 {
			push(part, 1+rnd.IntN(12), rnd.IntN(3) == 0)
		}
		if rnd.IntN(4) != 0 {
			lease := uuid.NewString()
			out := claim(t, db, pg.PopArgs{Queue: "q", Group: group, Names: []string{part},
				Budget: 1 + rnd.IntN(15), LeaseID: lease, LeaseSeconds: 60})
			if len(out.Messages) > 0 {
				if p, ok := last[key(part, group)]; ok {
					prev[key(part, group)] = p
				}
				last[key(part, group)] = popped{lease, out.Messages}
			}
		}
		p, ok := last[key(part, group)]
		if !ok {
			continue
		}
		item := func(m pg.PopMessage, st string) pg.AckRow {
			g := group
			if g == "__QUEUE_MODE__" && rnd.IntN(2) == 0 {
				g = ""
			}
			return pg.AckRow{Group: g, PartitionID: m.PartitionID, TxID: m.TxID, Status: protocol.AckStatus(st), LeaseID: p.lease}
		}
		kind := kinds[rnd.IntN(len(kinds))]
		var rows []pg.AckRow
		msgs := p.msgs
		switch kind {
		case "prefix":
			msgs = msgs[:1+rnd.IntN(len(msgs))]
		case "subset":
			var sub []pg.PopMessage
			for _, m := range msgs {
				if rnd.IntN(2) == 0 {
					sub = append(sub, m)
				}
			}
			msgs = sub
		}
		for _, m := range msgs {
			rows = append(rows, item(m, statusOf()))
		}
		if len(rows) == 0 {
			continue
		}
		// in one spelling of the group, or mixed
		if kind != "groupspell" {
			for i := range rows {
				rows[i].Group = rows[0].Group
			}
		}
		switch kind {
		case "shuffled":
			rnd.Shuffle(len(rows), func(i, j int) { rows[i], rows[j] = rows[j], rows[i] })
		case "wronglease":
			rows[rnd.IntN(len(rows))].LeaseID = uuid.NewString()
		case "expired":
			if _, err := conn.Exec(ctx, `UPDATE queen.consumers SET lease_expires_at = clock_timestamp() - interval '1 second'
				WHERE partition_id = $1 AND consumer_group = $2 AND lease_id IS NOT NULL`, pid, group); err != nil {
				t.Fatal(err)
			}
		case "mixed":
			for i := range rows {
				if rnd.IntN(3) == 0 {
					rows[i].Status = []protocol.AckStatus{"failed", "retry", "dlq", "bogus"}[rnd.IntN(4)]
				}
			}
		case "fail":
			// a retry decision (or a dead letter at the limit): the
			// retry counter goes up, and a later whole batch resets it
			rows = rows[:1]
			rows[0].Status = "failed"
		case "straddle":
			// a message resolved before, and all but the first of the
			// batch: as many items as the range past the cursor holds
			if q, ok := prev[key(part, group)]; ok {
				m := q.msgs[len(q.msgs)-1]
				rows = append([]pg.AckRow{{Group: rows[0].Group, PartitionID: m.PartitionID, TxID: m.TxID,
					Status: "completed", LeaseID: p.lease}}, rows[1:]...)
			}
		case "beyond":
			// and messages pushed after the pop, never delivered
			push(part, 1+rnd.IntN(2), false)
			for _, tx := range pushed[part][len(pushed[part])-1:] {
				rows = append(rows, pg.AckRow{Group: rows[0].Group, PartitionID: pid, TxID: tx,
					Status: "completed", LeaseID: p.lease})
			}
		case "dup":
			rows = append(rows, rows[rnd.IntN(len(rows))])
		case "twoparts":
			other := parts[0]
			if other == part {
				other = parts[1]
			}
			if q, ok := last[key(other, group)]; ok {
				for _, m := range q.msgs {
					rows = append(rows, pg.AckRow{Group: rows[0].Group, PartitionID: m.PartitionID, TxID: m.TxID,
						Status: "completed", LeaseID: q.lease})
				}
			}
		case "nolease":
			for i := range rows {
				rows[i].LeaseID = ""
			}
		case "unknown":
			rows[rnd.IntN(len(rows))].TxID = "no-such-tx"
		case "upper":
			rows[rnd.IntN(len(rows))].Status = "COMPLETED"
		}
		// "repeat" acks the last pop again whether or not it was acked.

		want := qualifies(rows)
		var retried bool
		if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM queen.consumers
			WHERE partition_id = $1 AND consumer_group = $2 AND retry_count > 0)`, pid, group).Scan(&retried); err != nil {
			t.Fatal(err)
		}
		before := map[string]time.Time{}
		{
			rs, err := conn.Query(ctx, `SELECT partition_id::text, consumer_group, updated_at FROM queen.consumers`)
			if err != nil {
				t.Fatal(err)
			}
			for rs.Next() {
				var a, b string
				var ts time.Time
				if err := rs.Scan(&a, &b, &ts); err != nil {
					t.Fatal(err)
				}
				before[fmt.Sprint(a, b)] = ts
			}
		}
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "SAVEPOINT general"); err != nil {
			t.Fatal(err)
		}
		hits := fastHits
		gotG := call("ack_v2_general", rows)
		stG := state(before)
		if fastHits != hits {
			t.Fatal("the general function took the fast path")
		}
		if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT general"); err != nil {
			t.Fatal(err)
		}
		hitsV1 := fastHitsV1
		gotV1 := byIdx(callValues("ack_v1", rows), true)
		stV1 := state(before)
		fastV1 := fastHitsV1 != hitsV1
		if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT general"); err != nil {
			t.Fatal(err)
		}
		valsF := callValues("ack_v2", rows)
		gotF := make([]string, len(valsF))
		for i, v := range valsF {
			gotF[i] = fmt.Sprint(v)
		}
		stF := state(before)
		fast := fastHits != hits
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(gotG, gotF) || !reflect.DeepEqual(stG, stF) {
			t.Fatalf("round %d (%s, fast path %v): ack_v2 differs from the general loop\nitems %+v\ngeneral rows:\n  %s\nack_v2 rows:\n  %s\ngeneral state:\n  %s\nack_v2 state:\n  %s",
				round, kind, fast, rows, strings.Join(gotG, "\n  "), strings.Join(gotF, "\n  "),
				strings.Join(stG, "\n  "), strings.Join(stF, "\n  "))
		}
		if v2 := byIdx(valsF, false); !reflect.DeepEqual(gotV1, v2) || !reflect.DeepEqual(stV1, stF) || fastV1 != fast {
			t.Fatalf("round %d (%s, fast path v1 %v, v2 %v): ack_v2 differs from ack_v1\nitems %+v\nack_v1 rows (folded):\n  %s\nack_v2 rows:\n  %s\nack_v1 state:\n  %s\nack_v2 state:\n  %s",
				round, kind, fastV1, fast, rows, strings.Join(gotV1, "\n  "), strings.Join(v2, "\n  "),
				strings.Join(stV1, "\n  "), strings.Join(stF, "\n  "))
		}
		if fast != want {
			t.Fatalf("round %d (%s): fast path taken %v, want %v; items %+v\nrows:\n  %s", round, kind, fast, want, rows,
				strings.Join(gotF, "\n  "))
		}
		c := byKind[kind]
		c[0]++
		if fast {
			c[1]++
			if retried {
				fastRetried++
			}
		}
		byKind[kind] = c
	}
	t.Logf("calls, fast path by kind: %v; fast path after a retry: %d", byKind, fastRetried)
	if byKind["whole"][1] == 0 || byKind["prefix"][1] == 0 || fastRetried == 0 {
		t.Fatalf("the fast path never ran for a whole batch, a prefix, or after a retry: %v, %d", byKind, fastRetried)
	}
}
