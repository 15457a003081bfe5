package broker

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"queen-node/pg"
	"queen-node/protocol"
)

func memPop(lease, tenant string, until time.Time, parts, per int) (pg.PopArgs, *pg.PopOutcome) {
	args := pg.PopArgs{Tenant: tenant, Queue: "q", Group: QueueMode, LeaseID: lease}
	out := &pg.PopOutcome{}
	for p := 0; p < parts; p++ {
		pid := fmt.Sprintf("00000000-0000-4000-8000-%012d", p)
		out.Verdicts = append(out.Verdicts, pg.Verdict{Name: fmt.Sprint("p", p), PartitionID: pid,
			Kind: protocol.VerdictTook, Until: until})
		for i := 0; i < per; i++ {
			out.Messages = append(out.Messages, pg.PopMessage{Partition: fmt.Sprint("p", p), PartitionID: pid,
				Off: int64(2*i + 1), TxID: fmt.Sprintf("%s-%d-%d", lease, p, i)}) // holes: odd offsets
		}
	}
	return args, out
}

func memTxIDs(out *pg.PopOutcome, pid string) []string {
	var s []string
	for _, m := range out.Messages {
		if m.PartitionID == pid {
			s = append(s, m.TxID)
		}
	}
	slices.Sort(s)
	return s
}

// The lease memory hands a batch out once, only to its tenant and only for
// its exact set of transaction ids, and stays within its bounds: leases,
// bytes, and expiry (abandoned leases do not pile up).
func TestLeaseMemory(t *testing.T) {
	until := time.Now().Add(time.Minute)
	lm := newLeaseMemory(3, 1<<20)
	args, out := memPop("L1", "t1", until, 2, 4)
	lm.rememberPop(args, out)
	pid0 := out.Messages[0].PartitionID
	tx := memTxIDs(out, pid0)
	if b := lm.take("t2", "L1", pid0, QueueMode, tx); b != nil {
		t.Fatal("another tenant got the batch")
	}
	if b := lm.take("t1", "L1", pid0, QueueMode, tx[:3]); b != nil {
		t.Fatal("a part of the batch matched")
	}
	b := lm.take("t1", "L1", pid0, QueueMode, tx)
	if b == nil || b.first != 1 || b.end != 7 || len(b.txids) != 4 || b.partition != "p0" || b.queue != "q" {
		t.Fatalf("batch: %+v", b)
	}
	if b := lm.take("t1", "L1", pid0, QueueMode, tx); b != nil {
		t.Fatal("a batch handed out twice")
	}
	if n, _ := lm.len(); n != 1 {
		t.Fatalf("%d leases, want 1 (the second partition is left)", n)
	}
	// the lease count bound: oldest out first
	for i := 2; i <= 5; i++ {
		a, o := memPop(fmt.Sprint("L", i), "t1", until, 1, 2)
		lm.rememberPop(a, o)
	}
	if n, _ := lm.len(); n != 3 {
		t.Fatalf("%d leases, want 3", n)
	}
	if b := lm.take("t1", "L2", pid0, QueueMode, memTxIDs(memPopOut("L2", until), pid0)); b != nil {
		t.Fatal("an evicted lease is still there")
	}
	if b := lm.take("t1", "L5", pid0, QueueMode, memTxIDs(memPopOut("L5", until), pid0)); b == nil {
		t.Fatal("the newest lease is gone")
	}
	// the byte bound
	lm = newLeaseMemory(1000, 8*(leaseMemBatchOverhead+100*(leaseMemTxIDOverhead+20)))
	for i := 0; i < 50; i++ {
		a, o := memPop(fmt.Sprint("B", i), "t1", until, 1, 100)
		lm.rememberPop(a, o)
		if _, bytes := lm.len(); bytes > lm.maxBytes {
			t.Fatalf("%d bytes held, bound %d", bytes, lm.maxBytes)
		}
	}
	// expiry: expired leases go at the next insert, and are never handed out
	lm = newLeaseMemory(1000, 1<<20)
	past := time.Now().Add(-time.Hour)
	for i := 0; i < 10; i++ {
		a, o := memPop(fmt.Sprint("E", i), "t1", past, 1, 2)
		lm.rememberPop(a, o)
	}
	a, o := memPop("F", "t1", until, 1, 2)
	lm.rememberPop(a, o)
	if n, _ := lm.len(); n != 1 {
		t.Fatalf("%d leases after expiry, want 1", n)
	}
	// autoAck pops and pops without messages are not remembered
	a, o = memPop("G", "t1", until, 1, 2)
	a.AutoAck = true
	lm.rememberPop(a, o)
	if n, _ := lm.len(); n != 1 {
		t.Fatalf("%d leases, an autoAck pop was remembered", n)
	}
	var nilMem *leaseMemory
	nilMem.rememberPop(a, o) // CAS off: a no-op
}

func memPopOut(lease string, until time.Time) *pg.PopOutcome {
	_, o := memPop(lease, "t1", until, 1, 2)
	return o
}
