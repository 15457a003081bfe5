package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"queen-node/broker"
)

func TestConfigure(t *testing.T) {
	tb := setup(t)
	r := tb.do("POST", "/api/v1/configure", `{"queue":"orders","namespace":null,"task":"invoice",
		"options":{"leaseTime":10,"retryLimit":0,"encryptionEnabled":true,"priority":-5,"ttl":null,
		"namespace":"billing","task":"ignored","unknownOption":[1]},"extra":{}}`)
	if r.status != http.StatusOK {
		t.Fatalf("status %d %s", r.status, r.body)
	}
	checkJSONHeaders(t, r)
	m := r.object(t)
	if keys(m) != "configured,namespace,options,partitionId,queue,queueId,task" {
		t.Fatalf("keys %s", keys(m))
	}
	if m["configured"] != true || m["queue"] != "orders" || m["queueId"] != "qid" || m["partitionId"] != "pid" {
		t.Fatalf("body %s", r.body)
	}
	// Top-level null namespace falls back to options; top-level task wins.
	if m["namespace"] != "billing" || m["task"] != "invoice" {
		t.Fatalf("namespace/task %v/%v", m["namespace"], m["task"])
	}
	want := broker.DefaultQueueOptions()
	want.LeaseTime, want.RetryLimit, want.EncryptionEnabled, want.Priority = 10, 0, true, -5
	got := tb.fb.configureReq
	if got.Queue != "orders" || got.Namespace != "billing" || got.Task != "invoice" || got.Options != want {
		t.Fatalf("broker got %+v, want options %+v", got, want)
	}
	if tb.fb.tenant != "t1" {
		t.Fatalf("tenant %q", tb.fb.tenant)
	}
	opts := m["options"].(map[string]any)
	if opts["leaseTime"] != json.Number("10") || opts["ttl"] != json.Number("3600") || opts["deadLetterQueue"] != false {
		t.Fatalf("options %v", opts)
	}
}

func TestConfigureOmittedOptionsAreDefaults(t *testing.T) {
	tb := setup(t)
	for _, body := range []string{`{"queue":"q"}`, `{"queue":"q","options":null}`, `{"queue":"q","options":{}}`} {
		if r := tb.do("POST", "/api/v1/configure", body); r.status != 200 {
			t.Fatalf("%s: %d %s", body, r.status, r.body)
		}
		got := tb.fb.configureReq
		if got.Options != broker.DefaultQueueOptions() || got.Namespace != "" || got.Task != "" {
			t.Fatalf("%s: %+v", body, got)
		}
	}
}

func TestConfigureValidation(t *testing.T) {
	long := strings.Repeat("q", broker.MaxNameBytes+1)
	cases := []struct{ body, msg string }{
		{`{}`, "queue is required"},
		{`{"queue":null}`, "queue is required"},
		{`{"queue":5}`, "queue is required"},
		{`{"queue":""}`, "queue is required"},
		{`{"queue":"` + long + `"}`, ""},
		{`{"queue":"q","options":[]}`, "options must be an object"},
		{`{"queue":"q","options":{"leaseTime":"300"}}`, ""},
		{`{"queue":"q","options":{"leaseTime":1.5}}`, ""},
		{`{"queue":"q","options":{"retryLimit":-1}}`, ""},
		{`{"queue":"q","options":{"retryLimit":99999999999}}`, ""},
		{`{"queue":"q","options":{"encryptionEnabled":"true"}}`, ""},
		{`{"queue":"q","options":{"deadLetterQueue":1}}`, ""},
		{`{"queue":"q","namespace":5}`, "namespace must be a string"},
		{`{"queue":"q","options":{"task":true}}`, "options.task must be a string"},
	}
	for _, c := range cases {
		tb := setup(t)
		tb.do("POST", "/api/v1/configure", c.body).wantError(t, http.StatusBadRequest, c.msg)
		tb.noBrokerCalls()
	}
	// Integral floats are integers in JSON.
	tb := setup(t)
	if r := tb.do("POST", "/api/v1/configure", `{"queue":"q","options":{"leaseTime":3e2}}`); r.status != 200 || tb.fb.configureReq.Options.LeaseTime != 300 {
		t.Fatalf("%d %s", r.status, r.body)
	}
}

