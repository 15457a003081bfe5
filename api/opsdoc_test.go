package api

import (
	"os"
	"strings"
	"testing"
)

// TestOperationsDocNamesEveryFigure: every row of Table is documented
// where an operator looks for it, docs/operations.md: its /status field in
// the status table (by its full path, or by its parent's path on a line
// that names the leaf, as "`mesh.coalescer.size` / `.cap`" does) and its
// Prometheus family in the metrics tables. Five figures had been added to
// the table and not to the page.
func TestOperationsDocNamesEveryFigure(t *testing.T) {
	raw, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	start := strings.Index(doc, "## `GET /status`")
	mid := strings.Index(doc, "## `GET /metrics`")
	end := strings.Index(doc, "## Dashboard")
	if start < 0 || mid < start || end < mid {
		t.Fatal("docs/operations.md: the GET /status, GET /metrics and Dashboard sections are not where this test reads them")
	}
	status, metrics := strings.Split(doc[start:mid], "\n"), doc[mid:end]
	for _, r := range Table {
		if r.Metric != "" && !strings.Contains(metrics, "`"+r.Metric+"`") {
			t.Errorf("metric %s (/status %s) is not in docs/operations.md's metrics tables", r.Metric, r.Status)
		}
		if r.Count != nil || r.Status == "" {
			continue // a series derived from a documented field
		}
		if !statusDocumented(status, r.Status) {
			t.Errorf("/status field %s is not in docs/operations.md's status table", r.Status)
		}
	}
}

// statusDocumented: the row's first cell names the path in backticks, or
// a path under the same parent and the leaf in backticks ("`mesh.coalescer.size`
// / `.cap`"). Only the first cell counts: a description that mentions a
// field does not document it.
func statusDocumented(lines []string, path string) bool {
	i := strings.LastIndex(path, ".")
	parent, leaf := path[:i], path[i+1:]
	for _, l := range lines {
		if !strings.HasPrefix(l, "| `") {
			continue
		}
		cell := l[2:]
		if end := strings.Index(cell, " | "); end >= 0 {
			cell = cell[:end]
		}
		if strings.Contains(cell, "`"+path+"`") || strings.Contains(cell, "`"+path+"[") {
			return true
		}
		if strings.Contains(cell, "`"+parent+".") && (strings.Contains(cell, "`"+leaf+"`") || strings.Contains(cell, "`."+leaf+"`")) {
			return true
		}
	}
	return false
}
