package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"

	"queen-node/internal/pgtest"
)

func startCombineBroker(t *testing.T, hot bool) (*Broker, string) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.PG.URL = pgtest.NewDatabase(t)
	cfg.NodeName = "popcombine"
	cfg.Maintenance.BufferDir = t.TempDir()
	cfg.Hotlist.Enabled = hot
	cfg.PopCombine = true
	// The tests here count the claims' lock waits; a bulk provisioning
	// pass (broker/provision.go) waiting on the same locks in the
	// background would be counted with them.
	cfg.BulkProvision = false
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := New(ctx, cfg, hclog.NewNullLogger())
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(b.Close)
	return b, cfg.PG.URL
}

type combMsg struct {
	Q string `json:"q"`
	P string `json:"p"`
	N int    `json:"n"`
}

func pushSeq(t *testing.T, b *Broker, queue, part string, from, n int) {
	t.Helper()
	items := make([]PushItem, n)
	for i := range items {
		k := from + i
		items[i] = PushItem{Queue: queue, Partition: part, TransactionID: fmt.Sprintf("%s-%s-%d", queue, part, k),
			Payload: json.RawMessage(fmt.Sprintf(`{"q":%q,"p":%q,"n":%d}`, queue, part, k))}
	}
	res, err := b.Push(context.Background(), "t", nil, items)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Status != "queued" {
			t.Fatalf("push: %+v", r)
		}
	}
}

// TestPopCombinedConcurrent runs many pops at once on overlapping
// partitions of two queues and three groups (named partitions and the
// hot-list's wildcard, batches of all sizes, leases and autoAck): every
// message reaches every group exactly once, in partition order, each pop
// gets only rows of its own queue (and partition), and
// every ack with the pop's lease succeeds. It also checks that claims were
// merged at all.
func TestPopCombinedConcurrent(t *testing.T) {
	b, _ := startCombineBroker(t, true)
	queues := []string{"q0", "q1"}
	parts := []string{"p0", "p1", "p2", "p3"}
	groups := []string{"", "ga", "gb"}
	const perPart = 100
	for _, q := range queues {
		for _, p := range parts {
			pushSeq(t, b, q, p, 1, perPart)
		}
	}
	want := len(queues) * len(parts) * len(groups) * perPart

	var (
		mu      sync.Mutex
		last    = map[string]int{} // queue/group/partition -> last n delivered
		seen    = map[string]bool{}
		total   int
		failure error
	)
	fail := func(err error) {
		mu.Lock()
		if failure == nil {
			failure = err
		}
		mu.Unlock()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(w), 7))
			for {
				mu.Lock()
				stop := total >= want || failure != nil
				mu.Unlock()
				if stop || ctx.Err() != nil {
					return
				}
				req := PopRequest{Queue: queues[rnd.IntN(len(queues))], Group: groups[rnd.IntN(len(groups))],
					Batch: 1 + rnd.IntN(25), SubscriptionMode: "all"}
				// One group autoAcks: two of its pops may return in either
				// order, so only leased groups are checked for order across
				// pops (a leased pop records before it acks, and the next
				// claim of the partition waits for the ack).
				req.AutoAck = req.Group == "gb"
				if rnd.IntN(2) == 0 {
					req.Partition = parts[rnd.IntN(len(parts))]
				} else {
					req.Partitions = 1 + rnd.IntN(3)
				}
				res, err := b.Pop(ctx, "t", req)
				if err != nil {
					fail(fmt.Errorf("pop %+v: %w", req, err))
					return
				}
				if res == nil {
					continue
				}
				var acks []AckItem
				inPop := map[string]int{} // partition -> last n of this response
				mu.Lock()
				for _, m := range res.Messages {
					var c combMsg
					if err := json.Unmarshal(m.Data, &c); err != nil {
						failure = fmt.Errorf("payload %s: %w", m.Data, err)
						break
					}
					if c.Q != req.Queue || c.P != m.Partition || (req.Partition != "" && c.P != req.Partition) {
						failure = fmt.Errorf("pop %+v got %+v (partition %s): not its own", req, c, m.Partition)
						break
					}
					key := c.Q + "/" + req.Group + "/" + c.P
					if seen[key+fmt.Sprint(c.N)] {
						failure = fmt.Errorf("%s: %d delivered twice", key, c.N)
						break
					}
					seen[key+fmt.Sprint(c.N)] = true
					prev, ok := inPop[c.P]
					if (ok && c.N != prev+1) || (!req.AutoAck && c.N != last[key]+1) {
						failure = fmt.Errorf("%s: got %d after %d (earlier in this pop: %v): a loss or out of order",
							key, c.N, last[key], ok)
						break
					}
					inPop[c.P] = c.N
					last[key] = c.N
					total++
					acks = append(acks, AckItem{TransactionID: m.TransactionID, PartitionID: m.PartitionID,
						Group: req.Group, LeaseID: res.LeaseID})
				}
				mu.Unlock()
				if req.AutoAck || len(acks) == 0 {
					continue
				}
				out, err := b.Ack(ctx, "t", acks)
				if err != nil {
					fail(fmt.Errorf("ack: %w", err))
					return
				}
				for _, o := range out {
					if !o.Success {
						fail(fmt.Errorf("ack %+v refused: %s", o, o.Error))
						return
					}
				}
			}
		}(w)
	}
	wg.Wait()
	if failure != nil {
		t.Fatal(failure)
	}
	if total != want {
		t.Fatalf("delivered %d of %d (%v)", total, want, ctx.Err())
	}
	calls, flushes := b.stats.PopSQLCalls.Load(), b.stats.PopFlushes.Load()
	t.Logf("claims %d, transactions %d", calls, flushes)
	if flushes >= calls {
		t.Fatalf("no claim was merged: %d claims in %d transactions", calls, flushes)
	}
}

