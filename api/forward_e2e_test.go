package api_test

// Real nodes, real PostgreSQL, real mesh: push ownership (docs/api.md,
// "Push ownership"). Every push is stored by its queue's owner whichever
// node received it, and nothing is lost, doubled or reordered on the way.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"queen-node/broker"
	"queen-node/forward"
	"queen-node/internal/nodetest"
	"queen-node/node"
	"queen-node/owner"
)

// nodeStatus is the part of /status these tests read.
type nodeStatus struct {
	Requests struct {
		Pushed     int64 `json:"pushed_messages"`
		Duplicates int64 `json:"duplicates"`
		Popped     int64 `json:"popped_messages"`
		Released   int64 `json:"leases_released_undelivered"`
	} `json:"requests"`
	Forward struct {
		Owners   int64 `json:"owners"`
		Requests int64 `json:"requests"`
		Items    int64 `json:"items"`
		Failures int64 `json:"failures"`
		Fallback int64 `json:"fallback_items"`
		Local    int64 `json:"local_items"`
		Received int64 `json:"received"`

		Pops            int64 `json:"pops"` // the consumer side (consume_e2e_test.go)
		PopFailures     int64 `json:"pop_failures"`
		Acks            int64 `json:"acks"`
		AckItems        int64 `json:"ack_items"`
		AckLocal        int64 `json:"ack_local_items"`
		Routes          int64 `json:"routes"`
		ConsumeReceived int64 `json:"consume_received"`
	} `json:"forward"`
}

func statusOf(t *testing.T, n *nodetest.Node) nodeStatus {
	t.Helper()
	r := n.Do(t, "GET", "/status", nil)
	if r.Status != 200 {
		t.Fatalf("status: %d %s", r.Status, r.Body)
	}
	var st nodeStatus
	r.JSON(t, &st)
	return st
}

// meshKey seals a test cluster's mesh: pushes are forwarded only between
// authenticated members.
var meshKey = []byte("0123456789abcdef0123456789abcdef")

// forwarderVia is a forwarder for node from whose one peer, to, is
// reached at proxyURL (a proxy in front of it), marking its requests as
// the members of a mesh sealed with meshKey do, so the owner takes them as
// forwarded (forward/mark.go). It closes with the test.
func forwarderVia(t *testing.T, from, to *nodetest.Node, proxyURL string) *forward.Forwarder {
	tb := owner.New([]owner.Node{{Name: from.Node.Broker().NodeName(), Addr: "unused:1", Self: true},
		{Name: to.Node.Broker().NodeName(), Addr: strings.TrimPrefix(proxyURL, "http://")}})
	cfg := forward.DefaultConfig()
	cfg.Mark = forward.Mark(meshKey)
	f := forward.New(cfg, func() *owner.Table { return tb }, nil)
	t.Cleanup(f.Close)
	return f
}

