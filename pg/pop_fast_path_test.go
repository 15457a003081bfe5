package pg_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"queen-node/pg"
	"queen-node/protocol"
)

// generalPopSQL is pg/sql/functions/20_pop.sql with its set-based fast
// path switched off, renamed queen.pop_v1_general: the message loop alone.
func generalPopSQL(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile("sql/functions/20_pop.sql")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	const fast = "IF v_nacked = 0 AND v_q.delayed_processing = 0 THEN"
	const head = "CREATE OR REPLACE FUNCTION queen.pop_v1("
	if strings.Count(s, fast) != 1 || strings.Count(s, head) != 1 {
		t.Fatal("20_pop.sql: fast path condition or function head not found")
	}
	s = strings.Replace(s, fast, "IF false THEN", 1)
	s = strings.Replace(s, head, "CREATE OR REPLACE FUNCTION queen.pop_v1_general(", 1)
	return s
}

// TestPopFastPathMatchesGeneral runs random pops (named partitions,
// budgets, partition counts, byte caps, autoAck) over partitions with
// holes, acks past gaps and expired leases, each twice in one transaction:
// through the loop alone (rolled back) and through pop_v1, and compares
// the rows answered and the consumer rows written.
func TestPopFastPathMatchesGeneral(t *testing.T) {
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
	if _, err := conn.Exec(ctx, generalPopSQL(t), pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatal(err)
	}

	parts := []string{"p0", "p1", "p2"}
	pushed := map[string][]string{}
	seq := 0
	push := func() {
		p := parts[rnd.IntN(len(parts))]
		n := 1 + rnd.IntN(5)
		var rows []pg.PushRow
		for i := 0; i < n; i++ {
			seq++
			tx := fmt.Sprintf("tx-%d", seq)
			if rnd.IntN(5) == 0 && len(pushed[p]) > 0 {
				tx = pushed[p][rnd.IntN(len(pushed[p]))] // a duplicate (takes no offset)
				skipOffset(t, conn, "q", p)              // a hole, as a deleted message leaves
			}
			payload := fmt.Sprintf("%q", strings.Repeat("x", rnd.IntN(300)))
			rows = append(rows, pg.PushRow{Queue: "q", Partition: p, TxID: tx, ID: uuid.Must(uuid.NewV7()).String(), Payload: payload})
		}
		out, err := db.Push(ctx, "t", rows)
		if err != nil {
			t.Fatal(err)
		}
		for i, o := range out {
			if o.Status == "queued" {
				pushed[p] = append(pushed[p], rows[i].TxID)
			}
		}
	}
	for range 6 {
		push()
	}

	const call = `SELECT (to_jsonb(r) - 'o_until') || jsonb_build_object('until', r.o_until IS NOT NULL)
		FROM queen.%s($1, 'q', 'g', $2::text[], 16, $3, $4, $5, 600, $6, 'o', 'all', NULL, $7::bigint) r`
	const state = `SELECT COALESCE(jsonb_agg((to_jsonb(c) - 'updated_at' - 'lease_expires_at')
			|| jsonb_build_object('live', c.lease_expires_at > clock_timestamp()) ORDER BY c.partition_id), '[]')
		FROM queen.consumers c`
	rows := func(tx pgx.Tx, q string, args ...any) []string {
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

	var nMsgs, nTook int
	defer func() { t.Logf("messages served %d, took verdicts %d", nMsgs, nTook) }()
	type leased struct{ pid, tx, lease string }
	var held []leased
	for step := 0; step < 400; step++ {
		switch rnd.IntN(6) {
		case 0:
			push()
		case 1:
			// expire some leases
			if _, err := conn.Exec(ctx, `UPDATE queen.consumers SET lease_expires_at = clock_timestamp() - interval '1 s'
				WHERE lease_id IS NOT NULL AND random() < 0.5`); err != nil {
				t.Fatal(err)
			}
		case 2:
			// ack some held messages, out of order (gaps, remembered acks)
			if len(held) > 0 {
				rnd.Shuffle(len(held), func(i, j int) { held[i], held[j] = held[j], held[i] })
				k := 1 + rnd.IntN(len(held))
				var ack []pg.AckRow
				for _, h := range held[:k] {
					st := "completed"
					if rnd.IntN(6) == 0 {
						st = "failed"
					}
					ack = append(ack, pg.AckRow{Group: "g", PartitionID: h.pid, TxID: h.tx, Status: protocol.AckStatus(st), LeaseID: h.lease})
				}
				if _, err := db.Ack(ctx, "t", ack); err != nil {
					t.Fatal(err)
				}
				held = held[k:]
			}
		}

		names := append([]string(nil), parts...)
		rnd.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
		names = names[:1+rnd.IntN(len(names))]
		budget := 1 + rnd.IntN(8)
		maxParts := 1 + rnd.IntN(3)
		auto := rnd.IntN(4) == 0
		caps := []int64{0, 1, 300, 700, 1200, 3000}
		maxBytes := caps[rnd.IntN(len(caps))]
		lease := uuid.NewString()
		args := []any{"t", names, budget, maxParts, lease, auto, maxBytes}

		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "SAVEPOINT s"); err != nil {
			t.Fatal(err)
		}
		wantRows := rows(tx, fmt.Sprintf(call, "pop_v1_general"), args...)
		wantState := rows(tx, state)
		if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT s"); err != nil {
			t.Fatal(err)
		}
		gotRows := rows(tx, fmt.Sprintf(call, "pop_v1"), args...)
		gotState := rows(tx, state)
		if strings.Join(wantRows, "\n") != strings.Join(gotRows, "\n") {
			t.Fatalf("step %d (names %v budget %d parts %d auto %v cap %d): rows differ\ngeneral:\n%s\npop_v1:\n%s",
				step, names, budget, maxParts, auto, maxBytes, strings.Join(wantRows, "\n"), strings.Join(gotRows, "\n"))
		}
		if strings.Join(wantState, "") != strings.Join(gotState, "") {
			t.Fatalf("step %d: consumer rows differ\ngeneral: %s\npop_v1:  %s", step, wantState, gotState)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		for _, r := range gotRows {
			if strings.Contains(r, `"o_kind": "msg"`) {
				nMsgs++
			}
			if strings.Contains(r, `"o_verdict": "took"`) {
				nTook++
			}
		}
		if !auto {
			for _, r := range gotRows {
				if strings.Contains(r, `"o_kind": "msg"`) {
					var pid, txid string
					if err := conn.QueryRow(ctx, `SELECT ($1::jsonb)->>'o_pid', ($1::jsonb)->>'o_txid'`, r).Scan(&pid, &txid); err != nil {
						t.Fatal(err)
					}
					held = append(held, leased{pid, txid, lease})
				}
			}
		}
	}
}
