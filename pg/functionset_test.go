package pg

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"

	"queen-node/internal/pgtest"
)

// functionSets is the record of every released FunctionSet: its number and
// the hash of its files. Append a line whenever pg/sql/functions changes
// (and bump FunctionSet); never edit a line, so a number names one set.
var functionSets = []struct {
	Version int
	Hash    string
}{
	{1, "de18578be296bf84af20e5a45aec0904f3629cffa60c5fb88e3cc1f099f5dbdd"},  // the files as of a331f8c, the last release without the number
	{2, "570f99b4df157216c84d82012b8c2e61ba9a1df8097310bf78df40b234072ff8"},  // 20_pop.sql: the pop_v1 DROP explained against the renaming rule
	{3, "0b39def3e98a5f14f6e0dd10e8b5fd715781ebb6ab49c67242ae2e5aa97c5e96"},  // 10_push.sql: push_v4 (skip-locked flushes, per-item missing), push_v3 a wrapper of it
	{4, "25280eba37fa57290733ff76e052fa2b24240ce973f7600e3206c54e54d314e5"},  // issue 23 flat results merged: pop_v3, ack_v2, dlq_retry_v2, 00_constants.sql (push_v4 is set 3's)
	{5, "bb8cd2003e49a031750823c970ecb562d3159411b8cb180622058cfc716d501b"},  // issue 20: provision_group_v1 (23_provision.sql)
	{6, "621990e56c31f47804c861c1aa397342f7cb87a8ec209471fe80fef39d4d4fed"},  // issue 20: provision_group_v1 holds the group marker
	{7, "f53bdff42b210573055ffe38edcb85656644895f67c4231d5ee3fcfde18a91cb"},  // issue 20: provisional consumer rows (migration 11): provision_group_v1 sets it, claims clear it
	{8, "03b0a9d7755a9fcc4e2432752ed3729c4ccf526d7b1af1c82912f4b19499469e"},  // issue 20: acks clear consumers.provisional too
	{9, "99164bd758f3ddd86e840bf917c777fbefacb98dd6e954793d4ef57b78467c0e"},  // issue 20: only acks that move the cursor clear consumers.provisional
	{10, "00b06b1baeb9b84c0f118abb5cc073501510a0c774030e765da19c81c38f3bc0"}, // issue 20: ack_cas_v1 skips rows another transaction holds
	{11, "370ed6cd6c0af059824035bd138ba7b590325383fd728148f4e69c2ab808ff15"}, // issue 20: pop_v3 holds the group marker while it makes consumer rows
	{12, "67bd840ad5cd2e066c010d47571c647cc7bec7dfdc2db800ba48974a8a94984d"}, // issue 20: pop_v3's first sight of a partition holds the marker too (SKIP LOCKED: busy); provisioning locks it only when a row is missing
	{13, "06701a22d682e15c201293c8f411651a18afa540ffbf7ebcfca265a78ff338e8"}, // issue 20: queen.group_gate; pop_v3 makes rows under the group's gate (a fair advisory lock) instead of the marker's row lock
	{14, "511bc0de3128617467ae5343a8c983dc7d6175f71d1b3e69d50758a164889388"}, // issue 20: one gate per (tenant, group), queen.group_gate_v2; provision_group_v1 takes it too
	{15, "5c558a3a203c49c4c215cb4db8613efdbf49bcf71a50f26df939fa400ed025a5"}, // issue 20: queen.group_gate(uuid, text) kept for set-13 nodes restarting during a rollout
	{16, "515d5877839f40ce582198029873ea151b71971ec32236dd5cc5076b34321dd5"}, // issue 20: claims and pages hold the marker after the gate (older nodes' deletes); the gate before a claim makes the marker
	{17, "73a717ebb6e108ca89a67c45e01650c719bbffa2225f03bce4c90c3262ddadbd"}, // issue 20: ack_v2 makes no cursor row for an ack with a lease; pop_v3 takes the gate before it makes a queue
	{18, "92a62eca07f40c1c441e14742edf8c2831364d332f5be7dabd5fc56e5f8e864d"}, // issue 20: ack_v2 makes a cursor row only for a lease-less ack that resolves a message
	{19, "c0446071093ab97cf5a88ef27d11eb05db962b8108e409cb553d846d6285858a"}, // issue 20: the comment on ack_v2's makes_row corrected (no behaviour change)
}

