package auth_test

import (
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"queen-node/internal/nodetest"
	"queen-node/node"
)

// TestTenantsApartAcrossNodes: two tenants use the same queue name on a
// two-node cluster with authentication on. A push of one tenant on node 0
// wakes that tenant's consumer parked on node 1 through the mesh hint (well
// before the 30 s reseed floor), and never reaches the other tenant's
// consumer parked on the same queue name, nor its pops, DLQ or deletes.
func TestTenantsApartAcrossNodes(t *testing.T) {
	nodes := nodetest.StartClusterConfig(t, 2, func(c *node.Config) {
		c.Auth.Enabled = true
		c.Auth.Secret = secret
	})
	tok := func(tenant, role string) string {
		c := jwt.MapClaims{"sub": tenant + "-user", "role": role, "tenant": tenant, "exp": time.Now().Add(time.Hour).Unix()}
		return "Bearer " + hs(t, c)
	}
	acme, globex := tok("acme", "admin"), tok("globex", "admin")
	const queue = "orders"
	pop := func(n *nodetest.Node, token, query string) nodetest.Response {
		return n.DoAuth(t, token, "GET", "/api/v1/pop/queue/"+url.PathEscape(queue)+"?"+query, nil)
	}
	// First contact registers both tenants' groups on node 1, so the parked
	// pops below take the hot-list path a running consumer takes.
	for _, tk := range []string{acme, globex} {
		if r := pop(nodes[1], tk, "wait=false"); r.Status != 204 {
			t.Fatalf("first pop: %d %s", r.Status, r.Body)
		}
	}

	type result struct {
		r  nodetest.Response
		at time.Time
	}
	parked := func(token string, timeoutMS int) chan result {
		ch := make(chan result, 1)
		go func() {
			r := pop(nodes[1], token, fmt.Sprintf("wait=true&timeout=%d&autoAck=true", timeoutMS))
			ch <- result{r, time.Now()}
		}()
		return ch
	}
	acmeCh, globexCh := parked(acme, 20000), parked(globex, 3000)
	deadline := time.Now().Add(10 * time.Second)
	for nodes[1].Broker.Parked() < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the two pops never parked")
		}
		time.Sleep(5 * time.Millisecond)
	}

	pushed := time.Now()
	if r := nodes[0].DoAuth(t, acme, "POST", "/api/v1/push",
		map[string]any{"items": []map[string]any{{"queue": queue, "partition": "p1", "payload": map[string]any{"for": "acme"}}}}); r.Status != 201 {
		t.Fatalf("acme push: %d %s", r.Status, r.Body)
	}
	select {
	case got := <-acmeCh:
		if got.r.Status != 200 {
			t.Fatalf("acme's parked pop: %d %s", got.r.Status, got.r.Body)
		}
		if waited := got.at.Sub(pushed); waited > 5*time.Second {
			t.Fatalf("acme's consumer on the other node got the message %v after the push: not woken by the hint", waited)
		}
		msgs := got.r.Obj(t)["messages"].([]any)
		if len(msgs) != 1 || msgs[0].(map[string]any)["producerSub"] != "acme-user" {
			t.Fatalf("acme's pop: %s", got.r.Body)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("acme's parked pop never returned")
	}
	select {
	case got := <-globexCh:
		if got.r.Status != 204 {
			t.Fatalf("globex's parked pop on the same queue name got %d %s", got.r.Status, got.r.Body)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("globex's parked pop never returned")
	}

	// Another acme message stays acme's, whatever globex does on either node.
	if r := nodes[0].DoAuth(t, acme, "POST", "/api/v1/push",
		map[string]any{"items": []map[string]any{{"queue": queue, "partition": "p1", "payload": 2}}}); r.Status != 201 {
		t.Fatalf("acme push: %d %s", r.Status, r.Body)
	}
	for i, n := range nodes {
		if r := pop(n, globex, "wait=false"); r.Status != 204 {
			t.Fatalf("globex pop on node %d: %d %s", i, r.Status, r.Body)
		}
		if r := n.DoAuth(t, globex, "GET", "/api/v1/dlq?queue="+queue, nil); r.Status != 200 || len(r.Obj(t)["messages"].([]any)) != 0 {
			t.Fatalf("globex dlq on node %d: %d %s", i, r.Status, r.Body)
		}
	}
	// globex's seek to the end and its delete of its own "orders" (which its
	// first pop created) succeed, and touch only globex's rows.
	if r := nodes[1].DoAuth(t, globex, "POST", "/api/v1/consumer-groups/__QUEUE_MODE__/queues/"+queue+"/seek",
		map[string]any{"toEnd": true}); r.Status != 200 {
		t.Fatalf("globex seek: %d %s", r.Status, r.Body)
	}
	if r := nodes[1].DoAuth(t, globex, "DELETE", "/api/v1/resources/queues/"+queue, nil); r.Status != 200 {
		t.Fatalf("globex delete: %d %s", r.Status, r.Body)
	}
	r := pop(nodes[1], acme, "wait=false")
	if r.Status != 200 || len(r.Obj(t)["messages"].([]any)) != 1 {
		t.Fatalf("acme's second message after globex's delete and seek: %d %s", r.Status, r.Body)
	}
}
