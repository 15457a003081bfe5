package api

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"queen-node/broker"
)

func TestAckSingle(t *testing.T) {
	tb := setup(t)
	// JS sends nulls routinely.
	r := tb.do("POST", "/api/v1/ack", `{"transactionId":"t-1","partitionId":"p-1","status":"failed",
		"consumerGroup":null,"leaseId":null,"error":"intentional failure","producerSub":"x"}`)
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	checkJSONHeaders(t, r)
	a := r.array(t)
	if len(a) != 1 || keys(a[0]) != "dlq,error,index,leaseReleased,partitionName,queueName,success,transactionId" {
		t.Fatalf("%s", r.body)
	}
	if a[0]["error"] != nil || a[0]["success"] != true || a[0]["transactionId"] != "t-1" {
		t.Fatalf("%v", a[0])
	}
	want := broker.AckItem{TransactionID: "t-1", PartitionID: "p-1", Status: "failed", Group: broker.QueueMode, Error: "intentional failure"}
	if len(tb.fb.ackItems) != 1 || tb.fb.ackItems[0] != want {
		t.Fatalf("broker got %+v", tb.fb.ackItems)
	}

	tb.fb.ackRes = []broker.AckResult{{TransactionID: "t-2", Error: "Invalid or expired lease"}}
	r = tb.do("POST", "/api/v1/ack", `{"transactionId":"t-2","partitionId":"p","consumerGroup":"g","leaseId":"l","error":{"code":1}}`)
	if a := r.array(t); r.status != 200 || a[0]["error"] != "Invalid or expired lease" || a[0]["success"] != false {
		t.Fatalf("%d %s", r.status, r.body)
	}
	got := tb.fb.ackItems[0]
	if got.Group != "g" || got.LeaseID != "l" || got.Status != "" || got.Error != `{"code":1}` {
		t.Fatalf("%+v", got)
	}
}

func TestAckValidation(t *testing.T) {
	cases := []struct{ body, msg string }{
		{`{}`, "transactionId is required"},
		{`{"partitionId":"p"}`, "transactionId is required"},
		{`{"transactionId":null,"partitionId":"p"}`, "transactionId is required"},
		{`{"transactionId":5,"partitionId":"p"}`, "transactionId is required"},
		{`{"transactionId":"t"}`, "partitionId is required"},
		{`{"transactionId":"t","partitionId":null}`, "partitionId is required"},
		{`{"transactionId":"t","partitionId":[]}`, "partitionId is required"},
		{`{"transactionId":"t","partitionId":"p","status":1}`, "status must be a string"},
		{`{"transactionId":"t","partitionId":"p","consumerGroup":1}`, "consumerGroup must be a string"},
		{`{"transactionId":"t","partitionId":"p","leaseId":true}`, "leaseId must be a string"},
		{`{"transactionId":"` + strings.Repeat("t", 256) + `","partitionId":"p"}`, ""},
	}
	for _, c := range cases {
		tb := setup(t)
		tb.do("POST", "/api/v1/ack", c.body).wantError(t, http.StatusBadRequest, c.msg)
		tb.noBrokerCalls()
	}
}

func TestAckBatch(t *testing.T) {
	tb := setup(t)
	r := tb.do("POST", "/api/v1/ack/batch", `{"consumerGroup":"workers","acknowledgments":[
		{"transactionId":"t1","partitionId":"p","status":"completed","leaseId":"l","error":null},
		{"transactionId":"t2","partitionId":"p","consumerGroup":"own"},
		{"transactionId":"t3","partitionId":"p","consumerGroup":null}]}`)
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	if a := r.array(t); len(a) != 3 || a[2]["transactionId"] != "t3" || a[1]["index"] != json.Number("1") {
		t.Fatalf("%s", r.body)
	}
	groups := []string{tb.fb.ackItems[0].Group, tb.fb.ackItems[1].Group, tb.fb.ackItems[2].Group}
	if strings.Join(groups, ",") != "workers,own,workers" || tb.fb.ackItems[0].LeaseID != "l" {
		t.Fatalf("%+v", tb.fb.ackItems)
	}

	tb = setup(t)
	tb.do("POST", "/api/v1/ack/batch", `{"acknowledgments":[{"transactionId":"t1","partitionId":"p"}]}`)
	if tb.fb.ackItems[0].Group != broker.QueueMode {
		t.Fatalf("default group %q", tb.fb.ackItems[0].Group)
	}

	tb = setup(t)
	r = tb.do("POST", "/api/v1/ack/batch", `{"acknowledgments":[]}`)
	if r.status != 200 || strings.TrimSpace(string(r.body)) != "[]" {
		t.Fatalf("%d %s", r.status, r.body)
	}
	tb.noBrokerCalls()
}

