package broker_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"queen-node/broker"
	"queen-node/internal/nodetest"
)

// TestConcurrentProducersAndConsumers: 8 producers and 8 consumers in two
// groups, 20,000 messages over 50 partitions. Each group must receive
// exactly the pushed set, every partition in order, and no acked message may
// come back; with the hot-list on and off (the same workload must deliver
// the same set in both modes).
func TestConcurrentProducersAndConsumers(t *testing.T) {
	if testing.Short() {
		t.Skip("long")
	}
	for _, hot := range []bool{true, false} {
		t.Run(fmt.Sprintf("hotlist=%v", hot), func(t *testing.T) {
			concurrentWorkload(t, hot)
		})
	}
}

func concurrentWorkload(t *testing.T, hot bool) {
	n := nodetest.Start(t, func(c *broker.Config) { c.PG.MaxConns = 24; c.Hotlist.Enabled = hot })
	const (
		producers  = 8
		partitions = 50
		total      = 20000
		perPush    = 50
	)
	groups := []string{"g1", "g2"}

	// Each producer owns partitions p where p % producers == id, so per
	// partition the push order is the order one goroutine chose.
	var pushed atomic.Int64
	var pwg sync.WaitGroup
	for id := 0; id < producers; id++ {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			seq := map[int]int{}
			for sent := 0; sent < total/producers; sent += perPush {
				items := make([]msg, perPush)
				for i := range items {
					p := id + producers*((sent/perPush+i)%(partitions/producers+1))
					if p >= partitions {
						p = id
					}
					seq[p]++
					items[i] = msg{"queue": "load", "partition": fmt.Sprintf("p%02d", p),
						"payload": msg{"p": p, "s": seq[p]}}
				}
				pushItems(t, n, items)
				pushed.Add(perPush)
			}
		}()
	}

	type rec struct {
		mu      sync.Mutex
		lastSeq map[string]float64
		seen    map[string]bool
		count   int
	}
	recs := map[string]*rec{}
	for _, g := range groups {
		recs[g] = &rec{lastSeq: map[string]float64{}, seen: map[string]bool{}}
	}
	var failures atomic.Int64
	fail := func(format string, args ...any) {
		if failures.Add(1) < 10 {
			t.Errorf(format, args...)
		}
	}
	done := make(chan struct{})
	var cwg sync.WaitGroup
	for c := 0; c < 8; c++ {
		g := groups[c%2]
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			r := recs[g]
			for {
				select {
				case <-done:
					return
				default:
				}
				ms, _ := pop(t, n, "load", "batch=37&wait=true&timeout=500&consumerGroup="+g)
				if ms == nil {
					continue
				}
				r.mu.Lock()
				for _, m := range ms {
					d := m["data"].(map[string]any)
					key := fmt.Sprintf("%v/%v", d["p"], d["s"])
					part := m["partition"].(string)
					if r.seen[key] {
						fail("group %s: %s delivered again after ack", g, key)
					}
					if s := d["s"].(float64); s != r.lastSeq[part]+1 {
						fail("group %s partition %s: got seq %v after %v", g, part, s, r.lastSeq[part])
					} else {
						r.lastSeq[part] = s
					}
					r.seen[key] = true
					r.count++
				}
				r.mu.Unlock()
				for _, a := range ackAll(t, n, g, "completed", ms) {
					if a["success"] != true {
						fail("ack refused: %v", a)
					}
				}
			}
		}()
	}
	pwg.Wait()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		complete := true
		for _, g := range groups {
			r := recs[g]
			r.mu.Lock()
			if r.count < total {
				complete = false
			}
			r.mu.Unlock()
		}
		if complete || time.Now().After(deadline) || failures.Load() > 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	close(done)
	cwg.Wait()
	for _, g := range groups {
		if c := recs[g].count; c != total {
			t.Fatalf("group %s received %d of %d", g, c, total)
		}
	}
	if pushed.Load() != total {
		t.Fatalf("pushed %d", pushed.Load())
	}
}
