package pg

import (
	"io/fs"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"queen-node/protocol"
)

// sqlLiterals returns every single-quoted literal of the embedded SQL files,
// comments stripped, with the files it appears in.
func sqlLiterals(t *testing.T) map[string][]string {
	t.Helper()
	names, err := fs.Glob(sqlFiles, "sql/*/*.sql")
	if err != nil || len(names) == 0 {
		t.Fatalf("list SQL files: %v (%d)", err, len(names))
	}
	comment := regexp.MustCompile(`--[^\n]*`)
	literal := regexp.MustCompile(`'([^']*)'`)
	out := map[string][]string{}
	for _, name := range names {
		body, err := sqlFiles.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		// Dollar-quoted bodies are SQL too: their literals count.
		text := comment.ReplaceAllString(string(body), "")
		for _, m := range literal.FindAllStringSubmatch(text, -1) {
			out[m[1]] = append(out[m[1]], name)
		}
	}
	return out
}

// TestSQLProtocolLiterals ties the protocol strings of the SQL functions to
// package protocol: every literal in pg/sql is a protocol constant or one
// of the few SQL-only texts below, and every constant the SQL must know is
// spelled there. A value renamed on one side only fails here.
func TestSQLProtocolLiterals(t *testing.T) {
	must := map[string]string{ // value -> Go name; SQL spells each of these
		protocol.QueueMode:              "QueueMode",
		string(protocol.PushQueued):     "PushQueued",
		string(protocol.PushDuplicate):  "PushDuplicate",
		string(protocol.PushMissing):    "PushMissing",
		string(protocol.PushDeferred):   "PushDeferred",
		string(protocol.AckCompleted):   "AckCompleted",
		string(protocol.AckSuccess):     "AckSuccess",
		string(protocol.AckFailed):      "AckFailed",
		string(protocol.AckDLQ):         "AckDLQ",
		string(protocol.AckRetry):       "AckRetry",
		string(protocol.SubNew):         "SubNew",
		string(protocol.SubFrom):        "SubFrom",
		string(protocol.VerdictTook):    "VerdictTook",
		string(protocol.VerdictEmpty):   "VerdictEmpty",
		string(protocol.VerdictLeased):  "VerdictLeased",
		string(protocol.VerdictBusy):    "VerdictBusy",
		string(protocol.VerdictRequeue): "VerdictRequeue",
		protocol.PopRowMeta:             "PopRowMeta",
		protocol.PopRowVerdict:          "PopRowVerdict",
		protocol.PopRowMsg:              "PopRowMsg",
		protocol.GroupSeeded:            "GroupSeeded",
		protocol.GroupFresh:             "GroupFresh",
		protocol.ErrMessageNotFound:     "ErrMessageNotFound",
		protocol.ErrInvalidLease:        "ErrInvalidLease",
		protocol.ErrInvalidStatus:       "ErrInvalidStatus",
		string(protocol.MsgPending):     "MsgPending",
		string(protocol.MsgProcessing):  "MsgProcessing",
		string(protocol.MsgDeadLetter):  "MsgDeadLetter",
		protocol.DLQRetrySep:            "DLQRetrySep",
		string(protocol.DLQRetried):     "DLQRetried",
		string(protocol.DLQNotFound):    "DLQNotFound",
		string(protocol.DLQSuperseded):  "DLQSuperseded",
		string(protocol.DLQTaken):       "DLQTaken",
		protocol.StateRefusedRows:       "StateRefusedRows",
		protocol.StateRefusedBytes:      "StateRefusedBytes",
	}
	// Texts only SQL uses: empty values, array and key syntax, and error
	// texts Go never compares.
	sqlOnly := map[string]bool{
		"": true, "{}": true, "/": true,
		"Retries exhausted": true, "Unknown error": true,
		"Too many acks past an unresolved message": true,
		"queen.ack_v1: fast path":                  true, // RAISE DEBUGs pg/ack_fast_test.go counts
		"queen.ack_v2: fast path":                  true,
		"40001":                                    true, // pop_v3's raise, retried as pg/retry.go's codeSerialization
		"consumer group % of queue % deleted during a claim": true,
		"consumer row of group % deleted during an ack":      true,
		"queen.group:": true, // queen.group_gate's key prefix; Go calls the function
	}
	lits := sqlLiterals(t)
	var unknown []string
	for lit, files := range lits {
		if _, ok := must[lit]; !ok && !sqlOnly[lit] {
			unknown = append(unknown, "'"+lit+"' in "+strings.Join(files, ", "))
		}
	}
	sort.Strings(unknown)
	for _, u := range unknown {
		t.Errorf("SQL literal %s is not a constant of package protocol (add it there, or to sqlOnly if no Go code spells it)", u)
	}
	for v, name := range must {
		if _, ok := lits[v]; !ok {
			t.Errorf("protocol.%s (%q) is not spelled in pg/sql: renamed on one side only?", name, v)
		}
	}
	// The lists of package protocol cover what SQL accepts.
	for _, st := range protocol.AckStatuses {
		if _, ok := lits[string(st)]; !ok {
			t.Errorf("ack status %q missing from pg/sql", st)
		}
	}
	for _, v := range protocol.Verdicts {
		if _, ok := lits[string(v)]; !ok {
			t.Errorf("verdict %q missing from pg/sql", v)
		}
	}
}

