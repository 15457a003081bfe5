package api

import (
	"bytes"
	"encoding/json"
	"math/rand"
	"strings"
	"testing"
	"time"

	"queen-node/broker"
)

// The hand encoder writes exactly what encoding/json writes for popMessage,
// for names full of quotes, backslashes, control characters, U+2028/2029,
// non-ASCII and invalid UTF-8.
// jsonPieces are what the encoding tests build names from: quotes,
// backslashes, control characters, U+2028/2029, non-ASCII, invalid UTF-8
// and the characters HTML escaping would change.
var jsonPieces = []string{"a", "Z", "0", `"`, `\`, "\n", "\r", "\t", "\b", "\f", "\x00", "\x1f", "\x7f", "é", "日本", "\u2028", "\u2029",
	"\xff", "\xe2\x80", "<", ">", "&", "/", " ", "😀"}

// randJSONString joins up to max-1 random jsonPieces.
func randJSONString(rng *rand.Rand, max int) string {
	var b strings.Builder
	for n := rng.Intn(max); n > 0; n-- {
		b.WriteString(jsonPieces[rng.Intn(len(jsonPieces))])
	}
	return b.String()
}

func TestAppendPopMessageMatchesEncodingJSON(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	str := func() string { return randJSONString(rng, 8) }
	datas := []string{`null`, `{}`, `[]`, `"x<y>&\u2028"`, `{"a":[1,2.50,"é"],"b":{"c":null}}`, `12345678901234567890`, `true`}
	for i := 0; i < 5000; i++ {
		m := broker.Message{ID: str(), TransactionID: str(), Queue: str(), Partition: str(), PartitionID: str(),
			LeaseID: str(), ConsumerGroup: str(), RetryCount: rng.Intn(1000) - 1,
			CreatedAt: time.Unix(rng.Int63n(4e9), rng.Int63n(1e9)).In(time.FixedZone("x", 3600))}
		if rng.Intn(2) == 0 {
			s := str()
			m.TraceID = &s
		}
		if rng.Intn(2) == 0 {
			s := str()
			m.ProducerSub = &s
		}
		if k := rng.Intn(len(datas) + 1); k < len(datas) {
			m.Data = json.RawMessage(datas[k])
		}
		got := appendPopMessage(nil, &m)
		if want := encodeWithJSON(t, &m); !bytes.Equal(got, want) {
			t.Fatalf("message %d:\n got %s\nwant %s", i, got, want)
		}
	}
}

func encodeWithJSON(t testing.TB, m *broker.Message) []byte {
	data := m.Data
	if data == nil {
		data = json.RawMessage("null")
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(popMessage{ID: m.ID, TransactionID: m.TransactionID, TraceID: m.TraceID, Data: data,
		CreatedAt: fmtMicro(m.CreatedAt), Queue: m.Queue, Partition: m.Partition, PartitionID: m.PartitionID,
		LeaseID: m.LeaseID, ConsumerGroup: m.ConsumerGroup, ProducerSub: m.ProducerSub, RetryCount: m.RetryCount}); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// go test -run '^$' -bench PopMessageEncoding -benchmem ./api/
// One message as the benchmark workload sends it (256-byte payload).
func BenchmarkPopMessageEncoding(b *testing.B) {
	payload, _ := json.Marshal(map[string]any{"seq": 123456, "sent": 1764551234567890, "pad": string(bytes.Repeat([]byte("x"), 200))})
	m := broker.Message{ID: "0197d8f0-1234-7abc-8def-0123456789ab", TransactionID: "P3-123456", Queue: "bench-20261201",
		Partition: "p42", PartitionID: "5f0c6c1e-0a7b-4a53-9d2e-3c0e8f1b2a11", LeaseID: "9a1f2b3c-4d5e-4f60-8a7b-1c2d3e4f5a6b",
		ConsumerGroup: "__QUEUE_MODE__", Data: payload, CreatedAt: time.Now()}
	b.Run("encoding/json", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			encodeWithJSON(b, &m)
		}
	})
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, 0, 1024)
		for i := 0; i < b.N; i++ {
			buf = appendPopMessage(buf[:0], &m)
		}
	})
}

// TestAppendPopHeadMatchesEncodingJSON: the head appendPopHead writes is
// popHead as encoding/json writes it, up to the messages field.
func TestAppendPopHeadMatchesEncodingJSON(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	str := func() string { return randJSONString(rng, 6) }
	for i := 0; i < 2000; i++ {
		res := broker.PopResult{Queue: str(), Partition: str(), PartitionID: str(), LeaseID: str(),
			ConsumerGroup: str(), PartitionsClaimed: rng.Intn(300)}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(popHead{Success: true, Queue: res.Queue, Partition: res.Partition, PartitionID: res.PartitionID,
			LeaseID: res.LeaseID, ConsumerGroup: res.ConsumerGroup, PartitionsClaimed: res.PartitionsClaimed}); err != nil {
			t.Fatal(err)
		}
		want := append(bytes.TrimSuffix(buf.Bytes(), []byte("}\n")), `,"messages":[`...)
		if got := appendPopHead(nil, &res); !bytes.Equal(got, want) {
			t.Fatalf("head %d:\n got %s\nwant %s", i, got, want)
		}
	}
}