// ownedCluster starts n nodes on a sealed mesh and waits until each one's
// owner table holds all of them; it returns the nodes and, by node index,
// queue names each node owns. edits change the nodes' configuration.
func ownedCluster(t *testing.T, n, perNode int, edits ...func(*node.Config)) ([]*nodetest.Node, [][]string) {
	t.Helper()
	nodes := nodetest.StartClusterConfig(t, n, func(c *node.Config) {
		c.Mesh.Secret = meshKey
		for _, e := range edits {
			e(c)
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for _, nd := range nodes {
		for nd.Mesh.Owners().Len() != n {
			if time.Now().After(deadline) {
				t.Fatalf("owner table of %d members, want %d", nd.Mesh.Owners().Len(), n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	tb := nodes[0].Mesh.Owners()
	index := map[string]int{}
	for i, nd := range nodes {
		index[nd.Node.Broker().NodeName()] = i
	}
	owned := make([][]string, n)
	for k := 0; ; k++ {
		q := fmt.Sprintf("own-%d", k)
		i := index[tb.Node(tb.Owner("default", q)).Name]
		if len(owned[i]) < perNode {
			owned[i] = append(owned[i], q)
		}
		done := true
		for _, o := range owned {
			done = done && len(o) == perNode
		}
		if done {
			return nodes, owned
		}
		if k > 10000 {
			t.Fatal("could not find queues for every node")
		}
	}
}

// TestPushOwnership: six producers push concurrently through all three
// nodes, each push spanning queues of every owner. Each item is stored by
// its queue's owner (its pushed count is exactly the items of its queues),
// the answers come back in item order, a retry through another node is
// reported duplicate, and one group consumes every item once, in each
// producer's order per partition.
func TestPushOwnership(t *testing.T) {
	nodes, owned := ownedCluster(t, 3, 2)
	// The owner tables as the pushes start: a membership change during the
	// run (memberlist suspecting a member on a loaded machine) may move
	// queues, and then only the weaker checks apply.
	tables := make([]*owner.Table, len(nodes))
	for i, nd := range nodes {
		tables[i] = nd.Mesh.Owners()
	}
	var queues []string
	ownerOf := map[string]int{}
	for i, qs := range owned {
		for _, q := range qs {
			queues = append(queues, q)
			ownerOf[q] = i
		}
	}
	const producers, pushes, batch = 6, 25, 24
	type item struct {
		Queue     string `json:"queue"`
		Partition string `json:"partition"`
		TxID      string `json:"transactionId,omitempty"`
		Payload   any    `json:"payload"`
	}
	var mu sync.Mutex
	sent := map[string][]item{} // by producer: what to retry
	var wg sync.WaitGroup
	errs := make(chan error, producers)
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(p)))
			seq := 0
			for k := 0; k < pushes; k++ {
				items := make([]item, batch)
				for j := range items {
					q := queues[rng.Intn(len(queues))]
					items[j] = item{Queue: q, Partition: fmt.Sprintf("p%d", rng.Intn(4)),
						Payload: map[string]int{"producer": p, "seq": seq}}
					if seq%2 == 0 {
						items[j].TxID = fmt.Sprintf("tx-%d-%d", p, seq)
					}
					seq++
				}
				via := nodes[rng.Intn(len(nodes))]
				// Not via.Do: t.Fatalf must not run off the test's goroutine.
				status, body, err := postJSON(via.URL+"/api/v1/push", map[string]any{"items": items})
				if err != nil || status != 201 {
					errs <- fmt.Errorf("push: %d %s %v", status, body, err)
					return
				}
				var res []struct {
					Index  int    `json:"index"`
					Status string `json:"status"`
					TxID   string `json:"transactionId"`
					Queue  string `json:"queueName"`
				}
				if err := json.Unmarshal(body, &res); err != nil {
					errs <- fmt.Errorf("push answer %s: %v", body, err)
					return
				}
				for j, x := range res {
					if x.Index != j || x.Status != "queued" || x.Queue != items[j].Queue || (items[j].TxID != "" && x.TxID != items[j].TxID) || x.TxID == "" {
						errs <- fmt.Errorf("result %d of %+v: %+v", j, items[j], x)
						return
					}
				}
				mu.Lock()
				sent[fmt.Sprint(p)] = append(sent[fmt.Sprint(p)], items...)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	total := producers * pushes * batch
	perOwner := make([]int64, len(nodes))
	for _, items := range sent {
		for _, it := range items {
			perOwner[ownerOf[it.Queue]]++
		}
	}
	steady := true
	for i, nd := range nodes {
		steady = steady && nd.Mesh.Owners() == tables[i]
	}
	var forwarded, received, stored int64
	for i, nd := range nodes {
		st := statusOf(t, nd)
		stored += st.Requests.Pushed
		if !steady {
			continue
		}
		if st.Requests.Pushed != perOwner[i] {
			t.Errorf("node %d stored %d items, but owns queues with %d", i, st.Requests.Pushed, perOwner[i])
		}
		if st.Forward.Owners != 3 || st.Forward.Failures != 0 || st.Forward.Fallback != 0 {
			t.Errorf("node %d forward figures %+v", i, st.Forward)
		}
		forwarded += st.Forward.Items
		received += st.Forward.Received
	}
	if !steady {
		t.Logf("the membership changed during the pushes: per-owner counts not checked")
		forwarded, received = 1, 1
	}
	if stored != int64(total) {
		t.Errorf("the nodes stored %d items, %d were pushed", stored, total)
	}
	if forwarded == 0 || received == 0 {
		t.Fatalf("nothing was forwarded (%d items, %d pushes received)", forwarded, received)
	}

	// A retry of items with transaction ids, through another node than
	// before, finds them: duplicate, stored nowhere again.
	retry := []item{}
	for _, it := range sent["0"] {
		if it.TxID != "" && len(retry) < 40 {
			retry = append(retry, it)
		}
	}
	r := nodes[1].Do(t, "POST", "/api/v1/push", map[string]any{"items": retry})
	if r.Status != 201 {
		t.Fatalf("retry: %d %s", r.Status, r.Body)
	}
	for _, x := range r.Arr(t) {
		if x["status"] != "duplicate" {
			t.Fatalf("retried item answered %v", x)
		}
	}

	// One group reads everything back once, in order per producer and
	// partition.
	type key struct {
		producer  int
		queue     string
		partition string
	}
	last := map[key]int{}
	got := 0
	for qi, q := range queues {
		for empty := 0; empty < 2; {
			via := nodes[(qi+empty)%len(nodes)]
			r := via.Do(t, "GET", "/api/v1/pop/queue/"+url.PathEscape(q)+"?batch=100&wait=false&consumerGroup=check", nil)
			if r.Status == 204 {
				empty++
				continue
			}
			if r.Status != 200 {
				t.Fatalf("pop: %d %s", r.Status, r.Body)
			}
			var pr struct {
				Messages []struct {
					TxID      string          `json:"transactionId"`
					Partition string          `json:"partitionId"`
					Lease     string          `json:"leaseId"`
					Data      json.RawMessage `json:"data"`
					Name      string          `json:"partition"`
				} `json:"messages"`
			}
			r.JSON(t, &pr)
			var acks []map[string]any
			for _, m := range pr.Messages {
				var d struct{ Producer, Seq int }
				if err := json.Unmarshal(m.Data, &d); err != nil {
					t.Fatalf("payload %s: %v", m.Data, err)
				}
				k := key{d.Producer, q, m.Name}
				if prev, ok := last[k]; ok && d.Seq <= prev {
					t.Fatalf("producer %d, %s/%s: seq %d after %d", d.Producer, q, m.Name, d.Seq, prev)
				}
				last[k] = d.Seq
				got++
				acks = append(acks, map[string]any{"transactionId": m.TxID, "partitionId": m.Partition, "leaseId": m.Lease, "status": "completed", "consumerGroup": "check"})
			}
			if a := via.Do(t, "POST", "/api/v1/ack/batch", map[string]any{"acknowledgments": acks}); a.Status != 200 {
				t.Fatalf("ack: %d %s", a.Status, a.Body)
			}
		}
	}
	if got != total {
		t.Fatalf("read %d messages back, pushed %d", got, total)
	}
}

// A push that a peer forwarded is stored where it arrives, whatever that
// node thinks its owner is: a forward is never forwarded again.
func TestForwardedPushIsStoredWhereItArrives(t *testing.T) {
	nodes, owned := ownedCluster(t, 2, 1)
	q := owned[1][0] // node 1's
	before := statusOf(t, nodes[0])
	r := nodes[0].DoHeader(t, map[string]string{forward.Header: forward.Mark(meshKey)}, "POST", "/api/v1/push",
		map[string]any{"items": []map[string]any{{"queue": q, "payload": map[string]int{"n": 1}}}})
	if r.Status != 201 {
		t.Fatalf("push: %d %s", r.Status, r.Body)
	}
	after := statusOf(t, nodes[0])
	if after.Requests.Pushed != before.Requests.Pushed+1 || after.Forward.Requests != before.Forward.Requests ||
		after.Forward.Received != before.Forward.Received+1 {
		t.Fatalf("node 0 before %+v, after %+v: want the item stored there, nothing forwarded", before, after)
	}
	// Without the mark the same push goes to node 1.
	r = nodes[0].Do(t, "POST", "/api/v1/push", map[string]any{"items": []map[string]any{{"queue": q, "payload": map[string]int{"n": 2}}}})
	if r.Status != 201 {
		t.Fatalf("push: %d %s", r.Status, r.Body)
	}
	if st := statusOf(t, nodes[0]); st.Forward.Requests != after.Forward.Requests+1 || st.Requests.Pushed != after.Requests.Pushed {
		t.Fatalf("node 0 after an unmarked push %+v: want it forwarded", st)
	}
}

// On an open mesh (no secret) nothing is forwarded: anyone who reaches the
// mesh port could advertise an address and be handed pushes and tokens.
func TestOpenMeshForwardsNothing(t *testing.T) {
	nodes := nodetest.StartCluster(t, 2)
	for i := 0; i < 20; i++ {
		r := nodes[0].Do(t, "POST", "/api/v1/push", map[string]any{"items": []map[string]any{{"queue": fmt.Sprintf("open-%d", i), "payload": map[string]int{"n": i}}}})
		if r.Status != 201 {
			t.Fatalf("push: %d %s", r.Status, r.Body)
		}
	}
	st := statusOf(t, nodes[0])
	if st.Requests.Pushed != 20 || st.Forward.Requests != 0 || st.Forward.Owners != 0 {
		t.Fatalf("node 0 on an open mesh: %+v, want all 20 stored there and no forwarder", st)
	}
}

// postJSON posts body as JSON and returns the answer, without t.
func postJSON(url string, body any) (int, []byte, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return 0, nil, err
	}
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, data, err
}

// TestLostAnswerIsADuplicate: the owner stores a forward but its answer is
// lost (a proxy in front of it relays the push and answers 502). The
// fallback on the forwarding node finds every item by the transaction id
// it was sent with, generated ones included: each answered duplicate with
// the owner's message id, and the queue holds each message once.
func TestLostAnswerIsADuplicate(t *testing.T) {
	nodes, owned := ownedCluster(t, 2, 1)
	q := owned[1][0]
	var relayed sync.WaitGroup
	relayed.Add(1)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req, _ := http.NewRequest("POST", nodes[1].URL+r.URL.Path, bytes.NewReader(body))
		req.Header = r.Header.Clone()
		if resp, err := http.DefaultClient.Do(req); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		relayed.Done()
		http.Error(w, "bad gateway", http.StatusBadGateway)
	}))
	defer proxy.Close()
	f := forwarderVia(t, nodes[0], nodes[1], proxy.URL)
	items := make([]broker.PushItem, 10)
	for i := range items {
		items[i] = broker.PushItem{Queue: q, Partition: fmt.Sprintf("p%d", i%2), Payload: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))}
		if i%2 == 0 {
			items[i].TransactionID = fmt.Sprintf("lost-%d", i)
		}
	}
	local := func(ctx context.Context, items []broker.PushItem) ([]broker.PushResult, error) {
		return nodes[0].Broker.Push(ctx, broker.DefaultTenant, nil, items)
	}
	res, err := f.Push(context.Background(), broker.DefaultTenant, "", items, local)
	if err != nil {
		t.Fatal(err)
	}
	relayed.Wait()
	for i, r := range res {
		if r.Status != "duplicate" || r.MessageID == "" || r.TransactionID == "" {
			t.Fatalf("result %d = %+v, want duplicate with the stored message's id", i, r)
		}
	}
	if st := f.Stats(); st.Failures != 1 || st.FallbackItems != 10 {
		t.Fatalf("forwarder stats %+v", st)
	}
	got := 0
	for empty := 0; empty < 2; {
		r := nodes[0].Do(t, "GET", "/api/v1/pop/queue/"+url.PathEscape(q)+"?batch=100&wait=false&autoAck=true", nil)
		if r.Status == 204 {
			empty++
			continue
		}
		got += len(r.Obj(t)["messages"].([]any))
	}
	if got != len(items) {
		t.Fatalf("the queue held %d messages, %d were pushed once", got, len(items))
	}
}

