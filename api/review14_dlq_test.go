package api_test

// Review of issue 14: a dead-letter retry must deliver the copy to the
// entry's group only (docs/api.md, "Retry or drop a dead letter").

import (
	"strings"
	"testing"

	"queen-node/internal/nodetest"
)

// TestReview14DLQRetryCopyReachesGroupWithoutCursor: group late consumes
// the queue (it has its metadata row and a cursor on another partition)
// but has not reached partition p yet when g's dead letter of m1 is
// retried. The copy is marked resolved only for groups with a consumer row
// on p, so late later gets m1 AND the copy: a duplicate delivery to a
// group the retry was not for.
func TestReview14DLQRetryCopyReachesGroupWithoutCursor(t *testing.T) {
	c := rc{t: t, n: nodetest.Start(t)}
	c.configure("rv", msg{"retryLimit": 0})
	otherPid := c.push("rv", "other", "o1")
	got, lease := c.pop("rv", "other", "late", 10)
	c.ackAs("late", otherPid, lease, got...)

	pid := c.push("rv", "p", "m1")
	if tx := c.deadLetter("rv", "p", "g", pid); tx != "m1" {
		t.Fatalf("dead-lettered %s", tx)
	}
	c.ok(200, "POST", retryPath(pid, "m1", "g"), nil)

	got, _ = c.pop("rv", "p", "late", 10)
	if strings.Join(got, ",") != "m1" {
		t.Fatalf("group late (not the retried group) got %v from p, want only m1", got)
	}
}
