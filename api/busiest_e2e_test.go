package api_test

// Real node, real PostgreSQL: the bounded reads the dashboard's queue page
// makes every round (docs/api.md, "Resources, messages and consumer
// groups"): a queue's busiest partitions, and one group's cursors on one
// queue with counts over all of them.

import (
	"fmt"
	"strings"
	"testing"

	"queen-node/internal/nodetest"
)

func TestQueuePageReadsAreBounded(t *testing.T) {
	c := rc{t: t, n: nodetest.Start(t)}
	// p0..p4 with 1..5 messages: p4 is the busiest.
	pids := map[string]string{}
	for i := 0; i < 5; i++ {
		var txs []string
		for k := 0; k <= i; k++ {
			txs = append(txs, fmt.Sprintf("m%d-%d", i, k))
		}
		pids[fmt.Sprintf("p%d", i)] = c.push("bq", fmt.Sprintf("p%d", i), txs...)
	}
	// g consumes p0 and p1 whole, holds a lease on one message of p2.
	for _, p := range []string{"p0", "p1"} {
		got, lease := c.pop("bq", p, "g", 10)
		c.ackAs("g", pids[p], lease, got...)
	}
	c.pop("bq", "p2", "g", 1)
	// g has a cursor on every partition (a pop on each creates it).
	for _, p := range []string{"p3", "p4"} {
		c.do("GET", "/api/v1/pop/queue/bq/partition/"+p+"?wait=false&batch=1&consumerGroup=g&autoAck=false", nil)
	}

	d := c.ok(200, "GET", "/api/v1/resources/queues/bq?partitionOrder=busiest&partitionLimit=2", nil).Obj(t)
	parts := d["partitions"].([]any)
	if len(parts) != 2 || parts[0].(msg)["name"] != "p4" || parts[1].(msg)["name"] != "p3" || d["partitionsTruncated"] != true || d["partitionCount"] != 5.0 {
		t.Fatalf("busiest two: %v", d)
	}
	byName := c.ok(200, "GET", "/api/v1/resources/queues/bq", nil).Obj(t)["partitions"].([]any)
	if len(byName) != 5 || byName[0].(msg)["name"] != "p0" {
		t.Fatalf("by name: %v", byName)
	}
	for _, bad := range []string{"partitionOrder=lag", "partitionLimit=0", "partitionLimit=x"} {
		if r := c.do("GET", "/api/v1/resources/queues/bq?"+bad, nil); r.Status != 400 || !strings.Contains(string(r.Body), "error") {
			t.Fatalf("%s: %d %s", bad, r.Status, r.Body)
		}
	}

	g := c.ok(200, "GET", "/api/v1/consumer-groups/g?queue=bq&limit=2", nil).Obj(t)
	q := g["bq"].(msg)
	cur := q["partitions"].([]any)
	// lags: p4 4 (one leased... popped batch 1 is unresolved), p3 3, p2 3 (leased), p1 0, p0 0
	if len(cur) != 2 || cur[0].(msg)["partition"] != "p4" || q["partitionCount"] != 5.0 || q["partitionsTruncated"] != true {
		t.Fatalf("two most lagging cursors: %v", g)
	}
	if q["pendingPartitions"] != 3.0 || q["leasedPartitions"] != 3.0 {
		t.Fatalf("counts over every cursor: pending %v leased %v", q["pendingPartitions"], q["leasedPartitions"])
	}
	if len(g) != 1 {
		t.Fatalf("a queue filter returned other queues: %v", g)
	}
	if e := c.ok(200, "GET", "/api/v1/consumer-groups/g?queue=nope", nil).Obj(t); len(e) != 0 {
		t.Fatalf("unknown queue: %v", e)
	}
	if r := c.do("GET", "/api/v1/consumer-groups/g?queue=bq&limit=-1", nil); r.Status != 400 {
		t.Fatalf("bad limit: %d %s", r.Status, r.Body)
	}
	// Without the filter: every cursor, no counts (the reference's shape).
	all := c.ok(200, "GET", "/api/v1/consumer-groups/g", nil).Obj(t)["bq"].(msg)
	if len(all["partitions"].([]any)) != 5 || all["partitionCount"] != nil {
		t.Fatalf("unfiltered: %v", all)
	}
}
