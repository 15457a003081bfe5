package api

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"queen-node/broker"
	"queen-node/reads"
)

func TestTransaction(t *testing.T) {
	tb := setup(t)
	tb.fb.txRes = &broker.TxResult{TransactionID: "tx-1", Success: true, Results: []broker.TxOpResult{
		{Index: 0, Type: "ack", Success: true, TransactionID: "t-1"},
		{Index: 1, Type: "push", Success: true, TransactionID: "n-1", MessageID: "m", PartitionID: "p", QueueName: "next", Status: "queued"},
	}}
	r := tb.do("POST", "/api/v1/transaction", `{"operations":[
		{"type":"ack","transactionId":"t-1","partitionId":"p-1","status":"completed","consumerGroup":"workers","leaseId":null,"error":null},
		{"type":"push","items":[{"queue":"next","payload":{"x":1}},{"queue":"next","partition":"Default","transactionId":"n-2"}]},
		{"type":"ack","transactionId":"t-2","partitionId":"p-1"}],
		"requiredLeases":["l-1","", "l-2"]}`)
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	checkJSONHeaders(t, r)
	m := r.object(t)
	if keys(m) != "error,results,success,transactionId" || m["success"] != true || m["error"] != nil || m["transactionId"] != "tx-1" {
		t.Fatalf("%s", r.body)
	}
	res := m["results"].([]any)
	ack, push := res[0].(map[string]any), res[1].(map[string]any)
	if keys(ack) != "dlq,error,index,success,transactionId,type" || ack["error"] != nil {
		t.Fatalf("ack result %v", ack)
	}
	if keys(push) != "index,messageId,partitionId,queueName,status,success,transactionId,type" || push["status"] != "queued" {
		t.Fatalf("push result %v", push)
	}

	ops := tb.fb.txOps
	if len(ops) != 3 || ops[0].Type != "ack" || ops[1].Type != "push" || ops[2].Type != "ack" {
		t.Fatalf("%+v", ops)
	}
	// Each ack op uses its own group.
	if ops[0].Ack.Group != "workers" || ops[2].Ack.Group != broker.QueueMode || ops[0].Ack.TransactionID != "t-1" {
		t.Fatalf("acks %+v %+v", ops[0].Ack, ops[2].Ack)
	}
	if len(ops[1].Items) != 2 || string(ops[1].Items[0].Payload) != `{"x":1}` || ops[1].Items[1].TransactionID != "n-2" {
		t.Fatalf("push %+v", ops[1].Items)
	}
	if strings.Join(tb.fb.txLeases, ",") != "l-1,l-2" || tb.fb.txSub != nil {
		t.Fatalf("leases %v sub %v", tb.fb.txLeases, tb.fb.txSub)
	}
}

func TestTransactionFailedIs200(t *testing.T) {
	tb := setup(t)
	tb.fb.txRes = &broker.TxResult{TransactionID: "tx-2", Success: false, Error: "Message not found"}
	r := tb.do("POST", "/api/v1/transaction", `{"operations":[{"type":"ack","transactionId":"t","partitionId":"p"}],"requiredLeases":[]}`)
	m := r.object(t)
	if r.status != 200 || m["success"] != false || m["error"] != "Message not found" || r.array2(t, "results") != 0 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	if tb.fb.txLeases != nil {
		t.Fatalf("leases %v", tb.fb.txLeases)
	}
}

// array2 returns the length of an array field (which must be an array, not null).
func (r response) array2(t *testing.T, key string) int {
	t.Helper()
	a, ok := r.object(t)[key].([]any)
	if !ok {
		t.Fatalf("%s is not an array: %s", key, r.body)
	}
	return len(a)
}

func TestTransactionMalformed(t *testing.T) {
	cases := []struct {
		body   string
		status int
		msg    string
	}{
		{`{}`, 400, "operations array required"},
		{`{"operations":null}`, 400, "operations array required"},
		{`{"operations":{"type":"ack"}}`, 400, "operations array required"},
		{`{"operations":[]}`, 400, "operations array cannot be empty"},
		{`{"operations":[{"type":"ack","transactionId":"t","partitionId":"p"}],"requiredLeases":"l"}`, 400, ""},
		{`{"operations":[{"type":"ack","transactionId":"t","partitionId":"p"}],"requiredLeases":[1]}`, 400, ""},
	}
	for _, c := range cases {
		tb := setup(t)
		tb.do("POST", "/api/v1/transaction", c.body).wantError(t, c.status, c.msg)
		tb.noBrokerCalls()
	}
	tb := setup(t, func(c *Config) { c.MaxTxOps = 1 })
	tb.do("POST", "/api/v1/transaction", `{"operations":[{"type":"push","items":[]},{"type":"push","items":[]}]}`).
		wantError(t, http.StatusRequestEntityTooLarge, "")
	tb.noBrokerCalls()
}