// The function files cannot change without FunctionSet changing: a node
// decides by the number whether to install its functions, so two sets
// under one number would let an old body win (docs/storage.md, "Schema
// migrations").
func TestFunctionSetNumbered(t *testing.T) {
	set, err := embeddedFunctionSet()
	if err != nil {
		t.Fatal(err)
	}
	hash := set.Hash()
	last := functionSets[len(functionSets)-1]
	for i, s := range functionSets {
		if i > 0 && s.Version <= functionSets[i-1].Version {
			t.Fatalf("functionSets: version %d after %d: numbers must grow", s.Version, functionSets[i-1].Version)
		}
		if s.Hash == hash && s.Version != FunctionSet {
			t.Fatalf("pg/sql/functions are those of set %d, but FunctionSet is %d", s.Version, FunctionSet)
		}
	}
	switch {
	case last.Version == FunctionSet && last.Hash != hash:
		t.Fatalf("pg/sql/functions changed but FunctionSet is still %d: set FunctionSet = %d in pg/functionset.go and append {%d, %q} to functionSets",
			FunctionSet, FunctionSet+1, FunctionSet+1, hash)
	case last.Version != FunctionSet:
		t.Fatalf("FunctionSet is %d: append {%d, %q} to functionSets (the last recorded is %d)", FunctionSet, FunctionSet, hash, last.Version)
	}
}

