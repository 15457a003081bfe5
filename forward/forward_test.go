package forward

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"queen-node/broker"
	"queen-node/owner"
	"queen-node/protocol"
)

// peer is a real HTTP server standing in for another node's push endpoint:
// it decodes the forwarded body, records it, and answers with answer.
type peer struct {
	srv    *httptest.Server
	mu     sync.Mutex
	bodies []sentBody
	hdrs   []http.Header
	answer func(items []sentItem) (int, any)
}

type sentItem struct {
	Queue         string          `json:"queue"`
	Partition     string          `json:"partition"`
	TransactionID string          `json:"transactionId"`
	TraceID       *string         `json:"traceId"`
	Payload       json.RawMessage `json:"payload"`
}

type sentBody struct {
	Items []sentItem `json:"items"`
}

// queuedAnswer answers every item queued, as a node's push does.
func queuedAnswer(items []sentItem) (int, any) {
	out := make([]map[string]any, len(items))
	for i, it := range items {
		out[i] = map[string]any{"index": i, "status": "queued", "transactionId": it.TransactionID,
			"message_id": "m-" + it.TransactionID, "partitionId": "pid-" + it.Partition, "queueName": it.Queue}
	}
	return http.StatusCreated, out
}

func newPeer(t *testing.T, answer func([]sentItem) (int, any)) *peer {
	p := &peer{answer: answer}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/api/v1/push" {
			http.Error(w, "wrong route", http.StatusNotFound)
			return
		}
		raw, _ := io.ReadAll(r.Body)
		var b sentBody
		if err := json.Unmarshal(raw, &b); err != nil {
			t.Errorf("forwarded body is not JSON: %v: %s", err, raw)
			http.Error(w, "bad", http.StatusBadRequest)
			return
		}
		p.mu.Lock()
		p.bodies = append(p.bodies, b)
		p.hdrs = append(p.hdrs, r.Header.Clone())
		p.mu.Unlock()
		code, v := p.answer(b.Items)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		if s, ok := v.(string); ok {
			io.WriteString(w, s)
			return
		}
		json.NewEncoder(w).Encode(v)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *peer) addr() string { return strings.TrimPrefix(p.srv.URL, "http://") }

func (p *peer) items() []sentItem {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []sentItem
	for _, b := range p.bodies {
		out = append(out, b.Items...)
	}
	return out
}

// localStore records what the node stored itself.
type localStore struct {
	mu    sync.Mutex
	items []broker.PushItem
	err   error
}

func (l *localStore) store(ctx context.Context, items []broker.PushItem) ([]broker.PushResult, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return nil, l.err
	}
	l.items = append(l.items, items...)
	res := make([]broker.PushResult, len(items))
	for i, it := range items {
		res[i] = broker.PushResult{Index: i, Status: protocol.PushQueued, TransactionID: it.TransactionID,
			MessageID: "local-" + it.TransactionID, Queue: it.Queue}
	}
	return res, nil
}

// table makes a three-node owner table: self plus the given peers.
func table(peers ...string) func() *owner.Table {
	nodes := []owner.Node{{Name: "self", Addr: "unused:1", Self: true}}
	for i, a := range peers {
		nodes = append(nodes, owner.Node{Name: fmt.Sprintf("peer%d", i), Addr: a})
	}
	t := owner.New(nodes)
	return func() *owner.Table { return t }
}

// spread is n items over 12 queues of 5 partitions; odd ones carry a
// transaction id.
func spread(n int) []broker.PushItem {
	items := make([]broker.PushItem, n)
	for i := range items {
		items[i] = broker.PushItem{Queue: fmt.Sprintf("q%d", i%12), Partition: fmt.Sprintf("p%d", i%5), Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))}
		if i%2 == 1 {
			items[i].TransactionID = fmt.Sprintf("tx-%d", i)
		}
	}
	return items
}

func ownerOf(owners func() *owner.Table, it broker.PushItem) owner.Node {
	t := owners()
	return t.Node(t.Owner("default", it.Queue))
}

func TestAloneStoresEverythingHere(t *testing.T) {
	var l localStore
	f := New(DefaultConfig(), table(), nil)
	items := spread(50)
	res, err := f.Push(context.Background(), "default", "", items, l.store)
	if err != nil || len(res) != 50 || len(l.items) != 50 {
		t.Fatalf("res %d, local %d, err %v", len(res), len(l.items), err)
	}
	if st := f.Stats(); st.Requests != 0 || st.LocalItems != 50 || st.OwnersKnown != 1 {
		t.Fatalf("stats %+v", st)
	}
	if l.items[0].TransactionID != "" {
		t.Fatal("an item stored here got a transaction id it did not need")
	}
}

