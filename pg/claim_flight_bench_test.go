package pg_test

// BenchmarkClaimFlight measures one claim flight as the node's pop
// combiner sends it (broker/popcombine.go): the CAS acks of the previous
// flight's claims, then k claims of 10 messages on k distinct partitions of
// 100, one transaction. ms/flight against k tells how a flight's length
// grows with its claims; srv-cpu-us/claim is the database's CPU per claim
// (commits included). Mode "each" sends every claim as its own statement
// (the fast claim, pg/claimfast.go), "set" as one claim set
// (pg/claimset.go). Run as BenchmarkClaimCycle.
//
//	go run ./cmd/pgtemp -set fsync=on -set synchronous_commit=on -- \
//	    go test -run '^$' -bench BenchmarkClaimFlight -benchtime 1000x ./pg/

import (
	"context"
	"fmt"
	"testing"
	"time"

	"queen-node/pg"
	"queen-node/protocol"
)

func BenchmarkClaimFlight(b *testing.B) {
	e := newBenchEnv(b)
	ctx := context.Background()
	const budget, nparts = 10, 100
	for _, mode := range []string{"each", "set"} {
		for _, k := range []int{1, 2, 4, 8, 16} {
			b.Run(fmt.Sprintf("%s/claims%d", mode, k), func(b *testing.B) {
				e.db.SetClaimSets(mode == "set")
				q := fmt.Sprintf("f%d-%d", k, benchSeq.Add(1))
				names := e.prefillQueue(b, q, nparts, b.N*k*budget/nparts/benchBatch+2)
				var pairs []pg.CASPair
				e.resetStatements()
				c0 := e.srvCPU(b)
				t0 := time.Now()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					jobs := make([]pg.PopArgs, k)
					for j := range jobs {
						jobs[j] = pg.PopArgs{Tenant: benchTenant, Queue: q, Group: benchGroup,
							Names: []string{names[(i*k+j)%nparts]}, ScanLimit: 16, Budget: budget, MaxParts: 1,
							LeaseID: fmt.Sprint("L", i, "-", j), Owner: "bench", SubMode: protocol.SubAll,
							MaxBytes: 16 << 20, Unprov: []string{}}
					}
					outs := runFlight(ctx, b, e.db, jobs, pairs)
					for j, out := range outs {
						if n := len(out.Messages); n != budget {
							b.Fatalf("claim %d: %d messages", j, n)
						}
					}
					pairs = acksOf(pairs, benchTenant, benchGroup, jobs, outs)
				}
				b.StopTimer()
				el := time.Since(t0)
				b.ReportMetric(float64(el.Microseconds())/1e3/float64(b.N), "ms/flight")
				b.ReportMetric(float64(e.srvCPU(b)-c0)/1e3/float64(b.N*k), "srv-cpu-us/claim")
				e.logStatements(b, b.N/2)
			})
		}
	}
}