// Signatures, parsed from the files, name exactly the functions the set
// creates, as the catalog resolves them: the check an older node runs
// against a newer database relies on it.
func TestFunctionSignaturesMatchCatalog(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	db, err := Open(ctx, url, 4, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	set, err := embeddedFunctionSet()
	if err != nil {
		t.Fatal(err)
	}
	sigs, err := set.Signatures()
	if err != nil {
		t.Fatal(err)
	}
	var resolved []string
	if err := db.pool.QueryRow(ctx, `SELECT coalesce(array_agg(to_regprocedure(s)::text), '{}') FROM unnest($1::text[]) s`, sigs).Scan(&resolved); err != nil {
		t.Fatal(err)
	}
	var catalog []string
	if err := db.pool.QueryRow(ctx, `SELECT coalesce(array_agg(p.oid::regprocedure::text), '{}')
		FROM pg_proc p WHERE p.pronamespace = 'queen'::regnamespace`).Scan(&catalog); err != nil {
		t.Fatal(err)
	}
	slices.Sort(resolved)
	resolved = slices.Compact(resolved)
	slices.Sort(catalog)
	if len(resolved) != len(sigs) || !slices.Equal(resolved, catalog) {
		t.Fatalf("parsed %d signatures %v\nresolved %v\ncatalog %v", len(sigs), sigs, resolved, catalog)
	}
}

// markedSet is this build's set renumbered, plus a function whose body
// names the set it came from.
func markedSet(t *testing.T, version int, marker string, extra ...sqlFile) functionSet {
	t.Helper()
	set, err := embeddedFunctionSet()
	if err != nil {
		t.Fatal(err)
	}
	set.Version = version
	set.Files = append(set.Files, sqlFile{Name: "sql/functions/99_marker.sql",
		Body: "CREATE OR REPLACE FUNCTION queen.test_marker() RETURNS text LANGUAGE sql AS $$ SELECT '" + marker + "' $$;"})
	set.Files = append(set.Files, extra...)
	return set
}

func marker(t *testing.T, ctx context.Context, conn *pgx.Conn) (body string, version int) {
	t.Helper()
	if err := conn.QueryRow(ctx, `SELECT queen.test_marker(), (SELECT version FROM queen.function_set)`).Scan(&body, &version); err != nil {
		t.Fatal(err)
	}
	return body, version
}

// The ordering rule (docs/storage.md, "Schema migrations"): a node installs
// its functions only when its set is at least as new as the database's; an
// older node runs on the newer functions, or refuses with ErrSchema when
// one it calls is missing; one number with two contents is refused.
func TestFunctionSetNeverDowngrades(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	db, err := Open(ctx, url, 4, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var v int
	var hash string
	if err := conn.QueryRow(ctx, `SELECT version, hash FROM queen.function_set`).Scan(&v, &hash); err != nil {
		t.Fatal(err)
	}
	if set, _ := embeddedFunctionSet(); v != FunctionSet || hash != set.Hash() {
		t.Fatalf("recorded set %d %s, want %d %s", v, hash, FunctionSet, set.Hash())
	}

	step := func(name string, set functionSet, wantErr string, wantMarker string, wantVersion int) {
		t.Helper()
		err := db.migrate(ctx, set)
		switch {
		case wantErr == "" && err != nil:
			t.Fatalf("%s: %v", name, err)
		case wantErr != "" && (err == nil || !errors.Is(err, ErrSchema) || !strings.Contains(err.Error(), wantErr)):
			t.Fatalf("%s: want ErrSchema with %q, got %v", name, wantErr, err)
		}
		if m, v := marker(t, ctx, conn); m != wantMarker || v != wantVersion {
			t.Fatalf("%s: marker %q set %d, want %q set %d", name, m, v, wantMarker, wantVersion)
		}
	}
	next := FunctionSet + 1 // a newer node's set, this node being the older
	step("newer node installs", markedSet(t, next, "ten"), "", "ten", next)
	step("older node keeps the newer bodies", markedSet(t, FunctionSet, "nine"), "", "ten", next)
	step("same node again", markedSet(t, next, "ten"), "", "ten", next)
	step("same number, other files", markedSet(t, next, "other"), "different pg/sql/functions under one number", "ten", next)
	needs := sqlFile{Name: "sql/functions/98_gone.sql",
		Body: "CREATE OR REPLACE FUNCTION queen.test_gone(p_a text, p_b int[]) RETURNS int LANGUAGE sql AS $$ SELECT 1 $$;"}
	step("older node missing a function", markedSet(t, FunctionSet, "nine", needs), "lack queen.test_gone(text, int[])", "ten", next)

	// A node from before queen.function_set re-creates its bodies at every
	// start; the next start of a node of the recorded set puts them back.
	if _, err := conn.Exec(ctx, "CREATE OR REPLACE FUNCTION queen.test_marker() RETURNS text LANGUAGE sql AS $$ SELECT 'legacy' $$"); err != nil {
		t.Fatal(err)
	}
	step("same set repairs a legacy downgrade", markedSet(t, next, "ten"), "", "ten", next)
	step("a later set installs", markedSet(t, next+1, "eleven"), "", "eleven", next+1)
}

// A newer schema and a failing migration statement are permanent errors;
// a lost connection is not.
func TestSchemaErrorsArePermanent(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	db, err := Open(ctx, url, 4, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	bad := markedSet(t, FunctionSet+1, "x", sqlFile{Name: "sql/functions/99_zbad.sql", Body: "CREATE OR REPLACE FUNCTION queen.test_bad() RETURNS int LANGUAGE sql AS $$ SELECT no_such_column FROM queen.queues $$;"})
	if err := db.migrate(ctx, bad); !errors.Is(err, ErrSchema) || !strings.Contains(err.Error(), "99_zbad.sql") {
		t.Fatalf("failing function file: %v", err)
	}
	if _, err := db.pool.Exec(ctx, `INSERT INTO queen.schema_migrations (version, name) VALUES (9999, 'future')`); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(ctx, url, 4, hclog.NewNullLogger()); !errors.Is(err, ErrSchema) || !strings.Contains(err.Error(), "newer") {
		t.Fatalf("newer schema: %v", err)
	}
}
