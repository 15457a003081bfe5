package pg

import (
	"context"
	"fmt"
)

// Keys of queen.system_state rows (migration 5).
const (
	StatePushMaintenance = "maintenance_push"
	StatePopMaintenance  = "maintenance_pop"
)

// MaintenanceFlags are the cluster-wide maintenance switches; an absent
// row is off.
type MaintenanceFlags struct {
	Push bool
	Pop  bool
}

// MaintenanceFlags reads both switches: two primary-key probes of
// queen.system_state (its primary key index), so every node can poll it
// every second.
func (db *DB) MaintenanceFlags(ctx context.Context) (MaintenanceFlags, error) {
	var f MaintenanceFlags
	rows, err := db.pool.Query(ctx,
		`SELECT key, COALESCE((value->>'enabled')::boolean, false)
		   FROM queen.system_state WHERE key = ANY($1::text[])`,
		[]string{StatePushMaintenance, StatePopMaintenance})
	if err != nil {
		return f, fmt.Errorf("read maintenance flags: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var key string
		var on bool
		if err := rows.Scan(&key, &on); err != nil {
			return f, fmt.Errorf("read maintenance flags: %w", err)
		}
		switch key {
		case StatePushMaintenance:
			f.Push = on
		case StatePopMaintenance:
			f.Pop = on
		}
	}
	if err := rows.Err(); err != nil {
		return f, fmt.Errorf("read maintenance flags: %w", err)
	}
	return f, nil
}

// SetMaintenanceFlag turns one switch (StatePushMaintenance or
// StatePopMaintenance) on or off for the whole cluster.
func (db *DB) SetMaintenanceFlag(ctx context.Context, key string, on bool) error {
	_, err := db.pool.Exec(ctx,
		`INSERT INTO queen.system_state (key, value, updated_at)
		 VALUES ($1, jsonb_build_object('enabled', $2::boolean), now())
		 ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, updated_at = EXCLUDED.updated_at`,
		key, on)
	if err != nil {
		return fmt.Errorf("set %s: %w", key, err)
	}
	return nil
}
