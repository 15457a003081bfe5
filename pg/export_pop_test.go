package pg

import "context"

// QueryRowForTest reads one row through the pool, so a test with a pool of
// one connection sees that connection's session state.
func (db *DB) QueryRowForTest(ctx context.Context, sql string, dest ...any) error {
	return db.pool.QueryRow(ctx, sql).Scan(dest...)
}
