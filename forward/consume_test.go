package forward

import (
	"bytes"
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
)

// ownerNode is a real HTTP server standing in for a queue's owner: it
// records every request (its body included) and answers with its handler,
// which a test may change between requests.
type ownerNode struct {
	srv    *httptest.Server
	mu     sync.Mutex
	reqs   []seenRequest
	handle http.HandlerFunc
}

type seenRequest struct {
	method, uri string
	header      http.Header
	body        []byte
	te          []string // Transfer-Encoding, which the server moves out of header
	length      int64
}

func newOwnerNode(t *testing.T, h http.HandlerFunc) *ownerNode {
	n := &ownerNode{handle: h}
	n.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		n.mu.Lock()
		n.reqs = append(n.reqs, seenRequest{method: r.Method, uri: r.RequestURI, header: r.Header.Clone(), body: body,
			te: r.TransferEncoding, length: r.ContentLength})
		h := n.handle
		n.mu.Unlock()
		h(w, r)
	}))
	// Held requests end with their connections, so Close does not wait
	// for them whatever a failing test left behind.
	t.Cleanup(func() {
		n.srv.CloseClientConnections()
		n.srv.Close()
	})
	return n
}

func (n *ownerNode) addr() string { return strings.TrimPrefix(n.srv.URL, "http://") }

func (n *ownerNode) setHandler(h http.HandlerFunc) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.handle = h
}

func (n *ownerNode) requests() []seenRequest {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]seenRequest(nil), n.reqs...)
}

func (n *ownerNode) count() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.reqs)
}

// answering answers every request with status, content type and body.
func answering(status int, ctype, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if ctype != "" {
			w.Header().Set("Content-Type", ctype)
		}
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

// holding signals each request on arrived, then holds it until release is
// closed or the request's context ends (signalled on ended, when not nil),
// and answers 204.
func holding(arrived chan<- struct{}, release <-chan struct{}, ended chan<- struct{}) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		select {
		case <-release:
			w.WriteHeader(http.StatusNoContent)
		case <-r.Context().Done():
			if ended != nil {
				ended <- struct{}{}
			}
		}
	}
}

// gate is a channel that held requests wait on.
type gate struct {
	ch   chan struct{}
	once sync.Once
}

func newGate() *gate { return &gate{ch: make(chan struct{})} }

func (g *gate) open() { g.once.Do(func() { close(g.ch) }) }

// within waits for ch, failing the test past a generous deadline.
func within[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// refusedAddr is a port nothing listens on.
func refusedAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := ln.Addr().String()
	ln.Close()
	return a
}

// movable is a two-node owner table (self and peer0, as table makes it)
// whose peer can change address: owners are chosen by name, so its queues
// stay its own.
type movable struct {
	mu   sync.Mutex
	addr string
}

func (m *movable) set(addr string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.addr = addr
}

func (m *movable) owners() *owner.Table {
	m.mu.Lock()
	defer m.mu.Unlock()
	return owner.New([]owner.Node{{Name: "self", Addr: "unused:1", Self: true}, {Name: "peer0", Addr: m.addr}})
}

// queueOwnedBy returns a queue of tenant "default" that the node named
// name owns.
func queueOwnedBy(t *testing.T, owners func() *owner.Table, name string) string {
	t.Helper()
	tb := owners()
	for i := 0; i < 1000; i++ {
		q := fmt.Sprintf("queue-%d", i)
		if o := tb.Owner("default", q); o >= 0 && tb.Node(o).Name == name {
			return q
		}
	}
	t.Fatalf("no queue of %s", name)
	return ""
}

// clock is a forwarder's time, moved by the test.
type clock struct{ ns atomic.Int64 }

func setClock(f *Forwarder) *clock {
	c := &clock{}
	c.ns.Store(time.Unix(1000, 0).UnixNano())
	f.now = func() time.Time { return time.Unix(0, c.ns.Load()) }
	return c
}

func (c *clock) add(d time.Duration) { c.ns.Add(int64(d)) }

func popURI(queue string) string {
	return "/api/v1/pop/queue/" + queue + "?batch=5&wait=true&timeout=30000&consumerGroup=g%201&subscriptionMode=new"
}

