package pg_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"queen-node/pg"
	"queen-node/protocol"
)

// TestPopV2MatchesV1 runs random pops over random states, each in one
// transaction: through queen.pop_v1 (rolled back to a savepoint) and through
// queen.pop_v2, and compares the rows answered and the consumer rows
// written; then again through pop_v2 read into a pg.PopOutcome as the
// previous release reads it (rolled back) and through queen.pop_v3 (one row
// of arrays, read by pg.Pop's reader), and compares the outcomes and the
// consumer rows. The states cover acked gaps, live and expired leases, byte caps,
// a delayedProcessing and a windowBuffer queue, the three subscription
// modes, fresh groups, missing consumer rows, missing partitions and the
// wildcard scan. pop_v2 gets a p_unprov that is NULL or a superset of the
// candidates that lack a row (what a node passes), never a lie: with a lie
// a requeued candidate keeps lacking its row, which pop_v1 would have made.
func TestPopV2MatchesV1(t *testing.T) {
	db, url := openDB(t)
	ctx := context.Background()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rnd := rand.New(rand.NewPCG(seed, 21))
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := conn.Exec(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}

	// The wildcard scan orders candidates by random() after setseed, so the
	// two calls agree only if they feed rows to the sort in the same order.
	// An autovacuum ANALYZE between them (seen under a loaded test run) can
	// replan one call's scan and feed another order: keep the statistics
	// still for this database.
	for _, tbl := range []string{"queen.partitions", "queen.consumers", "queen.messages", "queen.queues"} {
		exec(`ALTER TABLE ` + tbl + ` SET (autovacuum_enabled = off)`)
	}

	queues := []string{"q", "qd", "qw"} // plain, delayedProcessing, windowBuffer
	parts := []string{"p0", "p1", "p2", "p3"}
	groups := []struct{ name, mode string }{
		{"__QUEUE_MODE__", "all"}, {"ga", "all"}, {"gn", "new"}, {"gf", "from"},
	}
	pushed := map[string][]string{} // queue/partition -> transaction ids
	seq := 0
	push := func() {
		q := queues[rnd.IntN(len(queues))]
		p := parts[rnd.IntN(len(parts))]
		key := q + "/" + p
		var rows []pg.PushRow
		for range 1 + rnd.IntN(6) {
			seq++
			tx := fmt.Sprintf("tx-%d", seq)
			if rnd.IntN(6) == 0 && len(pushed[key]) > 0 {
				tx = pushed[key][rnd.IntN(len(pushed[key]))] // a duplicate
				skipOffset(t, conn, q, p)                    // and a hole
			}
			payload := fmt.Sprintf("%q", strings.Repeat("y", rnd.IntN(400)))
			rows = append(rows, pg.PushRow{Queue: q, Partition: p, TxID: tx, ID: uuid.Must(uuid.NewV7()).String(), Payload: payload})
		}
		out, err := db.Push(ctx, "t", rows)
		if err != nil {
			t.Fatal(err)
		}
		for i, o := range out {
			if o.Status == "queued" {
				pushed[key] = append(pushed[key], rows[i].TxID)
			}
		}
	}
	for range 12 {
		push()
	}
	for _, q := range queues {
		if len(pushed[q+"/p0"]) == 0 {
			db.Push(ctx, "t", []pg.PushRow{{Queue: q, Partition: "p0", TxID: "first-" + q, ID: uuid.Must(uuid.NewV7()).String(), Payload: "1"}})
		}
	}
	exec(`UPDATE queen.queues SET delayed_processing = 3600 WHERE name = 'qd'`)
	exec(`UPDATE queen.queues SET window_buffer = 3600 WHERE name = 'qw'`)

	const call = `SELECT (to_jsonb(r) - 'o_until') || jsonb_build_object('until', r.o_until IS NOT NULL)
		FROM queen.%s($1, $2, $3, $4::text[], 3, $5, $6, $7, 600, $8, 'o', $9, $10, $11::bigint%s) r`
	const state = `SELECT COALESCE(jsonb_agg((to_jsonb(c) - 'updated_at' - 'lease_expires_at')
			|| jsonb_build_object('live', c.lease_expires_at > clock_timestamp()) ORDER BY c.partition_id, c.consumer_group), '[]')
		FROM queen.consumers c`
	rows := func(tx pgx.Tx, q string, args ...any) []string {
		t.Helper()
		rs, err := tx.Query(ctx, q, args...)
		if err != nil {
			t.Fatal(err)
		}
		out, err := pgx.CollectRows(rs, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	// missing lists the candidates of (queue, group) without a consumer row.
	missing := func(tx pgx.Tx, queue, group string, names []string) []string {
		t.Helper()
		rs, err := tx.Query(ctx, `SELECT n FROM unnest($3::text[]) n WHERE NOT EXISTS (
				SELECT 1 FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
				JOIN queen.consumers c ON c.partition_id = p.id AND c.consumer_group = $2
				WHERE q.tenant = 't' AND q.name = $1 AND p.name = n)`, queue, group, names)
		if err != nil {
			t.Fatal(err)
		}
		out, err := pgx.CollectRows(rs, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return out
	}

	type leased struct{ group, pid, tx, lease string }
	var held []leased
	var nMsgs, nTook, nFresh, nWild, nSkipped int
	defer func() {
		t.Logf("messages %d, took %d, fresh groups %d, wildcard %d, provisioning skipped %d", nMsgs, nTook, nFresh, nWild, nSkipped)
	}()
	extra := 0
	for step := 0; step < 500; step++ {
		switch rnd.IntN(9) {
		case 0, 1:
			push()
		case 2:
			exec(`UPDATE queen.consumers SET lease_expires_at = clock_timestamp() - interval '1 s'
				WHERE lease_id IS NOT NULL AND random() < 0.5`)
		case 3:
			if len(held) > 0 {
				rnd.Shuffle(len(held), func(i, j int) { held[i], held[j] = held[j], held[i] })
				k := 1 + rnd.IntN(len(held))
				var ack []pg.AckRow
				for _, h := range held[:k] {
					st := "completed"
					if rnd.IntN(6) == 0 {
						st = "failed"
					}
					ack = append(ack, pg.AckRow{Group: h.group, PartitionID: h.pid, TxID: h.tx, Status: protocol.AckStatus(st), LeaseID: h.lease})
				}
				if _, err := db.Ack(ctx, "t", ack); err != nil {
					t.Fatal(err)
				}
				held = held[k:]
			}
		case 4:
			// time passes for the deferral queues, in steps of half their
			// 3600 s: the two calls of a step, a moment apart, never sit on
			// either side of a deferral's end
			exec(`UPDATE queen.messages m SET created_at = m.created_at - interval '1800 s'
				FROM queen.partitions p WHERE p.id = m.partition_id AND random() < 0.7`)
			exec(`UPDATE queen.partitions SET last_write_at = last_write_at - interval '1800 s' WHERE random() < 0.7`)
		case 5:
			// consumer rows vanish (a missing row must be provisioned again)
			exec(`DELETE FROM queen.consumers WHERE lease_id IS NULL AND random() < 0.15`)
		}

		q := queues[rnd.IntN(len(queues))]
		g := groups[rnd.IntN(len(groups))]
		group := g.name
		if rnd.IntN(12) == 0 {
			extra++ // a group never seen: the first-contact path
			group = fmt.Sprintf("g-new-%d", extra)
			nFresh++
		}
		var names []string
		if rnd.IntN(5) == 0 {
			nWild++ // nil: the wildcard scan
		} else {
			names = append([]string(nil), parts...)
			if rnd.IntN(4) == 0 {
				names = append(names, "px") // no such partition
			}
			rnd.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
			names = names[:1+rnd.IntN(len(names))]
		}
		var from *time.Time
		if g.mode == "from" {
			f := time.Now().Add(-time.Duration(rnd.IntN(4)) * 1800 * time.Second)
			from = &f
		}
		budget := 1 + rnd.IntN(10)
		maxParts := 1 + rnd.IntN(3)
		auto := rnd.IntN(4) == 0
		caps := []int64{0, 1, 500, 900, 1500, 4000}
		maxBytes := caps[rnd.IntN(len(caps))]
		lease := uuid.NewString()
		var namesArg any
		if names != nil {
			namesArg = names
		}
		args := []any{"t", q, group, namesArg, budget, maxParts, lease, auto, g.mode, from, maxBytes}

		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "SAVEPOINT s; SELECT setseed(0.25)"); err != nil {
			t.Fatal(err)
		}
		wantRows := rows(tx, fmt.Sprintf(call, "pop_v1", ""), args...)
		wantState := rows(tx, state)
		if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT s; SELECT setseed(0.25)"); err != nil {
			t.Fatal(err)
		}
		var unprov any // NULL: every candidate
		if names != nil && rnd.IntN(5) != 0 {
			u := missing(tx, q, group, names)
			for _, n := range names {
				if !slices.Contains(u, n) && rnd.IntN(4) == 0 {
					u = append(u, n) // a superset is fine: the row exists, the insert does nothing
				}
			}
			if len(u) == 0 {
				nSkipped++
			}
			unprov = u
		}
		gotRows := rows(tx, fmt.Sprintf(call, "pop_v2", ", $12::text[]"), append(args, unprov)...)
		gotState := rows(tx, state)
		desc := fmt.Sprintf("step %d (queue %s group %s names %v unprov %v budget %d parts %d auto %v cap %d)",
			step, q, group, names, unprov, budget, maxParts, auto, maxBytes)
		if strings.Join(wantRows, "\n") != strings.Join(gotRows, "\n") {
			t.Fatalf("%s: rows differ\npop_v1:\n%s\npop_v2:\n%s", desc, strings.Join(wantRows, "\n"), strings.Join(gotRows, "\n"))
		}
		if strings.Join(wantState, "") != strings.Join(gotState, "") {
			t.Fatalf("%s: consumer rows differ\npop_v1: %s\npop_v2: %s", desc, wantState, gotState)
		}

		// pop_v3 on the same state: the same outcome, read from its one row
		// of arrays, as pop_v2's rows read the way the previous release did.
		pa := pg.PopArgs{Tenant: "t", Queue: q, Group: group, Names: names, ScanLimit: 3, Budget: budget,
			MaxParts: maxParts, LeaseID: lease, LeaseSeconds: 600, AutoAck: auto, Owner: "o",
			SubMode: protocol.SubMode(g.mode), SubFrom: from, MaxBytes: maxBytes}
		if u, ok := unprov.([]string); ok {
			pa.Unprov = u
			if u == nil {
				pa.Unprov = []string{}
			}
		}
		if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT s; SELECT setseed(0.25)"); err != nil {
			t.Fatal(err)
		}
		outV2, err := pg.PopV2Tx(ctx, tx, pa)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT s; SELECT setseed(0.25)"); err != nil {
			t.Fatal(err)
		}
		outV3, err := pg.PopTx(ctx, tx, pa)
		if err != nil {
			t.Fatal(err)
		}
		v3State := rows(tx, state)
		if a, b := popString(outV2), popString(outV3); a != b {
			t.Fatalf("%s: outcomes differ\npop_v2: %s\npop_v3: %s", desc, a, b)
		}
		if strings.Join(gotState, "") != strings.Join(v3State, "") {
			t.Fatalf("%s: consumer rows differ\npop_v2: %s\npop_v3: %s", desc, gotState, v3State)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		for _, r := range gotRows {
			if strings.Contains(r, `"o_verdict": "took"`) {
				nTook++
			}
			if !strings.Contains(r, `"o_kind": "msg"`) {
				continue
			}
			nMsgs++
			if !auto {
				var pid, txid string
				if err := conn.QueryRow(ctx, `SELECT ($1::jsonb)->>'o_pid', ($1::jsonb)->>'o_txid'`, r).Scan(&pid, &txid); err != nil {
					t.Fatal(err)
				}
				held = append(held, leased{group, pid, txid, lease})
			}
		}
	}
	if nMsgs < 200 || nTook < 50 || nSkipped < 20 {
		t.Fatalf("too few cases exercised: messages %d, took %d, provisioning skipped %d", nMsgs, nTook, nSkipped)
	}
}

// popString prints an outcome for comparison: lease and deferral times
// only as set or not (the two calls run a moment apart), times in UTC.
func popString(o *pg.PopOutcome) string {
	c := *o
	c.Verdicts = append([]pg.Verdict(nil), o.Verdicts...)
	for i := range c.Verdicts {
		c.Verdicts[i].Until = time.Time{}.Add(time.Duration(boolInt(!o.Verdicts[i].Until.IsZero())))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "queue %s seeded %v delay %d window %d\n", c.QueueID, c.Seeded, c.Delay, c.Window)
	for _, v := range c.Verdicts {
		fmt.Fprintf(&b, "  verdict %+v\n", v)
	}
	for _, m := range o.Messages {
		fmt.Fprintf(&b, "  msg %s %s %d %s %s %v %s %s %v %d\n", m.Partition, m.PartitionID, m.Off, m.ID, m.TxID,
			deref(m.Trace), m.Payload, m.CreatedAt.UTC().Format(time.RFC3339Nano), deref(m.Sub), m.Retry)
	}
	return b.String()
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}
