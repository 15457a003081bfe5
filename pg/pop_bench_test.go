package pg_test

// BenchmarkPopV2 measures one claim of 35 messages (the mean pop of the
// issue 20 load) with autoAck, on a pre-filled queue of 8 partitions whose
// consumer rows exist, four ways: "v1" calls queen.pop_v1, "v3" pg.DB.Pop
// (queen.pop_v3) told that no candidate lacks its row (what a node passes
// once it has seen them), "v3-unprov-all" pop_v3 with p_unprov NULL (the
// provisioning INSERT runs, as in pop_v1: the single read alone), and
// "merged8" pg.DB.PopMany of 8 claims on the 8 partitions (one transaction
// per flush of 8):
//
//	go run ./cmd/pgtemp -set shared_preload_libraries=pg_stat_statements -- \
//	    go test -run '^$' -bench BenchmarkPopV2 -benchtime 4000x -count 3 ./pg/
//
// ns/op is per claim (per job for merged8). Metrics per claim:
//
//	srv-cpu-us/pop CPU time all server processes of the database spent
//	               (their /proc/PID/schedstat; commit included; only with
//	               the server on this host)
//	pg-us/pop      PostgreSQL's mean execution time of the pop call,
//	               without the commit (with pg_stat_statements loaded)

import (
	"context"
	"testing"

	"queen-node/pg"
	"queen-node/protocol"
)

func BenchmarkPopV2(b *testing.B) {
	e := newBenchEnv(b)
	ctx := context.Background()
	_, err := e.pool.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
	if err == nil {
		_, err = e.pool.Exec(ctx, "SELECT 1 FROM pg_stat_statements LIMIT 1") // fails unless preloaded
	}
	stats := err == nil
	const budget, nparts = 35, 8
	srvCPU := func() (int64, bool) {
		rs, err := e.pool.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database()`)
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
			n, ok := schedRuntime(pid)
			if !ok {
				return 0, false
			}
			sum += n
		}
		return sum, rs.Err() == nil
	}
	modes := []struct {
		name, fn string
		merged   int
	}{{"v1", "pop_v1", 0}, {"v3", "pop_v3", 0}, {"v3-unprov-all", "pop_v3", 0}, {"merged1", "pop_v3", 1}, {"merged8", "pop_v3", nparts}}
	for _, mode := range modes {
		b.Run(mode.name, func(b *testing.B) {
			names := e.prefillQueue(b, "q", nparts, b.N*budget/nparts/benchBatch+2)
			if stats {
				e.exec(b, "SELECT pg_stat_statements_reset()")
			}
			args := func(i int) pg.PopArgs {
				a := pg.PopArgs{Tenant: benchTenant, Queue: "q", Group: benchGroup, Names: names[i%nparts : i%nparts+1],
					ScanLimit: 16, Budget: budget, MaxParts: 1, AutoAck: true, Owner: "bench",
					SubMode: protocol.SubAll, MaxBytes: 16 << 20}
				if mode.name == "v3" || mode.merged > 0 {
					a.Unprov = []string{}
				}
				return a
			}
			check := func(out *pg.PopOutcome) {
				if len(out.Messages) != budget {
					b.Fatalf("pop: %d messages, want %d", len(out.Messages), budget)
				}
			}
			c0, cpuOK := srvCPU()
			b.ResetTimer()
			switch {
			case mode.fn == "pop_v1":
				for i := 0; i < b.N; i++ {
					a := args(i)
					rs, err := e.pool.Query(ctx, `SELECT count(*) FILTER (WHERE o_kind = 'msg') FROM queen.pop_v1($1, $2, $3, $4,
						$5, $6, $7, $8, $9, $10, $11, $12, $13, $14)`, a.Tenant, a.Queue, a.Group, a.Names, a.ScanLimit,
						a.Budget, a.MaxParts, a.LeaseID, a.LeaseSeconds, a.AutoAck, a.Owner, a.SubMode, a.SubFrom, a.MaxBytes)
					if err != nil {
						b.Fatal(err)
					}
					var n int
					for rs.Next() {
						if err := rs.Scan(&n); err != nil {
							b.Fatal(err)
						}
					}
					if rs.Err() != nil || n != budget {
						b.Fatalf("pop_v1: %d messages, %v", n, rs.Err())
					}
				}
			case mode.merged > 0:
				for i := 0; i < b.N; i += mode.merged {
					jobs := make([]pg.PopArgs, min(mode.merged, b.N-i))
					for k := range jobs {
						jobs[k] = args(i + k)
					}
					outs, err := e.db.PopMany(ctx, jobs)
					if err != nil {
						b.Fatal(err)
					}
					for _, out := range outs {
						check(out)
					}
				}
			default:
				for i := 0; i < b.N; i++ {
					out, err := e.db.Pop(ctx, args(i))
					if err != nil {
						b.Fatal(err)
					}
					check(out)
				}
			}
			b.StopTimer()
			c1, ok := srvCPU()
			if cpuOK && ok {
				b.ReportMetric(float64(c1-c0)/1e3/float64(b.N), "srv-cpu-us/pop")
			}
			if stats {
				var us float64
				if err := e.pool.QueryRow(ctx, `SELECT COALESCE(sum(total_exec_time) / nullif(sum(calls), 0), 0) * 1000
					FROM pg_stat_statements WHERE toplevel AND query LIKE $1`, "%queen."+mode.fn+"($1%").Scan(&us); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(us, "pg-us/pop")
			}
		})
	}
}
