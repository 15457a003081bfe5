package api

import (
	"encoding/json"
	"math/rand"
	"net/http/httptest"
	"strings"
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

// The one-pass head reader takes the heads writePop writes, and wherever
// it takes a head it reads what the token reader reads: generated heads
// with escapes, nulls, numbers (also beyond float64's range, where the
// tokens stop), nested values, duplicate, escaped and case-changed keys,
// and cut documents.
func TestAnswerHeadOnePass(t *testing.T) {
	res := &broker.PopResult{Queue: "q\u2028\"é", Partition: "p", PartitionID: "pid", LeaseID: "lease",
		ConsumerGroup: "g", PartitionsClaimed: 1, Messages: []broker.Message{{ID: "m", CreatedAt: time.Unix(0, 0)}}}
	rec := httptest.NewRecorder()
	if err := writePop(rec, res, time.Second); err != nil {
		t.Fatal(err)
	}
	head := rec.Body.Bytes()
	if l, q, p, ok := fastAnswerHead(head[:min(len(head), maxAnswerHead)]); !ok || l != "lease" || q != res.Queue || p != "pid" {
		t.Fatalf("writePop's head: (%q, %q, %q, %v)", l, q, p, ok)
	}

	rng := rand.New(rand.NewSource(20))
	pick := func(xs ...string) string { return xs[rng.Intn(len(xs))] }
	accepted := 0
	for i := 0; i < 20000; i++ {
		var b strings.Builder
		b.WriteString(pick("", " ") + "{")
		for j := rng.Intn(6); j > 0; j-- {
			b.WriteString(pick("", " ") + pick(`"leaseId"`, `"queue"`, `"partitionId"`, `"messages"`, `"success"`,
				`"LeaseId"`, `"lease\u0049d"`, `"x"`) + ":" + pick("", " "))
			b.WriteString(pick(`"a"`, `"b\"c"`, `"\u00e9"`, `"\ud800"`, `""`, "null", "1", "-2.5e3", "1e400", "-1e999", "true",
				`{"leaseId":"in"}`, `["leaseId","x"]`, `[]`))
			if j > 1 {
				b.WriteString(pick(",", ",", " ,", ""))
			}
		}
		b.WriteString(pick("}", "}", "} x", ""))
		doc := []byte(b.String())
		if rng.Intn(10) == 0 {
			doc = doc[:rng.Intn(len(doc)+1)]
		}
		l, q, p, ok := fastAnswerHead(doc)
		if !ok {
			continue
		}
		accepted++
		if wl, wq, wp := answerHeadTokens(doc); l != wl || q != wq || p != wp {
			t.Fatalf("%s: one pass (%q, %q, %q), tokens (%q, %q, %q)", doc, l, q, p, wl, wq, wp)
		}
	}
	if accepted < 2000 {
		t.Fatalf("the one-pass reader took %d of 20,000 heads", accepted)
	}
}

// BenchmarkAnswerHead: the head of a forwarded pop's answer, one pass
// against tokens.
func BenchmarkAnswerHead(b *testing.B) {
	res := &broker.PopResult{Queue: "bench-q", Partition: "p7", PartitionID: "0190a0b4-5f2c-7c3e-8a4b-1f2e3d4c5b6a",
		LeaseID: "0190a0b4-5f2c-7c3e-8a4b-1f2e3d4c5b6b", ConsumerGroup: "__QUEUE_MODE__", PartitionsClaimed: 1}
	for i := 0; i < 100; i++ {
		res.Messages = append(res.Messages, broker.Message{ID: "m", Data: json.RawMessage(`{"n":1}`), CreatedAt: time.Unix(0, 0)})
	}
	rec := httptest.NewRecorder()
	if err := writePop(rec, res, time.Second); err != nil {
		b.Fatal(err)
	}
	head := rec.Body.Bytes()[:maxAnswerHead]
	b.Run("onepass", func(b *testing.B) {
		for b.Loop() {
			if _, _, _, ok := fastAnswerHead(head); !ok {
				b.Fatal("declined")
			}
		}
	})
	b.Run("tokens", func(b *testing.B) {
		for b.Loop() {
			answerHeadTokens(head)
		}
	})
}