// TestPopCombinedClientLeaves holds the node's one flush in flight
// (blocked on a table lock) with two more claims waiting behind it, then
// lets the first and third clients leave: the first's flush still claims
// its rows, and its lease must be released when the flush ends; the third
// must never be sent; the second gets its messages in the next flush.
func TestPopCombinedClientLeaves(t *testing.T) {
	b, url := startCombineBroker(t, false)
	ctx := context.Background()
	parts := []string{"p0", "p1", "p2"}
	for _, p := range parts {
		// a first pop provisions the rows, so later claims are merged
		pushSeq(t, b, "q", p, 1, 1)
		res, err := b.Pop(ctx, "t", PopRequest{Queue: "q", Partition: p, Batch: 1, AutoAck: true})
		if err != nil || res == nil {
			t.Fatalf("first pop of %s: %v %v", p, res, err)
		}
		pushSeq(t, b, "q", p, 2, 5)
	}

	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	lockTx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lockTx.Rollback(ctx)
	look, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer look.Close(ctx)
	if _, err := lockTx.Exec(ctx, "LOCK TABLE queen.consumer_groups_metadata IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(2 * time.Millisecond) // polling a condition, not a guess at timing
		}
	}
	waiting := func() int {
		var n int
		if err := look.QueryRow(ctx, `SELECT count(*) FROM pg_locks
			WHERE NOT granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	type popRes struct {
		res *PopResult
		err error
	}
	start := func(part string) (context.CancelFunc, chan popRes) {
		cctx, cancel := context.WithCancel(ctx)
		ch := make(chan popRes, 1)
		go func() {
			r, err := b.Pop(cctx, "t", PopRequest{Queue: "q", Partition: part, Batch: 10})
			ch <- popRes{r, err}
		}()
		return cancel, ch
	}
	pending := func() int {
		b.popc.mu.Lock()
		defer b.popc.mu.Unlock()
		return len(b.popc.pending)
	}
	flushing := func() bool {
		b.popc.mu.Lock()
		defer b.popc.mu.Unlock()
		return b.popc.inflight == 1 && len(b.popc.pending) == 0
	}
	cancelA, chA := start("p0")
	waitFor("the first flush to block", func() bool { return flushing() && waiting() >= 1 })
	_, chB := start("p1")
	waitFor("the second claim to wait", func() bool { return pending() == 1 })
	cancelC, chC := start("p2")
	waitFor("the third claim to wait", func() bool { return pending() == 2 })
	dropped, flushes := b.stats.LeasesDropped.Load(), b.stats.PopFlushes.Load()
	cancelA()
	cancelC()
	if r := <-chA; r.err == nil {
		t.Fatalf("pop A answered %+v after its client left", r.res)
	}
	if r := <-chC; r.err == nil {
		t.Fatalf("pop C answered %+v after its client left", r.res)
	}
	if err := lockTx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	rB := <-chB
	if rB.err != nil || rB.res == nil || len(rB.res.Messages) != 5 {
		t.Fatalf("pop B: %+v %v", rB.res, rB.err)
	}
	waitFor("A's lease to be released", func() bool { return b.stats.LeasesDropped.Load() > dropped })
	waitFor("the combiner to go idle", func() bool {
		b.popc.mu.Lock()
		defer b.popc.mu.Unlock()
		return b.popc.inflight == 0
	})
	// B's flush alone; C, sent with it, would have claimed p2 and had its
	// lease dropped as A's was
	if n, d := b.stats.PopFlushes.Load()-flushes, b.stats.LeasesDropped.Load()-dropped; n != 1 || d != 1 {
		t.Fatalf("%d more transactions and %d leases dropped after A's flush, want 1 and 1 (B's flush, A's lease): C was sent", n, d)
	}
	leases := map[string]bool{}
	rs, err := look.Query(ctx, `SELECT p.name, c.lease_id IS NOT NULL FROM queen.consumers c
		JOIN queen.partitions p ON p.id = c.partition_id ORDER BY p.name`)
	if err != nil {
		t.Fatal(err)
	}
	for rs.Next() {
		var name string
		var held bool
		if err := rs.Scan(&name, &held); err != nil {
			t.Fatal(err)
		}
		leases[name] = held
	}
	if rs.Err() != nil {
		t.Fatal(rs.Err())
	}
	if leases["p0"] || !leases["p1"] || leases["p2"] {
		t.Fatalf("leases held by partition: %v (want only p1: A's released, C never claimed)", leases)
	}
	// and p0's messages are claimable again at once
	res, err := b.Pop(ctx, "t", PopRequest{Queue: "q", Partition: "p0", Batch: 10})
	if err != nil || res == nil || len(res.Messages) != 5 {
		t.Fatalf("pop of p0 after the release: %+v %v", res, err)
	}
}
