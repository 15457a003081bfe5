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

// TestForwardedPushKeepsTheCallersIdentity: with authentication on, a push
// through node 0 to a queue node 1 owns (docs/api.md, "Push ownership") is
// stored by node 1 under the caller's tenant and subject, which the
// forwarded Authorization header carries; a caller who may not push is
// refused by node 0 and nothing is forwarded.
func TestForwardedPushKeepsTheCallersIdentity(t *testing.T) {
	nodes := nodetest.StartClusterConfig(t, 2, func(c *node.Config) {
		c.Auth.Enabled = true
		c.Auth.Secret = secret
		c.Mesh.Secret = []byte("0123456789abcdef") // pushes are forwarded only on a sealed mesh
	})
	tok := func(tenant, sub, role string) string {
		c := jwt.MapClaims{"sub": sub, "role": role, "tenant": tenant, "exp": time.Now().Add(time.Hour).Unix()}
		return "Bearer " + hs(t, c)
	}
	admin := tok("acme", "alice", "admin")
	deadline := time.Now().Add(10 * time.Second)
	for nodes[0].Mesh.Owners().Len() != 2 {
		if time.Now().After(deadline) {
			t.Fatal("node 0's owner table never held both nodes")
		}
		time.Sleep(10 * time.Millisecond)
	}
	tb := nodes[0].Mesh.Owners()
	queue := ""
	for k := 0; queue == ""; k++ {
		q := fmt.Sprintf("fw-%d", k)
		if tb.Node(tb.Owner("acme", q)).Name == nodes[1].Node.Broker().NodeName() {
			queue = q
		}
	}
	received := func(n *nodetest.Node) float64 {
		r := n.DoAuth(t, admin, "GET", "/status", nil)
		if r.Status != 200 {
			t.Fatalf("status: %d %s", r.Status, r.Body)
		}
		return r.Obj(t)["forward"].(map[string]any)["received"].(float64)
	}
	push := func(token string) nodetest.Response {
		return nodes[0].DoAuth(t, token, "POST", "/api/v1/push", map[string]any{"items": []any{
			map[string]any{"queue": queue, "payload": map[string]any{"n": 1}}}})
	}

	if r := push(tok("acme", "reader", "read-only")); r.Status != 403 {
		t.Fatalf("read-only push: %d %s, want 403", r.Status, r.Body)
	}
	if n := received(nodes[1]); n != 0 {
		t.Fatalf("node 1 received %v forwarded pushes after a refused one", n)
	}
	if r := push(tok("acme", "bob", "read-write")); r.Status != 201 || r.Arr(t)[0]["status"] != "queued" {
		t.Fatalf("push: %d %s", r.Status, r.Body)
	}
	if n := received(nodes[1]); n != 1 {
		t.Fatalf("node 1 received %v forwarded pushes, want 1", n)
	}
	// The message is acme's, pushed by bob: another tenant's same-named
	// queue is empty, and acme's pop shows bob as the producer.
	if r := nodes[1].DoAuth(t, tok("globex", "carol", "admin"), "GET", "/api/v1/pop/queue/"+url.PathEscape(queue)+"?wait=false", nil); r.Status != 204 {
		t.Fatalf("globex pop: %d %s, want 204", r.Status, r.Body)
	}
	r := nodes[0].DoAuth(t, admin, "GET", "/api/v1/pop/queue/"+url.PathEscape(queue)+"?wait=false&autoAck=true", nil)
	if r.Status != 200 {
		t.Fatalf("acme pop: %d %s", r.Status, r.Body)
	}
	msgs := r.Obj(t)["messages"].([]any)
	if len(msgs) != 1 || msgs[0].(map[string]any)["producerSub"] != "bob" {
		t.Fatalf("acme pop %s, want one message produced by bob", r.Body)
	}
}
