package suite

import (
	"context"
	"fmt"

	"github.com/hashicorp/go-hclog"

	"queen-node/internal/pgtemp"
)

// ProductionSettings are the server settings of the suite's PostgreSQL,
// merged over pgtemp.DefaultSettings (which turns durability off for
// tests). They are what a production server of this size runs with:
// durable commits and full-page writes on, 1 GB of shared buffers, WAL
// and checkpoints sized so that a 20 s run does not checkpoint on WAL
// volume alone, and SSD cost settings. docs/BENCHMARKS.md lists the values
// the server actually reports.
func ProductionSettings() map[string]string {
	return map[string]string{
		"fsync":                        "on",
		"synchronous_commit":           "on",
		"full_page_writes":             "on",
		"wal_level":                    "replica",
		"shared_buffers":               "1GB",
		"effective_cache_size":         "3GB",
		"work_mem":                     "16MB",
		"maintenance_work_mem":         "256MB",
		"wal_buffers":                  "16MB",
		"max_wal_size":                 "4GB",
		"min_wal_size":                 "1GB",
		"checkpoint_timeout":           "15min",
		"checkpoint_completion_target": "0.9",
		"random_page_cost":             "1.1",
		"effective_io_concurrency":     "200",
		"max_connections":              "300",
		"autovacuum":                   "on",
		"track_io_timing":              "on",
	}
}

// settingNames are the settings the report asks the running server for.
func settingNames() []string {
	return []string{"fsync", "synchronous_commit", "full_page_writes", "wal_level", "shared_buffers",
		"effective_cache_size", "work_mem", "maintenance_work_mem", "wal_buffers", "max_wal_size",
		"min_wal_size", "checkpoint_timeout", "checkpoint_completion_target", "random_page_cost",
		"effective_io_concurrency", "max_connections", "autovacuum", "track_io_timing", "wal_sync_method"}
}

// startPostgres starts the disposable server with ProductionSettings. As
// root, pgtemp runs initdb and postgres as the postgres user.
func startPostgres(ctx context.Context, log hclog.Logger) (*pgtemp.Server, error) {
	opts := pgtemp.DefaultOptions()
	opts.Settings = ProductionSettings()
	opts.Logger = log.Named("pgtemp")
	s, err := pgtemp.Start(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("start PostgreSQL: %w", err)
	}
	return s, nil
}
