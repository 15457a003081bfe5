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
	for i, want := range []string{`{"hello":"world"}`, `{"p":1,"s":2.5,"t":3}`, `null`} {
		if m := ms[i+1]; m.ok || m.foreign != want {
			t.Fatalf("message %d taken for a benchmark payload or logged as %q: %+v", i+1, m.foreign, m)
		}
	}
	// The values do not alias the parser: a second parse leaves them as they were.
	if _, err := d.pop([]byte(`{"messages":[{"transactionId":"zzzzz","data":{"p":9,"s":9,"t":9}}]}`)); err != nil {
		t.Fatal(err)
	}
	if ms[0].msg != want {
		t.Fatalf("first message changed by the next parse: %+v", ms[0].msg)
	}
	for _, bad := range []string{``, `{"messages":`, `{"success":true}`, `{"messages":{}}`, `{"messages":[1]}`, `[]`,
		`{"messages":[{"transactionId":"a\qb"}]}`, "{\"messages\":[{\"transactionId\":\"a\x01b\"}]}",
		`{"messages":[{"data":{"p":01,"s":1,"t":1}}]}`} {
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
	for _, bad := range []string{``, `{}`, `[`, `{"error":"x"}`, `[1,"x"]`, `[{"success":true},2]`, `[{"error":"a\qb"}]`,
		"[{\"error\":\"a\tb\"}]", `[{"index":01}]`} {
		if _, err := d.acks([]byte(bad)); err == nil {
			t.Errorf("ack answer %q: no error", bad)
		}
		if _, err := d.push([]byte(bad)); err == nil {
			t.Errorf("push answer %q: no error", bad)
		}
	}
}

// go test -run '^$' -bench DecodePop -benchmem ./internal/bench/
// A pop answer of 44 messages with the standard workload's 256-byte
// payloads: this decoder against what the consumer did before (encoding/json
// into structs, then each payload parsed again).
func BenchmarkDecodePop(b *testing.B) {
	var body []byte
	body = append(body, `{"success":true,"queue":"bench-20261203","partition":"p42","partitionId":"5f0c6c1e-0a7b-4a53-9d2e-3c0e8f1b2a11","leaseId":"9a1f2b3c-4d5e-4f60-8a7b-1c2d3e4f5a6b","consumerGroup":"__QUEUE_MODE__","partitionsClaimed":1,"messages":[`...)
	for i := range 44 {
		if i > 0 {
			body = append(body, ',')
		}
		body = append(body, `{"id":"0197d8f0-1234-7abc-8def-0123456789ab","transactionId":"P3-123456","traceId":null,"data":`...)
		body = appendPayload(body, 3, int64(123456+i), 1764551234567890123, 256)
		body = append(body, `,"createdAt":"2026-12-03T07:00:00.123456Z","queue":"bench-20261203","partition":"p42","partitionId":"5f0c6c1e-0a7b-4a53-9d2e-3c0e8f1b2a11","leaseId":"9a1f2b3c-4d5e-4f60-8a7b-1c2d3e4f5a6b","consumerGroup":"__QUEUE_MODE__","producerSub":null,"retryCount":0}`...)
	}
	body = append(body, "]}\n"...)
	b.Run("encoding-json", func(b *testing.B) {
		type msg struct {
			TransactionID string          `json:"transactionId"`
			PartitionID   string          `json:"partitionId"`
			Partition     string          `json:"partition"`
			LeaseID       string          `json:"leaseId"`
			Data          json.RawMessage `json:"data"`
		}
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			var ans struct{ Messages []msg }
			if err := json.Unmarshal(body, &ans); err != nil || len(ans.Messages) != 44 {
				b.Fatal(err)
			}
			for _, m := range ans.Messages {
				var p struct{ P, S, T int64 }
				if err := json.Unmarshal(m.Data, &p); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("fastjson", func(b *testing.B) {
		var d decoder
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			if ms, err := d.pop(body); err != nil || len(ms) != 44 || !ms[43].ok {
				b.Fatal(err)
			}
		}
	})
}
