package api_test

// Real node, real PostgreSQL: GET /api/v1/status/hotlist/{queue}, the
// node's hot-list view of a queue (docs/api.md, "Hot-list view").

import (
	"net/url"
	"strings"
	"testing"
)

type hlEntry struct {
	Name        string  `json:"name"`
	ID          *string `json:"id"`
	State       string  `json:"state"`
	DueInMs     *int64  `json:"dueInMs"`
	HeldMs      *int64  `json:"heldMs"`
	Unconfirmed bool    `json:"unconfirmed"`
}

type hlRing struct {
	Group               string    `json:"group"`
	Ready               int       `json:"ready"`
	Wheel               int       `json:"wheel"`
	Inflight            int       `json:"inflight"`
	Cold                bool      `json:"cold"`
	NextReseedInMs      int64     `json:"nextReseedInMs"`
	Partitions          []hlEntry `json:"partitions"`
	PartitionsTruncated bool      `json:"partitionsTruncated"`
}

type hlView struct {
	Node       string   `json:"node"`
	Queue      string   `json:"queue"`
	Enabled    bool     `json:"enabled"`
	Registered bool     `json:"registered"`
	Rings      []hlRing `json:"rings"`
}

func (c rc) hotlist(queue string) hlView {
	c.t.Helper()
	var v hlView
	c.ok(200, "GET", "/api/v1/status/hotlist/"+url.PathEscape(queue), nil).JSON(c.t, &v)
	return v
}

func (v hlView) ring(group string) *hlRing {
	for i := range v.Rings {
		if v.Rings[i].Group == group {
			return &v.Rings[i]
		}
	}
	return nil
}

// popQueue pops one message of queue for group through the ring path
// (wait=false, leased) and returns its transaction id, partition id and
// lease; "" when none.
func (c rc) popQueue(queue, group string) (tx, pid, lease string) {
	c.t.Helper()
	r := c.do("GET", "/api/v1/pop/queue/"+queue+"?wait=false&batch=1&consumerGroup="+url.QueryEscape(group), nil)
	if r.Status == 204 {
		return "", "", ""
	}
	if r.Status != 200 {
		c.t.Fatalf("pop %s: %d %s", queue, r.Status, r.Body)
	}
	m := r.Obj(c.t)["messages"].([]any)[0].(msg)
	return m["transactionId"].(string), m["partitionId"].(string), m["leaseId"].(string)
}

// ackGroup acks one message of group under lease.
func (c rc) ackGroup(group, pid, lease, tx string) {
	c.t.Helper()
	var res []msg
	c.ok(200, "POST", "/api/v1/ack/batch", msg{"consumerGroup": group, "acknowledgments": []msg{
		{"transactionId": tx, "partitionId": pid, "status": "completed", "leaseId": lease}}}).JSON(c.t, &res)
	if len(res) != 1 || res[0]["success"] != true {
		c.t.Fatalf("ack %s: %v", tx, res)
	}
}

