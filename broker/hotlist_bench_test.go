package broker_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"queen-node/broker"
	"queen-node/internal/nodetest"
	"queen-node/internal/pgtest"
)

// fillIdle creates a queue of `parts` partitions holding one message each
// and consumes them all, so every partition exists and none has work.
func fillIdle(b *testing.B, n *nodetest.Node, queue string, parts int) {
	b.Helper()
	for p := 0; p < parts; p += 1000 {
		items := make([]msg, 0, 1000)
		for i := p; i < min(p+1000, parts); i++ {
			items = append(items, msg{"queue": queue, "partition": fmt.Sprintf("p%06d", i), "payload": 1})
		}
		if r := n.Do(b, "POST", "/api/v1/push", msg{"items": items}); r.Status != 201 {
			b.Fatalf("prefill: %d %s", r.Status, r.Body)
		}
	}
	for {
		r := n.Do(b, "GET", "/api/v1/pop/queue/"+queue+"?batch=10000&partitions=10000&autoAck=true", nil)
		if r.Status == 204 {
			break
		}
	}
	// The second contact registers the ring. An autoAck "took" goes back
	// to ready (spec), so the ring still names every drained partition once:
	// let pops clear them (one empty probe each) before measuring.
	n.Do(b, "GET", "/api/v1/pop/queue/"+queue+"?batch=1", nil)
	for h := n.Broker.Hotlist(); ; {
		n.Do(b, "GET", "/api/v1/pop/queue/"+queue+"?batch=1", nil)
		if h == nil || h.Stats().Ready+h.Stats().Wheel+h.Stats().Inflight == 0 {
			return
		}
	}
}

// BenchmarkSparseWildcardPop: a queue with 10,000 or 100,000 partitions of
// which one has data. Each iteration pushes one message to a random
// partition, pops it with a wildcard pop (timed), and acks it. The SQL scan
// joins every partition with its consumer row; the hot-list names the one
// candidate. Reports the pop latency percentiles.
func BenchmarkSparseWildcardPop(b *testing.B) {
	for _, parts := range []int{10000, 100000} {
		for _, hot := range []bool{true, false} {
			b.Run(fmt.Sprintf("partitions=%d/hotlist=%v", parts, hot), func(b *testing.B) {
				n := nodetest.Start(b, func(c *broker.Config) { c.Hotlist.Enabled = hot })
				fillIdle(b, n, "sparse", parts)
				sql0 := n.Broker.Stats().PopSQLCalls.Load()
				lat := make([]time.Duration, 0, b.N)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					p := fmt.Sprintf("p%06d", (i*7919)%parts)
					n.Do(b, "POST", "/api/v1/push", msg{"items": []msg{{"queue": "sparse", "partition": p, "payload": i}}})
					t0 := time.Now()
					r := n.Do(b, "GET", "/api/v1/pop/queue/sparse?batch=1&wait=true&timeout=5000", nil)
					lat = append(lat, time.Since(t0))
					if r.Status != 200 {
						b.Fatalf("pop: %d", r.Status)
					}
					m := r.Obj(b)["messages"].([]any)[0].(map[string]any)
					n.Do(b, "POST", "/api/v1/ack", msg{"transactionId": m["transactionId"], "partitionId": m["partitionId"], "leaseId": m["leaseId"]})
				}
				b.StopTimer()
				reportPercentiles(b, "pop", lat)
				b.ReportMetric(float64(n.Broker.Stats().PopSQLCalls.Load()-sql0)/float64(b.N), "sql-calls/pop")
			})
		}
	}
}

// BenchmarkIdleLongPolls: 50 consumers long-poll an idle queue of 10,000
// partitions for the benchmark's duration. Reports the claim SQL calls and
// the PostgreSQL transactions per second they cost (pg_stat_database of the
// test database, minus this benchmark's own reads).
func BenchmarkIdleLongPolls(b *testing.B) {
	for _, hot := range []bool{true, false} {
		b.Run(fmt.Sprintf("hotlist=%v", hot), func(b *testing.B) {
			n := nodetest.Start(b, func(c *broker.Config) { c.Hotlist.Enabled = hot })
			fillIdle(b, n, "idle", 10000)
			xacts := func() int64 {
				count, err := pgtest.TransactionCount(context.Background(), n.DBURL)
				if err != nil {
					b.Fatal(err)
				}
				return count
			}
			time.Sleep(10500 * time.Millisecond) // idle backends flush statistics after 10 s (PGSTAT_IDLE_INTERVAL)
			x0, sql0, start := xacts(), n.Broker.Stats().PopSQLCalls.Load(), time.Now()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				var wg sync.WaitGroup
				for c := 0; c < 50; c++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						n.Do(b, "GET", "/api/v1/pop/queue/idle?wait=true&timeout=2000", nil)
					}()
				}
				wg.Wait()
			}
			b.StopTimer()
			secs := time.Since(start).Seconds()
			time.Sleep(10500 * time.Millisecond) // and the measured window's, likewise
			b.ReportMetric(float64(n.Broker.Stats().PopSQLCalls.Load()-sql0)/secs, "sql-calls/s")
			b.ReportMetric(float64(xacts()-x0-1)/secs, "pg-xacts/s") // minus the first reading itself
		})
	}
}

func reportPercentiles(b *testing.B, name string, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	sorted := append([]time.Duration(nil), d...)
	for i := 1; i < len(sorted); i++ {
		for j := i; j > 0 && sorted[j] < sorted[j-1]; j-- {
			sorted[j], sorted[j-1] = sorted[j-1], sorted[j]
		}
	}
	b.ReportMetric(float64(sorted[len(sorted)/2].Microseconds())/1000, name+"-p50-ms")
	b.ReportMetric(float64(sorted[len(sorted)*99/100].Microseconds())/1000, name+"-p99-ms")
}