// Invalid operations fail the transaction (200, success:false) without
// reaching the broker: the reference rolls everything back.
func TestTransactionInvalidOperation(t *testing.T) {
	cases := []struct{ ops, contains string }{
		{`[{"type":"bogus"}]`, "unknown operation type"},
		{`[{"transactionId":"t","partitionId":"p"}]`, "unknown operation type"},
		{`[5]`, "must be an object"},
		{`[{"type":"ack","partitionId":"p"}]`, "transactionId is required"},
		{`[{"type":"ack","transactionId":"t"}]`, "partitionId is required"},
		{`[{"type":"push"}]`, "items array is required"},
		{`[{"type":"push","items":[{"payload":1}]}]`, "Queue must be a string"},
		{`[{"type":"push","items":[{"queue":"q","traceId":"nope"}]}]`, "traceId must be a UUID"},
	}
	for _, c := range cases {
		tb := setup(t)
		r := tb.do("POST", "/api/v1/transaction", `{"operations":`+c.ops+`}`)
		m := r.object(t)
		if r.status != 200 || m["success"] != false || !strings.Contains(m["error"].(string), c.contains) || m["transactionId"] == "" {
			t.Fatalf("%s: %d %s", c.ops, r.status, r.body)
		}
		if r.array2(t, "results") != 0 {
			t.Fatalf("results %s", r.body)
		}
		tb.noBrokerCalls()
	}
}

func TestDLQ(t *testing.T) {
	tb := setup(t)
	at := time.Date(2026, 5, 6, 10, 1, 42, 123456000, time.UTC)
	tb.fb.dlqRes = []reads.DLQEntry{{ID: "m", TransactionID: "t-1", PartitionID: "p", Queue: "orders", Partition: "Default",
		ConsumerGroup: "g", ErrorMessage: "intentional failure", RetryCount: 2, Data: []byte(`{"test":"dlq"}`),
		CreatedAt: at, FailedAt: at.Add(time.Second)}}
	tb.fb.dlqTotal = 7
	r := tb.do("GET", "/api/v1/dlq?queue=orders&consumerGroup=g&partition=P%2F1&limit=10&offset=5&from=2026-05-06T00:00:00Z&to=2026-05-07T00:00:00%2B02:00", "")
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	checkJSONHeaders(t, r)
	m := r.object(t)
	if keys(m) != "limit,messages,offset,pagination,total,truncated" || m["truncated"] != false || m["total"] != jsonNum("7") || m["limit"] != jsonNum("10") || m["offset"] != jsonNum("5") {
		t.Fatalf("%s", r.body)
	}
	if p := m["pagination"].(map[string]any); p["limit"] != jsonNum("10") || p["offset"] != jsonNum("5") {
		t.Fatalf("pagination %v", p)
	}
	msg := m["messages"].([]any)[0].(map[string]any)
	if keys(msg) != "consumerGroup,createdAt,data,errorMessage,failedAt,id,partition,partitionId,producerSub,queue,retryCount,superseded,transactionId" ||
		msg["createdAt"] != "2026-05-06T10:01:42.123Z" || msg["failedAt"] != "2026-05-06T10:01:43.123Z" || msg["producerSub"] != nil ||
		msg["data"].(map[string]any)["test"] != "dlq" {
		t.Fatalf("message %v", msg)
	}
	q := tb.fb.dlqQuery
	if q.Queue != "orders" || q.Group != "g" || q.Partition != "P/1" || q.Limit != 10 || q.Offset != 5 ||
		q.From == nil || !q.From.Equal(time.Date(2026, 5, 6, 0, 0, 0, 0, time.UTC)) ||
		q.To == nil || !q.To.Equal(time.Date(2026, 5, 6, 22, 0, 0, 0, time.UTC)) || q.MaxBytes != DefaultMaxReadBytes {
		t.Fatalf("query %+v", q)
	}
	// A page the byte bound cut says so, and where the rest starts.
	tb.fb.dlqTruncated = true
	m = tb.do("GET", "/api/v1/dlq?queue=orders&limit=10&offset=5", "").object(t)
	if m["truncated"] != true || m["nextOffset"] != jsonNum("6") {
		t.Fatalf("truncated page: %v", m)
	}

	tb = setup(t)
	r = tb.do("GET", "/api/v1/dlq?queue=q&limit=abc&offset=-4", "")
	if r.status != 200 || r.array2(t, "messages") != 0 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	if q := tb.fb.dlqQuery; q.Limit != 100 || q.Offset != 0 || q.Group != "" || q.From != nil {
		t.Fatalf("defaults %+v", q)
	}

	for _, qs := range []string{"from=yesterday", "to=2026-13-01T00:00:00Z", "queue=" + strings.Repeat("q", 256)} {
		tb := setup(t)
		tb.do("GET", "/api/v1/dlq?"+qs, "").wantError(t, 400, "")
		tb.noBrokerCalls()
	}
}
