package pg_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"queen-node/pg"
	"queen-node/protocol"
)

// TestClaimSetMatchesSingleClaims is the claim set's differential test
// (pg/claimset.go): random flushes of fast claims over random states, each
// in one transaction, as one claim set (rolled back to a savepoint) and as
// single fast claims in job order. Every claim's outcome and the consumer
// rows written must agree. The flushes hold claims of one consumer row
// twice (the second must find the first's lease), of other tenants'
// queues, of missing partitions and groups, with and without byte caps and
// lease times, and rows another transaction holds; the states hold live
// and expired leases, acked gaps, missing consumer rows and group
// markers, a delayedProcessing and a windowBuffer queue, holes past the
// last message, and messages deleted under the cursors. The claim set runs
// under the generic plan, as the node sends it.
func TestClaimSetMatchesSingleClaims(t *testing.T) {
	db, url := openDB(t)
	ctx := context.Background()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rnd := rand.New(rand.NewPCG(seed, 11))
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	other, err := pgx.Connect(ctx, url) // holds rows now and then
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := conn.Exec(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	tenants := []string{"t", "u"}
	queues := []string{"q", "ql", "qd", "qw"}
	parts := []string{"p0", "p1", "p2", "p3", "p4", "p5"}
	groups := []string{"__QUEUE_MODE__", "ga"}
	seq := 0
	push := func(tenant, q, p string, n int) {
		var rows []pg.PushRow
		for range n {
			seq++
			payload := fmt.Sprintf("%q", strings.Repeat("z", rnd.IntN(600)))
			var sub *string
			if rnd.IntN(3) == 0 {
				s := fmt.Sprint("sub-", rnd.IntN(9))
				sub = &s
			}
			rows = append(rows, pg.PushRow{Queue: q, Partition: p, TxID: fmt.Sprintf("tx-%d", seq),
				ID: uuid.Must(uuid.NewV7()).String(), Payload: payload, Sub: sub})
		}
		if _, err := db.Push(ctx, tenant, rows); err != nil {
			t.Fatal(err)
		}
		if tenant == "t" && rnd.IntN(2) == 0 {
			skipOffset(t, conn, q, p) // a hole past the last message
		}
	}
	for _, tn := range tenants {
		for _, q := range queues {
			for _, p := range parts {
				push(tn, q, p, 1+rnd.IntN(6))
			}
		}
	}
	// A general claim provisions the consumer rows and group markers
	// the fast claims need (pop_v3 inserts those of p_unprov).
	provision := func(tenant, q, group string) {
		t.Helper()
		a := pg.PopArgs{Tenant: tenant, Queue: q, Group: group, Names: parts, Unprov: parts, ScanLimit: 8,
			Budget: 1, MaxParts: 1, LeaseID: uuid.NewString(), Owner: "o", SubMode: protocol.SubAll}
		if _, err := db.Pop(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	for _, tn := range tenants {
		for _, q := range queues {
			for _, g := range groups {
				provision(tn, q, g)
			}
		}
	}
	exec(`UPDATE queen.consumers SET lease_expires_at = clock_timestamp() - interval '1 s'`)
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

	type leased struct{ tenant, group, pid, tx, lease string }
	var held []leased
	var nSets, nInSet, nTook, nMissed, nDup, nCapped, nHoleDrained, nHeld int
	// At least 400 flushes, and more (up to 1,600) until every case the
	// check below counts was exercised: how often each comes up depends on
	// the seed.
	enough := func() bool {
		return nSets >= 200 && nTook >= 150 && nMissed >= 100 && nDup >= 50 && nCapped >= 10 && nHoleDrained >= 5 && nHeld >= 20
	}
	for step := 0; step < 400 || (step < 1600 && !enough()); step++ {
		switch rnd.IntN(10) {
		case 0, 1, 9:
			for range 3 {
				push(tenants[rnd.IntN(2)], queues[rnd.IntN(2)], parts[rnd.IntN(len(parts))], 1+rnd.IntN(12))
			}
		case 2, 8:
			exec(`UPDATE queen.consumers SET lease_expires_at = clock_timestamp() - interval '1 s'
				WHERE lease_id IS NOT NULL AND random() < 0.5`)
		case 3:
			if len(held) > 0 {
				if rnd.IntN(4) == 0 { // out of order: an acked gap
					rnd.Shuffle(len(held), func(i, j int) { held[i], held[j] = held[j], held[i] })
				}
				k := 1 + rnd.IntN(len(held))
				byTenant := map[string][]pg.AckRow{}
				for _, h := range held[:k] {
					st := protocol.AckStatus("completed")
					if rnd.IntN(6) == 0 {
						st = "failed"
					}
					byTenant[h.tenant] = append(byTenant[h.tenant], pg.AckRow{Group: h.group, PartitionID: h.pid,
						TxID: h.tx, Status: st, LeaseID: h.lease})
				}
				for tn, rows := range byTenant {
					if _, err := db.Ack(ctx, tn, rows); err != nil {
						t.Fatal(err)
					}
				}
				held = held[k:]
			}
		case 4:
			exec(`DELETE FROM queen.consumers WHERE lease_id IS NULL AND random() < 0.1`)
		case 5:
			exec(`DELETE FROM queen.messages WHERE random() < 0.03`)
		case 6:
			exec(`DELETE FROM queen.consumer_groups_metadata WHERE random() < 0.1`)
		case 7:
			provision(tenants[rnd.IntN(2)], queues[rnd.IntN(len(queues))], groups[rnd.IntN(len(groups))])
		}

		// One flush: 2 to 8 fast claims, one in four of them again on the
		// consumer row of an earlier one.
		caps := []int64{0, 0, 0, 1, 700, 4000}
		jobs := make([]pg.PopArgs, 2+rnd.IntN(7))
		for i := range jobs {
			if i > 0 && rnd.IntN(4) == 0 {
				a := jobs[rnd.IntN(i)]
				a.LeaseID, a.Budget = uuid.NewString(), 1+rnd.IntN(10)
				jobs[i] = a
				continue
			}
			names := append([]string(nil), parts...)
			rnd.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
			names = names[:1+rnd.IntN(3)]
			if rnd.IntN(12) == 0 {
				names[0] = "px" // no such partition
			}
			group := groups[rnd.IntN(len(groups))]
			if rnd.IntN(12) == 0 {
				group = "gnone" // no such group
			}
			q := queues[rnd.IntN(2)] // mostly the queues the fast claim serves
			if rnd.IntN(4) == 0 {
				q = queues[rnd.IntN(len(queues))]
			}
			jobs[i] = pg.PopArgs{Tenant: tenants[rnd.IntN(2)], Queue: q, Group: group,
				Names: names, ScanLimit: 4, Budget: []int{1 + rnd.IntN(10), 40}[rnd.IntN(2)], MaxParts: 1, LeaseID: uuid.NewString(),
				Owner: fmt.Sprint("o", rnd.IntN(3)), SubMode: protocol.SubAll, MaxBytes: caps[rnd.IntN(len(caps))]}
			if rnd.IntN(2) == 0 {
				jobs[i].LeaseSeconds = 600
			}
		}

		// Now and then another transaction holds a claim's row: both
		// ways must skip it (SKIP LOCKED), not wait.
		var holder pgx.Tx
		if rnd.IntN(5) == 0 {
			a := jobs[rnd.IntN(len(jobs))]
			if holder, err = other.Begin(ctx); err != nil {
				t.Fatal(err)
			}
			var n int
			if err := holder.QueryRow(ctx, `WITH h AS (SELECT 1 FROM queen.consumers c
					JOIN queen.partitions p ON p.id = c.partition_id JOIN queen.queues q ON q.id = p.queue_id
					WHERE q.tenant = $1 AND q.name = $2 AND p.name = $3 AND c.consumer_group = $4 FOR UPDATE OF c)
				SELECT count(*) FROM h`, a.Tenant, a.Queue, a.Names[0], a.Group).Scan(&n); err != nil {
				t.Fatal(err)
			}
			nHeld += n
		}
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "SAVEPOINT s"); err != nil {
			t.Fatal(err)
		}
		want, _, err := pg.FastFlightTx(ctx, tx, jobs, false)
		if err != nil {
			t.Fatalf("step %d, single claims: %v", step, err)
		}
		wantState := stateOf(tx)
		if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT s"); err != nil {
			t.Fatal(err)
		}
		got, sent, err := pg.FastFlightTx(ctx, tx, jobs, true)
		if err != nil {
			t.Fatalf("step %d, claim set: %v", step, err)
		}
		gotState := stateOf(tx)
		for i := range jobs {
			a := jobs[i]
			desc := fmt.Sprintf("step %d job %d of %d (%s/%s/%s group %s budget %d cap %d)", step, i, len(jobs),
				a.Tenant, a.Queue, a.Names[0], a.Group, a.Budget, a.MaxBytes)
			if (want[i] == nil) != (got[i] == nil) {
				t.Fatalf("%s: single claim answered %v, claim set %v", desc, want[i] != nil, got[i] != nil)
			}
			if want[i] == nil {
				nMissed++
				continue
			}
			if w, g := popString(want[i]), popString(got[i]); w != g {
				t.Fatalf("%s: outcomes differ\nsingle:\n%s\nclaim set:\n%s", desc, w, g)
			}
			if d := got[i].Verdicts[0].Until.Sub(want[i].Verdicts[0].Until); d > 5*time.Second || d < -5*time.Second {
				t.Fatalf("%s: lease ends %v, single claim's %v", desc, got[i].Verdicts[0].Until, want[i].Verdicts[0].Until)
			}
			nTook++
			if v := got[i].Verdicts[0]; v.Drained && len(got[i].Messages) < a.Budget &&
				got[i].Messages[len(got[i].Messages)-1].Off < lastOffset(t, conn, a) {
				nHoleDrained++ // drained short of the watermark: all there was
			}
			if a.MaxBytes > 0 && len(got[i].Messages) < a.Budget && !got[i].Verdicts[0].Drained {
				nCapped++
			}
			for k := 0; k < i; k++ {
				b := jobs[k]
				if b.Tenant == a.Tenant && b.Queue == a.Queue && b.Names[0] == a.Names[0] && b.Group == a.Group {
					t.Fatalf("%s: took a consumer row job %d claimed in the same flush", desc, k)
				}
			}
		}
		if wantState != gotState {
			t.Fatalf("step %d: consumer rows differ\nsingle: %s\nclaim set: %s", step, wantState, gotState)
		}
		if sent > 0 {
			nSets++
			nInSet += sent
		}
		seen := map[string]bool{}
		for _, a := range jobs {
			key := a.Tenant + "/" + a.Queue + "/" + a.Names[0] + "/" + a.Group
			if seen[key] {
				nDup++
			}
			seen[key] = true
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if holder != nil {
			if err := holder.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
		}
		for i, out := range got {
			if out != nil {
				for _, m := range out.Messages {
					held = append(held, leased{jobs[i].Tenant, jobs[i].Group, m.PartitionID, m.TxID, jobs[i].LeaseID})
				}
			}
		}
	}
	t.Logf("claim sets %d (%d claims), took %d (%d cut by the byte cap, %d drained below a hole), missed %d, repeated rows %d, rows held %d",
		nSets, nInSet, nTook, nCapped, nHoleDrained, nMissed, nDup, nHeld)
	if !enough() {
		t.Fatalf("too few cases exercised: sets %d, took %d, capped %d, drained below a hole %d, missed %d, repeated %d",
			nSets, nTook, nCapped, nHoleDrained, nMissed, nDup)
	}
}

// lastOffset is the watermark of a's first candidate.
func lastOffset(t *testing.T, conn *pgx.Conn, a pg.PopArgs) int64 {
	t.Helper()
	var last int64
	if err := conn.QueryRow(context.Background(), `SELECT p.last_offset FROM queen.partitions p
		JOIN queen.queues q ON q.id = p.queue_id WHERE q.tenant = $1 AND q.name = $2 AND p.name = $3`,
		a.Tenant, a.Queue, a.Names[0]).Scan(&last); err != nil {
		t.Fatal(err)
	}
	return last
}
