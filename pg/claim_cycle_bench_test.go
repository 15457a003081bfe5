package pg_test

// BenchmarkClaimCycle measures what one consumer's cycle costs PostgreSQL:
// a claim of 10 messages under a lease on one of 100 pre-filled partitions,
// then the CAS ack of that batch, each its own transaction, serially. Mode
// "general" claims through queen.pop_v3 only, "fast" as pg.DB.Pop does
// (the fast claim, docs/storage.md). With pg_stat_statements loaded, the
// log lists the statements' mean execution times (track = all shows the
// statements inside the functions too):
//
//	go run ./cmd/pgtemp -set shared_preload_libraries=pg_stat_statements \
//	    -set pg_stat_statements.track=all -set fsync=on -set synchronous_commit=on -- \
//	    go test -run '^$' -bench BenchmarkClaimCycle -benchtime 3000x -v ./pg/
//
// srv-cpu-us/cycle is the CPU time of the database's server processes
// (their /proc/PID/schedstat, commits included) per cycle; only with the
// server on this host.
//
// BenchmarkPushSpread measures a push of 100 rows into one partition and
// into 100 (one row each), the shape of the standard workload's pushes
// (srv-cpu-us/row as above): "general" through queen.push_v4, "fast" as the
// fast push with every partition waited for (pg.DB.Push, a combiner's
// second attempt), "fastskip" as a combiner's first attempt (skip-locked).

import (
	"context"
	"fmt"
	"testing"

	"queen-node/pg"
	"queen-node/protocol"
)

// srvCPU is the CPU time (ns) of this database's backends.
func (e *benchEnv) srvCPU(b *testing.B) int64 {
	return e.cpuOf(b, `SELECT pid FROM pg_stat_activity WHERE datname = current_database()`)
}

// cpuOf sums the CPU time (ns, /proc/PID/schedstat) of the server
// processes whose pids query returns.
func (e *benchEnv) cpuOf(b *testing.B, query string) int64 {
	rs, err := e.pool.Query(context.Background(), query)
	if err != nil {
		b.Fatal(err)
	}
	defer rs.Close()
	var sum int64
	for rs.Next() {
		var pid int
		if err := rs.Scan(&pid); err != nil {
			b.Fatal(err)
		}
		n, _ := schedRuntime(pid)
		sum += n
	}
	return sum
}

// logStatements logs the statements called at least min times, by total
// execution time, when pg_stat_statements is loaded.
func (e *benchEnv) logStatements(b *testing.B, min int) {
	rs, err := e.pool.Query(context.Background(), `SELECT calls, round((total_exec_time / calls * 1000)::numeric, 1),
		round((total_plan_time / calls * 1000)::numeric, 1), left(regexp_replace(query, '\s+', ' ', 'g'), 100)
		FROM pg_stat_statements WHERE calls >= $1 ORDER BY total_exec_time DESC LIMIT 10`, min)
	if err != nil {
		return // not loaded
	}
	defer rs.Close()
	for rs.Next() {
		var calls int64
		var us, plan float64
		var q string
		if err := rs.Scan(&calls, &us, &plan, &q); err != nil {
			return
		}
		b.Logf("%6d calls %8.1f us (planning %.1f us)  %s", calls, us, plan, q)
	}
}

func (e *benchEnv) resetStatements() {
	_, _ = e.pool.Exec(context.Background(), "CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
	_, _ = e.pool.Exec(context.Background(), "SELECT pg_stat_statements_reset()")
}

func BenchmarkClaimCycle(b *testing.B) {
	e := newBenchEnv(b)
	ctx := context.Background()
	const budget, nparts = 10, 100
	for _, mode := range []string{"general", "fast"} { // "fastskip" is a push mode (BenchmarkPushSpread)
		b.Run(mode, func(b *testing.B) {
			names := e.prefillQueue(b, "q", nparts, b.N*budget/nparts/benchBatch+2)
			e.resetStatements()
			c0 := e.srvCPU(b)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				a := pg.PopArgs{Tenant: benchTenant, Queue: "q", Group: benchGroup, Names: []string{names[i%nparts]},
					ScanLimit: 16, Budget: budget, MaxParts: 1, LeaseID: fmt.Sprint("L", i), Owner: "bench",
					SubMode: protocol.SubAll, MaxBytes: 16 << 20, Unprov: []string{}}
				var out *pg.PopOutcome
				var err error
				if mode == "general" {
					out, err = e.db.PopGeneral(ctx, a)
				} else {
					out, err = e.db.Pop(ctx, a)
				}
				if err != nil {
					b.Fatal(err)
				}
				n := len(out.Messages)
				if n != budget || out.Fast != (mode == "fast") {
					b.Fatalf("%s claim: %d messages, fast %v", mode, n, out.Fast)
				}
				first, last := out.Messages[0], out.Messages[n-1]
				res, err := e.db.AckCAS(ctx, []pg.CASPair{{Tenant: benchTenant, PartitionID: first.PartitionID, Group: benchGroup,
					LeaseID: a.LeaseID, First: first.Off, End: last.Off, N: n}})
				if err != nil || !res[0].OK {
					b.Fatalf("ack: %v %+v", err, res)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(e.srvCPU(b)-c0)/1e3/float64(b.N), "srv-cpu-us/cycle")
			e.logStatements(b, b.N/2)
		})
	}
}

func BenchmarkPushSpread(b *testing.B) {
	e := newBenchEnv(b)
	ctx := context.Background()
	for _, mode := range []string{"general", "fast", "fastskip"} {
		for _, spread := range []int{1, 100} {
			b.Run(fmt.Sprintf("%s/partitions%d", mode, spread), func(b *testing.B) {
				// a queue of its own per run: prefillQueue re-creates the
				// partitions, and the node's cached ids of an earlier run's
				// would be stale (a first attempt defers those, by design)
				q := fmt.Sprintf("%s%d-%d", mode, spread, benchSeq.Add(1))
				e.prefillQueue(b, q, 100, 2)
				wait := make([]bool, benchBatch) // fastskip: a combiner's first attempt
				for k := range wait {
					wait[k] = mode == "fast" // a combiner's second attempt, as Push
				}
				e.resetStatements()
				c0 := e.srvCPU(b)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					ba := e.newBatch(b, i)
					rows := make([]pg.PushRow, benchBatch)
					for k := range rows {
						rows[k] = pg.PushRow{Queue: q, Partition: fmt.Sprint("p", (i*7+k*13)%spread), TxID: ba.txids[k],
							ID: ba.ids[k], Payload: ba.payloads[k]}
					}
					var err error
					var outs []pg.PushOutcome
					if mode != "general" {
						// the combiner's call: the fast push statement
						outs, err = e.db.PushSome(ctx, benchTenant, rows, wait)
					} else {
						outs, err = e.db.PushGeneral(ctx, benchTenant, rows, nil)
					}
					if err != nil {
						b.Fatal(err)
					}
					for _, o := range outs {
						if o.Status != protocol.PushQueued {
							b.Fatalf("%+v, want queued", o)
						}
					}
				}
				b.StopTimer()
				b.ReportMetric(float64(e.srvCPU(b)-c0)/1e3/float64(b.N)/benchBatch, "srv-cpu-us/row")
				e.logStatements(b, b.N/2)
			})
		}
	}
	if st := e.db.Stat(); st.PushFast == 0 {
		b.Fatalf("the fast mode never took the fast push: %+v", st)
	}
}
