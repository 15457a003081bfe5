package pg

import "context"

// PushGeneral is PushSome through queen.push_v4 alone, for the fast push's
// differential test.
func (db *DB) PushGeneral(ctx context.Context, tenant string, rows []PushRow, wait []bool) ([]PushOutcome, error) {
	return db.pushGeneral(ctx, tenant, rows, wait)
}
