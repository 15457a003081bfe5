package pg_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"

	"queen-node/internal/pgtest"
	"queen-node/pg"
	"queen-node/protocol"
)

// The claim core's verdicts, straight against PostgreSQL: the hot-list
// builds on exactly these.

func openDB(t *testing.T) (*pg.DB, string) {
	t.Helper()
	url := pgtest.NewDatabase(t)
	db, err := pg.Open(context.Background(), url, 8, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	return db, url
}

func pushN(t *testing.T, db *pg.DB, queue, part string, n int) {
	t.Helper()
	rows := make([]pg.PushRow, n)
	for i := range rows {
		id := fmt.Sprintf("0190a0b0-0000-7000-8000-%012d", time.Now().UnixNano()%1e12+int64(i))
		rows[i] = pg.PushRow{Queue: queue, Partition: part, TxID: fmt.Sprintf("%s-%d-%d", part, time.Now().UnixNano(), i), ID: id, Payload: fmt.Sprint(i)}
	}
	out, err := db.Push(context.Background(), "t", rows)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range out {
		if o.Status != "queued" {
			t.Fatalf("push: %+v", o)
		}
	}
}

func claim(t *testing.T, db *pg.DB, a pg.PopArgs) *pg.PopOutcome {
	t.Helper()
	if a.Tenant == "" {
		a.Tenant = "t"
	}
	if a.Group == "" {
		a.Group = "g"
	}
	if a.MaxParts == 0 {
		a.MaxParts = 1
	}
	if a.ScanLimit == 0 {
		a.ScanLimit = 16
	}
	if a.SubMode == "" {
		a.SubMode = protocol.SubAll
	}
	out, err := db.Pop(context.Background(), a)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func verdicts(out *pg.PopOutcome) map[string]pg.Verdict {
	m := map[string]pg.Verdict{}
	for _, v := range out.Verdicts {
		m[v.Name] = v
	}
	return m
}

func TestClaimTookReportsDrained(t *testing.T) {
	t.Parallel()
	db, _ := openDB(t)
	pushN(t, db, "q", "p", 10)
	out := claim(t, db, pg.PopArgs{Queue: "q", Names: []string{"p"}, Budget: 4, LeaseID: "L1"})
	v := verdicts(out)["p"]
	if v.Kind != protocol.VerdictTook || v.Drained || len(out.Messages) != 4 || v.Until.IsZero() {
		t.Fatalf("budget 4 of 10: %+v, %d messages", v, len(out.Messages))
	}
	if out.Seeded {
		t.Fatal("the first contact must report a fresh marker")
	}
	out = claim(t, db, pg.PopArgs{Queue: "q", Names: []string{"p"}, Budget: 100, LeaseID: "L2", Group: "g2"})
	if v := verdicts(out)["p"]; v.Kind != protocol.VerdictTook || !v.Drained || len(out.Messages) != 10 {
		t.Fatalf("whole backlog: %+v", v)
	}
}

func TestClaimLeasedReportsExpiry(t *testing.T) {
	t.Parallel()
	db, _ := openDB(t)
	pushN(t, db, "q", "p", 3)
	first := verdicts(claim(t, db, pg.PopArgs{Queue: "q", Names: []string{"p"}, Budget: 1, LeaseID: "L1"}))["p"]
	out := claim(t, db, pg.PopArgs{Queue: "q", Names: []string{"p"}, Budget: 1, LeaseID: "L2"})
	v := verdicts(out)["p"]
	if v.Kind != protocol.VerdictLeased || !v.Until.Equal(first.Until) || len(out.Messages) != 0 {
		t.Fatalf("want leased until %v, got %+v", first.Until, v)
	}
	if !out.Seeded {
		t.Fatal("the second contact must see the marker")
	}
}

func TestClaimEmptyAndRequeue(t *testing.T) {
	t.Parallel()
	db, _ := openDB(t)
	pushN(t, db, "q", "a", 1)
	pushN(t, db, "q", "b", 1)
	pushN(t, db, "q", "c", 1)
	out := claim(t, db, pg.PopArgs{Queue: "q", Names: []string{"nothing", "a", "b", "c"}, Budget: 10, MaxParts: 2, LeaseID: "L"})
	v := verdicts(out)
	if v["nothing"].Kind != protocol.VerdictEmpty || v["a"].Kind != protocol.VerdictTook || v["b"].Kind != protocol.VerdictTook || v["c"].Kind != protocol.VerdictRequeue {
		t.Fatalf("verdicts %+v", v)
	}
	// the budget, not only the partition count, ends evaluation
	pushN(t, db, "q", "d", 5)
	pushN(t, db, "q", "e", 5)
	out = claim(t, db, pg.PopArgs{Queue: "q", Names: []string{"d", "e"}, Budget: 5, MaxParts: 5, LeaseID: "L2"})
	if v := verdicts(out); v["d"].Kind != protocol.VerdictTook || v["e"].Kind != protocol.VerdictRequeue {
		t.Fatalf("budget exhausted: %+v", v)
	}
}

func TestClaimBusyWhileRowLocked(t *testing.T) {
	t.Parallel()
	db, url := openDB(t)
	pushN(t, db, "q", "p", 1)
	claim(t, db, pg.PopArgs{Queue: "q", Names: []string{"nothing"}, Budget: 1, LeaseID: "L0"})
	// seed the consumer row, then hold its lock from another connection
	out := claim(t, db, pg.PopArgs{Queue: "q", Names: []string{"p"}, Budget: 1, AutoAck: true})
	if verdicts(out)["p"].Kind != protocol.VerdictTook {
		t.Fatal("setup")
	}
	pushN(t, db, "q", "p", 1)
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	tx, err := conn.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(context.Background(), `SELECT 1 FROM queen.consumers WHERE consumer_group = 'g' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	out = claim(t, db, pg.PopArgs{Queue: "q", Names: []string{"p"}, Budget: 1, LeaseID: "L"})
	if v := verdicts(out)["p"]; v.Kind != protocol.VerdictBusy {
		t.Fatalf("locked row: %+v", v)
	}
}

func TestClaimAutoAckTakesNoLease(t *testing.T) {
	t.Parallel()
	db, _ := openDB(t)
	pushN(t, db, "q", "p", 2)
	out := claim(t, db, pg.PopArgs{Queue: "q", Names: []string{"p"}, Budget: 1, AutoAck: true})
	if v := verdicts(out)["p"]; v.Kind != protocol.VerdictTook || !v.Until.IsZero() {
		t.Fatalf("autoAck: %+v", v)
	}
	out = claim(t, db, pg.PopArgs{Queue: "q", Names: []string{"p"}, Budget: 5, AutoAck: true})
	if len(out.Messages) != 1 || string(out.Messages[0].Payload) != "1" {
		t.Fatalf("autoAck committed the first message: %+v", out.Messages)
	}
}

func TestClaimScanSkipsLeasedAndConsumed(t *testing.T) {
	t.Parallel()
	db, _ := openDB(t)
	pushN(t, db, "q", "leased", 1)
	pushN(t, db, "q", "consumed", 1)
	pushN(t, db, "q", "pending", 1)
	claim(t, db, pg.PopArgs{Queue: "q", Names: []string{"leased"}, Budget: 1, LeaseID: "L"})
	claim(t, db, pg.PopArgs{Queue: "q", Names: []string{"consumed"}, Budget: 1, AutoAck: true})
	out := claim(t, db, pg.PopArgs{Queue: "q", Budget: 10, MaxParts: 10, LeaseID: "L2"})
	v := verdicts(out)
	if len(v) != 1 || v["pending"].Kind != protocol.VerdictTook {
		t.Fatalf("the scan must name only the pending, lease-free partition: %+v", v)
	}
}

func TestReseedPagesInIDOrderAndOverIncludesLeased(t *testing.T) {
	t.Parallel()
	db, _ := openDB(t)
	for i := 0; i < 25; i++ {
		pushN(t, db, "q", fmt.Sprintf("p%02d", i), 1)
	}
	claim(t, db, pg.PopArgs{Queue: "q", Names: []string{"p00"}, Budget: 1, LeaseID: "L"})  // leased: still listed
	claim(t, db, pg.PopArgs{Queue: "q", Names: []string{"p01"}, Budget: 1, AutoAck: true}) // consumed: not listed
	var all []pg.ReseedRow
	after := ""
	for page := 0; page < 10; page++ {
		rows, err := db.ReseedPage(context.Background(), "t", "q", "g", after, 10)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, rows...)
		if len(rows) < 10 {
			break
		}
		after = rows[len(rows)-1].PartitionID
	}
	names := map[string]bool{}
	for i, r := range all {
		names[r.Name] = true
		if i > 0 && all[i-1].PartitionID >= r.PartitionID {
			t.Fatal("pages are not in id order")
		}
	}
	if len(all) != 24 || !names["p00"] || names["p01"] {
		t.Fatalf("reseed listed %d: leased p00 %v, consumed p01 %v", len(all), names["p00"], names["p01"])
	}
}