// While a node buffers pushes (push maintenance), it stores every push in
// its own buffer, forwarding nothing: buffered pushes keep their order
// behind that buffer only (docs/api.md, "Push ownership").
func TestNoForwardWhileBuffering(t *testing.T) {
	nodes, owned := ownedCluster(t, 2, 1)
	q := owned[1][0] // node 1's
	if r := nodes[0].Do(t, "POST", "/api/v1/system/maintenance", map[string]any{"enabled": true}); r.Status != 200 {
		t.Fatalf("maintenance on: %d %s", r.Status, r.Body)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !nodes[0].Broker.PushBuffering() {
		if time.Now().After(deadline) {
			t.Fatal("node 0 never started buffering")
		}
		time.Sleep(10 * time.Millisecond)
	}
	before := statusOf(t, nodes[0])
	r := nodes[0].Do(t, "POST", "/api/v1/push", map[string]any{"items": []map[string]any{{"queue": q, "payload": map[string]int{"n": 1}}}})
	if r.Status != 201 || r.Arr(t)[0]["status"] != "buffered" {
		t.Fatalf("push: %d %s, want it buffered here", r.Status, r.Body)
	}
	if after := statusOf(t, nodes[0]); after.Forward.Requests != before.Forward.Requests {
		t.Fatalf("node 0 forwarded while buffering: %+v -> %+v", before.Forward, after.Forward)
	}
}

// X-Queen-Forwarded is a peer's only with the mesh's mark: a client that
// sends the header anyway ("1", or another mesh's mark) is a client, and
// its push still goes to the queue's owner rather than being stored where
// it arrived.
func TestAnUnmarkedForwardedPushGoesToTheOwner(t *testing.T) {
	nodes, owned := ownedCluster(t, 2, 1)
	q := owned[1][0] // node 1's
	received := func(n *nodetest.Node) float64 {
		var st struct {
			Forward map[string]any `json:"forward"`
		}
		n.Do(t, "GET", "/status", nil).JSON(t, &st)
		v, _ := st.Forward["received"].(float64)
		return v
	}
	for i, mark := range []string{"1", forward.Mark([]byte("another mesh's secret, 32 bytes.")), forward.Mark(meshKey)} {
		r := nodes[0].DoHeader(t, map[string]string{forward.Header: mark}, "POST", "/api/v1/push", map[string]any{"items": []map[string]any{
			{"queue": q, "partition": "p", "payload": map[string]int{"i": i}}}})
		if r.Status != 201 {
			t.Fatalf("push %d: %d %s", i, r.Status, r.Body)
		}
	}
	// The first two reached the owner as forwards; the third, marked, was
	// taken as one by node 0 and stored there.
	if got0, got1 := received(nodes[0]), received(nodes[1]); got0 != 1 || got1 != 2 {
		t.Fatalf("forwarded pushes received: node 0 %v, node 1 %v; want 1 and 2", got0, got1)
	}
}
