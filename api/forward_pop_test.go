package api

import (
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	"queen-node/broker"
)

// answerHead finds the lease, queue and partition in the head of the
// answer writePop writes, whatever the names hold, and no lease in an
// answer without one.
func TestAnswerHead(t *testing.T) {
	cases := []struct {
		name                   string
		queue, partition, want string
	}{
		{"plain", "orders", "p1", "lease-1"},
		{"names that look like the field", `"leaseId":"x`, `leaseId`, "lease-2"},
		{"escapes and unicode", "q\\\"\u2028é", "\t\n", "lease-3"},
		{"no lease (autoAck)", "q", "p", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := &broker.PopResult{Queue: c.queue, Partition: c.partition, PartitionID: "pid", LeaseID: c.want,
				ConsumerGroup: "g", PartitionsClaimed: 1}
			for i := 0; i < 50; i++ {
				res.Messages = append(res.Messages, broker.Message{ID: "m", TransactionID: "t", Queue: c.queue,
					Partition: c.partition, PartitionID: "pid", LeaseID: "not-the-head", Data: json.RawMessage(`{"leaseId":"inner"}`),
					CreatedAt: time.Unix(0, 0)})
			}
			rec := httptest.NewRecorder()
			if err := writePop(rec, res, time.Second); err != nil {
				t.Fatal(err)
			}
			body := rec.Body.Bytes()
			lease, queue, pid := answerHead(body[:min(len(body), maxAnswerHead)])
			if lease != c.want || queue != c.queue || pid != "pid" {
				t.Fatalf("head (%q, %q, %q), want (%q, %q, pid) (answer %.200s)", lease, queue, pid, c.want, c.queue, body)
			}
		})
	}
	for _, bad := range []string{"", "[", `{"success":true`, `{"messages":[{"leaseId":"inner"}],"leaseId":"late"}`, `{"error":"x"}`} {
		if got, _, _ := answerHead([]byte(bad)); got != "" {
			t.Fatalf("answerHead(%q) gives lease %q, want none", bad, got)
		}
	}
}
