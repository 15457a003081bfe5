package broker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"queen-node/broker"
	"queen-node/internal/nodetest"
)

// Concurrency tests for issue 9 items 3, 4 and 5: many goroutines through
// real HTTP against a real PostgreSQL. Pass/fail is deterministic: zero 5xx,
// and everything answered as stored can be popped back.

// call is one HTTP request that may run in any goroutine (nodetest.Node.Do
// calls t.Fatal, which only the test goroutine may).
func call(ctx context.Context, n *nodetest.Node, method, path string, body any) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		buf, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(buf)
	}
	req, err := http.NewRequestWithContext(ctx, method, n.URL+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, data, err
}

// errCounter keeps the first few unexpected answers for the failure message.
type errCounter struct {
	mu    sync.Mutex
	n     int
	first []string
}

func (e *errCounter) add(format string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.n++
	if len(e.first) < 8 {
		e.first = append(e.first, fmt.Sprintf(format, args...))
	}
}

func (e *errCounter) check(t *testing.T, what string, total int64) {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.n > 0 {
		t.Fatalf("%s: %d of %d requests answered badly; first: %q", what, e.n, total, e.first)
	}
}

// drain pops queue with autoAck until it is empty and returns the
// transaction ids it received (duplicates counted).
func drain(t *testing.T, n *nodetest.Node, queue string) map[string]int {
	t.Helper()
	got := map[string]int{}
	for {
		ms, _ := pop(t, n, queue, "batch=10000&partitions=256&autoAck=true")
		if ms == nil {
			return got
		}
		for _, m := range ms {
			got[m["transactionId"].(string)]++
		}
	}
}

func checkDelivered(t *testing.T, queue string, want map[string]bool, got map[string]int) {
	t.Helper()
	for tx, c := range got {
		if !want[tx] {
			t.Errorf("%s: popped %s, never answered queued", queue, tx)
		} else if c != 1 {
			t.Errorf("%s: popped %s %d times", queue, tx, c)
		}
	}
	for tx := range want {
		if got[tx] == 0 {
			t.Errorf("%s: %s answered queued but never popped", queue, tx)
		}
	}
}

// Item 3: producers pushing batches of 100 to random partitions among 100 new
// ones deadlocked in push_v2 (it locked the partitions it found, then waited
// on another push's uncommitted insert of a missing one).
func TestPushToNewPartitionsNoDeadlock(t *testing.T) {
	n := nodetest.Start(t, func(c *broker.Config) { c.PG.MaxConns = 24 })
	const (
		producers  = 8
		partitions = 100
		batch      = 100
		rounds     = 12 // a fresh queue (100 new partitions) per round
		perRound   = 3  // pushes per producer per round
	)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var bad errCounter
	var requests atomic.Int64
	queued := make([]map[string]bool, rounds)
	var mu sync.Mutex
	for r := range queued {
		queued[r] = map[string]bool{}
	}
	for r := 0; r < rounds; r++ {
		queue := fmt.Sprintf("newparts-%d", r)
		var wg sync.WaitGroup
		for p := 0; p < producers; p++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := 0; k < perRound; k++ {
					items := make([]msg, batch)
					for i := range items {
						items[i] = msg{"queue": queue, "partition": fmt.Sprintf("p%03d", rand.IntN(partitions)),
							"transactionId": fmt.Sprintf("r%d-p%d-k%d-i%d", r, p, k, i), "payload": i}
					}
					requests.Add(1)
					st, body, err := call(ctx, n, "POST", "/api/v1/push", msg{"items": items})
					if err != nil || st != 201 {
						bad.add("push: %d %v %.200s", st, err, body)
						continue
					}
					var res []msg
					if err := json.Unmarshal(body, &res); err != nil {
						bad.add("push: %v", err)
						continue
					}
					mu.Lock()
					for _, x := range res {
						if x["status"] != "queued" {
							bad.add("push item: %v", x)
							continue
						}
						queued[r][x["transactionId"].(string)] = true
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
	}
	bad.check(t, "push", requests.Load())
	for r := 0; r < rounds; r++ {
		queue := fmt.Sprintf("newparts-%d", r)
		checkDelivered(t, queue, queued[r], drain(t, n, queue))
	}
}

// Item 4: concurrent transactions with two or more push operations deadlocked
// (each operation locked its partitions separately, with no global order).
func TestTransactionsWithSeveralPushesNoDeadlock(t *testing.T) {
	n := nodetest.Start(t, func(c *broker.Config) { c.PG.MaxConns = 24 })
	const (
		workers    = 27
		perWorker  = 6
		partitions = 12
		queue      = "txpush"
	)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var bad errCounter
	var requests atomic.Int64
	var mu sync.Mutex
	queued := map[string]bool{}
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < perWorker; k++ {
				// 2-4 push operations, each to partitions in a random order:
				// without a global lock order two transactions cross.
				nops := 2 + rand.IntN(3)
				ops := make([]msg, nops)
				for o := range ops {
					items := make([]msg, 1+rand.IntN(5))
					for i := range items {
						items[i] = msg{"queue": queue, "partition": fmt.Sprintf("p%02d", rand.IntN(partitions)),
							"transactionId": fmt.Sprintf("w%d-k%d-o%d-i%d", w, k, o, i), "payload": i}
					}
					ops[o] = msg{"type": "push", "items": items}
				}
				requests.Add(1)
				st, body, err := call(ctx, n, "POST", "/api/v1/transaction", msg{"operations": ops, "requiredLeases": []string{}})
				if err != nil || st != 200 {
					bad.add("transaction: %d %v %.200s", st, err, body)
					continue
				}
				var res struct {
					Success bool
					Error   *string
					Results []msg
				}
				if err := json.Unmarshal(body, &res); err != nil || !res.Success {
					bad.add("transaction: %v %.200s", err, body)
					continue
				}
				mu.Lock()
				for _, x := range res.Results {
					if x["status"] == "queued" {
						queued[x["transactionId"].(string)] = true
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	bad.check(t, "transaction", requests.Load())
	checkDelivered(t, queue, queued, drain(t, n, queue))
}
