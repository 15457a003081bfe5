package bench

import (
	"encoding/json"
	"testing"

	"queen-node/protocol"
)

// TestDecodePop: the fields an ack needs and the payload come out of a pop
// answer as the node writes it (extra fields, nulls, escapes), a payload
// that is not the benchmark's is flagged rather than guessed, and an
// answer that is not JSON or has no messages is an error.
func TestDecodePop(t *testing.T) {
	var d decoder
	body := `{"success":true,"queue":"q","partition":"p7","partitionId":"pid","leaseId":"L","consumerGroup":"__QUEUE_MODE__","partitionsClaimed":1,"messages":[` +
		`{"id":"m1","transactionId":"tx\"1","partitionId":"pid","partition":"p7","leaseId":"L","data":{"p":2,"s":41,"t":1700000000000000001,"x":"xx"},"traceId":null,"createdAt":"2026-12-03T00:00:00Z","retryCount":0,"producerSub":null},` +
		`{"id":"m2","transactionId":"tx2","partitionId":"pid","partition":"p7","leaseId":"L","data":{"hello":"world"}},` +
		`{"id":"m3","transactionId":"tx3","partitionId":"pid","partition":"p7","leaseId":"L","data":{"p":1,"s":2.5,"t":3}},` +
		`{"id":"m4","transactionId":"tx4","partitionId":"pid","partition":"p7","leaseId":"L","data":null}]}`
	ms, err := d.pop([]byte(body))
	if err != nil || len(ms) != 4 {
		t.Fatalf("got %d messages, %v", len(ms), err)
	}
	want := popMsg{TransactionID: `tx"1`, PartitionID: "pid", Partition: "p7", LeaseID: "L"}
	if ms[0].msg != want || !ms[0].ok || ms[0].payload != (Payload{P: 2, S: 41, T: 1700000000000000001}) {
		t.Fatalf("first message: %+v", ms[0])
	}
	for i := 1; i < 4; i++ {
		if ms[i].ok {
			t.Fatalf("message %d taken for a benchmark payload: %+v", i, ms[i])
		}
	}
	// The values do not alias the parser: a second parse leaves them as they were.
	if _, err := d.pop([]byte(`{"messages":[{"transactionId":"zzzzz","data":{"p":9,"s":9,"t":9}}]}`)); err != nil {
		t.Fatal(err)
	}
	if ms[0].msg != want {
		t.Fatalf("first message changed by the next parse: %+v", ms[0].msg)
	}
	for _, bad := range []string{``, `{"messages":`, `{"success":true}`, `{"messages":{}}`, `{"messages":[1]}`, `[]`} {
		if _, err := d.pop([]byte(bad)); err == nil {
			t.Errorf("pop answer %q: no error", bad)
		}
	}
}

// TestDecodeAnswers: ack and push answers, read as the node writes them
// (encoded here by encoding/json from the same shapes), and malformed ones.
func TestDecodeAnswers(t *testing.T) {
	var d decoder
	acks, _ := json.Marshal([]map[string]any{
		{"transactionId": "a", "success": true, "error": nil},
		{"transactionId": "b", "success": false, "error": "lease expired"},
	})
	res, err := d.acks(acks)
	if err != nil || len(res) != 2 || !res[0].Success || res[0].Error != "" || res[1].Success || res[1].Error != "lease expired" {
		t.Fatalf("acks: %+v, %v", res, err)
	}
	push, _ := json.Marshal([]map[string]any{
		{"transactionId": "a", "status": protocol.PushQueued, "messageId": "m"},
		{"transactionId": "b", "status": protocol.PushDuplicate},
		{"transactionId": "c", "status": protocol.PushFailed, "error": "boom"},
	})
	items, err := d.push(push)
	if err != nil || len(items) != 3 || items[0].Status != protocol.PushQueued ||
		items[1].Status != protocol.PushDuplicate || items[2].Status != protocol.PushFailed || items[2].Error != "boom" {
		t.Fatalf("push: %+v, %v", items, err)
	}
	for _, bad := range []string{``, `{}`, `[`, `{"error":"x"}`} {
		if _, err := d.acks([]byte(bad)); err == nil {
			t.Errorf("ack answer %q: no error", bad)
		}
		if _, err := d.push([]byte(bad)); err == nil {
			t.Errorf("push answer %q: no error", bad)
		}
	}
}
