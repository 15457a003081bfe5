package api_test

// Review of issue 14: a dead-letter retry must deliver the copy to the
// entry's group only (docs/api.md, "Retry or drop a dead letter").

import (
	"strings"
	"testing"

	"queen-node/internal/nodetest"
)

// TestDLQRetryCopyReachesGroupWithoutCursor: group late consumes
// the queue (it has its metadata row and a cursor on another partition)
// but has not reached partition p yet when g's dead letter of m1 is
// retried. The copy is marked resolved only for groups with a consumer row
// on p, so late later gets m1 AND the copy: a duplicate delivery to a
// group the retry was not for.
func TestDLQRetryCopyReachesGroupWithoutCursor(t *testing.T) {
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

// TestDLQListedEntryCannotBeDropped: after a group delete the
// group's dead-letter entry is superseded, yet GET /api/v1/dlq (what the
// dashboard's queue page lists, with retry and drop buttons per row) still
// lists it, while drop and retry answer 404 for it: the row can never be
// cleared, and the list disagrees with the queue's deadLetter count.
func TestDLQListedEntryCannotBeDropped(t *testing.T) {
	c := rc{t: t, n: nodetest.Start(t)}
	c.configure("rd", msg{"retryLimit": 0})
	pid := c.push("rd", "p", "m1")
	c.deadLetter("rd", "p", "g", pid)
	c.ok(200, "DELETE", "/api/v1/consumer-groups/g/queues/rd", nil)

	// The entry stays listed, marked superseded (docs/api.md, "Retry or
	// drop a dead letter").
	listed, total := c.dlq("rd")
	if total != 1 {
		t.Fatalf("after the group delete the DLQ lists %v (total %d), want g's entry", listed, total)
	}
	body := c.ok(200, "GET", "/api/v1/dlq?queue=rd", nil).Obj(t)
	if e := body["messages"].([]any)[0].(msg); e["superseded"] != true {
		t.Fatalf("the group delete's entry is not marked superseded: %v", e)
	}
	// nothing to retry (409, entry kept), but it can be dropped
	if r := c.do("POST", retryPath(pid, "m1", "g"), nil); r.Status != 409 {
		t.Fatalf("retry of a superseded entry: %d %s", r.Status, r.Body)
	}
	if r := c.do("DELETE", dlqPath(pid, "m1", "g"), nil); r.Status != 200 {
		t.Fatalf("GET /api/v1/dlq lists %v (total %d) but dropping g/m1 answers %d %s", listed, total, r.Status, r.Body)
	}
	if _, total := c.dlq("rd"); total != 0 {
		t.Fatalf("after the drop the list still has %d entries", total)
	}
}

// TestDLQRetryCopyReachesNewSubscriber: group late subscribes with
// subscriptionMode=new after m1 was pushed (popping another partition, so
// it has no cursor on p), so it must never see m1. After g's dead letter of
// m1 is retried, late's first pop of p serves it the copy: created after
// its subscription, it passes late's subscription start.
func TestDLQRetryCopyReachesNewSubscriber(t *testing.T) {
	c := rc{t: t, n: nodetest.Start(t)}
	c.configure("rn", msg{"retryLimit": 0})
	pid := c.push("rn", "p", "m1")
	c.push("rn", "other", "o1")
	r := c.do("GET", "/api/v1/pop/queue/rn/partition/other?wait=false&batch=10&autoAck=true&consumerGroup=late&subscriptionMode=new", nil)
	if r.Status != 200 && r.Status != 204 {
		t.Fatalf("late subscribes: %d %s", r.Status, r.Body)
	}
	if tx := c.deadLetter("rn", "p", "g", pid); tx != "m1" {
		t.Fatalf("dead-lettered %s", tx)
	}
	c.ok(200, "POST", retryPath(pid, "m1", "g"), nil)

	if got, _ := c.pop("rn", "p", "late", 10); len(got) != 0 {
		t.Fatalf("group late (subscribed new, after m1) got %v from p", got)
	}
}
