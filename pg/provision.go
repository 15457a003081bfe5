package pg

import (
	"context"
	"fmt"
)

// ProvisionPage is one page of queen.provision_group_v1 (23_provision.sql).
type ProvisionPage struct {
	QueueID string   // "" when the queue or the group's marker does not exist
	Names   []string // every partition of the page, each with its row now
	LastID  string   // the page's last partition id: the next page starts after it
	New     int      // consumer rows this call created
}

// ProvisionGroup creates the group's missing consumer rows for the limit
// partitions of the queue whose ids come after after ("" for the first
// page), in one autocommit statement. A page shorter than limit is the
// last one.
func (db *DB) ProvisionGroup(ctx context.Context, tenant, queue, group, after string, limit int) (ProvisionPage, error) {
	var pg ProvisionPage
	var afterArg any
	if after != "" {
		afterArg = after
	}
	err := db.Retry(ctx, func() error {
		pg = ProvisionPage{}
		rs, err := db.pool.Query(ctx, `SELECT o_queue_id::text, o_pid::text, o_name, o_new
			FROM queen.provision_group_v1($1, $2, $3, $4::text::uuid, $5)`, tenant, queue, group, afterArg, limit)
		if err != nil {
			return err
		}
		defer rs.Close()
		for rs.Next() {
			var name string
			if err := rs.Scan(&pg.QueueID, &pg.LastID, &name, &pg.New); err != nil {
				return err
			}
			pg.Names = append(pg.Names, name)
		}
		return rs.Err()
	})
	if err != nil {
		return ProvisionPage{}, fmt.Errorf("provision group %q on queue %q: %w", group, queue, err)
	}
	return pg, nil
}
