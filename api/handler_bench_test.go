package api

import (
	"bytes"
	"net/http/httptest"
	"testing"
)

// Benchmarks of the whole push and batch-ack handlers on the decode
// benchmarks' bodies, against the fake broker: what the api package costs
// per request besides the broker.

func BenchmarkHandlePush(b *testing.B) {
	body := benchPushBody()
	srv := newFakeServer(DefaultConfig())
	h := srv.Handler()
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest("POST", "/api/v1/push", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != 201 {
			b.Fatal(rec.Code, rec.Body.String())
		}
	}
}

func BenchmarkHandleAckBatch(b *testing.B) {
	body := benchAckBody()
	srv := newFakeServer(DefaultConfig())
	h := srv.Handler()
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest("POST", "/api/v1/ack/batch", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != 200 {
			b.Fatal(rec.Code, rec.Body.String())
		}
	}
}