// TestHotlistView: a queue the node never saw is registered:false; after a
// group's pops the node's ring lists a lease-held partition (parked on the
// wheel until the lease's capped expiry, or promoted to ready) with its id,
// while PostgreSQL shows the lease; after the ack and one more pop the ring
// tracks nothing. Another tenant sees none of it, and bad input is 400.
func TestHotlistView(t *testing.T) {
	n, tok := startJWT(t, "hotlist-view-secret-0123456789")
	acme := rc{t: t, n: n, auth: tok("acme", "read-write")}
	reader := rc{t: t, n: n, auth: tok("acme", "read-only")}
	globex := rc{t: t, n: n, auth: tok("globex", "read-only")}

	if v := reader.hotlist("hl"); v.Registered || len(v.Rings) != 0 || !v.Enabled || v.Queue != "hl" || v.Node == "" {
		t.Fatalf("unknown queue: %+v", v)
	}
	// First contact provisions the group through SQL; the ring is
	// registered by the group's next pop (broker/hot.go, hotPop).
	pid0 := acme.push("hl", "p0", "w1")
	tx, _, lease := acme.popQueue("hl", "g")
	if tx != "w1" {
		t.Fatalf("warm-up pop: %q", tx)
	}
	acme.ackGroup("g", pid0, lease, tx)
	if tx, _, _ := acme.popQueue("hl", "g"); tx != "" {
		t.Fatalf("empty pop got %q", tx)
	}
	v := reader.hotlist("hl")
	if !v.Registered || v.ring("g") == nil {
		t.Fatalf("after the group's second pop: %+v", v)
	}

	pid := acme.push("hl", "p1", "m1")
	tx, gotPid, lease := acme.popQueue("hl", "g")
	if tx != "m1" || gotPid != pid {
		t.Fatalf("pop: %q %q", tx, gotPid)
	}
	g := reader.hotlist("hl").ring("g")
	var p1 *hlEntry
	for i := range g.Partitions {
		if g.Partitions[i].Name == "p1" {
			p1 = &g.Partitions[i]
		}
	}
	// A held lease parks its partition on the wheel for at most a second
	// (hotlist.LeaseParkCap); the wheel tick may have promoted it already.
	if p1 == nil || p1.ID == nil || *p1.ID != pid || (p1.State != "wheel" && p1.State != "ready") ||
		(p1.State == "wheel" && (p1.DueInMs == nil || *p1.DueInMs > 1000)) {
		t.Fatalf("lease-held partition in ring g: %+v (ring %+v)", p1, g)
	}
	if g.Ready+g.Wheel+g.Inflight < 1 || g.Cold {
		t.Fatalf("ring g: %+v", g)
	}
	// PostgreSQL's side of the same moment: the lease is live.
	var pg map[string]struct {
		Partitions []struct {
			Partition   string `json:"partition"`
			LeaseActive bool   `json:"leaseActive"`
		} `json:"partitions"`
	}
	reader.ok(200, "GET", "/api/v1/consumer-groups/g", nil).JSON(t, &pg)
	leased := false
	for _, p := range pg["hl"].Partitions {
		leased = leased || (p.Partition == "p1" && p.LeaseActive)
	}
	if !leased {
		t.Fatalf("PostgreSQL shows no lease on p1: %+v", pg)
	}

	// Another tenant's view of the same name holds nothing.
	if v := globex.hotlist("hl"); v.Registered || len(v.Rings) != 0 {
		t.Fatalf("globex sees acme's rings: %+v", v)
	}

	acme.ackGroup("g", pid, lease, tx)
	// The ack releases the parked entry, or a promoted one is probed
	// empty by the next pop: either way the ring ends up tracking nothing.
	if tx, _, _ := acme.popQueue("hl", "g"); tx != "" {
		t.Fatalf("pop after ack got %q", tx)
	}
	if g := reader.hotlist("hl").ring("g"); g.Ready+g.Wheel+g.Inflight != 0 || len(g.Partitions) != 0 {
		t.Fatalf("ring g after ack: %+v", g)
	}

	// Bounds and bad input.
	if r := reader.do("GET", "/api/v1/status/hotlist/hl?limit=0", nil); r.Status != 200 {
		t.Fatalf("limit=0: %d %s", r.Status, r.Body)
	}
	for _, p := range []string{"/api/v1/status/hotlist/hl?limit=-1", "/api/v1/status/hotlist/hl?limit=x",
		"/api/v1/status/hotlist/" + strings.Repeat("q", 1000)} {
		r := reader.do("GET", p, nil)
		if r.Status != 400 || !strings.Contains(string(r.Body), `"error"`) {
			t.Errorf("GET %s: %d %s", p, r.Status, r.Body)
		}
	}
	if r := n.DoAuth(t, "", "GET", "/api/v1/status/hotlist/hl", nil); r.Status != 401 {
		t.Errorf("no token: %d %s", r.Status, r.Body)
	}
}
