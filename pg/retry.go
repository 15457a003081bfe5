package pg

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// SQLSTATEs a retry inside the node may hide from clients.
const (
	codeSerialization = "40001" // serialization_failure
	codeDeadlock      = "40P01" // deadlock_detected
	codeForeignKey    = "23503" // foreign_key_violation
)

// Retry bounds: a few attempts with a short jittered backoff, so two
// transactions that collided do not collide again in lock step, and a client
// never waits long for an answer it would otherwise get as a 500.
const (
	retryAttempts = 5
	retryBackoff  = 2 * time.Millisecond // times the attempt number, plus jitter of the same size
)

// retryable tells whether err is a failure a whole-transaction retry may
// hide: a deadlock or serialization failure, and with fkRace a foreign-key
// violation (a row this call referenced was deleted under it by a concurrent
// queue delete; the retry sees the delete and acts accordingly).
func retryable(err error, fkRace bool) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code {
	case codeSerialization, codeDeadlock:
		return true
	case codeForeignKey:
		return fkRace
	}
	return false
}

// retry runs fn until it succeeds, fails otherwise, or the attempts run
// out. fn must be one statement in autocommit or one whole transaction, so
// a failure rolled back everything it did and running it again cannot apply
// anything twice; and fn must rebuild any result it accumulates.
func (db *DB) retry(ctx context.Context, fkRace bool, fn func() error) error {
	for attempt := 1; ; attempt++ {
		err := fn()
		if err == nil || attempt >= retryAttempts || !retryable(err, fkRace) || ctx.Err() != nil {
			return err
		}
		db.retries.Add(1)
		if db.log != nil {
			var pgErr *pgconn.PgError
			errors.As(err, &pgErr)
			db.log.Debug("retrying after a transient failure", "attempt", attempt, "code", pgErr.Code,
				"error", pgErr.Message, "detail", pgErr.Detail)
		}
		d := time.Duration(attempt)*retryBackoff + rand.N(retryBackoff*time.Duration(attempt))
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// Retry is retry for callers outside this package: it hides deadlocks,
// serialization failures and foreign-key violations caused by a concurrent
// queue delete. Use it only around one call that runs one statement in
// autocommit (such as Pop or Ack) or one whole transaction.
func (db *DB) Retry(ctx context.Context, fn func() error) error {
	return db.retry(ctx, true, fn)
}

// Retries returns how many times a call was retried after a deadlock,
// serialization failure or concurrent-delete foreign-key violation since the
// pool was opened.
func (db *DB) Retries() int64 { return db.retries.Load() }

// InTxRetry is InTx, run again (bounded) when the transaction failed with a
// deadlock, a serialization failure or a foreign-key violation caused by a
// concurrent delete. fn must start from scratch on every call.
func (db *DB) InTxRetry(ctx context.Context, fn func(*Tx) error) error {
	return db.retry(ctx, true, func() error { return db.InTx(ctx, fn) })
}
