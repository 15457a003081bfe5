package broker_test

import (
	"context"
	"fmt"
	"math/rand"
	"sync"
	"testing"
	"time"

	"queen-node/internal/nodetest"
)

// Multi-partition leases extended, acked and abandoned concurrently: extend
// and release lock every row of a lease, acks lock theirs in partition
// order; with no common order they deadlock. Zero 5xx over a few seconds.
func TestLeaseExtendAckConcurrentNoDeadlock(t *testing.T) {
	n := nodetest.Start(t)
	q := "leaseorder"
	const parts = 8
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	var mu sync.Mutex
	var bad []string
	report := func(s string) {
		mu.Lock()
		bad = append(bad, s)
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for w := 0; w < 2; w++ { // producers keep every partition busy
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				items := make([]msg, parts*2)
				for j := range items {
					items[j] = msg{"queue": q, "partition": fmt.Sprint("p", j%parts), "payload": i}
				}
				if r := n.DoCtx(ctx, t, "POST", "/api/v1/push", msg{"items": items}); r.Status >= 500 {
					report(fmt.Sprintf("push %d %s", r.Status, r.Body))
				}
			}
		}(w)
	}
	for w := 0; w < 6; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(w)))
			for ctx.Err() == nil {
				r := n.DoCtx(ctx, t, "GET", "/api/v1/pop/queue/"+q+"?batch=40&partitions=8", nil)
				if r.Status >= 500 {
					report(fmt.Sprintf("pop %d %s", r.Status, r.Body))
					continue
				}
				if r.Status != 200 {
					continue
				}
				var ms []msg
				for _, m := range r.Obj(t)["messages"].([]any) {
					ms = append(ms, m.(map[string]any))
				}
				lease := ms[0]["leaseId"].(string)
				// Acks from the last partition to the first, an extend and a
				// second extend racing them.
				acks := make([]msg, len(ms))
				for i, m := range ms {
					acks[len(ms)-1-i] = msg{"transactionId": m["transactionId"], "partitionId": m["partitionId"],
						"leaseId": lease, "status": "completed"}
				}
				var inner sync.WaitGroup
				for k := 0; k < 2; k++ {
					inner.Add(1)
					go func() {
						defer inner.Done()
						if r := n.DoCtx(ctx, t, "POST", "/api/v1/lease/"+lease+"/extend", msg{"seconds": 30}); r.Status >= 500 {
							report(fmt.Sprintf("extend %d %s", r.Status, r.Body))
						}
					}()
				}
				split := rng.Intn(len(acks) + 1)
				for _, part := range [][]msg{acks[:split], acks[split:]} {
					if len(part) == 0 {
						continue
					}
					if r := n.DoCtx(ctx, t, "POST", "/api/v1/ack/batch", msg{"acknowledgments": part}); r.Status >= 500 {
						report(fmt.Sprintf("ack %d %s", r.Status, r.Body))
					}
				}
				inner.Wait()
			}
		}(w)
	}
	wg.Wait()
	if len(bad) > 0 {
		t.Fatalf("%d requests answered 5xx; first: %s", len(bad), bad[0])
	}
}