func TestDeleteQueue(t *testing.T) {
	tb := setup(t)
	tb.fb.existed = true
	r := tb.do("DELETE", "/api/v1/resources/queues/a%2Fb%20c", "")
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	m := r.object(t)
	if keys(m) != "deleted,existed,queue" || m["deleted"] != true || m["existed"] != true || m["queue"] != "a/b c" {
		t.Fatalf("body %s", r.body)
	}
	if tb.fb.deletedQueue != "a/b c" {
		t.Fatalf("broker got %q", tb.fb.deletedQueue)
	}
	tb.fb.existed = false
	if m := tb.do("DELETE", "/api/v1/resources/queues/gone", "").object(t); m["existed"] != false {
		t.Fatalf("existed %v", m["existed"])
	}
	tb2 := setup(t)
	tb2.do("DELETE", "/api/v1/resources/queues/"+strings.Repeat("x", 256), "").wantError(t, 400, "")
	tb2.noBrokerCalls()
}

func TestPushResponseShape(t *testing.T) {
	tb := setup(t)
	trace := "0190B1B2-C3D4-7E5F-8A9B-0C1D2E3F4A5B"
	r := tb.do("POST", "/api/v1/push", `{"bufferMs":5,"items":[
		{"queue":"orders","partition":"p-1","payload":{"b": 1.50, "a":[1e3, "x<y>"]},"transactionId":"t-1","traceId":"`+trace+`","producerSub":"spoof"},
		{"queue":"orders","transactionId":"dup"},
		{"queue":"orders","partition":null,"payload":null,"transactionId":"bad","traceId":null},
		{"queue":"orders","transactionId":"","traceId":""}]}`)
	if r.status != http.StatusCreated {
		t.Fatalf("%d %s", r.status, r.body)
	}
	checkJSONHeaders(t, r)
	a := r.array(t)
	if len(a) != 4 {
		t.Fatalf("%d results", len(a))
	}
	common := "index,message_id,partitionId,partition_id,queueName,status,trace_id,transactionId,transaction_id"
	if keys(a[0]) != common || keys(a[1]) != common || keys(a[2]) != "error,"+common {
		t.Fatalf("keys %s / %s / %s", keys(a[0]), keys(a[1]), keys(a[2]))
	}
	canon := strings.ToLower(trace)
	if a[0]["transactionId"] != "t-1" || a[0]["transaction_id"] != "t-1" || a[0]["message_id"] != "mt-1" ||
		a[0]["partitionId"] != "p1" || a[0]["partition_id"] != "p1" || a[0]["trace_id"] != canon ||
		a[0]["queueName"] != "orders" || a[0]["status"] != "queued" || a[0]["index"] != json.Number("0") {
		t.Fatalf("item 0: %v", a[0])
	}
	if a[1]["status"] != "duplicate" || a[1]["trace_id"] != nil {
		t.Fatalf("item 1: %v", a[1])
	}
	if a[2]["status"] != "failed" || a[2]["error"] != "boom" || a[2]["message_id"] != nil {
		t.Fatalf("item 2: %v", a[2])
	}

	items := tb.fb.pushItems
	if tb.fb.pushSub != nil {
		t.Fatalf("producerSub must be nil without auth, got %q", *tb.fb.pushSub)
	}
	if string(items[0].Payload) != `{"b":1.50,"a":[1e3,"x<y>"]}` {
		t.Fatalf("payload not compact-verbatim: %s", items[0].Payload)
	}
	if items[0].Partition != "p-1" || items[0].TraceID == nil || *items[0].TraceID != canon {
		t.Fatalf("item 0: %+v", items[0])
	}
	if string(items[1].Payload) != `{}` || items[1].Partition != "" {
		t.Fatalf("absent payload must be {}: %+v", items[1])
	}
	if string(items[2].Payload) != `null` || items[2].TraceID != nil {
		t.Fatalf("null payload must stay null: %+v", items[2])
	}
	if items[3].TransactionID != "" || items[3].TraceID != nil {
		t.Fatalf("empty ids: %+v", items[3])
	}
}

func TestPushEmptyItems(t *testing.T) {
	tb := setup(t)
	r := tb.do("POST", "/api/v1/push", `{"items":[]}`)
	if r.status != http.StatusCreated || strings.TrimSpace(string(r.body)) != "[]" {
		t.Fatalf("%d %s", r.status, r.body)
	}
	tb.noBrokerCalls()
}

