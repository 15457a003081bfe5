package broker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"queen-node/broker"
	"queen-node/pg"
)

// An unparseable connection string is a configuration error, not a
// database that is still starting: New must give up at once (issue 9,
// item 12) instead of retrying until ctx ends.
func TestNewBadPGURLFailsAtOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg := broker.DefaultConfig()
	cfg.NodeName = "n1"
	cfg.PG.URL = "postgres://u:hunter2@h:notaport/db"
	_, err := broker.New(ctx, cfg, nil)
	if !errors.Is(err, pg.ErrBadURL) || ctx.Err() != nil {
		t.Fatalf("New = %v (ctx %v), want pg.ErrBadURL before the deadline", err, ctx.Err())
	}
}
