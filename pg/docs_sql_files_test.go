package pg_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDocsNameExistingSQLFiles: every SQL file the docs name by path
// (pg/sql/...something.sql, without wildcards) exists. The SQL moved to
// pg/sql/functions and pg/sql/migrations; a doc pointing at the old layout
// sends a reader to a file that is gone.
func TestDocsNameExistingSQLFiles(t *testing.T) {
	docs, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	docs = append(docs, "../README.md")
	re := regexp.MustCompile(`pg/sql/[A-Za-z0-9_./]+\.sql`)
	for _, d := range docs {
		b, err := os.ReadFile(d)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			for _, p := range re.FindAllString(line, -1) {
				if strings.Contains(p, "NNNN") {
					continue // a pattern, not a file
				}
				if _, err := os.Stat(filepath.Join("..", p)); err != nil {
					t.Errorf("%s:%d names %s, which does not exist", d, i+1, p)
				}
			}
		}
	}
}
