package broker_test

import (
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"queen-node/broker"
	"queen-node/internal/nodetest"
)

// Node benchmarks go through real HTTP into an in-process node on the
// test PostgreSQL. Compare them with the raw ceilings of pg's
// storage benchmarks in the same run (make bench); see docs/benchmarks.md.

var payload256 = map[string]any{"pad": strings.Repeat("x", 244)} // 256 bytes of JSON

func benchItems(queue string, part, n int) []msg {
	items := make([]msg, n)
	for i := range items {
		items[i] = msg{"queue": queue, "partition": fmt.Sprintf("p%03d", part), "payload": payload256}
	}
	return items
}

// BenchmarkNodePush: concurrent clients push batches of 100 messages.
func BenchmarkNodePush(b *testing.B) {
	n := nodetest.Start(b)
	var part atomic.Int64
	b.SetParallelism(4)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		p := int(part.Add(1))
		items := benchItems("bench-push", p, 100)
		for pb.Next() {
			if r := n.Do(b, "POST", "/api/v1/push", msg{"items": items}); r.Status != 201 {
				b.Fatalf("push: %d %s", r.Status, r.Body)
			}
		}
	})
	b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkNodePopAck: concurrent consumers pop batches of 100 and ack them
// with one batch ack, on a pre-filled queue of 32 partitions.
func BenchmarkNodePopAck(b *testing.B) {
	for _, hot := range []bool{true, false} {
		for _, wait := range []string{"false", "true"} {
			b.Run(fmt.Sprintf("hotlist=%v/wait=%s", hot, wait), func(b *testing.B) {
				n := nodetest.Start(b, func(c *broker.Config) { c.Hotlist.Enabled = hot })
				const parts = 32
				total := (b.N + 8) * 100
				for p := 0; p < parts; p++ {
					for sent := 0; sent < total/parts+100; sent += 1000 {
						if r := n.Do(b, "POST", "/api/v1/push", msg{"items": benchItems("bench-pop", p, 1000)}); r.Status != 201 {
							b.Fatalf("prefill: %d", r.Status)
						}
					}
				}
				var got atomic.Int64
				b.SetParallelism(4)
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						r := n.Do(b, "GET", "/api/v1/pop/queue/bench-pop?batch=100&wait="+wait+"&timeout=2000", nil)
						if r.Status == 204 {
							continue
						}
						body := r.Obj(b)
						ms := body["messages"].([]any)
						acks := make([]msg, len(ms))
						for i, m := range ms {
							mm := m.(map[string]any)
							acks[i] = msg{"transactionId": mm["transactionId"], "partitionId": mm["partitionId"], "leaseId": mm["leaseId"]}
						}
						if r := n.Do(b, "POST", "/api/v1/ack/batch", msg{"acknowledgments": acks}); r.Status != 200 {
							b.Fatalf("ack: %d %s", r.Status, r.Body)
						}
						got.Add(int64(len(ms)))
					}
				})
				b.ReportMetric(float64(got.Load())/b.Elapsed().Seconds(), "msgs/s")
				b.ReportMetric(float64(n.Broker.Stats().PopSQLCalls.Load())/float64(b.N), "sql-calls/pop")
			})
		}
	}
}

// BenchmarkNodeLatency reports p50/p99 of a single-message push and a
// single-message pop (batch=1, wait=false) plus its ack, one client.
func BenchmarkNodeLatency(b *testing.B) {
	n := nodetest.Start(b)
	pushLat := make([]time.Duration, 0, b.N)
	popLat := make([]time.Duration, 0, b.N)
	item := benchItems("bench-lat", 0, 1)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if r := n.Do(b, "POST", "/api/v1/push", msg{"items": item}); r.Status != 201 {
			b.Fatalf("push: %d", r.Status)
		}
		t1 := time.Now()
		r := n.Do(b, "GET", "/api/v1/pop/queue/bench-lat?batch=1", nil)
		t2 := time.Now()
		if r.Status != 200 {
			b.Fatalf("pop: %d %s", r.Status, r.Body)
		}
		m := r.Obj(b)["messages"].([]any)[0].(map[string]any)
		n.Do(b, "POST", "/api/v1/ack", msg{"transactionId": m["transactionId"], "partitionId": m["partitionId"], "leaseId": m["leaseId"]})
		pushLat = append(pushLat, t1.Sub(t0))
		popLat = append(popLat, t2.Sub(t1))
	}
	b.StopTimer()
	report := func(name string, d []time.Duration) {
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		b.ReportMetric(float64(d[len(d)/2].Microseconds())/1000, name+"-p50-ms")
		b.ReportMetric(float64(d[len(d)*99/100].Microseconds())/1000, name+"-p99-ms")
	}
	report("push", pushLat)
	report("pop", popLat)
}
