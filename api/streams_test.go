package api

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"queen-node/broker"
	"queen-node/reads"
)

// The fake broker's streams side: it records the call and answers success.

func (f *fakeBroker) RegisterStreamQuery(_ context.Context, tenant string, q reads.StreamQuery) (reads.StreamRegistration, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("RegisterStreamQuery", tenant)
	return reads.StreamRegistration{QueryID: "00000000-0000-0000-0000-000000000001", Fresh: true}, f.err
}

func (f *fakeBroker) StreamState(_ context.Context, tenant, _, _ string, _ reads.StreamStateFilter, _ int64) ([]reads.StreamStateRow, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("StreamState", tenant)
	return nil, f.err
}

func (f *fakeBroker) StreamCycle(_ context.Context, tenant string, _ *string, c broker.StreamCycle) (broker.StreamCycleResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("StreamCycle", tenant)
	f.streamCycle = c
	return broker.StreamCycleResult{Success: true}, f.err
}

const (
	testQID = "0b9c3a3e-7d7e-4c61-9a43-2f0c1f7f1c11"
	testPID = "5f0e6f55-1d11-4a35-8d1b-8cc0a2a1b0f2"
)

// Bad input is a 4xx JSON error and never reaches the broker: in
// particular an unknown op type anywhere in state_ops applies nothing.
func TestStreamsValidation(t *testing.T) {
	tb := setup(t)
	cyc := func(extra string) string {
		return `{"query_id":"` + testQID + `","partition_id":"` + testPID + `","consumer_group":"streams.q",` +
			`"release_lease":true` + extra + `}`
	}
	cases := []struct {
		path, body string
		status     int
		want       string
	}{
		{"/streams/v1/queries", `{"source_queue":"s","config_hash":"h"}`, 400, "name"},
		{"/streams/v1/queries", `{"name":"q","config_hash":"h"}`, 400, "source_queue"},
		{"/streams/v1/queries", `{"name":"q","source_queue":"s"}`, 400, "config_hash"},
		{"/streams/v1/queries", `{"name":"q","source_queue":"s","config_hash":"h","reset":"yes"}`, 400, "reset"},
		{"/streams/v1/queries", `{"name":"` + strings.Repeat("n", 256) + `","source_queue":"s","config_hash":"h"}`, 400, "too long"},
		{"/streams/v1/state/get", `{"query_id":"x","partition_id":"` + testPID + `"}`, 400, "query_id"},
		{"/streams/v1/state/get", `{"query_id":"` + testQID + `"}`, 400, "partition_id"},
		{"/streams/v1/state/get", `{"query_id":"` + testQID + `","partition_id":"` + testPID + `","ripe_at_or_before":"1"}`, 400, "ripe_at_or_before"},
		{"/streams/v1/state/get", `{"query_id":"` + testQID + `","partition_id":"` + testPID + `","keys":[1]}`, 400, "keys"},
		{"/streams/v1/cycle", cyc(`,"state_ops":[{"type":"upsert","key":"a","value":1},{"type":"merge","key":"b","value":2}]`), 400, "unknown type"},
		{"/streams/v1/cycle", cyc(`,"state_ops":[{"type":"upsert","value":1}]`), 400, "key"},
		{"/streams/v1/cycle", cyc(`,"state_ops":[{"type":"upsert","key":"` + strings.Repeat("k", MaxStreamKeyBytes+1) + `"}]`), 400, "too long"},
		{"/streams/v1/cycle", cyc(`,"state_ops":[{"type":"upsert","key":"a\u0000b"}]`), 400, "NUL"},
		{"/streams/v1/cycle", cyc(`,"push_items":[{"payload":{}}]`), 400, "Queue"},
		{"/streams/v1/cycle", cyc(`,"ack":{"leaseId":"l","status":"failed","count":1}`), 400, "status"},
		{"/streams/v1/cycle", cyc(`,"ack":{"status":"completed"}`), 400, "leaseId"},
		{"/streams/v1/cycle", strings.Replace(cyc(`,"ack":{"leaseId":"l"}`), `"release_lease":true`, `"release_lease":false`, 1), 400, "count"},
		{"/streams/v1/cycle", `{"query_id":"` + testQID + `","partition_id":"` + testPID + `"}`, 400, "consumer_group"},
	}
	for _, c := range cases {
		r := tb.do("POST", c.path, c.body)
		if r.status != c.status || !strings.Contains(string(r.body), c.want) || !strings.HasPrefix(string(r.body), `{"error":`) {
			t.Errorf("%s %.80s: got %d %s, want %d containing %q", c.path, c.body, r.status, r.body, c.status, c.want)
		}
	}
	if calls := tb.fb.Calls(); len(calls) != 0 {
		t.Fatalf("invalid requests reached the broker: %v", calls)
	}
	// A valid cycle does reach it, with the ops in order and the defaults.
	r := tb.do("POST", "/streams/v1/cycle", cyc(`,"state_ops":[{"type":"upsert","key":"a"},{"type":"delete","key":"a"}],"push_items":[{"queue":"o","payload":{"v":1}}],"ack":null`))
	if r.status != http.StatusOK || !strings.Contains(string(r.body), `"success":true`) {
		t.Fatalf("valid cycle: %d %s", r.status, r.body)
	}
	got := tb.fb.streamCycle
	if len(got.Ops) != 2 || got.Ops[0].Value != "null" || !got.Ops[1].Delete || got.Ack != nil || len(got.Push) != 1 || got.Push[0].Partition != "" {
		t.Fatalf("cycle as parsed: %+v", got)
	}
}

// Array bounds: state_ops beyond MaxTxOps, push_items beyond MaxPushItems
// and keys beyond MaxStreamKeys are 413, before the broker.
func TestStreamsArrayBounds(t *testing.T) {
	tb := setup(t, func(c *Config) { c.MaxTxOps, c.MaxPushItems = 2, 2 })
	head := `{"query_id":"` + testQID + `","partition_id":"` + testPID + `","consumer_group":"g","release_lease":true,`
	three := func(item string) string { return "[" + item + "," + item + "," + item + "]" }
	keys := make([]string, MaxStreamKeys+1)
	for i := range keys {
		keys[i] = `"k"`
	}
	for _, c := range []struct{ path, body string }{
		{"/streams/v1/cycle", head + `"state_ops":` + three(`{"type":"delete","key":"k"}`) + `}`},
		{"/streams/v1/cycle", head + `"push_items":` + three(`{"queue":"q","payload":{}}`) + `}`},
		{"/streams/v1/state/get", `{"query_id":"` + testQID + `","partition_id":"` + testPID + `","keys":[` + strings.Join(keys, ",") + `]}`},
	} {
		if r := tb.do("POST", c.path, c.body); r.status != http.StatusRequestEntityTooLarge {
			t.Errorf("%s %.90s: %d %s, want 413", c.path, c.body, r.status, r.body)
		}
	}
	if calls := tb.fb.Calls(); len(calls) != 0 {
		t.Fatalf("oversized requests reached the broker: %v", calls)
	}
}
