package pg_test

// BenchmarkInsertKeys measures what the keys of queen.messages cost a push:
// 100 rows per statement, one into each of 100 partitions pre-filled with
// 2,000 rows each, into a table shaped as queen.messages (primary key
// (partition, off), unique (partition, transaction id)). It tells whether
// a narrower partition key would pay for a migration of the messages table,
// and what a client's choice of transaction ids costs:
//
//   - uuid-key/v7-txid: the table as it is, with time-ordered transaction
//     ids (UUIDv7, what Queen's clients and this node generate);
//   - bigint-key/v7-txid: the partition key a bigint instead of a uuid;
//   - uuid-key/v4-txid: random transaction ids (UUIDv4): each row lands at
//     a random place of its partition's part of the unique index;
//   - uuid-key/no-txid-index: without the unique index (what it costs).
//
// srv-cpu-us/row is the CPU time of the database's backends per row (as
// in BenchmarkPushSpread); all-cpu-us/row adds the server's background
// processes (WAL writer, checkpointer, background writer), which write
// what the inserts dirtied. The table is not autovacuumed (a worker
// starting mid-run would be counted). -count 3 runs each case three times
// in a row. scripts/insert-keys-pgbench.sh measures the same with several
// clients and larger tables, and the load generator's ids:
//
//	go run ./cmd/pgtemp -set fsync=on -set synchronous_commit=on -- \
//	    go test -run '^$' -bench BenchmarkInsertKeys -benchtime 2000x -count 3 ./pg/

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/uuid"
)

func BenchmarkInsertKeys(b *testing.B) {
	cases := []struct {
		name      string
		bigint    bool // the partition key a bigint
		randomTx  bool // UUIDv4 transaction ids
		txidIndex bool
	}{
		{"uuid-key/v7-txid", false, false, true},
		{"bigint-key/v7-txid", true, false, true},
		{"uuid-key/v4-txid", false, true, true},
		{"uuid-key/no-txid-index", false, false, false},
	}
	const parts, prefill = 100, 2000
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			e := newBenchEnv(b)
			ctx := context.Background()
			keyType := "uuid"
			if tc.bigint {
				keyType = "bigint"
			}
			e.exec(b, fmt.Sprintf(`CREATE TABLE bench.keyed (
				partition_id %s NOT NULL, off bigint NOT NULL, id uuid NOT NULL, transaction_id text NOT NULL,
				payload json, created_at timestamptz NOT NULL, PRIMARY KEY (partition_id, off))
				WITH (autovacuum_enabled = off)`, keyType))
			if tc.txidIndex {
				e.exec(b, `CREATE UNIQUE INDEX keyed_txid ON bench.keyed (partition_id, transaction_id)`)
			}
			insert := fmt.Sprintf(`INSERT INTO bench.keyed (partition_id, off, id, transaction_id, payload, created_at)
				SELECT t.pid, t.off, t.id, t.txid, t.payload::json, clock_timestamp()
				FROM unnest($1::%s[], $2::bigint[], $3::uuid[], $4::text[], $5::text[]) AS t(pid, off, id, txid, payload)
				ORDER BY 1, 2`, keyType)

			uuids := make([]string, parts)
			nums := make([]int64, parts)
			for k := range uuids {
				uuids[k], nums[k] = uuid.NewString(), int64(k+1)
			}
			next := make([]int64, parts)
			txid := func() string {
				if tc.randomTx {
					return uuid.NewString()
				}
				return uuid.Must(uuid.NewV7()).String()
			}
			// rows builds perPart rows for every partition, in key order.
			rows := func(perPart, seq int) []any {
				n := parts * perPart
				offs, ids, txids, payloads := make([]int64, 0, n), make([]string, 0, n), make([]string, 0, n), make([]string, 0, n)
				var pidsU []string
				var pidsN []int64
				for k := range parts {
					for range perPart {
						next[k]++
						if tc.bigint {
							pidsN = append(pidsN, nums[k])
						} else {
							pidsU = append(pidsU, uuids[k])
						}
						offs = append(offs, next[k])
						ids = append(ids, uuid.NewString())
						txids = append(txids, txid())
						payloads = append(payloads, e.payloads[(seq+len(offs))%len(e.payloads)])
					}
				}
				if tc.bigint {
					return []any{pidsN, offs, ids, txids, payloads}
				}
				return []any{pidsU, offs, ids, txids, payloads}
			}
			for i := range prefill / 20 {
				if _, err := e.pool.Exec(ctx, insert, rows(20, i)...); err != nil {
					b.Fatalf("prefill: %v", err)
				}
			}
			e.exec(b, "VACUUM ANALYZE bench.keyed")
			batches := make([][]any, b.N)
			for i := range batches {
				batches[i] = rows(1, i)
			}
			c0, a0 := e.srvCPU(b), e.allCPU(b)
			b.ResetTimer()
			for i := range b.N {
				tag, err := e.pool.Exec(ctx, insert, batches[i]...)
				if err != nil {
					b.Fatalf("insert: %v", err)
				}
				if tag.RowsAffected() != parts {
					b.Fatalf("insert: %d rows", tag.RowsAffected())
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(e.srvCPU(b)-c0)/1e3/float64(b.N)/parts, "srv-cpu-us/row")
			b.ReportMetric(float64(e.allCPU(b)-a0)/1e3/float64(b.N)/parts, "all-cpu-us/row")
			b.ReportMetric(float64(b.N*parts)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}

// allCPU is srvCPU over every process of the server: the backends of all
// databases and the background processes.
func (e *benchEnv) allCPU(b *testing.B) int64 {
	return e.cpuOf(b, `SELECT pid FROM pg_stat_activity`)
}
