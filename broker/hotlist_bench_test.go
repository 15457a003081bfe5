package broker_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"queen-node/broker"
	"queen-node/internal/nodetest"
)

// BenchmarkSparseWildcardPop: a queue with 2,000 partitions of which only
// a few have work at any time. Each iteration pushes one message to a
// random partition and pops it with a wildcard pop, then acks. The SQL scan
// must join all partitions with their consumer rows and order randomly; the
// hot-list names the one candidate.
func BenchmarkSparseWildcardPop(b *testing.B) {
	for _, hot := range []bool{true, false} {
		b.Run(fmt.Sprintf("hotlist=%v", hot), func(b *testing.B) {
			n := nodetest.Start(b, func(c *broker.Config) { c.Hotlist = hot })
			const parts = 2000
			for p := 0; p < parts; p += 500 {
				items := make([]msg, 0, 500)
				for i := p; i < p+500; i++ {
					items = append(items, msg{"queue": "sparse", "partition": fmt.Sprintf("p%04d", i), "payload": 1})
				}
				n.Do(b, "POST", "/api/v1/push", msg{"items": items})
			}
			drain := func() {
				for {
					r := n.Do(b, "GET", "/api/v1/pop/queue/sparse?batch=100&partitions=50&autoAck=true", nil)
					if r.Status == 204 {
						return
					}
				}
			}
			drain()
			drain()
			sql0 := n.Broker.Stats().PopSQLCalls.Load()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				p := fmt.Sprintf("p%04d", (i*7919)%parts)
				n.Do(b, "POST", "/api/v1/push", msg{"items": []msg{{"queue": "sparse", "partition": p, "payload": i}}})
				r := n.Do(b, "GET", "/api/v1/pop/queue/sparse?batch=1&wait=true&timeout=5000", nil)
				if r.Status != 200 {
					b.Fatalf("pop: %d", r.Status)
				}
				m := r.Obj(b)["messages"].([]any)[0].(map[string]any)
				n.Do(b, "POST", "/api/v1/ack", msg{"transactionId": m["transactionId"], "partitionId": m["partitionId"], "leaseId": m["leaseId"]})
			}
			b.StopTimer()
			b.ReportMetric(float64(n.Broker.Stats().PopSQLCalls.Load()-sql0)/float64(b.N), "sql-calls/pop")
		})
	}
}

// BenchmarkIdleLongPolls: 50 consumers parked on 50 idle queues for the
// benchmark's duration. Reports the claim SQL calls per second they cost.
func BenchmarkIdleLongPolls(b *testing.B) {
	for _, hot := range []bool{true, false} {
		b.Run(fmt.Sprintf("hotlist=%v", hot), func(b *testing.B) {
			n := nodetest.Start(b, func(c *broker.Config) { c.Hotlist = hot })
			const consumers = 50
			for i := 0; i < consumers; i++ {
				q := fmt.Sprintf("idle-%d", i)
				n.Do(b, "GET", "/api/v1/pop/queue/"+q+"?batch=1", nil)
				n.Do(b, "GET", "/api/v1/pop/queue/"+q+"?batch=1", nil)
			}
			sql0 := n.Broker.Stats().PopSQLCalls.Load()
			start := time.Now()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				var wg sync.WaitGroup
				for c := 0; c < consumers; c++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						n.Do(b, "GET", fmt.Sprintf("/api/v1/pop/queue/idle-%d?wait=true&timeout=1000", c), nil)
					}()
				}
				wg.Wait()
			}
			b.StopTimer()
			b.ReportMetric(float64(n.Broker.Stats().PopSQLCalls.Load()-sql0)/time.Since(start).Seconds(), "sql-calls/s")
		})
	}
}
