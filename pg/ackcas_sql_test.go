package pg

import (
	"strings"
	"testing"
)

// TestAckCASStatementIsTheFunctions: ackCASSQL is queen.ack_cas_v1's
// statement sent as it is, so that nodes of this release and of earlier
// ones (which call the function) resolve CAS acks alike during a rolling
// upgrade. With the function's parameters written as the statement's
// placeholders (and their types), the two texts must be the same.
func TestAckCASStatementIsTheFunctions(t *testing.T) {
	body, err := sqlFiles.ReadFile("sql/functions/35_ack_cas.sql")
	if err != nil {
		t.Fatal(err)
	}
	fn := string(body)
	start, end := strings.Index(fn, "RETURN QUERY"), strings.LastIndex(fn, "END;")
	if start < 0 || end < start {
		t.Fatal("35_ack_cas.sql: no RETURN QUERY ... END;")
	}
	fn = strings.TrimSuffix(strings.TrimSpace(fn[start+len("RETURN QUERY"):end]), ";")
	// The function's parameters, in its signature's order, as casParams
	// sends them.
	fn = strings.NewReplacer(
		"p_idx", "$1::int[]", "p_tenants", "$2::text[]", "p_pids", "$3::text[]::uuid[]", "p_groups", "$4::text[]",
		"p_leases", "$5::text[]", "p_firsts", "$6::bigint[]", "p_ends", "$7::bigint[]", "p_counts", "$8::int[]",
	).Replace(fn)
	norm := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	if f, s := norm(fn), norm(ackCASSQL); f != s {
		t.Fatalf("ackCASSQL differs from queen.ack_cas_v1's statement:\nfunction:  %s\nstatement: %s", f, s)
	}
	if !strings.Contains(string(body), "p_idx     int[],\n    p_tenants text[],\n    p_pids    uuid[],\n    p_groups  text[],\n"+
		"    p_leases  text[],\n    p_firsts  bigint[],\n    p_ends    bigint[],\n    p_counts  int[])") {
		t.Fatal("queen.ack_cas_v1's parameters are no longer those the replacements above assume")
	}
}
