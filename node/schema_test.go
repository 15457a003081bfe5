package node_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"queen-node/internal/pgtest"
	"queen-node/node"
)

// A database migrated past this node's schema stops the start at once with
// one error, instead of "PostgreSQL not ready" retries forever (issue 23;
// docs/operations.md, "Upgrades").
func TestStartStopsOnNewerSchema(t *testing.T) {
	url := pgtest.NewDatabase(t)
	cfg := node.DefaultConfig()
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.Broker.NodeName = "n1"
	cfg.Broker.PG.URL = url
	cfg.Mesh.Enabled = false
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := node.Start(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := pgtest.Int64s(ctx, url, `INSERT INTO queen.schema_migrations (version, name) VALUES (9999, 'future') RETURNING version`); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	n, err = node.Start(ctx, cfg, nil)
	if err == nil {
		_ = n.Stop(ctx)
		t.Fatal("started against a newer schema")
	}
	if ctx.Err() != nil || !strings.Contains(err.Error(), "not retrying") || !strings.Contains(err.Error(), "newer than this node's") {
		t.Fatalf("after %v: %v", time.Since(start), err)
	}
}
