package pg_test

// BenchmarkAck measures queen.ack_v2 the way consumers ack under the
// standard load: pop a batch under a lease, then ack every message of it,
// completed, with the lease id, in the order received. Only the acks are
// timed. Each shape runs three ways: "general" calls only
// queen.ack_v2_general, the function with its fast path cut out (see
// generalAckSQL: the function as it was before the fast path), "fast" only
// queen.ack_v2, and "alternating" switches between the two pop by pop, so
// that both share the server, the data and whatever else the machine runs
// at the time (each then runs with its caches cooled by the other):
//
//	go run ./cmd/pgtemp -set shared_preload_libraries=pg_stat_statements -- \
//	    go test -run '^$' -bench BenchmarkAck -benchtime 2000x -count 3 ./pg/
//
// ns/op is per ack call (of both functions for "alternating"); per
// function X (general, fast) the metrics are:
//
//	X-us/call     wall time of the call as the client sees it (one round
//	              trip on loopback, commit included)
//	X-cpu-us/call CPU time the server process spent on it (its
//	              /proc/PID/schedstat; only with the server on this host)
//	X-cpu-us/msg  the same per acked message
//	X-pg-us/call  PostgreSQL's mean execution time of the call, without
//	              the commit (with pg_stat_statements loaded)

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"queen-node/pg"
	"queen-node/protocol"
)

func BenchmarkAck(b *testing.B) {
	e := newBenchEnv(b)
	ctx := context.Background()
	e.exec(b, generalAckSQL(b))
	_, err := e.pool.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
	if err == nil {
		_, err = e.pool.Exec(ctx, "SELECT 1 FROM pg_stat_statements LIMIT 1") // fails unless preloaded
	}
	stats := err == nil
	shapes := []struct {
		name        string
		batch, call int // messages popped, messages per ack call
	}{
		{"batch100", 100, 100}, // the whole batch in one call
		{"batch40", 40, 40},    // about the mean call of the standard load
		{"batch10", 10, 10},
		{"batch100by50", 100, 50}, // an ack of a prefix, then one of the rest
		{"batch100by10", 100, 10}, // ten calls: nine acks of a prefix, then the rest
	}
	fns := []struct{ label, fn string }{{"general", "ack_v2_general"}, {"fast", "ack_v2"}}
	modes := []struct {
		name      string
		first     int // the function of the first batch
		alternate bool
	}{{"general", 0, false}, {"fast", 1, false}, {"alternating", 1, true}}
	for _, sh := range shapes {
		for _, mode := range modes {
			b.Run(sh.name+"/"+mode.name, func(b *testing.B) {
				calls := sh.batch / sh.call
				e.exec(b, "TRUNCATE queen.messages") // the same start for every run (prefillQueue keeps them)
				names := e.prefillQueue(b, "q", 1, (b.N+calls-1)/calls*sh.batch/benchBatch+2)
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
				var (
					wall, cpu [2]time.Duration
					n, msgs   [2]int
					cpuOK     = true
					lease     string
					popped    []pg.PopMessage
					k         = 1 - mode.first // the function of the current batch
				)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if len(popped) == 0 {
						b.StopTimer()
						lease = uuid.NewString()
						out, err := e.db.Pop(ctx, pg.PopArgs{Tenant: benchTenant, Queue: "q", Group: benchGroup, Names: names,
							ScanLimit: 16, Budget: sh.batch, MaxParts: 1, LeaseID: lease, LeaseSeconds: 60,
							Owner: "bench", SubMode: protocol.SubAll})
						if err != nil {
							b.Fatalf("pop: %v", err)
						}
						if len(out.Messages) != sh.batch {
							b.Fatalf("pop: %d messages, want %d", len(out.Messages), sh.batch)
						}
						popped = out.Messages
						if mode.alternate || n[0]+n[1] == 0 {
							k = 1 - k
						}
						b.StartTimer()
					}
					part := popped[:sh.call]
					popped = popped[sh.call:]
					m := len(part)
					gs, ps, txs, sts, ls, es := make([]string, m), make([]string, m), make([]string, m),
						make([]string, m), make([]string, m), make([]string, m)
					for j, msg := range part {
						gs[j], ps[j], txs[j], sts[j], ls[j] = benchGroup, msg.PartitionID, msg.TxID, "completed", lease
					}
					c0, ok0 := schedRuntime(backend)
					t0 := time.Now()
					rs, err := conn.Query(ctx, fmt.Sprintf(ackCallSQL, fns[k].fn), benchTenant, gs, ps, txs, sts, ls, es, false)
					if err != nil {
						b.Fatalf("ack: %v", err)
					}
					rows, released := 0, false
					for rs.Next() {
						var idx int
						var ok, rel bool
						if err := rs.Scan(&idx, &ok, nil, nil, nil, &rel, nil, nil, nil, nil, nil); err != nil {
							b.Fatalf("ack: %v", err)
						}
						if !ok {
							b.Fatalf("ack: item %d failed", idx)
						}
						rows++
						released = released || rel
					}
					if rs.Err() != nil {
						b.Fatalf("ack: %v", rs.Err())
					}
					wall[k] += time.Since(t0)
					c1, ok1 := schedRuntime(backend)
					cpu[k] += time.Duration(c1 - c0)
					cpuOK = cpuOK && ok0 && ok1
					n[k]++
					msgs[k] += m
					if rows != m || released != (len(popped) == 0) {
						b.Fatalf("ack: %d rows, released %v", rows, released)
					}
				}
				b.StopTimer()
				for k, f := range fns {
					if n[k] == 0 {
						continue
					}
					b.ReportMetric(float64(wall[k].Microseconds())/float64(n[k]), f.label+"-us/call")
					if cpuOK {
						b.ReportMetric(float64(cpu[k].Nanoseconds())/1e3/float64(n[k]), f.label+"-cpu-us/call")
						b.ReportMetric(float64(cpu[k].Nanoseconds())/1e3/float64(msgs[k]), f.label+"-cpu-us/msg")
					}
					if stats {
						var us float64
						if err := e.pool.QueryRow(ctx, `SELECT COALESCE(sum(total_exec_time) / nullif(sum(calls), 0), 0) * 1000
						FROM pg_stat_statements WHERE toplevel AND query LIKE $1`, "%queen."+f.fn+"($1%").Scan(&us); err != nil {
							b.Fatal(err)
						}
						b.ReportMetric(us, f.label+"-pg-us/call")
					}
				}
			})
		}
	}
}

// schedRuntime is the CPU time, in ns, process pid has spent running (the
// first field of /proc/PID/schedstat).
func schedRuntime(pid int) (int64, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, false
	}
	n, err := strconv.ParseInt(f[0], 10, 64)
	return n, err == nil
}
