package pg

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5/pgconn"

	"queen-node/internal/pgtest"
)

// Two transactions that lock two rows in opposite orders deadlock; with
// InTxRetry the victim runs again and both apply exactly once, and the
// retry is counted.
func TestInTxRetryHidesDeadlock(t *testing.T) {
	ctx := context.Background()
	db, err := Open(ctx, pgtest.NewDatabase(t), 4, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.pool.Exec(ctx, `CREATE TABLE r (id int PRIMARY KEY, v int NOT NULL);
		INSERT INTO r VALUES (1, 0), (2, 0)`); err != nil {
		t.Fatal(err)
	}
	var bothHoldFirst sync.WaitGroup
	bothHoldFirst.Add(2)
	run := func(first, second int) error {
		var attempt atomic.Int32
		return db.InTxRetry(ctx, func(tx *Tx) error {
			if _, err := tx.tx.Exec(ctx, `UPDATE r SET v = v + 1 WHERE id = $1`, first); err != nil {
				return err
			}
			if attempt.Add(1) == 1 {
				// Only the first attempts meet here, so they surely cross.
				bothHoldFirst.Done()
				bothHoldFirst.Wait()
			}
			_, err := tx.tx.Exec(ctx, `UPDATE r SET v = v + 10 WHERE id = $1`, second)
			return err
		})
	}
	errs := make(chan error, 2)
	go func() { errs <- run(1, 2) }()
	go func() { errs <- run(2, 1) }()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("a transaction failed despite the retry: %v", err)
		}
	}
	var v1, v2 int
	if err := db.pool.QueryRow(ctx, `SELECT (SELECT v FROM r WHERE id = 1), (SELECT v FROM r WHERE id = 2)`).Scan(&v1, &v2); err != nil {
		t.Fatal(err)
	}
	if v1 != 11 || v2 != 11 {
		t.Fatalf("rows = %d, %d; want 11, 11 (each transaction applied exactly once)", v1, v2)
	}
	if db.Retries() < 1 {
		t.Fatalf("Retries() = %d, want at least 1", db.Retries())
	}
}

// Only the listed SQLSTATEs are retried, and 23503 only where a concurrent
// delete is the documented cause.
func TestRetryOnlyRetryableErrors(t *testing.T) {
	db := &DB{}
	ctx := context.Background()
	for _, tc := range []struct {
		code   string
		fkRace bool
		calls  int32
	}{
		{codeDeadlock, false, retryAttempts},
		{codeSerialization, false, retryAttempts},
		{codeForeignKey, true, retryAttempts},
		{codeForeignKey, false, 1},
		{"23505", true, 1}, // unique violation: a real answer, not a race
	} {
		var calls atomic.Int32
		want := &pgconn.PgError{Code: tc.code}
		err := db.retry(ctx, tc.fkRace, func() error {
			calls.Add(1)
			return want
		})
		if !errors.Is(err, want) || calls.Load() != tc.calls {
			t.Errorf("%s fkRace=%v: %d calls, err %v; want %d calls and the error", tc.code, tc.fkRace, calls.Load(), err, tc.calls)
		}
	}
	if got := db.Retries(); got != 3*(retryAttempts-1) {
		t.Errorf("Retries() = %d, want %d", got, 3*(retryAttempts-1))
	}
}
