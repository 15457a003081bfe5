package pg_test

// BenchmarkAckCAS compares the CAS ack (pg.AckCAS's statement) with
// queen.ack_v2 for the standard consumer: pop a batch of 100 under a lease,
// then ack all of it, completed, with the lease id. Only the ack is timed;
// the two alternate pop by pop so that both share the server, the data and
// the machine's load:
//
//	go run ./cmd/pgtemp -set shared_preload_libraries=pg_stat_statements -- \
//	    go test -run '^$' -bench BenchmarkAckCAS -benchtime 1000x -count 3 ./pg/
//
// Per path X (ack_v2, cas): X-us/call is the wall time of the call (one
// loopback round trip, commit included), X-cpu-us/call the server process's
// CPU time for it (/proc/PID/schedstat), X-pg-us/call PostgreSQL's mean
// execution time without the commit (with pg_stat_statements loaded).

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"queen-node/pg"
	"queen-node/protocol"
)

func BenchmarkAckCAS(b *testing.B) {
	e := newBenchEnv(b)
	ctx := context.Background()
	_, err := e.pool.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
	if err == nil {
		_, err = e.pool.Exec(ctx, "SELECT 1 FROM pg_stat_statements LIMIT 1") // fails unless preloaded
	}
	stats := err == nil
	const batch = 100
	names := e.prefillQueue(b, "q", 1, b.N+2)
	if stats {
		e.exec(b, "SELECT pg_stat_statements_reset()")
	}
	conn, err := e.pool.Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Release()
	var backend int
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&backend); err != nil {
		b.Fatal(err)
	}
	labels := []string{"ack_v2", "cas"}
	var (
		wall, cpu [2]time.Duration
		n         [2]int
		cpuOK     = true
	)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		lease := uuid.NewString()
		out, err := e.db.Pop(ctx, pg.PopArgs{Tenant: benchTenant, Queue: "q", Group: benchGroup, Names: names,
			ScanLimit: 16, Budget: batch, MaxParts: 1, LeaseID: lease, LeaseSeconds: 60,
			Owner: "bench", SubMode: protocol.SubAll})
		if err != nil {
			b.Fatalf("pop: %v", err)
		}
		if len(out.Messages) != batch {
			b.Fatalf("pop: %d messages, want %d", len(out.Messages), batch)
		}
		ms := out.Messages
		k := i % 2
		b.StartTimer()
		c0, ok0 := schedRuntime(backend)
		t0 := time.Now()
		if k == 0 {
			gs, ps, txs, sts, ls, es := make([]string, batch), make([]string, batch), make([]string, batch),
				make([]string, batch), make([]string, batch), make([]string, batch)
			for j, m := range ms {
				gs[j], ps[j], txs[j], sts[j], ls[j] = benchGroup, m.PartitionID, m.TxID, "completed", lease
			}
			rs, err := conn.Query(ctx, fmt.Sprintf(ackCallSQL, "ack_v2"), benchTenant, gs, ps, txs, sts, ls, es, false)
			if err != nil {
				b.Fatalf("ack: %v", err)
			}
			rows := 0
			for rs.Next() {
				rows++
			}
			if rs.Err() != nil || rows != batch {
				b.Fatalf("ack: %d rows, %v", rows, rs.Err())
			}
		} else {
			// what the broker sends for one whole batch (pg.AckCAS)
			rs, err := conn.Query(ctx, pg.AckCASSQL, []int32{0}, []string{benchTenant}, []string{ms[0].PartitionID},
				[]string{benchGroup}, []string{lease}, []int64{ms[0].Off}, []int64{ms[batch-1].Off}, []int32{batch})
			if err != nil {
				b.Fatalf("cas: %v", err)
			}
			rows := 0
			for rs.Next() {
				rows++
			}
			if rs.Err() != nil || rows != 1 {
				b.Fatalf("cas: %d rows, %v", rows, rs.Err())
			}
		}
		wall[k] += time.Since(t0)
		c1, ok1 := schedRuntime(backend)
		cpu[k] += time.Duration(c1 - c0)
		cpuOK = cpuOK && ok0 && ok1
		n[k]++
	}
	b.StopTimer()
	for k, l := range labels {
		if n[k] == 0 {
			continue
		}
		b.ReportMetric(float64(wall[k].Microseconds())/float64(n[k]), l+"-us/call")
		if cpuOK {
			b.ReportMetric(float64(cpu[k].Nanoseconds())/1e3/float64(n[k]), l+"-cpu-us/call")
		}
		if stats {
			pattern := "%queen.ack_v2($1%"
			if k == 1 {
				pattern = "WITH u AS ( SELECT * FROM unnest($1::int[]%"
			}
			var us float64
			if err := e.pool.QueryRow(ctx, `SELECT COALESCE(sum(total_exec_time) / nullif(sum(calls), 0), 0) * 1000
				FROM pg_stat_statements WHERE toplevel AND regexp_replace(query, '\s+', ' ', 'g') LIKE $1`, pattern).Scan(&us); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(us, l+"-pg-us/call")
		}
	}
}
