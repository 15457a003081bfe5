package pg_test

import (
	"context"
	"encoding/json"
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

// TestFastClaimMatchesGeneral is the fast claim's differential test
// (pg/claimfast.go): random claims over random states, each in one
// transaction, through queen.pop_v3 alone (rolled back to a savepoint) and
// through the path PopMany takes (the fast claim, then pop_v3 when it
// answers nothing). The outcomes and the consumer rows written must agree,
// and a lease taken by either must end within a moment of the other's. The
// states cover what sends a claim to the general path: acked gaps, live
// and expired leases, missing consumer rows, a delayedProcessing and a
// windowBuffer queue, partitions drained, messages deleted under the
// cursor's range, byte caps, several candidates and claims of two
// partitions.
func TestFastClaimMatchesGeneral(t *testing.T) {
	db, url := openDB(t)
	ctx := context.Background()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rnd := rand.New(rand.NewPCG(seed, 7))
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

	// plain (leaseTime 300), leaseTime 0 (the default lease), delayed, windowed
	queues := []string{"q", "ql", "qd", "qw"}
	parts := []string{"p0", "p1", "p2", "p3"}
	groups := []string{"__QUEUE_MODE__", "ga"}
	pushed := map[string][]string{}
	seq := 0
	push := func() {
		q := queues[rnd.IntN(len(queues))]
		p := parts[rnd.IntN(len(parts))]
		key := q + "/" + p
		var rows []pg.PushRow
		for range 1 + rnd.IntN(8) {
			seq++
			tx := fmt.Sprintf("tx-%d", seq)
			if rnd.IntN(8) == 0 && len(pushed[key]) > 0 {
				tx = pushed[key][rnd.IntN(len(pushed[key]))] // a duplicate
				skipOffset(t, conn, q, p)                    // and a hole
			}
			payload := fmt.Sprintf("%q", strings.Repeat("z", rnd.IntN(600)))
			var sub *string
			if rnd.IntN(3) == 0 {
				s := fmt.Sprint("sub-", rnd.IntN(9))
				sub = &s
			}
			rows = append(rows, pg.PushRow{Queue: q, Partition: p, TxID: tx, ID: uuid.Must(uuid.NewV7()).String(),
				Payload: payload, Sub: sub})
		}
		out, err := db.Push(ctx, "t", rows)
		if err != nil {
			t.Fatal(err)
		}
		for i, o := range out {
			if o.Status == protocol.PushQueued {
				pushed[key] = append(pushed[key], rows[i].TxID)
			}
		}
	}
	for _, q := range queues {
		for _, p := range parts {
			if _, err := db.Push(ctx, "t", []pg.PushRow{{Queue: q, Partition: p, TxID: "first-" + q + p,
				ID: uuid.Must(uuid.NewV7()).String(), Payload: "1"}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for range 20 {
		push()
	}
	exec(`UPDATE queen.queues SET lease_time = 0 WHERE name = 'ql'`)
	exec(`UPDATE queen.queues SET delayed_processing = 3600 WHERE name = 'qd'`)
	exec(`UPDATE queen.queues SET window_buffer = 3600 WHERE name = 'qw'`)

	const state = `SELECT COALESCE(jsonb_agg((to_jsonb(c) - 'updated_at' - 'lease_expires_at')
			|| jsonb_build_object('live', c.lease_expires_at > clock_timestamp()) ORDER BY c.partition_id, c.consumer_group), '[]')::text
		FROM queen.consumers c`
	stateOf := func(tx pgx.Tx) string {
		t.Helper()
		var s string
		if err := tx.QueryRow(ctx, state).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
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
		if out == nil {
			out = []string{}
		}
		return out
	}

	type leased struct{ group, pid, tx, lease string }
	var held []leased
	var nFast, nGeneral, nFastMsgs, nFastCapped, nFastUnlearnt, nMissed int
	for step := 0; step < 600; step++ {
		switch rnd.IntN(10) {
		case 0, 1:
			push()
		case 2:
			exec(`UPDATE queen.consumers SET lease_expires_at = clock_timestamp() - interval '1 s'
				WHERE lease_id IS NOT NULL AND random() < 0.5`)
		case 3, 4:
			if len(held) > 0 {
				rnd.Shuffle(len(held), func(i, j int) { held[i], held[j] = held[j], held[i] })
				k := 1 + rnd.IntN(len(held))
				var ack []pg.AckRow
				for _, h := range held[:k] {
					st := protocol.AckStatus("completed")
					if rnd.IntN(6) == 0 {
						st = "failed"
					}
					ack = append(ack, pg.AckRow{Group: h.group, PartitionID: h.pid, TxID: h.tx, Status: st, LeaseID: h.lease})
				}
				if _, err := db.Ack(ctx, "t", ack); err != nil {
					t.Fatal(err)
				}
				held = held[k:]
			}
		case 5:
			exec(`DELETE FROM queen.consumers WHERE lease_id IS NULL AND random() < 0.1`)
		case 6:
			// retention took some messages from under the cursors
			exec(`DELETE FROM queen.messages WHERE random() < 0.03`)
		case 7:
			// consumer rows without their group's marker (a group delete's
			// leftovers, a seek of a group never popped): the fast claim
			// must miss, whatever the node says it knows
			exec(`DELETE FROM queen.consumer_groups_metadata WHERE random() < 0.15`)
		}

		q := queues[rnd.IntN(len(queues))]
		group := groups[rnd.IntN(len(groups))]
		names := append([]string(nil), parts...)
		rnd.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
		names = names[:1+rnd.IntN(len(names))]
		if rnd.IntN(10) == 0 {
			names[0] = "px" // no such partition
		}
		maxParts := 1
		if rnd.IntN(6) == 0 {
			maxParts = 2
		}
		caps := []int64{0, 1, 700, 1500, 4000}
		a := pg.PopArgs{Tenant: "t", Queue: q, Group: group, Names: names, ScanLimit: 4, Budget: 1 + rnd.IntN(10),
			MaxParts: maxParts, LeaseID: uuid.NewString(), AutoAck: rnd.IntN(10) == 0, Owner: "o",
			SubMode: []protocol.SubMode{protocol.SubAll, protocol.SubNew}[rnd.IntN(2)], MaxBytes: caps[rnd.IntN(len(caps))]}
		if rnd.IntN(2) == 0 {
			a.LeaseSeconds = 600
		}

		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "SAVEPOINT s"); err != nil {
			t.Fatal(err)
		}
		// What the node knows: exactly the missing rows, nothing (a node
		// that has not learnt the pair), or none of the names (nothing
		// learnt yet of these partitions). The fast claim is tried in every
		// case: with the first row missing it must answer nothing.
		firstMissing := slices.Contains(missing(tx, q, group, names), names[0])
		switch rnd.IntN(3) {
		case 0:
			a.Unprov = missing(tx, q, group, names)
		case 1:
			a.Unprov = nil
		default:
			a.Unprov = slices.Clone(names)
		}
		// The fast claim must answer when it can: a plain queue, the group's
		// marker and the first candidate's row present, with no live lease
		// and no acked gap.
		var plainRow bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM queen.consumers c
				JOIN queen.partitions p ON p.id = c.partition_id JOIN queen.queues q ON q.id = p.queue_id
				JOIN queen.consumer_groups_metadata md ON md.queue_id = q.id AND md.consumer_group = c.consumer_group
				WHERE q.tenant = 't' AND q.name = $1 AND p.name = $2 AND c.consumer_group = $3
				  AND q.delayed_processing = 0 AND q.window_buffer = 0 AND cardinality(c.acked) = 0
				  AND (c.lease_expires_at IS NULL OR c.lease_expires_at <= clock_timestamp()))`,
			q, names[0], group).Scan(&plainRow); err != nil {
			t.Fatal(err)
		}
		want, err := pg.PopTx(ctx, tx, a)
		if err != nil {
			t.Fatal(err)
		}
		wantState := stateOf(tx)
		if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT s"); err != nil {
			t.Fatal(err)
		}
		got, fast, err := pg.PopFastTx(ctx, tx, a)
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		gotState := stateOf(tx)
		desc := fmt.Sprintf("step %d (queue %s group %s names %v unprov %v budget %d parts %d auto %v cap %d fast %v)",
			step, q, group, names, a.Unprov, a.Budget, maxParts, a.AutoAck, a.MaxBytes, fast)
		if w, g := popString(want), popString(got); w != g {
			t.Fatalf("%s: outcomes differ\npop_v3:\n%s\nfast path:\n%s", desc, w, g)
		}
		if fast {
			// pop_v3 first provisions every candidate the node says may
			// lack its row; the fast claim evaluates only the first
			// candidate and provisions nothing, so the others are
			// provisioned when a claim evaluates them (the node passes
			// Unprov for that). Those rows aside, the states agree.
			wantState = withoutRows(t, wantState, gotState)
		}
		if wantState != gotState {
			t.Fatalf("%s: consumer rows differ\npop_v3: %s\nfast path: %s", desc, wantState, gotState)
		}
		if shouldBeFast := plainRow && pg.FastClaimable(a) && want.Verdicts[0].Kind == protocol.VerdictTook; shouldBeFast != fast {
			t.Fatalf("%s: the fast claim answered %v, want %v", desc, fast, shouldBeFast)
		}
		for i, v := range got.Verdicts {
			if d := v.Until.Sub(want.Verdicts[i].Until); d > 5*time.Second || d < -5*time.Second {
				t.Fatalf("%s: verdict %d ends %v, pop_v3's %v", desc, i, v.Until, want.Verdicts[i].Until)
			}
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if fast && (a.Unprov == nil || slices.Contains(a.Unprov, names[0])) {
			nFastUnlearnt++ // a row the node had not learnt: a hit
		}
		if pg.FastClaimable(a) && firstMissing {
			nMissed++ // tried, no row: answered by pop_v3, compared above
		}
		if fast {
			nFast++
			nFastMsgs += len(got.Messages)
			if a.MaxBytes > 0 && len(got.Messages) < a.Budget && !got.Verdicts[0].Drained {
				nFastCapped++
			}
		} else {
			nGeneral++
		}
		if !a.AutoAck {
			for _, m := range got.Messages {
				held = append(held, leased{group, m.PartitionID, m.TxID, a.LeaseID})
			}
		}
	}
	t.Logf("fast claims %d (%d messages, %d cut by the byte cap, %d on rows the node had not learnt), general %d (%d after a fast miss)",
		nFast, nFastMsgs, nFastCapped, nFastUnlearnt, nGeneral, nMissed)
	if nFast < 40 || nGeneral < 100 || nFastCapped < 5 || nFastUnlearnt < 20 || nMissed < 10 {
		t.Fatalf("too few cases exercised: fast %d, byte-capped %d, unlearnt %d, general %d, missed %d",
			nFast, nFastCapped, nFastUnlearnt, nGeneral, nMissed)
	}
}

// withoutRows drops from the consumer rows of want (the state query's JSON
// array) those whose key is not in got.
func withoutRows(t *testing.T, want, got string) string {
	t.Helper()
	var w, g []map[string]any
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(got), &g); err != nil {
		t.Fatal(err)
	}
	keys := map[string]bool{}
	for _, r := range g {
		keys[fmt.Sprint(r["partition_id"], "/", r["consumer_group"])] = true
	}
	var keep []map[string]any
	for _, r := range w {
		if keys[fmt.Sprint(r["partition_id"], "/", r["consumer_group"])] {
			keep = append(keep, r)
		}
	}
	if len(keep) == len(w) {
		return want
	}
	// re-encode both the same way so that only their rows differ
	a, _ := json.Marshal(keep)
	b, _ := json.Marshal(g)
	if string(a) == string(b) {
		return got
	}
	return string(a)
}

// TestFastClaimQualifies pins which claims try the fast statement first.
func TestFastClaimQualifies(t *testing.T) {
	base := pg.PopArgs{Names: []string{"a", "b"}, MaxParts: 1, Budget: 10, LeaseID: "l", Unprov: []string{"b"}}
	cases := []struct {
		name string
		edit func(*pg.PopArgs)
		want bool
	}{
		{"lease, one partition", func(*pg.PopArgs) {}, true},
		{"wildcard", func(a *pg.PopArgs) { a.Names = nil }, false},
		{"two partitions", func(a *pg.PopArgs) { a.MaxParts = 2 }, false},
		{"autoAck", func(a *pg.PopArgs) { a.AutoAck = true }, false},
		{"no lease id", func(a *pg.PopArgs) { a.LeaseID = "" }, false},
		// The statement finds the row or answers nothing (TestFastClaimMatchesGeneral).
		{"first candidate may lack its row", func(a *pg.PopArgs) { a.Unprov = []string{"a"} }, true},
		{"provisioning unknown", func(a *pg.PopArgs) { a.Unprov = nil }, true},
	}
	for _, c := range cases {
		a := base
		c.edit(&a)
		if got := pg.FastClaimable(a); got != c.want {
			t.Errorf("%s: fast %v, want %v", c.name, got, c.want)
		}
	}
	if !slices.Equal(base.Unprov, []string{"b"}) {
		t.Fatal("edited the base")
	}
}

// TestFastClaimByteCapEdges sets the byte cap at each message boundary of a
// partition and one byte to either side, and compares the fast claim with
// pop_v3: the same messages fit, the first one always.
func TestFastClaimByteCapEdges(t *testing.T) {
	db, url := openDB(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	const queue, part, group = "qb", "pb", "gb"
	var rows []pg.PushRow
	for i, n := range []int{0, 37, 300, 5, 120} {
		sub := "s"
		r := pg.PushRow{Queue: queue, Partition: part, TxID: fmt.Sprint("tx", i), ID: uuid.Must(uuid.NewV7()).String(),
			Payload: fmt.Sprintf("%q", strings.Repeat("b", n))}
		if i%2 == 1 {
			r.Sub = &sub
		}
		rows = append(rows, r)
	}
	if _, err := db.Push(ctx, "t", rows); err != nil {
		t.Fatal(err)
	}
	// provision the group's row
	if _, err := db.Pop(ctx, pg.PopArgs{Tenant: "t", Queue: queue, Group: group, Names: []string{"none"}, Budget: 1,
		MaxParts: 1, LeaseID: "x", Owner: "o", SubMode: protocol.SubAll}); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO queen.consumers (partition_id, consumer_group)
		SELECT p.id, $1 FROM queen.partitions p WHERE p.name = $2`, group, part); err != nil {
		t.Fatal(err)
	}
	// each message's size as the claim core counts it (docs/api.md, "Input bounds")
	var edges []int64
	sum := int64(0)
	for _, r := range rows {
		n := int64(len(r.Payload) + len(r.TxID) + len(queue) + 2*len(part) + len(group) + protocol.RowEnvelopeBytes)
		if r.Sub != nil {
			n += int64(len(*r.Sub))
		}
		sum += n
		edges = append(edges, sum)
	}
	checked := 0
	for _, e := range edges {
		for _, cap := range []int64{e - 1, e, e + 1} {
			a := pg.PopArgs{Tenant: "t", Queue: queue, Group: group, Names: []string{part}, Budget: 10, MaxParts: 1,
				LeaseID: uuid.NewString(), Owner: "o", SubMode: protocol.SubAll, MaxBytes: cap, Unprov: []string{}}
			tx, err := conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			want, err := pg.PopTx(ctx, tx, a)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, "ROLLBACK"); err != nil {
				t.Fatal(err)
			}
			tx, err = conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			got, fast, err := pg.PopFastTx(ctx, tx, a)
			if err != nil {
				t.Fatal(err)
			}
			if err := tx.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			if !fast {
				t.Fatalf("cap %d: the fast claim answered nothing", cap)
			}
			if w, g := popString(want), popString(got); w != g {
				t.Fatalf("cap %d: outcomes differ\npop_v3:\n%s\nfast:\n%s", cap, w, g)
			}
			checked++
		}
	}
	if checked != 15 {
		t.Fatalf("checked %d caps", checked)
	}
}

// When PopMany's second transaction (the fast claims that found nothing,
// run as pop_v3) fails, its first has committed: the outcomes of the
// first's jobs come back with the error, for the caller to deliver. Here
// an autoAck claim commits in the first (its cursor moves: were it run
// again, its messages would never be delivered) while the second blocks
// on another session's uncommitted insert of the same consumer row until
// the context ends.
func TestPopManySecondTransactionFails(t *testing.T) {
	db, url := openDB(t)
	ctx := context.Background()
	pushN(t, db, "rq", "p", 5)
	pushN(t, db, "rq", "q2", 1)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	held, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Rollback(ctx)
	if _, err := held.Exec(ctx, `INSERT INTO queen.consumers (partition_id, consumer_group)
		SELECT p.id, 'g' FROM queen.partitions p WHERE p.name = 'q2'`); err != nil {
		t.Fatal(err)
	}
	jobs := []pg.PopArgs{
		{Tenant: "t", Queue: "rq", Group: "g", Names: []string{"p"}, Budget: 10, MaxParts: 1, AutoAck: true,
			Owner: "o", SubMode: protocol.SubAll},
		// believed provisioned: a fast claim, which finds no row it can see
		{Tenant: "t", Queue: "rq", Group: "g", Names: []string{"q2"}, Budget: 10, MaxParts: 1, LeaseID: "l2",
			Owner: "o", SubMode: protocol.SubAll, Unprov: []string{}},
	}
	tctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	outs, err := db.PopMany(tctx, jobs)
	if err == nil {
		t.Fatal("the second transaction did not fail")
	}
	if len(outs) != 2 || outs[0] == nil || len(outs[0].Messages) != 5 || outs[1] != nil {
		t.Fatalf("outcomes after the second transaction failed: %+v (err %v); want the autoAck claim's 5 messages and nil", outs, err)
	}
}
