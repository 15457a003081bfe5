package pg

import (
	"strings"
	"testing"
)

// TestAckCASStatementIsTheFunctions: ackCASSQL is queen.ack_cas_v1's
// statement sent as it is, so that nodes of this release and of earlier
// ones (which call the function) resolve CAS acks alike during a rolling
// upgrade. Past their input lines (the function's parameters, the
// statement's $n), the two texts must be the same.
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
	tail := func(s string) string {
		const from = "AS u(i, tenant, pid, grp, lease, first_off, end_off, n)"
		i := strings.Index(s, from)
		if i < 0 {
			t.Fatalf("no %q in %s", from, s)
		}
		return strings.Join(strings.Fields(s[i:]), " ")
	}
	if f, s := tail(fn), tail(ackCASSQL); f != s {
		t.Fatalf("ackCASSQL differs from queen.ack_cas_v1's statement:\nfunction:  %s\nstatement: %s", f, s)
	}
}
