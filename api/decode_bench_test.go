package api

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/uuid"
)

// Benchmarks of the push and batch-ack body decoders on the shape of the
// standard load (docs/BENCHMARKS.md): pushes of 100 messages with 256-byte
// JSON object payloads to random partitions, acks of one pop of 100.

const benchItems = 100

// benchUUID is a deterministic random UUID string.
func benchUUID(rng *rand.Rand) string {
	var u uuid.UUID
	for i := range u {
		u[i] = byte(rng.Uint32())
	}
	u[6] = u[6]&0x0f | 0x40 // version 4
	u[8] = u[8]&0x3f | 0x80 // RFC 4122 variant
	return u.String()
}

func benchPushBody() []byte {
	rng := rand.New(rand.NewPCG(1, 2))
	var b strings.Builder
	b.WriteString(`{"items":[`)
	for i := range benchItems {
		if i > 0 {
			b.WriteByte(',')
		}
		payload := fmt.Sprintf(`{"seq":%d,"sent":%d,"pad":"`, 1000+i, int64(1733011200000000000)+int64(i))
		payload += strings.Repeat("x", 256-len(payload)-2) + `"}`
		fmt.Fprintf(&b, `{"queue":"bench-queue","partition":"p%d","transactionId":"%s","payload":%s}`,
			rng.IntN(100), benchUUID(rng), payload)
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

func benchAckBody() []byte {
	rng := rand.New(rand.NewPCG(3, 4))
	partition, lease := benchUUID(rng), benchUUID(rng) // one pop: one partition, one lease
	var b strings.Builder
	b.WriteString(`{"acknowledgments":[`)
	for i := range benchItems {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"transactionId":"%s","partitionId":"%s","leaseId":"%s","status":"completed","consumerGroup":"bench-group"}`,
			benchUUID(rng), partition, lease)
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

func BenchmarkDecodePush(b *testing.B) {
	body := benchPushBody()
	if items, ok := fastPushItems(body, 10000); !ok || len(items) != benchItems {
		b.Fatalf("fastPushItems: %d items, %v", len(items), ok)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := decodePush(body, 10000); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeAckBatch(b *testing.B) {
	body := benchAckBody()
	if items, ok := fastAckItems(body, 10000); !ok || len(items) != benchItems {
		b.Fatalf("fastAckItems: %d items, %v", len(items), ok)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := decodeAckBatch(body, 10000); err != nil {
			b.Fatal(err)
		}
	}
}
