package pg

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"queen-node/protocol"
)

// PopTx runs the claim core (queen.pop_v3) on tx and reads it as Pop does.
func PopTx(ctx context.Context, tx pgx.Tx, a PopArgs) (*PopOutcome, error) {
	rs, err := tx.Query(ctx, popSQL, popParams(a)...)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	return scanPop(rs)
}

// PopV2Tx runs queen.pop_v2, the previous release's claim core, on tx and
// reads its rows ('meta', 'verdict', 'msg') as that release did, so that
// tests can compare it with pop_v3.
func PopV2Tx(ctx context.Context, tx pgx.Tx, a PopArgs) (*PopOutcome, error) {
	rs, err := tx.Query(ctx, `SELECT o_kind, o_pname, o_pid, o_verdict, o_until, o_drained, o_off,
		o_mid, o_txid, o_trace, o_payload::text, o_created, o_sub, o_retry, o_delay, o_window
	FROM queen.pop_v2($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)`, popParams(a)...)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	out := &PopOutcome{}
	for rs.Next() {
		var (
			kind                           string
			pname, pid, verdict, mid, txid *string
			trace, payload, sub            *string
			until, created                 *time.Time
			drained                        *bool
			off                            *int64
			retry, delay, window           *int32
		)
		if err := rs.Scan(&kind, &pname, &pid, &verdict, &until, &drained, &off, &mid, &txid,
			&trace, &payload, &created, &sub, &retry, &delay, &window); err != nil {
			return nil, fmt.Errorf("scan: %w", err)
		}
		switch kind {
		case protocol.PopRowMeta:
			out.QueueID = deref(pid)
			out.Seeded = deref(verdict) == protocol.GroupSeeded
			out.Delay, out.Window = int(derefInt(delay)), int(derefInt(window))
		case protocol.PopRowVerdict:
			v := Verdict{Name: deref(pname), PartitionID: deref(pid), Kind: protocol.Verdict(deref(verdict))}
			if until != nil {
				v.Until = *until
			}
			if drained != nil {
				v.Drained = *drained
			}
			out.Verdicts = append(out.Verdicts, v)
		case protocol.PopRowMsg:
			m := PopMessage{Partition: deref(pname), PartitionID: deref(pid), ID: deref(mid),
				TxID: deref(txid), Trace: trace, Sub: sub, Retry: int(derefInt(retry))}
			if off != nil {
				m.Off = *off
			}
			if payload != nil {
				m.Payload = []byte(*payload)
			} else {
				m.Payload = []byte("null")
			}
			if created != nil {
				m.CreatedAt = *created
			}
			out.Messages = append(out.Messages, m)
		}
	}
	return out, rs.Err()
}

// PopFastTx runs one claim as PopMany does, on tx: the fast claim when a
// qualifies, then queen.pop_v3 when it answered nothing. fast reports
// whether the fast claim answered.
func PopFastTx(ctx context.Context, tx pgx.Tx, a PopArgs) (out *PopOutcome, fast bool, err error) {
	if fastClaimable(a) {
		rs, err := tx.Query(ctx, fastClaimSQL, fastParams(a)...)
		if err != nil {
			return nil, false, err
		}
		out, err = scanFast(rs, a)
		rs.Close()
		if err != nil || out != nil {
			return out, out != nil, err
		}
	}
	out, err = PopTx(ctx, tx, a)
	return out, false, err
}

// FastClaimable is fastClaimable, for the tests of which claims qualify.
var FastClaimable = fastClaimable

// FastClaimSQL is the fast claim's statement, for plan checks.
const FastClaimSQL = fastClaimSQL

// PopGeneral runs one claim as queen.pop_v3 only, as PopMany did before
// the fast claim, for the benchmarks that compare the two.
func (db *DB) PopGeneral(ctx context.Context, a PopArgs) (*PopOutcome, error) {
	outs := make([]*PopOutcome, 1)
	if _, _, err := db.popBatch(ctx, []PopArgs{a}, []int{0}, outs, false, nil); err != nil {
		return nil, err
	}
	return outs[0], nil
}

// SetClaimSets turns the claim set (claimset.go) on or off, for the
// benchmarks that compare it with the single statements.
func (db *DB) SetClaimSets(on bool) { db.noClaimSets = !on }

// FastFlightTx runs the fast claims of a flush on tx as popBatch sends
// them, without the general path: with set, the claim set and then the
// single statements for the jobs it leaves out; without, every job as its
// own single statement, in job order. A job whose fast claim answered
// nothing gets nil; every job must qualify (fastClaimable). sent reports
// how many went into the claim set.
func FastFlightTx(ctx context.Context, tx pgx.Tx, jobs []PopArgs, set bool) (outs []*PopOutcome, sent int, err error) {
	outs = make([]*PopOutcome, len(jobs))
	idx := make([]int, len(jobs))
	for i, a := range jobs {
		if !fastClaimable(a) {
			return nil, 0, fmt.Errorf("job %d does not qualify", i)
		}
		idx[i] = i
	}
	var in []int
	rest := idx
	if set {
		in, rest = claimSetJobs(jobs, idx)
	}
	if len(in) > 0 {
		// under the generic plan, as popBatch sends it
		if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = force_generic_plan"); err != nil {
			return nil, 0, err
		}
		rs, err := tx.Query(ctx, claimSetSQL, claimSetParams(jobs, in)...)
		if err != nil {
			return nil, 0, err
		}
		err = scanClaimSet(rs, jobs, in, outs)
		rs.Close()
		if err != nil {
			return nil, 0, err
		}
		if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = auto"); err != nil {
			return nil, 0, err
		}
	}
	for _, i := range rest {
		rs, err := tx.Query(ctx, fastClaimSQL, fastParams(jobs[i])...)
		if err != nil {
			return nil, 0, err
		}
		outs[i], err = scanFast(rs, jobs[i])
		rs.Close()
		if err != nil {
			return nil, 0, err
		}
	}
	return outs, len(in), nil
}

// PlanCounts reads, on a connection of db's pool, the setting
// plan_cache_mode and the generic and custom plans PostgreSQL made of the
// prepared statements whose text starts with prefix (pg_prepared_statements
// is per connection: give db a pool of one).
func (db *DB) PlanCounts(ctx context.Context, prefix string) (mode string, generic, custom int64, err error) {
	err = db.pool.QueryRow(ctx, `SELECT current_setting('plan_cache_mode'),
			COALESCE(sum(generic_plans), 0)::bigint, COALESCE(sum(custom_plans), 0)::bigint
		FROM pg_prepared_statements WHERE starts_with(statement, $1)`, prefix).Scan(&mode, &generic, &custom)
	return
}

// ClaimSetPrefix and AckCASPrefix begin the two array statements' texts.
var (
	ClaimSetPrefix = claimSetSQL[:40]
	AckCASPrefix   = ackCASSQL[:40]
)

// BackendPID is the server process of a connection of db's pool.
func (db *DB) BackendPID(ctx context.Context) (pid int, err error) {
	err = db.pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid)
	return
}
