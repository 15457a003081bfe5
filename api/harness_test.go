package api

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"queen-node/broker"
	"queen-node/reads"
)

// fakeBroker records every call and returns canned answers. Tests check
// both what reached it and, for rejected requests, that nothing did.
type fakeBroker struct {
	TraceReads     // nil: the trace routes are tested against real nodes (traces_test.go)
	AnalyticsReads // nil: likewise (analytics_test.go)

	mu    sync.Mutex
	calls []string // method names in call order

	tenant       string
	configureReq broker.ConfigureRequest
	deletedQueue string
	pushSub      *string
	pushItems    []broker.PushItem
	popReq       broker.PopRequest
	popNS        string // namespace and task of the last PopAny
	popTask      string
	ackItems     []broker.AckItem
	leaseID      string
	leaseSeconds int
	txSub        *string
	txOps        []broker.TxOp
	txLeases     []string
	dlqQuery     reads.DLQQuery
	groupName    string
	groupQueue   string
	groupMeta    bool
	seekToEnd    bool
	seekTS       *time.Time
	streamCycle  broker.StreamCycle  // the last StreamCycle (streams_test.go)
	hotlistView  *broker.HotlistView // HotlistView's answer; nil = no hot-list (hotlist_fake_test.go)

	err          error // returned by every method when set
	healthErr    error
	popFn        func(ctx context.Context, req broker.PopRequest) (*broker.PopResult, error)
	ackRes       []broker.AckResult // nil = one success per item
	leaseRes     broker.LeaseResult
	txRes        *broker.TxResult
	dlqRes       []reads.DLQEntry
	dlqTotal     int
	dlqTruncated bool
	existed      bool
	deleted      int
	released     chan string             // lease ids given back by ReleaseUndelivered
	maint        broker.MaintenanceState // switches of the MaintenanceBroker fake (maintenance_test.go)
}

func (f *fakeBroker) ReleaseUndelivered(_ string, res *broker.PopResult) {
	f.mu.Lock()
	ch := f.released
	f.mu.Unlock()
	if ch != nil {
		ch <- res.LeaseID
	}
}

func (f *fakeBroker) ReleaseForwarded(tenant, leaseID string, _ bool) {
	f.ReleaseUndelivered(tenant, &broker.PopResult{LeaseID: leaseID})
}

func (f *fakeBroker) record(name, tenant string) {
	f.calls = append(f.calls, name)
	f.tenant = tenant
}

func (f *fakeBroker) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func (f *fakeBroker) Configure(_ context.Context, tenant string, req broker.ConfigureRequest) (broker.ConfigureResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("Configure", tenant)
	f.configureReq = req
	return broker.ConfigureResult{QueueID: "qid", PartitionID: "pid", Namespace: req.Namespace, Task: req.Task, Options: req.Options}, f.err
}

func (f *fakeBroker) DeleteQueue(_ context.Context, tenant, queue string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("DeleteQueue", tenant)
	f.deletedQueue = queue
	return f.existed, f.err
}

func (f *fakeBroker) Push(_ context.Context, tenant string, sub *string, items []broker.PushItem) ([]broker.PushResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("Push", tenant)
	f.pushSub, f.pushItems = sub, items
	if f.err != nil {
		return nil, f.err
	}
	out := make([]broker.PushResult, len(items))
	for i, it := range items {
		out[i] = broker.PushResult{Index: i, Status: "queued", TransactionID: it.TransactionID,
			MessageID: "m" + it.TransactionID, PartitionID: "p1", TraceID: it.TraceID, Queue: it.Queue}
		if it.TransactionID == "dup" {
			out[i].Status = "duplicate"
		}
		if it.TransactionID == "bad" {
			out[i].Status, out[i].Error, out[i].MessageID = "failed", "boom", ""
		}
	}
	return out, nil
}

func (f *fakeBroker) Pop(ctx context.Context, tenant string, req broker.PopRequest) (*broker.PopResult, error) {
	f.mu.Lock()
	f.record("Pop", tenant)
	f.popReq = req
	fn, err := f.popFn, f.err
	f.mu.Unlock()
	if fn != nil {
		return fn(ctx, req)
	}
	return nil, err
}

func (f *fakeBroker) PopAny(ctx context.Context, tenant, namespace, task string, req broker.PopRequest) (*broker.PopResult, error) {
	f.mu.Lock()
	f.record("PopAny", tenant)
	f.popReq = req
	f.popNS, f.popTask = namespace, task
	fn, err := f.popFn, f.err
	f.mu.Unlock()
	if fn != nil {
		return fn(ctx, req)
	}
	return nil, err
}

func (f *fakeBroker) AckPeer(ctx context.Context, tenant string, items []broker.AckItem, _ []broker.PeerClaim) ([]broker.AckResult, error) {
	return f.Ack(ctx, tenant, items)
}

func (f *fakeBroker) Prefetching() bool { return false }

func (f *fakeBroker) Ack(_ context.Context, tenant string, items []broker.AckItem) ([]broker.AckResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("Ack", tenant)
	f.ackItems = items
	if f.err != nil {
		return nil, f.err
	}
	if f.ackRes != nil {
		return f.ackRes, nil
	}
	out := make([]broker.AckResult, len(items))
	for i, it := range items {
		out[i] = broker.AckResult{Index: i, TransactionID: it.TransactionID, Success: true,
			QueueName: "q", PartitionName: "Default", LeaseReleased: true}
	}
	return out, nil
}