// Each item reaches its queue's owner, in push order,
// with the forwarded mark and the client's Authorization; results come back
// in the items' order.
func TestItemsGoToTheirOwners(t *testing.T) {
	a, b := newPeer(t, queuedAnswer), newPeer(t, queuedAnswer)
	owners := table(a.addr(), b.addr())
	var l localStore
	f := New(DefaultConfig(), owners, nil)
	items := spread(300)
	orig := append([]broker.PushItem(nil), items...)
	res, err := f.Push(context.Background(), "default", "Bearer tok", items, l.store)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]sentItem{"self": nil}
	for _, it := range l.items {
		got["self"] = append(got["self"], sentItem{Queue: it.Queue, Partition: it.Partition, TransactionID: it.TransactionID, Payload: it.Payload})
	}
	got["peer0"], got["peer1"] = a.items(), b.items()
	if len(got["self"]) == 0 || len(got["peer0"]) == 0 || len(got["peer1"]) == 0 {
		t.Fatalf("items per node: self %d, peer0 %d, peer1 %d: want some on each", len(got["self"]), len(got["peer0"]), len(got["peer1"]))
	}
	// Every item went to its owner, in order.
	next := map[string]int{}
	for i, it := range orig {
		o := ownerOf(owners, it).Name
		k := next[o]
		next[o]++
		if k >= len(got[o]) {
			t.Fatalf("item %d missing at its owner %s", i, o)
		}
		s := got[o][k]
		if s.Queue != it.Queue || s.Partition != it.Partition || string(s.Payload) != string(it.Payload) {
			t.Fatalf("item %d: owner %s got %+v at its place", i, o, s)
		}
		if it.TransactionID != "" && s.TransactionID != it.TransactionID {
			t.Fatalf("item %d: transaction id %q became %q", i, it.TransactionID, s.TransactionID)
		}
		if o != "self" && s.TransactionID == "" {
			t.Fatalf("forwarded item %d has no transaction id", i)
		}
		r := res[i]
		if r.Index != i || r.Status != protocol.PushQueued || r.TransactionID != items[i].TransactionID {
			t.Fatalf("result %d = %+v", i, r)
		}
		if o != "self" && r.PartitionID != "pid-"+it.Partition {
			t.Fatalf("result %d did not come from the owner's answer: %+v", i, r)
		}
	}
	for _, p := range []*peer{a, b} {
		for _, h := range p.hdrs {
			if h.Get(Header) != "1" || h.Get("Authorization") != "Bearer tok" {
				t.Fatalf("forwarded headers %v", h)
			}
		}
	}
	st := f.Stats()
	if st.Requests != 2 || st.Items != int64(len(got["peer0"])+len(got["peer1"])) || st.LocalItems != int64(len(got["self"])) || st.Failures != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// Whatever goes wrong with a peer, its items are stored here with the