// readAnswer reads and closes a forwarded pop's answer.
func readAnswer(t *testing.T, a *PopAnswer) string {
	t.Helper()
	b, err := a.ReadAll(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A pop of a peer's queue goes to it with the client's path, query and
// Authorization and the forwarded mark; its answer, whatever it is, comes
// back as it is, and a refusal does not cool the peer down.
func TestPopGoesToTheOwner(t *testing.T) {
	cases := []struct {
		name   string
		status int
		ctype  string
		body   string
	}{
		{"messages", http.StatusOK, "application/json; charset=utf-8", `{"messages":[{"transactionId":"t1","data":{"é":"\"x\""}}]}`},
		{"empty", http.StatusNoContent, "", ""},
		{"refused", http.StatusBadRequest, "application/json", `{"error":"batch must be a positive integer"}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := newOwnerNode(t, answering(tc.status, tc.ctype, tc.body))
			owners := table(p.addr())
			f := New(DefaultConfig(), owners, nil)
			defer f.Close()
			q := queueOwnedBy(t, owners, "peer0")
			a, sent := f.Pop(context.Background(), "default", q, popURI(q), "Bearer tok", "lease-1", 30*time.Second, nil)
			if a == nil || !sent {
				t.Fatalf("the pop was served here (sent %v)", sent)
			}
			if a.Status != tc.status || a.ContentType != tc.ctype {
				t.Fatalf("answer %d %q, owner sent %d %q", a.Status, a.ContentType, tc.status, tc.ctype)
			}
			if body := readAnswer(t, a); body != tc.body {
				t.Fatalf("body %q, owner sent %q", body, tc.body)
			}
			reqs := p.requests()
			if len(reqs) != 1 {
				t.Fatalf("%d requests reached the owner", len(reqs))
			}
			r := reqs[0]
			if r.method != http.MethodGet || r.uri != popURI(q) {
				t.Fatalf("owner got %s %s, client sent GET %s", r.method, r.uri, popURI(q))
			}
			if r.header.Get(Header) != "1" || r.header.Get("Authorization") != "Bearer tok" || r.header.Get(LeaseHeader) != "lease-1" {
				t.Fatalf("forwarded headers %v", r.header)
			}
			// The next pop goes too (no cool-down), and without a token
			// or a lease sends neither.
			a = popNoLease(f, context.Background(), "default", q, popURI(q), "", 30*time.Second)
			if a == nil {
				t.Fatal("the next pop was served here")
			}
			readAnswer(t, a)
			reqs = p.requests()
			if len(reqs) != 2 {
				t.Fatalf("%d requests reached the owner", len(reqs))
			}
			if _, ok := reqs[1].header["Authorization"]; ok {
				t.Fatalf("a pop without a token sent Authorization %q", reqs[1].header.Get("Authorization"))
			}
			if _, ok := reqs[1].header[LeaseHeader]; ok {
				t.Fatalf("a pop without a lease sent %s %q", LeaseHeader, reqs[1].header.Get(LeaseHeader))
			}
			if st := f.Stats(); st.Pops != 2 || st.PopFailures != 0 || st.PopsBusy != 0 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

// A pop is served here, without a request, when this node owns the queue,
// is alone, or does not forward pops.
func TestPopServedHereWithoutARequest(t *testing.T) {
	p := newOwnerNode(t, answering(http.StatusNoContent, "", ""))
	two := table(p.addr())
	peerQueue, ownQueue := queueOwnedBy(t, two, "peer0"), queueOwnedBy(t, two, "self")
	off := DefaultConfig()
	off.Consume = false
	cases := []struct {
		name   string
		cfg    Config
		owners func() *owner.Table
		queue  string
	}{
		{"own queue", DefaultConfig(), two, ownQueue},
		{"alone", DefaultConfig(), table(), peerQueue},
		{"no owner table", DefaultConfig(), nil, peerQueue},
		{"consume off", off, two, peerQueue},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := p.count()
			f := New(tc.cfg, tc.owners, nil)
			defer f.Close()
			if a, sent := f.Pop(context.Background(), "default", tc.queue, popURI(tc.queue), "", "l", time.Second, nil); a != nil || sent {
				if a != nil {
					readAnswer(t, a)
				}
				t.Fatalf("the pop was forwarded (sent %v)", sent)
			}
			if n := p.count() - before; n != 0 {
				t.Fatalf("%d requests reached the peer", n)
			}
			if st := f.Stats(); st.Pops != 0 || st.PopFailures != 0 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

// An owner that cannot take the pop (unreachable, 5xx, 408, 429) has it
// served here and cools down: pops within the cool-down send nothing;
// after it, one pop probes the owner while the others are served here.
func TestAFailedPopOwnerCoolsDown(t *testing.T) {
	fails := func(code int) http.HandlerFunc { return answering(code, "application/json", `{"error":"busy"}`) }
	cases := []struct {
		name string
		fail http.HandlerFunc // nil: unreachable
	}{
		{"unreachable", nil},
		{"500", fails(http.StatusInternalServerError)},
		{"503", fails(http.StatusServiceUnavailable)},
		{"408", fails(http.StatusRequestTimeout)},
		{"429", fails(http.StatusTooManyRequests)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := newOwnerNode(t, tc.fail)
			release := newGate()
			m := &movable{addr: p.addr()}
			if tc.fail == nil {
				m.set(refusedAddr(t))
			}
			cfg := DefaultConfig()
			cfg.Cooldown = time.Minute
			f := New(cfg, m.owners, nil)
			defer f.Close()
			clk := setClock(f)
			q := queueOwnedBy(t, m.owners, "peer0")
			// Pops that do not wait: only those may probe.
			pop := func() (*PopAnswer, bool) {
				return f.Pop(context.Background(), "default", q, popURI(q), "", "l", 0, nil)
			}
			// A failure after sending says so (the owner may have
			// claimed under the lease); one that never connected does not.
			if a, sent := pop(); a != nil || sent != (tc.fail != nil) {
				if a != nil {
					readAnswer(t, a)
				}
				t.Fatalf("a failed pop forward was given to the client, or sent %v (owner reachable: %v)", sent, tc.fail != nil)
			}
			sent := p.count()
			if st := f.Stats(); st.Pops != 1 || st.PopFailures != 1 {
				t.Fatalf("stats after the failure %+v", st)
			}
			clk.add(59 * time.Second)
			if a, sent := pop(); a != nil || sent {
				if a != nil {
					readAnswer(t, a)
				}
				t.Fatal("a pop was forwarded to an owner cooling down")
			}
			if st := f.Stats(); st.Pops != 1 || p.count() != sent {
				t.Fatalf("a pop within the cool-down was sent: stats %+v", st)
			}

			// The owner is back, and holds the probe.
			arrived := make(chan struct{}, 8)
			p.setHandler(holding(arrived, release.ch, nil))
			m.set(p.addr())
			clk.add(2 * time.Second)
			// A long-poll is never the probe: it could hold the owner's
			// queues here for its whole wait.
			if a := popNoLease(f, context.Background(), "default", q, popURI(q), "", time.Minute); a != nil {
				readAnswer(t, a)
				t.Fatal("a long-poll probed the owner")
			}
			if p.count() != sent {
				t.Fatal("a long-poll was sent to an owner whose cool-down awaits its probe")
			}
			probe := make(chan *PopAnswer, 1)
			go func() { a, _ := pop(); probe <- a }()
			within(t, arrived, "the probe")
			if a, _ := pop(); a != nil {
				readAnswer(t, a)
				t.Fatal("a pop during the probe was forwarded")
			}
			if st := f.Stats(); st.Pops != 2 || p.count() != sent+1 {
				t.Fatalf("a pop during the probe was sent: stats %+v, %d requests", st, p.count()-sent)
			}
			release.open()
			a := within(t, probe, "the probe's answer")
			if a == nil || a.Status != http.StatusNoContent {
				t.Fatalf("probe answer %+v", a)
			}
			readAnswer(t, a)
			// The probe worked: pops go to the owner again.
			p.setHandler(answering(http.StatusNoContent, "", ""))
			if a, _ := pop(); a == nil {
				t.Fatal("the owner still cools down after a probe that worked")
			} else {
				readAnswer(t, a)
			}
			if st := f.Stats(); st.Pops != 3 || st.PopFailures != 1 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

// An owner slower than the pop's wait plus Timeout failed it (Pop's doc
// lists it with 5xx): the pop is served here, and the owner cools down,
// as for a push (Config.Cooldown: a hung owner stalls one request per
// cool-down, not every one).
func TestASlowPopOwnerCoolsDown(t *testing.T) {
	arrived := make(chan struct{}, 8)
	p := newOwnerNode(t, holding(arrived, newGate().ch, nil))
	owners := table(p.addr())
	cfg := DefaultConfig()
	cfg.Timeout = 200 * time.Millisecond
	cfg.Cooldown = time.Minute
	f := New(cfg, owners, nil)
	defer f.Close()
	setClock(f)
	q := queueOwnedBy(t, owners, "peer0")
	if a := popNoLease(f, context.Background(), "default", q, popURI(q), "", 0); a != nil {
		readAnswer(t, a)
		t.Fatal("a pop that timed out was given to the client")
	}
	if st := f.Stats(); st.PopFailures != 1 {
		t.Fatalf("stats %+v: want the timeout counted a failure", st)
	}
	if a := popNoLease(f, context.Background(), "default", q, popURI(q), "", 0); a != nil {
		readAnswer(t, a)
	}
	if n := p.count(); n != 1 {
		t.Fatalf("%d pops reached an owner that timed out a moment ago, want 1 (it should cool down)", n)
	}
}

// PopConns bounds the pops in flight to one owner: past it a pop is
// served here at once (PopsBusy), and closing an answer frees its slot.
func TestPopConnsBoundTheOwnersPops(t *testing.T) {
	release := newGate()
	arrived := make(chan struct{}, 8)
	p := newOwnerNode(t, func(w http.ResponseWriter, r *http.Request) {
		// Headers now, the body when the long-poll ends.
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		arrived <- struct{}{}
		select {
		case <-release.ch:
		case <-r.Context().Done():
		}
	})
	owners := table(p.addr())
	cfg := DefaultConfig()
	cfg.PopConns = 2
	f := New(cfg, owners, nil)
	defer f.Close()
	q := queueOwnedBy(t, owners, "peer0")
	pop := func(ctx context.Context) *PopAnswer {
		return popNoLease(f, ctx, "default", q, popURI(q), "", 30*time.Second)
	}
	a1, a2 := pop(context.Background()), pop(context.Background())
	if a1 == nil || a2 == nil {
		t.Fatal("a pop within PopConns was served here")
	}
	within(t, arrived, "pop 1")
	within(t, arrived, "pop 2")
	// Bounded, so a mistake fails rather than hangs.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if a := pop(ctx); a != nil {
		a.Close()
		t.Fatal("a third pop was forwarded past PopConns 2")
	}
	if st := f.Stats(); st.PopsBusy != 1 || st.Pops != 2 || st.PopFailures != 0 || p.count() != 2 {
		t.Fatalf("stats %+v, %d requests", st, p.count())
	}
	a1.Close()
	a3 := pop(context.Background())
	if a3 == nil {
		t.Fatal("closing an answer did not free its slot")
	}
	within(t, arrived, "pop 3")
	if st := f.Stats(); st.Pops != 3 || st.PopsBusy != 1 || p.count() != 3 {
		t.Fatalf("stats %+v, %d requests", st, p.count())
	}
	a2.Close()
	a3.Close()
	f.popMu.Lock()
	left := len(f.popsOut)
	f.popMu.Unlock()
	if left != 0 {
		t.Fatalf("%d peers still have pops in flight after every answer closed", left)
	}
}

// A client that leaves while the owner holds its pop: the forward ends
// (the owner sees its request end), the pop is not counted a failure, and
// the owner does not cool down, whether the pop was a probe or not.
func TestAPopWhoseClientLeaves(t *testing.T) {
	for _, probe := range []bool{false, true} {
		t.Run(fmt.Sprintf("probe=%v", probe), func(t *testing.T) {
			arrived, ended := make(chan struct{}, 8), make(chan struct{}, 8)
			p := newOwnerNode(t, holding(arrived, newGate().ch, ended))
			owners := table(p.addr())
			f := New(DefaultConfig(), owners, nil)
			if probe {
				f = cooledOver(owners)
			}
			defer f.Close()
			q := queueOwnedBy(t, owners, "peer0")
			wait := 30 * time.Second
			if probe {
				wait = 0 // a long-poll never probes
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan *PopAnswer, 1)
			go func() { done <- popNoLease(f, ctx, "default", q, popURI(q), "", wait) }()
			within(t, arrived, "the forwarded pop")
			cancel()
			if a := within(t, done, "Pop to return"); a != nil {
				readAnswer(t, a)
				t.Fatal("a cancelled pop returned an answer")
			}
			within(t, ended, "the owner's request to end")
			if st := f.Stats(); st.PopFailures != 0 {
				t.Fatalf("stats %+v: a client leaving is not the owner's failure", st)
			}
			p.setHandler(answering(http.StatusNoContent, "", ""))
			a := popNoLease(f, context.Background(), "default", q, popURI(q), "", wait)
			if a == nil {
				t.Fatal("the owner cools down after a client left")
			}
			readAnswer(t, a)
			if p.count() != 2 {
				t.Fatalf("%d requests reached the owner", p.count())
			}
		})
	}
}

// Once the owner's answer has begun, the client leaving no longer cancels
// it: the caller can still read it all (and release its leases).
func TestAPopAnswerOutlivesItsClient(t *testing.T) {
	release := newGate()
	headers := make(chan struct{}, 1)
	const body = `{"messages":[{"transactionId":"t1","leaseId":"lease-1"}]}`
	p := newOwnerNode(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		headers <- struct{}{}
		select {
		case <-release.ch:
			io.WriteString(w, body)
		case <-r.Context().Done():
		}
	})
	owners := table(p.addr())
	f := New(DefaultConfig(), owners, nil)
	defer f.Close()
	q := queueOwnedBy(t, owners, "peer0")
	ctx, cancel := context.WithCancel(context.Background())
	a := popNoLease(f, ctx, "default", q, popURI(q), "", 30*time.Second)
	if a == nil {
		t.Fatal("the pop was served here")
	}
	within(t, headers, "the answer's headers")
	cancel()
	release.open()
	if got := readAnswer(t, a); got != body {
		t.Fatalf("answer %q after the client left, owner sent %q", got, body)
	}
	if st := f.Stats(); st.PopFailures != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// sentAck is one acknowledgment of a forwarded batch ack body; a nil
// field was absent.
type sentAck struct {
	TransactionID string  `json:"transactionId"`
	PartitionID   string  `json:"partitionId"`
	Status        *string `json:"status"`
	ConsumerGroup *string `json:"consumerGroup"`
	LeaseID       *string `json:"leaseId"`
	Error         *string `json:"error"`
}

func decodeSentAcks(t *testing.T, body []byte) []sentAck {
	t.Helper()
	var b struct {
		Acknowledgments []sentAck `json:"acknowledgments"`
	}
	if err := json.Unmarshal(body, &b); err != nil {
		t.Fatalf("forwarded ack body: %v: %s", err, body)
	}
	return b.Acknowledgments
}

// ackAnswer builds an owner's answer to the acks it got.
type ackAnswer func(acks []sentAck) []map[string]any

// ackedBy answers every ack a success of node name, in reverse order (the
// forwarder reads results by index).
func ackedBy(name string) ackAnswer {
	return func(acks []sentAck) []map[string]any {
		out := make([]map[string]any, len(acks))
		for i, a := range acks {
			out[len(acks)-1-i] = map[string]any{"index": i, "transactionId": a.TransactionID, "success": true, "error": nil,
				"queueName": "remote", "partitionName": name + "-" + a.PartitionID, "leaseReleased": true, "dlq": false}
		}
		return out
	}
}

// ackOwner answers POST /api/v1/ack/batch with answer, 200.
func ackOwner(t *testing.T, answer ackAnswer) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/api/v1/ack/batch" {
			http.Error(w, "wrong route", http.StatusNotFound)
			return
		}
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(answer(decodeSentAcks(t, body)))
	}
}

// ackStore is the local AckStore: it records what was applied here and
// names each partition's queue as the broker does (queues; "" when the
// partition is unknown, as for an ack that failed).
type ackStore struct {
	mu     sync.Mutex
	queues map[string]string
	calls  [][]broker.AckItem
}

func (s *ackStore) apply(ctx context.Context, items []broker.AckItem) ([]broker.AckResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, append([]broker.AckItem(nil), items...))
	res := make([]broker.AckResult, len(items))
	for i, it := range items {
		res[i] = broker.AckResult{Index: i, TransactionID: it.TransactionID, Success: true,
			QueueName: s.queues[it.PartitionID], PartitionName: "local-" + it.PartitionID}
	}
	return res, nil
}

// call returns the transaction ids of the nth call, "" joined.
func (s *ackStore) call(n int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n >= len(s.calls) {
		return fmt.Sprintf("(no call %d)", n)
	}
	return txIDs(s.calls[n])
}

func (s *ackStore) ncalls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.calls)
}

func txIDs(items []broker.AckItem) string {
	ids := make([]string, len(items))
	for i, it := range items {
		ids[i] = it.TransactionID
	}
	return strings.Join(ids, ",")
}

// checkResults checks that res answers items in order, each from where
// (a node name, or "local").
func checkResults(t *testing.T, res []broker.AckResult, items []broker.AckItem, where []string) {
	t.Helper()
	if len(res) != len(items) {
		t.Fatalf("%d results for %d acks", len(res), len(items))
	}
	for i, r := range res {
		if r.Index != i || r.TransactionID != items[i].TransactionID || !r.Success || r.PartitionName != where[i]+"-"+items[i].PartitionID {
			t.Fatalf("result %d = %+v, want ack %s answered by %s", i, r, items[i].TransactionID, where[i])
		}
	}
}

// Acks of partitions whose queue this node does not know are applied here,
// and teach it their queues; later acks of a peer's queue go to the peer,
// one request per peer with its acks in order, and the results come back
// in the items' order.
func TestAcksGoToTheOwnersTheyLearn(t *testing.T) {
	a := newOwnerNode(t, ackOwner(t, ackedBy("peer0")))
	b := newOwnerNode(t, ackOwner(t, ackedBy("peer1")))
	owners := table(a.addr(), b.addr())
	qS, qA, qB := queueOwnedBy(t, owners, "self"), queueOwnedBy(t, owners, "peer0"), queueOwnedBy(t, owners, "peer1")
	local := &ackStore{queues: map[string]string{"pS": qS, "pA1": qA, "pA2": qA, "pB": qB}}
	f := New(DefaultConfig(), owners, nil)
	defer f.Close()
	learn := []broker.AckItem{{TransactionID: "l0", PartitionID: "pS"}, {TransactionID: "l1", PartitionID: "pA1"},
		{TransactionID: "l2", PartitionID: "pA2"}, {TransactionID: "l3", PartitionID: "pB"}, {TransactionID: "l4", PartitionID: "pU"}}
	res, err := f.Ack(context.Background(), "default", "Bearer tok", learn, local.apply)
	if err != nil {
		t.Fatal(err)
	}
	checkResults(t, res, learn, []string{"local", "local", "local", "local", "local"})
	if a.count() != 0 || b.count() != 0 {
		t.Fatalf("acks of partitions of unknown queues were forwarded (%d, %d)", a.count(), b.count())
	}
	if st := f.Stats(); st.Acks != 0 || st.AckLocalItems != 5 || st.Routes != 4 {
		t.Fatalf("stats after learning %+v", st)
	}

	items := []broker.AckItem{
		{TransactionID: "t0", PartitionID: "pA1", Status: "completed", Group: "g1", LeaseID: "lease-0"},
		{TransactionID: "t1", PartitionID: "pS"},
		{TransactionID: "t2", PartitionID: "pB", Status: "failed", Error: `bad "payload"`},
		{TransactionID: "t3", PartitionID: "pA2"},
		{TransactionID: "t4", PartitionID: "pU"},
		{TransactionID: "t5", PartitionID: "pA1", Status: "retry"},
		{TransactionID: "t6", PartitionID: "pB"},
	}
	res, err = f.Ack(context.Background(), "default", "Bearer tok", items, local.apply)
	if err != nil {
		t.Fatal(err)
	}
	checkResults(t, res, items, []string{"peer0", "local", "peer1", "peer0", "local", "peer0", "peer1"})
	if got := local.call(1); got != "t1,t4" {
		t.Fatalf("applied here: %s, want t1,t4", got)
	}
	for _, c := range []struct {
		n    *ownerNode
		want string
	}{{a, "t0,t3,t5"}, {b, "t2,t6"}} {
		reqs := c.n.requests()
		if len(reqs) != 1 {
			t.Fatalf("%d requests to one owner, want 1", len(reqs))
		}
		r := reqs[0]
		if r.method != http.MethodPost || r.uri != "/api/v1/ack/batch" {
			t.Fatalf("forwarded to %s %s", r.method, r.uri)
		}
		if r.header.Get(Header) != "1" || r.header.Get("Authorization") != "Bearer tok" || r.header.Get("Content-Type") != "application/json" {
			t.Fatalf("forwarded headers %v", r.header)
		}
		acks := decodeSentAcks(t, r.body)
		ids := make([]string, len(acks))
		for i, s := range acks {
			ids[i] = s.TransactionID
		}
		if got := strings.Join(ids, ","); got != c.want {
			t.Fatalf("owner got %s, want %s", got, c.want)
		}
	}
	// Each forwarded ack says what the client's did.
	byTx := map[string]sentAck{}
	for _, n := range []*ownerNode{a, b} {
		for _, s := range decodeSentAcks(t, n.requests()[0].body) {
			byTx[s.TransactionID] = s
		}
	}
	for _, it := range items {
		s, ok := byTx[it.TransactionID]
		if !ok {
			continue
		}
		group := it.Group
		if group == "" {
			group = broker.QueueMode
		}
		if s.PartitionID != it.PartitionID || deref(s.Status) != string(it.Status) || deref(s.ConsumerGroup) != group ||
			deref(s.LeaseID) != it.LeaseID || deref(s.Error) != it.Error {
			t.Fatalf("ack %s sent as %+v", it.TransactionID, s)
		}
	}
	if st := f.Stats(); st.Acks != 2 || st.AckItems != 5 || st.AckLocalItems != 7 || st.AckFailures != 0 || st.AckFallbackItems != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// Without consume forwarding, acks are applied here even of a peer's
// queue this node knows.
func TestAcksServedHereWhenNotForwarding(t *testing.T) {
	p := newOwnerNode(t, ackOwner(t, ackedBy("peer0")))
	owners := table(p.addr())
	local := &ackStore{queues: map[string]string{"pA": queueOwnedBy(t, owners, "peer0")}}
	cfg := DefaultConfig()
	cfg.Consume = false
	f := New(cfg, owners, nil)
	defer f.Close()
	items := []broker.AckItem{{TransactionID: "t0", PartitionID: "pA"}, {TransactionID: "t1", PartitionID: "pA"}}
	for i := 0; i < 2; i++ {
		res, err := f.Ack(context.Background(), "default", "", items, local.apply)
		if err != nil {
			t.Fatal(err)
		}
		checkResults(t, res, items, []string{"local", "local"})
	}
	if p.count() != 0 || local.ncalls() != 2 {
		t.Fatalf("%d requests forwarded, %d applied here", p.count(), local.ncalls())
	}
}

// A forward the owner does not answer usably is applied here; an owner at
// fault cools down (the next acks of its queues are applied here without a
// request), a refusal of the request itself does not.
func TestAFailedAckForwardIsAppliedHere(t *testing.T) {
	status := func(code int) http.HandlerFunc {
		return answering(code, "application/json", `{"error":"no"}`)
	}
	edit := func(change func([]map[string]any) []map[string]any) func(*testing.T) http.HandlerFunc {
		return func(t *testing.T) http.HandlerFunc {
			return ackOwner(t, func(acks []sentAck) []map[string]any {
				rev := ackedBy("peer0")(acks)
				out := make([]map[string]any, len(rev)) // in index order, for the changes
				for _, o := range rev {
					out[o["index"].(int)] = o
				}
				return change(out)
			})
		}
	}
	fixed := func(h http.HandlerFunc) func(*testing.T) http.HandlerFunc {
		return func(*testing.T) http.HandlerFunc { return h }
	}
	// unsent: the owner certainly applied nothing (no connection, or a
	// 4xx refusal), so every item is applied here; otherwise only the
	// completions are, and the failed ack is answered ErrOutcomeUnknown.
	cases := []struct {
		name    string
		handler func(*testing.T) http.HandlerFunc // nil: unreachable
		slow    bool
		cools   bool
		unsent  bool
	}{
		{"unreachable", nil, false, true, true},
		{"500", fixed(status(500)), false, true, false},
		{"503", fixed(status(503)), false, true, false},
		{"408", fixed(status(408)), false, true, true},
		{"429", fixed(status(429)), false, true, true},
		{"redirect", fixed(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "/elsewhere", http.StatusTemporaryRedirect)
		}), false, true, false},
		{"401", fixed(status(401)), false, false, true},
		{"403", fixed(status(403)), false, false, true},
		{"not JSON", fixed(answering(200, "application/json", `[{"index":0`)), false, true, false},
		{"another transaction id", edit(func(o []map[string]any) []map[string]any { o[1]["transactionId"] = "other"; return o }), false, true, false},
		{"repeated index", edit(func(o []map[string]any) []map[string]any { o[1] = o[0]; return o }), false, true, false},
		{"missing index", edit(func(o []map[string]any) []map[string]any { delete(o[1], "index"); return o }), false, true, false},
		{"null index", edit(func(o []map[string]any) []map[string]any { o[0]["index"] = nil; return o }), false, true, false},
		{"index out of range", edit(func(o []map[string]any) []map[string]any { o[1]["index"] = 2; return o }), false, true, false},
		{"too few results", edit(func(o []map[string]any) []map[string]any { return o[:1] }), false, true, false},
		{"too many results", edit(func(o []map[string]any) []map[string]any {
			extra := map[string]any{}
			for k, v := range o[0] {
				extra[k] = v
			}
			return append(o, extra)
		}), false, true, false},
		{"too slow", nil, true, true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var p *ownerNode
			addr := refusedAddr(t)
			switch {
			case tc.slow:
				p = newOwnerNode(t, holding(make(chan struct{}, 8), newGate().ch, nil))
				addr = p.addr()
			case tc.handler != nil:
				p = newOwnerNode(t, tc.handler(t))
				addr = p.addr()
			}
			owners := table(addr)
			local := &ackStore{queues: map[string]string{"pA": queueOwnedBy(t, owners, "peer0"), "pS": queueOwnedBy(t, owners, "self")}}
			cfg := DefaultConfig()
			cfg.Cooldown = time.Minute
			if tc.slow {
				cfg.Timeout = 300 * time.Millisecond
			}
			f := New(cfg, owners, nil)
			defer f.Close()
			setClock(f)
			learn := []broker.AckItem{{TransactionID: "l0", PartitionID: "pA"}, {TransactionID: "l1", PartitionID: "pS"}}
			if _, err := f.Ack(context.Background(), "default", "", learn, local.apply); err != nil {
				t.Fatal(err)
			}
			items := []broker.AckItem{{TransactionID: "t0", PartitionID: "pA"}, {TransactionID: "t1", PartitionID: "pS"},
				{TransactionID: "t2", PartitionID: "pA", Status: "failed"}}
			res, err := f.Ack(context.Background(), "default", "", items, local.apply)
			if err != nil {
				t.Fatal(err)
			}
			if tc.unsent {
				checkResults(t, res, items, []string{"local", "local", "local"})
				if got := local.call(1) + " then " + local.call(2); got != "t1 then t0,t2" {
					t.Fatalf("applied here: %s, want t1 then t0,t2", got)
				}
				if st := f.Stats(); st.Acks != 1 || st.AckItems != 2 || st.AckFailures != 1 || st.AckFallbackItems != 2 || st.AckLocalItems != 3 || st.AckUnknownItems != 0 {
					t.Fatalf("stats %+v", st)
				}
			} else {
				checkResults(t, res[:2], items[:2], []string{"local", "local"})
				if r := res[2]; r.Index != 2 || r.Success || r.Error != ErrOutcomeUnknown || r.TransactionID != "t2" {
					t.Fatalf("the failed ack whose outcome is unknown: %+v", r)
				}
				if got := local.call(1) + " then " + local.call(2); got != "t1 then t0" {
					t.Fatalf("applied here: %s, want t1 then t0 (a failed ack the owner may have applied is not replayed)", got)
				}
				if st := f.Stats(); st.Acks != 1 || st.AckItems != 2 || st.AckFailures != 1 || st.AckFallbackItems != 1 || st.AckLocalItems != 3 || st.AckUnknownItems != 1 {
					t.Fatalf("stats %+v", st)
				}
			}
			if p != nil && p.count() != 1 {
				t.Fatalf("%d requests reached the owner", p.count())
			}

			// Again, within a cool-down if the owner is at fault.
			res, err = f.Ack(context.Background(), "default", "", items, local.apply)
			if err != nil {
				t.Fatal(err)
			}
			checkResults(t, res, items, []string{"local", "local", "local"})
			st := f.Stats()
			if tc.cools {
				if st.Acks != 1 || st.AckLocalItems != 6 || (p != nil && p.count() != 1) {
					t.Fatalf("acks of an owner cooling down were sent: stats %+v", st)
				}
				if got := local.call(3); got != "t0,t1,t2" {
					t.Fatalf("applied here: %s, want t0,t1,t2 in order", got)
				}
			} else if st.Acks != 2 || p.count() != 2 {
				t.Fatalf("a refusal cooled the owner down: stats %+v", st)
			}
		})
	}
}

// A client that leaves while its acks are at the owner gets its context's
// error; nothing of the owner's is applied here, and the owner does not
// cool down.
func TestAnAckWhoseClientLeaves(t *testing.T) {
	arrived, ended := make(chan struct{}, 8), make(chan struct{}, 8)
	p := newOwnerNode(t, holding(arrived, newGate().ch, ended))
	owners := table(p.addr())
	local := &ackStore{queues: map[string]string{"pA": queueOwnedBy(t, owners, "peer0")}}
	f := New(DefaultConfig(), owners, nil)
	defer f.Close()
	if _, err := f.Ack(context.Background(), "default", "", []broker.AckItem{{TransactionID: "l0", PartitionID: "pA"}}, local.apply); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	items := []broker.AckItem{{TransactionID: "t0", PartitionID: "pA"}}
	go func() {
		_, err := f.Ack(ctx, "default", "", items, local.apply)
		done <- err
	}()
	within(t, arrived, "the forwarded ack")
	cancel()
	if err := within(t, done, "Ack to return"); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	within(t, ended, "the owner's request to end")
	if n := local.ncalls(); n != 1 {
		t.Fatalf("the owner's acks were applied here after the client left (%d calls)", n)
	}
	p.setHandler(ackOwner(t, ackedBy("peer0")))
	res, err := f.Ack(context.Background(), "default", "", items, local.apply)
	if err != nil {
		t.Fatal(err)
	}
	checkResults(t, res, items, []string{"peer0"})
	if st := f.Stats(); st.AckFailures != 0 || st.AckFallbackItems != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// Config.Routes bounds the partitions remembered; a partition learned last
// is remembered.
func TestAckRoutesAreBounded(t *testing.T) {
	local := &ackStore{queues: map[string]string{}}
	var items []broker.AckItem
	for i := 0; i < 10; i++ {
		pid := fmt.Sprintf("p%d", i)
		local.queues[pid] = "q" + pid
		items = append(items, broker.AckItem{TransactionID: fmt.Sprintf("t%d", i), PartitionID: pid})
	}
	cfg := DefaultConfig()
	cfg.Routes = 3
	f := New(cfg, table("unused:2"), nil)
	defer f.Close()
	if _, err := f.Ack(context.Background(), "default", "", items, local.apply); err != nil {
		t.Fatal(err)
	}
	if st := f.Stats(); st.Routes != 3 {
		t.Fatalf("%d routes remembered, Routes is 3", st.Routes)
	}
	if q, ok := f.routes.get("default", "p9"); !ok || q != "qp9" {
		t.Fatalf("the last partition learned is not remembered: %q %v", q, ok)
	}
	if _, ok := f.routes.get("other", "p9"); ok {
		t.Fatal("a route of one tenant is known to another")
	}
}

// The batch ack body escapes what JSON requires, keeps everything else as
// it is, names every item's group and omits an empty status, lease or
// error.
func TestEncodeAcksEscapes(t *testing.T) {
	var ctl strings.Builder
	for c := byte(0); c < 0x20; c++ {
		ctl.WriteByte(c)
	}
	items := []broker.AckItem{
		{TransactionID: `t"\` + ctl.String() + "\x7f", PartitionID: "π/ü\u2028😀", Status: "completed",
			Group: `g"\` + "\t", LeaseID: "l\u2029\\", Error: "say \"no\"\\\n\ttab\r\b\f ошибка"},
		{TransactionID: "t", PartitionID: "p"},
		{TransactionID: "u", PartitionID: "p", Status: "maybe", Group: broker.QueueMode, Error: "x"},
	}
	body := EncodeAcks(items)
	for i, c := range body {
		if c < 0x20 {
			t.Fatalf("raw control byte %#x at %d: %q", c, i, body)
		}
	}
	var raw struct {
		Acknowledgments []map[string]json.RawMessage `json:"acknowledgments"`
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	acks := decodeSentAcks(t, body)
	if len(acks) != len(items) || len(raw.Acknowledgments) != len(items) {
		t.Fatalf("%d acks decoded from %s", len(acks), body)
	}
	for i, it := range items {
		s := acks[i]
		group := it.Group
		if group == "" {
			group = broker.QueueMode
		}
		if s.TransactionID != it.TransactionID || s.PartitionID != it.PartitionID || deref(s.ConsumerGroup) != group ||
			deref(s.Status) != string(it.Status) || deref(s.LeaseID) != it.LeaseID || deref(s.Error) != it.Error {
			t.Fatalf("ack %d decoded as %+v, encoded %+v", i, s, it)
		}
		for key, empty := range map[string]bool{"status": it.Status == "", "leaseId": it.LeaseID == "", "error": it.Error == ""} {
			if _, ok := raw.Acknowledgments[i][key]; ok == empty {
				t.Fatalf("ack %d: %s present %v, its value empty %v: %s", i, key, ok, empty, body)
			}
		}
		if _, ok := raw.Acknowledgments[i]["consumerGroup"]; !ok {
			t.Fatalf("ack %d names no group", i)
		}
	}
	// Short escapes where JSON has one.
	tabs := EncodeAcks([]broker.AckItem{{TransactionID: strings.Repeat("\t", 50), PartitionID: "p"}})
	if plain := EncodeAcks([]broker.AckItem{{TransactionID: strings.Repeat("ab", 50), PartitionID: "p"}}); len(tabs) != len(plain) {
		t.Fatalf("a transaction id of 50 tabs takes %d bytes, one of 100 letters %d", len(tabs), len(plain))
	}
	if b := EncodeAcks(nil); string(b) != `{"acknowledgments":[]}` {
		t.Fatalf("no acks: %s", b)
	}
}

// A route learned from a forwarded pop's answer sends the first ack of
// that partition to the owner; routes are per tenant.
func TestALearnedRouteSendsTheFirstAck(t *testing.T) {
	a := newOwnerNode(t, ackOwner(t, ackedBy("peer0")))
	b := newOwnerNode(t, ackOwner(t, ackedBy("peer1")))
	owners := table(a.addr(), b.addr())
	qA := queueOwnedBy(t, owners, "peer0")
	local := &ackStore{queues: map[string]string{"pA": qA}}
	f := New(DefaultConfig(), owners, nil)
	defer f.Close()
	f.LearnRoute("default", "pA", qA)
	items := []broker.AckItem{{TransactionID: "t0", PartitionID: "pA"}}
	res, err := f.Ack(context.Background(), "default", "", items, local.apply)
	if err != nil {
		t.Fatal(err)
	}
	checkResults(t, res, items, []string{"peer0"})
	if local.ncalls() != 0 || a.count() != 1 {
		t.Fatalf("applied here %d times, forwarded %d, want the first ack forwarded", local.ncalls(), a.count())
	}
	// Another tenant's partition of the same id is not known.
	res, err = f.Ack(context.Background(), "other", "", items, local.apply)
	if err != nil {
		t.Fatal(err)
	}
	checkResults(t, res, items, []string{"local"})
}

// Every spelling of a partition's UUID takes the same path: the broker
// reads them as one partition.
func TestARouteIsKnownInEverySpelling(t *testing.T) {
	a := newOwnerNode(t, ackOwner(t, ackedBy("peer0")))
	owners := table(a.addr())
	qA := queueOwnedBy(t, owners, "peer0")
	const canonical = "0b9c2f62-3c57-4f3a-9d38-5d9d7b7a1e01"
	local := &ackStore{queues: map[string]string{}}
	f := New(DefaultConfig(), owners, nil)
	defer f.Close()
	f.LearnRoute("default", strings.ToUpper(canonical), qA)
	items := []broker.AckItem{{TransactionID: "t0", PartitionID: canonical},
		{TransactionID: "t1", PartitionID: "urn:uuid:" + canonical}}
	res, err := f.Ack(context.Background(), "default", "", items, local.apply)
	if err != nil {
		t.Fatal(err)
	}
	checkResults(t, res, items, []string{"peer0", "peer0"})
	if a.count() != 1 || local.ncalls() != 0 {
		t.Fatalf("%d requests to the owner, %d applied here: want one request with both", a.count(), local.ncalls())
	}
}

// failedAt returns a forwarder whose peers failed at a fixed time, and a
// function setting its clock to that time plus d.
func failedAt(owners func() *owner.Table, cfg Config) (*Forwarder, func(d time.Duration)) {
	f := New(cfg, owners, nil)
	t0 := time.Unix(1000, 0)
	f.now = func() time.Time { return t0 }
	for _, n := range owners().Nodes() {
		if !n.Self {
			f.failed(n.Name)
		}
	}
	var mu sync.Mutex
	at := t0
	f.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return at }
	return f, func(d time.Duration) { mu.Lock(); at = t0.Add(d); mu.Unlock() }
}

// A long-poll is held here while the owner's cool-down awaits a probe
// from another request, but not for ever: a cool-down after it ended, a
// long-poll probes (a node whose only requests to the owner are
// long-polls would otherwise never go back to it).
func TestALongPollProbesAnOwnerNothingElseTried(t *testing.T) {
	p := newOwnerNode(t, answering(http.StatusNoContent, "", ""))
	owners := table(p.addr())
	cfg := DefaultConfig()
	cfg.Cooldown = time.Minute
	f, clock := failedAt(owners, cfg)
	defer f.Close()
	q := queueOwnedBy(t, owners, "peer0")
	clock(cfg.Cooldown + time.Second)
	if a := popNoLease(f, context.Background(), "default", q, popURI(q), "", time.Second); a != nil {
		readAnswer(t, a)
		t.Fatal("a long-poll probed an owner whose cool-down had just ended")
	}
	clock(2*cfg.Cooldown + time.Second)
	a := popNoLease(f, context.Background(), "default", q, popURI(q), "", time.Second)
	if a == nil {
		t.Fatal("a long-poll never goes back to an owner nothing else tried")
	}
	readAnswer(t, a)
	if f.holdsLongPolls("peer0") || p.count() != 1 {
		t.Fatalf("after the long-poll's probe worked: holds %v, %d requests", f.holdsLongPolls("peer0"), p.count())
	}
}

// A probe answered with a refusal of the request (4xx, passed to the
// client) says nothing of the owner: its cool-down stays.
func TestARefusedPopProbeKeepsTheCoolDown(t *testing.T) {
	p := newOwnerNode(t, answering(http.StatusUnauthorized, "application/json", `{"error":"token"}`))
	owners := table(p.addr())
	cfg := DefaultConfig()
	cfg.Cooldown = time.Minute
	f, clock := failedAt(owners, cfg)
	defer f.Close()
	q := queueOwnedBy(t, owners, "peer0")
	clock(cfg.Cooldown + time.Second)
	a := popNoLease(f, context.Background(), "default", q, popURI(q), "", 0)
	if a == nil || a.Status != http.StatusUnauthorized {
		t.Fatalf("probe answer %+v, want the 401 passed on", a)
	}
	readAnswer(t, a)
	if !f.holdsLongPolls("peer0") {
		t.Fatal("a 401 answer ended the owner's cool-down")
	}
	// Closing an answer unread says nothing either, and frees the probe.
	a = popNoLease(f, context.Background(), "default", q, popURI(q), "", 0)
	if a == nil {
		t.Fatal("the next request did not probe")
	}
	a.Close()
	a.Close()
	if !f.holdsLongPolls("peer0") || f.coolingDown("peer0") {
		t.Fatal("an answer closed unread settled the cool-down, or left the probe taken")
	}
}

// Once a part of an ack went to its owner, a failure here is answered per
// item: an error for the whole request would have the client send the
// owner's part again.
func TestAFailureHereAfterAForwardIsPerItem(t *testing.T) {
	a := newOwnerNode(t, ackOwner(t, ackedBy("peer0")))
	owners := table(a.addr())
	qA := queueOwnedBy(t, owners, "peer0")
	f := New(DefaultConfig(), owners, nil)
	defer f.Close()
	f.LearnRoute("default", "pA", qA)
	failing := func(ctx context.Context, items []broker.AckItem) ([]broker.AckResult, error) {
		return nil, errors.New("database unavailable")
	}
	items := []broker.AckItem{{TransactionID: "t0", PartitionID: "pA", Status: "failed"}, {TransactionID: "t1", PartitionID: "pU", Status: "failed"}}
	res, err := f.Ack(context.Background(), "default", "", items, failing)
	if err != nil {
		t.Fatalf("Ack failed as a whole (%v) after the owner applied its part", err)
	}
	if !res[0].Success || res[1].Success || res[1].Error != ErrOutcomeUnknownHere || res[1].Index != 1 {
		t.Fatalf("results %+v", res)
	}
	// Nothing sent: the request fails as before.
	if _, err := f.Ack(context.Background(), "default", "", items[1:], failing); err == nil {
		t.Fatal("a request applied only here did not fail with its error")
	}
	// Nothing sent either when the owner's part is too large to send.
	cfg := DefaultConfig()
	cfg.MaxBodyBytes = 10
	small := New(cfg, owners, nil)
	defer small.Close()
	small.LearnRoute("default", "pA", qA)
	before := a.count()
	if _, err := small.Ack(context.Background(), "default", "", items, failing); err == nil || a.count() != before {
		t.Fatalf("a request none of which was sent: error %v, %d requests to the owner; want the request's error", err, a.count()-before)
	}
}

// A forwarded pop is sent once: when its reused connection closes before
// an answer, the transport must not send it again on a new one (the owner
// may have read the first copy and claimed under its lease; two claims
// under one lease would let one's release free the other). Pop fails
// instead, and says it sent the request.
func TestForwardedPopIsNotResent(t *testing.T) {
	var n atomic.Int32
	p := newOwnerNode(t, func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			w.WriteHeader(http.StatusNoContent) // leaves the connection open for reuse
			return
		}
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close() // read, then gone without an answer
		}
	})
	owners := table(p.addr())
	f := New(DefaultConfig(), owners, nil)
	defer f.Close()
	q := queueOwnedBy(t, owners, "peer0")
	a, _ := f.Pop(context.Background(), "default", q, popURI(q), "", "lease-1", 0, nil)
	if a == nil || a.Status != http.StatusNoContent {
		t.Fatalf("first pop: %+v", a)
	}
	readAnswer(t, a)
	a, sent := f.Pop(context.Background(), "default", q, popURI(q), "", "lease-2", 0, nil)
	if a != nil {
		readAnswer(t, a)
		t.Fatalf("a pop whose connection closed unanswered got answer %d", a.Status)
	}
	if !sent {
		t.Fatal("the pop reached the owner, but Pop says it was not sent")
	}
	if got := n.Load(); got != 2 {
		t.Fatalf("the owner read %d requests, want 2: the second pop was resent", got)
	}
	reqs := p.requests()
	// The empty body is sent as none (or, when the transport's probe of
	// it is slow, chunked and empty: the owner reads it, api/pop.go).
	if len(reqs) == 2 && (reqs[1].header.Get(LeaseHeader) != "lease-2" || len(reqs[1].body) != 0 ||
		!(reqs[1].length == 0 && reqs[1].te == nil || reqs[1].length == -1 && len(reqs[1].te) == 1 && reqs[1].te[0] == "chunked")) {
		t.Fatalf("the second pop arrived as %+v, want lease-2 and no body", reqs[1])
	}
}

// popNoLease is Pop for the tests that do not look at the lease header or
// at whether the request was sent.
func popNoLease(f *Forwarder, ctx context.Context, tenant, q, uri, auth string, wait time.Duration) *PopAnswer {
	a, _ := f.Pop(ctx, tenant, q, uri, auth, "", wait, nil)
	return a
}

func TestKeyOfSpellings(t *testing.T) {
	const canon = "0b6f1c5e-3d1a-4c1e-9a77-5f0e2d9c4b10"
	for _, s := range []string{canon, strings.ToUpper(canon), "{" + canon + "}", "urn:uuid:" + canon,
		strings.ReplaceAll(canon, "-", "")} {
		if got := keyOf("t", s); got != (routeKey{"t", canon}) {
			t.Errorf("keyOf(%q) = %v, want the canonical spelling", s, got)
		}
	}
	for _, s := range []string{"", "not-a-uuid", canon[:35] + "g", canon[:8] + "x" + canon[9:]} {
		if got := keyOf("t", s); got != (routeKey{"t", s}) {
			t.Errorf("keyOf(%q) = %v, want it as it is", s, got)
		}
		if canonicalUUID(s) {
			t.Errorf("canonicalUUID(%q) = true", s)
		}
	}
	if !canonicalUUID(canon) {
		t.Errorf("canonicalUUID(%q) = false", canon)
	}
}