func TestPushValidation(t *testing.T) {
	long := strings.Repeat("x", broker.MaxNameBytes+1)
	cases := []struct{ body, msg string }{
		{`{}`, "items array is required"},
		{``, "items array is required"},
		{`{"items":null}`, "items array is required"},
		{`{"items":{"queue":"q"}}`, "items array is required"},
		{`{"items":"x"}`, "items array is required"},
		{`{"items":[{"payload":1}]}`, "Queue must be a string"},
		{`{"items":[{"queue":null}]}`, "Queue must be a string"},
		{`{"items":[{"queue":7}]}`, "Queue must be a string"},
		{`{"items":[{"queue":"ok"},{"queue":["q"]}]}`, "Queue must be a string"},
		{`{"items":[{"queue":""}]}`, ""},
		{`{"items":[{"queue":"` + long + `"}]}`, ""},
		{`{"items":[{"queue":"q","partition":3}]}`, "partition must be a string"},
		{`{"items":[{"queue":"q","partition":"` + long + `"}]}`, ""},
		{`{"items":[{"queue":"q","transactionId":3}]}`, "transactionId must be a string"},
		{`{"items":[{"queue":"q","transactionId":"` + long + `"}]}`, ""},
		{`{"items":[{"queue":"q","traceId":3}]}`, "traceId must be a string"},
		{`{"items":[{"queue":"q","traceId":"not-a-uuid"}]}`, "traceId must be a UUID"},
		{`{"items":[5]}`, "each item must be an object"},
		{`{"items":[null]}`, "each item must be an object"},
	}
	for _, c := range cases {
		tb := setup(t)
		tb.do("POST", "/api/v1/push", c.body).wantError(t, http.StatusBadRequest, c.msg)
		tb.noBrokerCalls()
	}
}

func TestPushTooManyItems(t *testing.T) {
	tb := setup(t, func(c *Config) { c.MaxPushItems = 3 })
	items := strings.Repeat(`{"queue":"q"},`, 4)
	tb.do("POST", "/api/v1/push", `{"items":[`+strings.TrimSuffix(items, ",")+`]}`).
		wantError(t, http.StatusRequestEntityTooLarge, "too many items: 4 (max 3 per request)")
	tb.noBrokerCalls()
}

func TestPushManyItemsKeepOrder(t *testing.T) {
	tb := setup(t)
	var sb strings.Builder
	sb.WriteString(`{"items":[`)
	for i := range 10000 {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"queue":"q","transactionId":"t%d","payload":{"i":%d}}`, i, i)
	}
	sb.WriteString(`]}`)
	r := tb.do("POST", "/api/v1/push", sb.String())
	if r.status != 201 {
		t.Fatalf("%d %.200s", r.status, r.body)
	}
	a := r.array(t)
	if len(a) != 10000 || a[9999]["transactionId"] != "t9999" || string(tb.fb.pushItems[42].Payload) != `{"i":42}` {
		t.Fatalf("order lost")
	}
}

// Text PostgreSQL cannot store (NUL, invalid UTF-8) is a 400, never a 500,
// whichever way it arrives.
func TestUnstorableTextIsBadRequest(t *testing.T) {
	bundle := setup(t)
	for _, tc := range []struct{ method, path, body string }{
		{"POST", "/api/v1/push", `{"items":[{"queue":"a\u0000b","payload":1}]}`},
		{"POST", "/api/v1/push", `{"items":[{"queue":"q","transactionId":"x\u0000","payload":1}]}`},
		{"POST", "/api/v1/push", "{\"items\":[{\"queue\":\"q\",\"payload\":\"\xff\"}]}"},
		{"POST", "/api/v1/ack", `{"transactionId":"x\u0000","partitionId":"p"}`},
		{"POST", "/api/v1/ack/batch", `{"acknowledgments":[{"transactionId":"x","partitionId":"p","leaseId":"\u0000"}]}`},
		{"GET", "/api/v1/pop/queue/%FF", ""},
		{"GET", "/api/v1/pop/queue/a%00b", ""},
		{"GET", "/api/v1/pop/queue/ok?consumerGroup=%FF", ""},
		{"GET", "/api/v1/pop/queue/ok/partition/%00", ""},
	} {
		resp := bundle.do(tc.method, tc.path, tc.body)
		if resp.status != 400 {
			t.Errorf("%s %s %q: got %d %s", tc.method, tc.path, tc.body, resp.status, resp.body)
		}
	}
	if calls := bundle.fb.Calls(); len(calls) != 0 {
		t.Fatalf("the broker was called: %v", calls)
	}
}
