package pg

import "context"

// QueryRowForTest reads one row through the pool, so a test with a pool of
// one connection sees that connection's session state.
func (db *DB) QueryRowForTest(ctx context.Context, sql string, dest ...any) error {
	return db.pool.QueryRow(ctx, sql).Scan(dest...)
}

// PopManySyncCommit runs the claims as PopMany does and reads
// synchronous_commit at the end of their transaction.
func (db *DB) PopManySyncCommit(ctx context.Context, jobs []PopArgs) (string, error) {
	b, async := popBatch(jobs)
	b.Queue(`SHOW synchronous_commit`)
	br := db.pool.SendBatch(ctx, b)
	defer br.Close()
	if async {
		if _, err := br.Exec(); err != nil {
			return "", err
		}
	}
	for range jobs {
		rs, err := br.Query()
		if err != nil {
			return "", err
		}
		rs.Close()
	}
	var v string
	err := br.QueryRow().Scan(&v)
	return v, err
}