// TestSQLNumbers ties the numbers the SQL functions share with Go to
// package protocol: each is written once in SQL, as a constant function of
// 00_constants.sql (SELECT <number>), whose value must be the Go
// constant's, and no other function body writes it as a bare literal (it
// calls the function instead).
func TestSQLNumbers(t *testing.T) {
	want := map[string]int{ // SQL function -> Go constant
		"default_lease_seconds": protocol.DefaultLeaseSeconds,
		"row_envelope_bytes":    protocol.RowEnvelopeBytes,
		"max_acked_past_gap":    protocol.MaxAckedPastGap,
	}
	names, err := fs.Glob(sqlFiles, "sql/functions/*.sql")
	if err != nil || len(names) == 0 {
		t.Fatalf("list SQL files: %v (%d)", err, len(names))
	}
	comment := regexp.MustCompile(`--[^\n]*`)
	constFn := regexp.MustCompile(`(?s)CREATE OR REPLACE FUNCTION queen\.([a-z_0-9]+)\(\)\s*RETURNS int\s*LANGUAGE sql IMMUTABLE PARALLEL SAFE AS \$\$\s*SELECT (\d+)\s*\$\$;`)
	got := map[string]int{}
	for _, name := range names {
		body, err := sqlFiles.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		text := comment.ReplaceAllString(string(body), "")
		for _, m := range constFn.FindAllStringSubmatch(text, -1) {
			if _, dup := got[m[1]]; dup {
				t.Errorf("queen.%s() defined twice", m[1])
			}
			v, _ := strconv.Atoi(m[2])
			got[m[1]] = v
		}
		rest := constFn.ReplaceAllString(text, "")
		for fn, v := range want {
			if regexp.MustCompile(`\b` + strconv.Itoa(v) + `\b`).MatchString(rest) {
				t.Errorf("%s writes %d as a literal: call queen.%s() instead", name, v, fn)
			}
		}
	}
	for fn, v := range want {
		g, ok := got[fn]
		switch {
		case !ok:
			t.Errorf("queen.%s() is not defined in pg/sql/functions as SELECT <number>", fn)
		case g != v:
			t.Errorf("queen.%s() is %d in SQL and %d in package protocol", fn, g, v)
		}
	}
	for fn := range got {
		if _, ok := want[fn]; !ok {
			t.Errorf("queen.%s() is a constant with no protocol counterpart in this test", fn)
		}
	}
}
