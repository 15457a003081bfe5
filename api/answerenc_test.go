package api

import (
	"bytes"
	"math/rand"
	"net/http/httptest"
	"testing"

	"queen-node/protocol"
)

// The push and ack answers' appenders write exactly what encoding/json
// writes for the same results (names full of quotes, control characters,
// U+2028/2029, non-ASCII and invalid UTF-8; absent and present ids;
// errors present and empty), through writeJSON as the handlers call it.
func TestAnswerAppendersMatchEncodingJSON(t *testing.T) {
	rng := rand.New(rand.NewSource(16))
	str := func() string { return randJSONString(rng, 8) }
	ptr := func() *string {
		if rng.Intn(3) == 0 {
			return nil
		}
		s := str()
		return &s
	}
	same := func(v jsonAppender, what string) {
		t.Helper()
		rec := httptest.NewRecorder()
		writeJSON(rec, 201, v)
		var want bytes.Buffer
		if err := encodeJSON(&want, v); err != nil {
			t.Fatal(err)
		}
		if got := rec.Body.Bytes(); !bytes.Equal(got, want.Bytes()) {
			t.Fatalf("%s:\n got %s\nwant %s", what, got, want.Bytes())
		}
	}
	same(pushResults(nil), "nil push answer")
	same(pushResults{}, "empty push answer")
	same(ackResults(nil), "nil ack answer")
	same(ackResults{}, "empty ack answer")
	statuses := []protocol.PushStatus{protocol.PushQueued, protocol.PushDuplicate, protocol.PushFailed, "x\"y"}
	for i := 0; i < 2000; i++ {
		prs := make(pushResults, rng.Intn(5))
		for j := range prs {
			prs[j] = pushResult{Index: rng.Intn(20000) - 10, Status: statuses[rng.Intn(len(statuses))],
				TransactionID: str(), TransactionIDSn: str(), MessageID: ptr(), PartitionIDSn: ptr(), PartitionID: ptr(),
				TraceID: ptr(), QueueName: str()}
			if rng.Intn(2) == 0 {
				prs[j].Error = str()
			}
		}
		same(prs, "push answer")
		acks := make(ackResults, rng.Intn(5))
		for j := range acks {
			acks[j] = ackResult{Index: rng.Intn(20000) - 10, TransactionID: str(), Success: rng.Intn(2) == 0,
				Error: ptr(), QueueName: str(), PartitionName: str(), LeaseReleased: rng.Intn(2) == 0, DLQ: rng.Intn(2) == 0}
		}
		same(acks, "ack answer")
	}
}

// BenchmarkPushAnswer: a 100-result push answer, appended against
// encoding/json.
func BenchmarkPushAnswer(b *testing.B) {
	prs := make(pushResults, 100)
	for i := range prs {
		tx, id, pid := "0190a0b4-5f2c-7c3e-8a4b-1f2e3d4c5b6a", "0190a0b5-5f2c-7c3e-8a4b-1f2e3d4c5b6a", "0190a0b6-5f2c-7c3e-8a4b-1f2e3d4c5b6a"
		prs[i] = pushResult{Index: i, Status: protocol.PushQueued, TransactionID: tx, TransactionIDSn: tx,
			MessageID: &id, PartitionIDSn: &pid, PartitionID: &pid, QueueName: "bench-q"}
	}
	var buf bytes.Buffer
	b.Run("append", func(b *testing.B) {
		for b.Loop() {
			buf.Reset()
			buf.Write(prs.appendJSON(buf.AvailableBuffer()))
		}
	})
	b.Run("json", func(b *testing.B) {
		for b.Loop() {
			buf.Reset()
			if err := encodeJSON(&buf, prs); err != nil {
				b.Fatal(err)
			}
		}
	})
}