func (f *fakeBroker) ExtendLease(_ context.Context, tenant, leaseID string, seconds int) (broker.LeaseResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("ExtendLease", tenant)
	f.leaseID, f.leaseSeconds = leaseID, seconds
	return f.leaseRes, f.err
}

func (f *fakeBroker) Transaction(_ context.Context, tenant string, sub *string, ops []broker.TxOp, leases []string) (broker.TxResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("Transaction", tenant)
	f.txSub, f.txOps, f.txLeases = sub, ops, leases
	if f.txRes != nil {
		return *f.txRes, f.err
	}
	return broker.TxResult{TransactionID: "tx", Success: true}, f.err
}

func (f *fakeBroker) ListDLQ(_ context.Context, tenant string, q reads.DLQQuery) (reads.DLQPage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("ListDLQ", tenant)
	f.dlqQuery = q
	return reads.DLQPage{Entries: f.dlqRes, Total: f.dlqTotal, Truncated: f.dlqTruncated}, f.err
}

func (f *fakeBroker) RetryDeadLetter(_ context.Context, tenant, _, _, _ string) (broker.DLQRetried, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("RetryDeadLetter", tenant)
	return broker.DLQRetried{}, f.err
}

func (f *fakeBroker) DropDeadLetter(_ context.Context, tenant, _, _, _ string) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("DropDeadLetter", tenant)
	return 1, f.err
}

func (f *fakeBroker) DeleteConsumerGroup(_ context.Context, tenant, group, queue string, deleteMetadata bool) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("DeleteConsumerGroup", tenant)
	f.groupName, f.groupQueue, f.groupMeta = group, queue, deleteMetadata
	return f.deleted, f.err
}

func (f *fakeBroker) Seek(_ context.Context, tenant, group, queue string, toEnd bool, ts *time.Time) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("Seek", tenant)
	f.groupName, f.groupQueue, f.seekToEnd, f.seekTS = group, queue, toEnd, ts
	return 2, f.err
}

func (f *fakeBroker) Health(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "Health")
	return f.healthErr
}

// newFakeServer is a Server whose Broker and Reads are one fakeBroker.
func newFakeServer(cfg Config) *Server {
	fb := &fakeBroker{}
	return New(fb, fb, cfg, nil)
}

// testBundle is one server under test.
type testBundle struct {
	t   *testing.T
	fb  *fakeBroker
	srv *Server
	url string
}

func setup(t *testing.T, mutate ...func(*Config)) *testBundle {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Tenant = "t1"
	cfg.Version = "v-test"
	for _, m := range mutate {
		m(&cfg)
	}
	fb := &fakeBroker{}
	srv := New(fb, fb, cfg, nil)
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return &testBundle{t: t, fb: fb, srv: srv, url: ts.URL}
}

type response struct {
	status int
	header http.Header
	body   []byte
}

// do sends a request like the Queen clients do: Content-Type always set.
func (tb *testBundle) do(method, path, body string) response {
	tb.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, tb.url+path, rd)
	if err != nil {
		tb.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

// object decodes the body as a JSON object, keeping numbers exact.
func (r response) object(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(r.body))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil || m == nil {
		t.Fatalf("body is not a JSON object: %v: %s", err, r.body)
	}
	return m
}

// array decodes the body as a JSON array of objects.
func (r response) array(t *testing.T) []map[string]any {
	t.Helper()
	var a []map[string]any
	dec := json.NewDecoder(bytes.NewReader(r.body))
	dec.UseNumber()
	if err := dec.Decode(&a); err != nil || a == nil {
		t.Fatalf("body is not a JSON array: %v: %s", err, r.body)
	}
	return a
}

// wantError asserts an error response ({"error": ...}).
func (r response) wantError(t *testing.T, status int, msg string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status = %d, want %d; body %s", r.status, status, r.body)
	}
	checkJSONHeaders(t, r)
	m := r.object(t)
	got, ok := m["error"].(string)
	if !ok || got == "" {
		t.Fatalf("body %s has no string error", r.body)
	}
	if msg != "" && got != msg {
		t.Fatalf("error = %q, want %q", got, msg)
	}
}

func checkJSONHeaders(t *testing.T, r response) {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q", ct)
	}
	checkCORS(t, r.header)
}

func checkCORS(t *testing.T, h http.Header) {
	t.Helper()
	want := map[string]string{
		"Access-Control-Allow-Origin":  "*",
		"Access-Control-Allow-Methods": "GET, POST, PUT, DELETE, OPTIONS",
		"Access-Control-Allow-Headers": "Content-Type, Authorization",
	}
	for k, v := range want {
		if got := h.Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
}

// noBrokerCalls asserts a rejected request never reached the broker.
func (tb *testBundle) noBrokerCalls() {
	tb.t.Helper()
	if c := tb.fb.Calls(); len(c) != 0 {
		tb.t.Fatalf("broker was called: %v", c)
	}
}

// keys returns the sorted key set of m, for exact shape checks.
func keys(m map[string]any) string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return strings.Join(ks, ",")
}
