package pg

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"

	"queen-node/internal/pgtest"
)

func appliedVersions(t *testing.T, ctx context.Context, conn *pgx.Conn) []int {
	t.Helper()
	rows, err := conn.Query(ctx, "SELECT version FROM queen.schema_migrations ORDER BY version")
	if err != nil {
		t.Fatal(err)
	}
	vs, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		t.Fatal(err)
	}
	return vs
}

func wantAllVersions(t *testing.T, got []int) {
	t.Helper()
	all, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(all) {
		t.Fatalf("applied versions %v, want 1..%d", got, len(all))
	}
	for i, v := range got {
		if v != i+1 {
			t.Fatalf("applied versions %v, want 1..%d", got, len(all))
		}
	}
}

// Each migration is recorded once, however often nodes start.
func TestMigrateAppliesEachMigrationOnce(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	for range 3 {
		db, err := Open(ctx, url, 4, hclog.NewNullLogger())
		if err != nil {
			t.Fatal(err)
		}
		db.Close()
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	wantAllVersions(t, appliedVersions(t, ctx, conn))
}

// A database set up by the code before the version table existed (every SQL
// file re-run at start, no queen.schema_migrations) upgrades in place and
// keeps its data.
func TestMigrateUpgradesUnversionedDatabase(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// The former layout: the same table file, then the functions, run as
	// plain scripts.
	all, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, all[0].SQL, pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatal(err)
	}
	files, err := functionFiles()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		body, _ := sqlFiles.ReadFile(f)
		if _, err := conn.Exec(ctx, string(body), pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	if _, err := conn.Exec(ctx, `INSERT INTO queen.queues (id, tenant, name, lease_time) VALUES (gen_random_uuid(), 't', 'kept', 77)`); err != nil {
		t.Fatal(err)
	}

	db, err := Open(ctx, url, 4, hclog.NewNullLogger())
	if err != nil {
		t.Fatalf("upgrade: %v", err)
	}
	db.Close()
	wantAllVersions(t, appliedVersions(t, ctx, conn))
	var lease int
	if err := conn.QueryRow(ctx, `SELECT lease_time FROM queen.queues WHERE tenant = 't' AND name = 'kept'`).Scan(&lease); err != nil || lease != 77 {
		t.Fatalf("queue after upgrade: lease %d, %v", lease, err)
	}
}

// A node refuses a database a newer node migrated past what it knows.
func TestMigrateRefusesNewerSchema(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	db, err := Open(ctx, url, 4, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `INSERT INTO queen.schema_migrations (version, name) VALUES (9999, 'future')`); err != nil {
		t.Fatal(err)
	}
	_, err = Open(ctx, url, 4, hclog.NewNullLogger())
	if err == nil || !strings.Contains(err.Error(), "newer") {
		t.Fatalf("want a refusal, got %v", err)
	}
}

// The shared pending predicate is inlined: the candidate scan's plan is the
// one of the expression written out.
func TestPartitionPendingIsInlined(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	db, err := Open(ctx, url, 4, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	plan := func(pred string) string {
		t.Helper()
		var lines []string
		rows, err := conn.Query(ctx, `EXPLAIN (COSTS OFF, VERBOSE)
			SELECT p.id FROM queen.partitions p
			LEFT JOIN queen.consumers c ON c.partition_id = p.id AND c.consumer_group = 'g'
			WHERE p.queue_id = '00000000-0000-0000-0000-000000000000' AND `+pred)
		if err != nil {
			t.Fatal(err)
		}
		lines, err = pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		// A server with compute_query_id on (pg_stat_statements loaded)
		// prints the statement's hash, which differs between the two texts.
		lines = slices.DeleteFunc(lines, func(l string) bool { return strings.HasPrefix(l, "Query Identifier:") })
		return strings.Join(lines, "\n")
	}
	inline := plan(`p.last_offset > COALESCE(c.committed_offset, 0)`)
	shared := plan(`queen.partition_pending(p.last_offset, c.committed_offset)`)
	if inline != shared {
		t.Fatalf("plans differ:\nwritten out:\n%s\nshared predicate:\n%s", inline, shared)
	}
	if strings.Contains(shared, "partition_pending") {
		t.Fatalf("predicate not inlined:\n%s", shared)
	}
}
