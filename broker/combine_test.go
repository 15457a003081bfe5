package broker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"queen-node/broker"
	"queen-node/internal/nodetest"
)

// Concurrent pushes are combined into fewer transactions (group commit),
// and each still gets exactly its own answer: duplicates across pushes of
// one flush are reported once queued and otherwise duplicate, every queued
// message is stored once, each producer's order holds per partition, and a
// push that fails in PostgreSQL fails alone.
func TestPushCombining(t *testing.T) {
	n := nodetest.Start(t, func(c *broker.Config) { c.PushCombine, c.PushLanes = true, 1 }) // one lane: a push, one flush (lanes: pushlanes_test.go)
	b := n.Broker
	ctx := context.Background()
	const producers, pushes, per, parts = 8, 40, 10, 5
	q := "combine"

	var mu sync.Mutex
	queued := map[string]int{}   // txid -> times answered queued
	answered := map[string]int{} // txid -> answers
	var wg sync.WaitGroup
	errs := make(chan error, producers+1)
	// The invalid pushes start once half the valid ones are answered: a
	// flush that carries one fails and replays each of its pushes alone,
	// so while they run, transactions can outnumber pushes. Combining is
	// judged on the first half, correctness on all of it.
	var done sync.WaitGroup
	done.Add(producers * pushes / 2)
	var half broker.Snapshot
	halfTaken := make(chan struct{})
	go func() { done.Wait(); half = b.Snapshot(); close(halfTaken) }()
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			counted := 0
			defer func() { // a producer that failed early still lets the rest go on
				for ; counted < pushes/2; counted++ {
					done.Done()
				}
			}()
			for i := 0; i < pushes; i++ {
				items := make([]broker.PushItem, per)
				for j := range items {
					// Every 4th item uses a txid that all producers share, so
					// pushes of one flush carry duplicates of each other.
					tx := fmt.Sprintf("p%d-%d-%d", p, i, j)
					if j%4 == 0 {
						tx = fmt.Sprintf("shared-%d-%d", i, j)
					}
					items[j] = broker.PushItem{Queue: q, Partition: fmt.Sprint("part", j%parts), TransactionID: tx,
						Payload: json.RawMessage(fmt.Sprintf(`{"p":%d,"i":%d,"j":%d}`, p, i, j))}
				}
				res, err := b.Push(ctx, broker.DefaultTenant, nil, items)
				if err != nil {
					errs <- fmt.Errorf("producer %d push %d: %v", p, i, err)
					return
				}
				mu.Lock()
				for j, r := range res {
					if r.Index != j || r.TransactionID != items[j].TransactionID {
						mu.Unlock()
						errs <- fmt.Errorf("answer %d of a push is %+v", j, r)
						return
					}
					answered[r.TransactionID]++
					switch r.Status {
					case "queued":
						queued[r.TransactionID]++
					case "duplicate":
					default:
						mu.Unlock()
						errs <- fmt.Errorf("item %s: %+v", r.TransactionID, r)
						return
					}
				}
				mu.Unlock()
				if i < pushes/2 {
					counted++
					done.Done()
				}
			}
		}(p)
	}
	// A push PostgreSQL refuses (its payload is not JSON) fails alone.
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-halfTaken
		for i := 0; i < pushes; i++ {
			_, err := b.Push(ctx, broker.DefaultTenant, nil, []broker.PushItem{{Queue: q, Partition: "part0", TransactionID: fmt.Sprint("bad-", i),
				Payload: json.RawMessage(`{"unterminated`)}})
			if err == nil {
				errs <- fmt.Errorf("a push of invalid JSON succeeded")
				return
			}
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for tx, k := range queued {
		if k != 1 {
			t.Fatalf("%s answered queued %d times", tx, k)
		}
	}
	for tx := range answered {
		if queued[tx] != 1 {
			t.Fatalf("%s was never answered queued", tx)
		}
	}
	if half.Requests.PushFlushes >= half.Requests.Pushes {
		t.Fatalf("%d pushes in %d transactions: nothing was combined", half.Requests.Pushes, half.Requests.PushFlushes)
	}
	st := b.Snapshot()
	t.Logf("first half: %d pushes in %d transactions; all: %d in %d", half.Requests.Pushes, half.Requests.PushFlushes,
		st.Requests.Pushes, st.Requests.PushFlushes)

	// Every queued message is stored once, each producer's in its order.
	last := map[string]int{} // producer/partition -> last (i*per+j)
	got := drainQueue(t, n, q, func(m msg) {
		d := m["data"].(map[string]any)
		if !isShared(m["transactionId"].(string)) {
			k := fmt.Sprint(d["p"], "/", m["partition"])
			seq := int(d["i"].(float64))*per + int(d["j"].(float64))
			if prev, ok := last[k]; ok && seq <= prev {
				t.Fatalf("producer/partition %s out of order: %d after %d", k, seq, prev)
			}
			last[k] = seq
		}
	})
	if got != len(queued) {
		t.Fatalf("popped %d, queued %d", got, len(queued))
	}
}

func isShared(tx string) bool { return len(tx) > 7 && tx[:7] == "shared-" }

// A push stuck behind a lock that another transaction holds costs pushes to
// other queues at most the combined flush's bound (2 s), once: its client
// has no deadline, yet a push to an unrelated queue gets through, and the
// stuck push completes when the lock goes.
func TestPushCombiningStuckPushDoesNotBlockOthers(t *testing.T) {
	n := nodetest.Start(t, func(c *broker.Config) { c.PushCombine = true })
	b := n.Broker
	ctx := context.Background()
	for _, q := range []string{"qa", "qb"} {
		if _, err := b.Push(ctx, broker.DefaultTenant, nil, []broker.PushItem{{Queue: q, Payload: json.RawMessage(`1`)}}); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := pgx.Connect(ctx, n.DBURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT 1 FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
		WHERE q.name = 'qb' FOR UPDATE OF p`); err != nil {
		t.Fatal(err)
	}
	stuck := make(chan error, 1)
	go func() {
		_, err := b.Push(ctx, broker.DefaultTenant, nil, []broker.PushItem{{Queue: "qb", Payload: json.RawMessage(`2`)}})
		stuck <- err
	}()
	// Wait until the stuck push is waiting on the lock.
	deadline := time.Now().Add(5 * time.Second)
	for {
		var waiting int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the qb push never waited on the lock")
		}
		time.Sleep(10 * time.Millisecond)
	}
	other := make(chan error, 1)
	go func() {
		_, err := b.Push(ctx, broker.DefaultTenant, nil, []broker.PushItem{{Queue: "qa", Payload: json.RawMessage(`3`)}})
		other <- err
	}()
	select {
	case err := <-other:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(8 * time.Second):
		t.Fatal("a push to an unrelated queue is still blocked behind the stuck one after 8 s")
	}
	_ = tx.Rollback(ctx)
	select {
	case err := <-stuck:
		if err != nil {
			t.Fatalf("the stuck push, once the lock went: %v", err)
		}
	case <-time.After(8 * time.Second):
		t.Fatal("the stuck push did not complete after the lock went")
	}
}
