package broker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"queen-node/internal/nodetest"
	"queen-node/node"
)

// TestFirstContactScansOnce: the consumers of a node that restarts all
// arrive at once at a queue the node has no ring for. Only one of them runs
// the SQL candidate scan (it reads every partition of the queue); the others
// wait for it and serve from the ring it registered. The scans are held on
// a table lock until all eight pops have begun, so without the wait every
// one of them scans (8).
func TestFirstContactScansOnce(t *testing.T) {
	n1 := nodetest.Start(t)
	const q, parts = "firstq", 300
	items := make([]msg, parts)
	for i := range items {
		items[i] = msg{"queue": q, "partition": fmt.Sprintf("p%03d", i), "payload": i, "transactionId": fmt.Sprintf("seed-%d", i)}
	}
	pushItems(t, n1, items)
	for got := 0; got < parts; {
		ms, _ := pop(t, n1, q, "batch=1000&partitions=1000&autoAck=true&wait=false")
		if ms == nil {
			t.Fatalf("drained %d of %d", got, parts)
		}
		got += len(ms)
	}
	push(t, n1, q, "p007", "late")

	n2 := nodetest.StartConfigOn(t, n1.DBURL, "restarted", func(*node.Config) {})
	data := heldFirstPops(t, n2, q, "batch=10&wait=true&timeout=1000")
	if len(data) != 1 || data[0] != "late" {
		t.Fatalf("delivered %v, want [late] once", data)
	}
	if scans := n2.Broker.Snapshot().Requests.PopScans; scans != 1 {
		t.Fatalf("%d SQL candidate scans for 8 concurrent first pops, want 1", scans)
	}
}

// TestFirstContactOfANewGroup: the first call of a new group creates its
// marker and registers no ring (the ring waits for a marker committed
// before the call), so the waiting pops take turns: one more call, which
// registers the ring, and the rest serve from it. 2 scans, not 8.
func TestFirstContactOfANewGroup(t *testing.T) {
	n := nodetest.Start(t)
	const q = "firstg"
	push(t, n, q, "p1", "one")
	data := heldFirstPops(t, n, q, "consumerGroup=fresh&batch=10&wait=true&timeout=1000")
	if len(data) != 1 || data[0] != "one" {
		t.Fatalf("delivered %v, want [one] once", data)
	}
	if scans := n.Broker.Snapshot().Requests.PopScans; scans != 2 {
		t.Fatalf("%d SQL candidate scans for 8 concurrent first pops of a new group, want 2", scans)
	}
}

// heldFirstPops runs 8 concurrent wildcard pops of queue on n while an
// ACCESS EXCLUSIVE lock on queen.queues holds every SQL call, released
// once all 8 have begun, and returns the data they delivered.
func heldFirstPops(t *testing.T, n *nodetest.Node, q, query string) []string {
	t.Helper()
	ctx := context.Background()
	lock, err := pgx.Connect(ctx, n.DBURL)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close(ctx)
	tx, err := lock.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "LOCK TABLE queen.queues IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	const consumers = 8
	began := n.Broker.Snapshot().Requests.Pops
	var wg sync.WaitGroup
	got := make(chan string, consumers)
	errs := make(chan error, consumers)
	for range consumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Get(n.URL + "/api/v1/pop/queue/" + q + "?" + query)
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			switch resp.StatusCode {
			case http.StatusNoContent:
			case http.StatusOK:
				var ans struct {
					Messages []struct {
						Data any `json:"data"`
					} `json:"messages"`
				}
				if err := json.Unmarshal(body, &ans); err != nil {
					errs <- err
					return
				}
				for _, m := range ans.Messages {
					got <- fmt.Sprint(m.Data)
				}
			default:
				errs <- fmt.Errorf("pop: %d %s", resp.StatusCode, body)
			}
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for n.Broker.Snapshot().Requests.Pops-began < consumers {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d pops began", n.Broker.Snapshot().Requests.Pops-began, consumers)
		}
		time.Sleep(5 * time.Millisecond) // polled with a deadline
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(got)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var data []string
	for d := range got {
		data = append(data, d)
	}
	return data
}