// transaction ids they were sent with, so an item the peer did store is a
// duplicate rather than a copy.
func TestAFailedForwardIsStoredHere(t *testing.T) {
	refused := func() string { // a port nothing listens on
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		a := ln.Addr().String()
		ln.Close()
		return a
	}
	cases := []struct {
		name   string
		answer func([]sentItem) (int, any)
		addr   func(*peer) string
	}{
		{"unreachable", nil, func(*peer) string { return refused() }},
		{"503", func([]sentItem) (int, any) { return 503, map[string]string{"error": "database unavailable"} }, nil},
		{"401", func([]sentItem) (int, any) { return 401, map[string]string{"error": "no"} }, nil},
		{"not JSON", func([]sentItem) (int, any) { return 201, "[{" }, nil},
		{"too few results", func(it []sentItem) (int, any) {
			c, v := queuedAnswer(it)
			return c, v.([]map[string]any)[1:]
		}, nil},
		{"another transaction id", func(it []sentItem) (int, any) {
			c, v := queuedAnswer(it)
			v.([]map[string]any)[0]["transactionId"] = "other"
			return c, v
		}, nil},
		{"repeated index", func(it []sentItem) (int, any) {
			c, v := queuedAnswer(it)
			v.([]map[string]any)[0]["index"] = 1
			return c, v
		}, nil},
		{"unknown status", func(it []sentItem) (int, any) {
			c, v := queuedAnswer(it)
			v.([]map[string]any)[0]["status"] = "maybe"
			return c, v
		}, nil},
		{"too slow", func(it []sentItem) (int, any) { time.Sleep(3 * time.Second); return queuedAnswer(it) }, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			good := newPeer(t, queuedAnswer)
			var bad *peer
			addr := ""
			if tc.answer != nil {
				bad = newPeer(t, tc.answer)
				addr = bad.addr()
			} else {
				addr = tc.addr(nil)
			}
			owners := table(good.addr(), addr)
			var l localStore
			cfg := DefaultConfig()
			cfg.Timeout = time.Second // the good peer answers well within it, even on a loaded machine
			f := New(cfg, owners, nil)
			f.now = func() time.Time { return time.Unix(1000, 0) }
			items := spread(120)
			res, err := f.Push(context.Background(), "default", "", items, l.store)
			if err != nil {
				t.Fatal(err)
			}
			stored := map[string]bool{}
			for _, it := range l.items {
				stored[it.Queue+"/"+string(it.Payload)] = true
			}
			var sent []sentItem
			if bad != nil {
				sent = bad.items()
			}
			fellBack := 0
			for i, it := range items {
				o := ownerOf(owners, it).Name
				if o != "peer1" {
					continue
				}
				fellBack++
				if !stored[it.Queue+"/"+string(it.Payload)] {
					t.Fatalf("item %d of the failed peer was not stored here", i)
				}
				if res[i].Status != protocol.PushQueued || res[i].MessageID != "local-"+it.TransactionID {
					t.Fatalf("result %d = %+v, want the local store's", i, res[i])
				}
			}
			// The ids sent to the peer are the ids stored here.
			ids := map[string]bool{}
			for _, it := range l.items {
				ids[it.TransactionID] = true
			}
			for _, s := range sent {
				if !ids[s.TransactionID] {
					t.Fatalf("the peer got transaction id %q, which the fallback did not use", s.TransactionID)
				}
			}
			st := f.Stats()
			if fellBack == 0 || st.Failures != 1 || st.FallbackItems != int64(fellBack) {
				t.Fatalf("%d items of the failed peer; stats %+v", fellBack, st)
			}
		})
	}
}