func TestAckBatchValidation(t *testing.T) {
	cases := []struct{ body, msg string }{
		{`{}`, "acknowledgments array is required"},
		{`{"acknowledgments":null}`, "acknowledgments array is required"},
		{`{"acknowledgments":{}}`, "acknowledgments array is required"},
		{`{"acknowledgments":[{"transactionId":"t","partitionId":"p"},{"partitionId":"p"}]}`, "transactionId is required"},
		{`{"acknowledgments":[{"transactionId":"t","partitionId":"p"},{"transactionId":"t"}]}`, "partitionId is required"},
		{`{"acknowledgments":[1]}`, "each acknowledgment must be an object"},
		{`{"consumerGroup":7,"acknowledgments":[]}`, "consumerGroup must be a string"},
	}
	for _, c := range cases {
		tb := setup(t)
		tb.do("POST", "/api/v1/ack/batch", c.body).wantError(t, http.StatusBadRequest, c.msg)
		tb.noBrokerCalls()
	}
	tb := setup(t, func(c *Config) { c.MaxAckItems = 1 })
	tb.do("POST", "/api/v1/ack/batch", `{"acknowledgments":[{"transactionId":"t","partitionId":"p"},{"transactionId":"u","partitionId":"p"}]}`).
		wantError(t, http.StatusRequestEntityTooLarge, "")
	tb.noBrokerCalls()
}

func TestLeaseExtend(t *testing.T) {
	tb := setup(t)
	exp := time.Date(2026, 5, 6, 10, 6, 42, 123456789, time.UTC)
	tb.fb.leaseRes = broker.LeaseResult{Success: true, ExpiresAt: exp}
	r := tb.do("POST", "/api/v1/lease/lease%2F1/extend", `{}`)
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	checkJSONHeaders(t, r)
	m := r.object(t)
	if keys(m) != "error,expiresAt,leaseId,newExpiresAt,success" || m["leaseId"] != "lease/1" || m["success"] != true ||
		m["newExpiresAt"] != "2026-05-06T10:06:42.123Z" || m["expiresAt"] != "2026-05-06T10:06:42.123Z" || m["error"] != nil {
		t.Fatalf("%s", r.body)
	}
	if tb.fb.leaseID != "lease/1" || tb.fb.leaseSeconds != 60 {
		t.Fatalf("%q %d", tb.fb.leaseID, tb.fb.leaseSeconds)
	}
	tb.do("POST", "/api/v1/lease/l/extend", `{"seconds":120}`)
	if tb.fb.leaseSeconds != 120 {
		t.Fatalf("seconds %d", tb.fb.leaseSeconds)
	}
	tb.do("POST", "/api/v1/lease/l/extend", ``) // no body at all
	if tb.fb.leaseSeconds != 60 {
		t.Fatalf("seconds %d", tb.fb.leaseSeconds)
	}

	tb.fb.leaseRes = broker.LeaseResult{Error: "Lease not found"}
	m = tb.do("POST", "/api/v1/lease/l/extend", `{"seconds":null}`).object(t)
	if m["success"] != false || m["error"] != "Lease not found" || m["newExpiresAt"] != nil {
		t.Fatalf("%v", m)
	}

	for _, body := range []string{`{"seconds":"60"}`, `{"seconds":0}`, `{"seconds":-5}`, `{"seconds":1.5}`} {
		tb := setup(t)
		tb.do("POST", "/api/v1/lease/l/extend", body).wantError(t, 400, "")
		tb.noBrokerCalls()
	}
}
