package clustertest

import (
	"context"
	"net/url"
	"testing"
	"time"

	"queen-node/internal/pgbouncer"
	"queen-node/internal/pgtest"
)

// BouncerURL is the documented way through PgBouncer in transaction mode
// (docs/operations.md, "Behind PgBouncer"): the bouncer's address, and
// pgx's cache_describe mode, which never leaves a named prepared statement
// on a server connection.
func bouncerURL(t *testing.T, b *pgbouncer.Bouncer, direct string) string {
	t.Helper()
	via, err := b.URL(direct)
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(via)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("default_query_exec_mode", "cache_describe")
	u.RawQuery = q.Encode()
	return u.String()
}

// startBouncer runs a transaction-mode PgBouncer in front of the tests'
// server, or skips when it is not installed (scripts/ensure-ha.sh installs
// it; make test runs that script).
func startBouncer(t *testing.T) *pgbouncer.Bouncer {
	t.Helper()
	if _, err := pgbouncer.Find(""); err != nil {
		t.Skip(err)
	}
	srv, err := url.Parse(pgtest.ServerURL())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// 10 server connections for 3 nodes of 16 each: the bouncer must
	// multiplex, as it does in production.
	b, err := pgbouncer.Start(ctx, pgbouncer.Options{Target: srv.Host, PoolSize: 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Stop)
	return b
}

// Three nodes whose only way to PostgreSQL is a transaction-mode PgBouncer
// (issue 22 item 3): they start together (the migrations' lock must work
// through it), run the checked workload (pushes, pops, acks, lease
// expiries), and run retention passes one node at a time (its lease must
// work through it too).
func TestThroughPgBouncer(t *testing.T) {
	b := startBouncer(t)
	c := startClusterOpts(t, ClusterOptions{N: 3, PGURL: bouncerURL(t, b, pgtest.NewDatabase(t)),
		Env: map[string]string{"QUEEN_RETENTION_INTERVAL_MS": "300"}})
	w := startWorkload(t, c, WorkloadSpec{
		Messages: 6000, Rate: 1500, Partitions: 30, Producers: 3, PushBatch: [2]int{1, 50},
		ConsumersPerGroup: 3, PopBatches: []int{1, 10, 50}, LeaseTime: 3, ForgetRate: 0.01,
		WaitTimeoutMS: 1000, Timeout: 3 * time.Minute,
	})
	rep := w.Check("through PgBouncer, transaction mode", CheckOptions{})
	if rep.Deliveries == 0 {
		t.Fatal("nothing delivered")
	}
	var runs, errs int64
	for i := range c.Nodes() {
		st := c.MustStatus(i)
		runs += st.Retention.Runs
		errs += st.Retention.Errors
	}
	t.Logf("retention through the bouncer: %d passes, %d errors", runs, errs)
	if runs == 0 || errs != 0 {
		t.Fatalf("retention through the bouncer: %d passes, %d errors; want some passes and no error", runs, errs)
	}
}