// A client that leaves gets an error, and nothing more is stored for it.
func TestALeavingClientStoresNoFallback(t *testing.T) {
	release := make(chan struct{})
	slow := newPeer(t, func(it []sentItem) (int, any) { <-release; return queuedAnswer(it) })
	defer close(release)
	owners := table(slow.addr(), slow.addr())
	var l localStore
	f := New(DefaultConfig(), owners, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	items := spread(90)
	go func() {
		_, err := f.Push(ctx, "default", "", items, l.store)
		done <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	for len(slow.items()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("nothing was forwarded")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, it := range l.items {
		if ownerOf(owners, it).Name != "self" {
			t.Fatalf("item %+v of a peer was stored here after the client left", it)
		}
	}
}

// An error of the local store is the push's error, as without forwarding.
func TestALocalErrorFailsThePush(t *testing.T) {
	a := newPeer(t, queuedAnswer)
	l := localStore{err: errors.New("database unavailable")}
	f := New(DefaultConfig(), table(a.addr(), a.addr()), nil)
	if _, err := f.Push(context.Background(), "default", "", spread(60), l.store); err == nil || err.Error() != "database unavailable" {
		t.Fatalf("err = %v", err)
	}
}

// The forwarded body is the public push body, whatever the names and
// payloads hold.
func TestEncodeBodyRoundTrips(t *testing.T) {
	trace := "0190b6f4-7c3a-7d1e-9a4b-2f6c8d0e1a2b"
	items := []broker.PushItem{
		{Queue: `q"\` + "\x01\t", Partition: "π/ü", TransactionID: "t\u2028x", TraceID: &trace, Payload: json.RawMessage(`{"a":[1,"x\"y"],"b":null}`)},
		{Queue: "q", Payload: json.RawMessage(`null`)},
		{Queue: "q", Partition: "p", TransactionID: "t"},
	}
	var b sentBody
	if err := json.Unmarshal(EncodeBody(items), &b); err != nil {
		t.Fatalf("%v: %s", err, EncodeBody(items))
	}
	if len(b.Items) != 3 {
		t.Fatalf("%d items", len(b.Items))
	}
	for i, it := range items {
		g := b.Items[i]
		want := string(it.Payload)
		if it.Payload == nil {
			want = "{}"
		}
		if g.Queue != it.Queue || g.Partition != it.Partition || g.TransactionID != it.TransactionID || string(g.Payload) != want {
			t.Fatalf("item %d: %+v, want %+v", i, g, it)
		}
		if (g.TraceID == nil) != (it.TraceID == nil) || (g.TraceID != nil && *g.TraceID != *it.TraceID) {
			t.Fatalf("item %d trace %v", i, g.TraceID)
		}
	}
}

// A peer answering its results out of order is read by index.
func TestResultsAreReadByIndex(t *testing.T) {
	rev := newPeer(t, func(it []sentItem) (int, any) {
		c, v := queuedAnswer(it)
		l := v.([]map[string]any)
		for i, j := 0, len(l)-1; i < j; i, j = i+1, j-1 {
			l[i], l[j] = l[j], l[i]
		}
		return c, l
	})
	owners := table(rev.addr(), rev.addr())
	var l localStore
	f := New(DefaultConfig(), owners, nil)
	items := spread(100)
	res, err := f.Push(context.Background(), "default", "", items, l.store)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Index != i || r.TransactionID != items[i].TransactionID || r.Queue != items[i].Queue {
			t.Fatalf("result %d = %+v for item %+v", i, r, items[i])
		}
	}
	if f.Stats().Failures != 0 {
		t.Fatalf("stats %+v", f.Stats())
	}
}

// After a failed forward, the peer's queues are stored here without asking
// it until its cool-down ends; then it is asked again.
func TestAFailedPeerCoolsDown(t *testing.T) {
	var fail sync.Mutex
	failing := true
	p := newPeer(t, func(it []sentItem) (int, any) {
		fail.Lock()
		defer fail.Unlock()
		if failing {
			return 503, map[string]string{"error": "starting"}
		}
		return queuedAnswer(it)
	})
	owners := table(p.addr(), p.addr())
	cfg := DefaultConfig()
	cfg.Cooldown = time.Minute
	f := New(cfg, owners, nil)
	now := time.Unix(1000, 0)
	f.now = func() time.Time { return now }
	var l localStore
	push := func() {
		t.Helper()
		if _, err := f.Push(context.Background(), "default", "", spread(60), l.store); err != nil {
			t.Fatal(err)
		}
	}
	push() // fails, falls back, cools down
	asked := len(p.items())
	if asked == 0 || f.Stats().Failures != 2 { // both peers share the address
		t.Fatalf("first push: %d items reached the peer, stats %+v", asked, f.Stats())
	}
	fail.Lock()
	failing = false
	fail.Unlock()
	now = now.Add(59 * time.Second)
	push() // cooling down: nothing sent
	if got := len(p.items()); got != asked {
		t.Fatalf("%d more items sent to a peer cooling down", got-asked)
	}
	if st := f.Stats(); st.FallbackItems != 120-int64(st.LocalItems) || st.Requests != 2 {
		t.Fatalf("stats while cooling down %+v", st)
	}
	now = now.Add(2 * time.Second)
	push() // cooled down: asked again, and it answers
	if got := len(p.items()); got == asked {
		t.Fatal("the peer was not asked again after its cool-down")
	}
	if st := f.Stats(); st.Failures != 2 || st.Requests != 4 {
		t.Fatalf("stats after the cool-down %+v", st)
	}
}

// A forward whose body would pass the owner's limit is stored here at once.
func TestAForwardTooLargeIsStoredHere(t *testing.T) {
	p := newPeer(t, queuedAnswer)
	cfg := DefaultConfig()
	cfg.MaxBodyBytes = 200
	f := New(cfg, table(p.addr(), p.addr()), nil)
	var l localStore
	items := spread(60)
	res, err := f.Push(context.Background(), "default", "", items, l.store)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.items()) != 0 || len(l.items) != len(items) {
		t.Fatalf("%d items sent, %d stored here", len(p.items()), len(l.items))
	}
	for i, r := range res {
		if r.Index != i || r.Status != protocol.PushQueued {
			t.Fatalf("result %d = %+v", i, r)
		}
	}
	if st := f.Stats(); st.Requests != 0 || st.Failures != 0 || st.LocalItems != 60 {
		t.Fatalf("stats %+v", st)
	}
}

// A redirect is an answer that cannot be used: the body and the token are
// never sent where it points.
func TestARedirectIsNotFollowed(t *testing.T) {
	elsewhere := newPeer(t, queuedAnswer)
	var asked sync.Mutex
	redirects := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Lock()
		redirects++
		asked.Unlock()
		http.Redirect(w, r, elsewhere.srv.URL+"/api/v1/push", http.StatusTemporaryRedirect)
	}))
	t.Cleanup(srv.Close)
	addr := strings.TrimPrefix(srv.URL, "http://")
	var l localStore
	f := New(DefaultConfig(), table(addr, addr), nil)
	items := spread(60)
	if _, err := f.Push(context.Background(), "default", "Bearer secret", items, l.store); err != nil {
		t.Fatal(err)
	}
	asked.Lock()
	n := redirects
	asked.Unlock()
	if n == 0 || len(elsewhere.items()) != 0 {
		t.Fatalf("%d redirects answered, %d items reached the redirect's target", n, len(elsewhere.items()))
	}
	if len(l.items) != len(items) {
		t.Fatalf("%d of %d items stored here", len(l.items), len(items))
	}
}

// When a cool-down ends, one push tries the peer; while it waits, other
// pushes keep storing the peer's items here (a hung peer stalls one push
// per cool-down, not every push).
func TestOneProbeAfterTheCoolDown(t *testing.T) {
	release := make(chan struct{})
	var arrived atomic.Int32
	hung := newPeer(t, func(it []sentItem) (int, any) {
		arrived.Add(1)
		<-release
		return queuedAnswer(it)
	})
	owners := table(hung.addr(), hung.addr())
	f := cooledOver(owners)
	var l localStore
	done := make(chan error, 1)
	go func() {
		_, err := f.Push(context.Background(), "default", "", spread(60), l.store)
		done <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	for arrived.Load() < 2 { // the probe of each peer
		if time.Now().After(deadline) {
			t.Fatalf("%d probes reached the peers", arrived.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	before := f.Stats().Requests
	if _, err := f.Push(context.Background(), "default", "", spread(60), l.store); err != nil {
		t.Fatal(err)
	}
	if st := f.Stats(); st.Requests != before || arrived.Load() != 2 {
		t.Fatalf("a push during the probes sent %d requests (%d arrived)", st.Requests-before, arrived.Load())
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if f.coolingDown("peer0") || f.coolingDown("peer1") {
		t.Fatal("a probe that worked left its peer cooling down")
	}
}

// A forward sent before a failure says nothing of the peer after it.
func TestAnOlderSuccessKeepsTheCoolDown(t *testing.T) {
	f := New(DefaultConfig(), table(), nil)
	now := time.Unix(1000, 0)
	f.now = func() time.Time { return now }
	f.failed("p")
	f.worked("p", now.Add(-time.Second))
	if !f.coolingDown("p") {
		t.Fatal("an older success ended the cool-down")
	}
	f.worked("p", now)
	if f.coolingDown("p") {
		t.Fatal("a success sent after the failure did not end it")
	}
}

// A refusal of the request itself (a 4xx other than 408 and 429) falls
// back without cooling the peer down: the next push tries it again.
func TestARefusalDoesNotCoolThePeer(t *testing.T) {
	p := newPeer(t, func([]sentItem) (int, any) { return 401, map[string]string{"error": "token expired"} })
	f := New(DefaultConfig(), table(p.addr(), p.addr()), nil)
	var l localStore
	for i := 0; i < 2; i++ {
		if _, err := f.Push(context.Background(), "default", "", spread(60), l.store); err != nil {
			t.Fatal(err)
		}
	}
	if st := f.Stats(); st.Requests != 4 || st.Failures != 4 {
		t.Fatalf("stats %+v: want both pushes to ask both peers", st)
	}
	for _, code := range []int{408, 429, 500, 503} {
		if !blamesPeer(&refusal{status: code}) {
			t.Fatalf("%d does not cool the peer down", code)
		}
	}
}

// A probe whose client leaves does not leave its peer cooled for good: the
// next push tries the peer.
func TestAProbeWhoseClientLeavesEndsTheProbe(t *testing.T) {
	var hang atomic.Bool
	hang.Store(true)
	release := make(chan struct{})
	defer close(release)
	var arrived atomic.Int32
	p := newPeer(t, func(it []sentItem) (int, any) {
		arrived.Add(1)
		if hang.Load() {
			<-release
		}
		return queuedAnswer(it)
	})
	owners := table(p.addr(), p.addr())
	f := cooledOver(owners)
	var l localStore
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := f.Push(ctx, "default", "", spread(60), l.store)
		done <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	for arrived.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the probes never reached the peers")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	hang.Store(false)
	if _, err := f.Push(context.Background(), "default", "", spread(60), l.store); err != nil {
		t.Fatal(err)
	}
	if arrived.Load() != 4 {
		t.Fatalf("%d requests reached the peers, want the next push to try both again", arrived.Load())
	}
}

// cooledOver is a forwarder whose every peer failed an hour ago on its
// clock: their cool-downs are over, and the next push probes them.
func cooledOver(owners func() *owner.Table) *Forwarder {
	f := New(DefaultConfig(), owners, nil)
	failedAt := time.Unix(1000, 0)
	f.now = func() time.Time { return failedAt }
	for _, n := range owners().Nodes() {
		if !n.Self {
			f.failed(n.Name)
		}
	}
	f.now = func() time.Time { return failedAt.Add(time.Hour) }
	return f
}
