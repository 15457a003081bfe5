package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"testing"
)

// Fuzz targets of the HTTP request decoders (make fuzz). Seeds are below
// and in testdata/fuzz; inputs the fuzzer found are kept there too.

var fuzzSeeds = []string{
	``, `null`, `{}`, `[]`, `"x"`, `{"items":null}`, `{"items":[]}`, `{"items":[0,0,0,0]}`,
	`{"items":[{"queue":"q","payload":{"a":1}}]}`,
	`{"items":[{"queue":"q","partition":"p","transactionId":"t","traceId":"0190a0b4-5f2c-7c3e-8a4b-1f2e3d4c5b6a","payload":[1, 2]}]}`,
	`{"items":[{"queue":"q","payload":null},{"queue":"q"}],"items":[{"queue":"r"}]}`,
	`{"items":[{"queue":"q\u0000"}]}`, `{"items":[{"queue":"","payload":1}]}`, `{"items":[{"Queue":"q"}]}`,
	`{"consumerGroup":"g","acknowledgments":[{"transactionId":"t","partitionId":"p","status":"completed","leaseId":"l"}]}`,
	`{"acknowledgments":[{"transactionId":"t","partitionId":"p","status":"failed","error":{"why":1},"consumerGroup":""}]}`,
	`{"acknowledgments":[0,0,0,0,0]}`, `{"transactionId":"t","partitionId":"p","status":"completed"}`,
	`{"operations":[{"type":"push","items":[{"queue":"q"}]},{"type":"ack","transactionId":"t","partitionId":"p"}],"requiredLeases":["l",""]}`,
	`{"operations":[{"type":"push","items":[0,0,0,0]}]}`, `{"operations":[{"type":"x"}],"requiredLeases":[1]}`,
	`{"queue":"q","namespace":"n","task":"t","options":{"leaseTime":300,"retryLimit":3.0,"deadLetterQueue":true,"priority":-1}}`,
	`{"queue":"q","options":{"namespace":"n","task":"t","ttl":1e3}}`, `{"queue":"q","options":[1]}`,
	// Shapes for the single-pass scanner of the fast push and ack decoders.
	` {"items" : [ {"queue" : "q\u00e9\ud83d\ude00\"" , "payload" : { "a" : [1, -2.5e+3 ,{}, "x y"] } } ] } `,
	`{"items":[{"queue":"q","partition":"p","transactionId":"t\/\b\f\n\r\t","payload":"\ud800"}],"x":[true,false,null]}`,
	`{"items":[{"queue":"q","payload":{"Queue":"名前"}},{"queue":"q","queue":"r","traceId":null}]}`,
	`{"consumerGroup":"g","acknowledgments":[{"transactionId":"t","partitionId":"p","error":"a\u0000b"},{"transactionId":"u","partitionId":"p","error":[1, {"b":null}]}]}`,
	`{"acknowledgments":[{"transactionId":"t","partitionId":"p","status":"completed","consumerGroup":"g"},{"transactionId":"t2","partitionId":"p","status":"completed"}],"consumerGroup":null}`,
}

const fuzzMax = 3 // item limits small enough for the fuzzer to cross

func addSeeds(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
}

// wantReqError fails unless err is nil or a validation error of this
// package with a 4xx status.
func wantReqError(t *testing.T, err error, allowed ...int) {
	t.Helper()
	if err == nil {
		return
	}
	var re *reqError
	if !errors.As(err, &re) {
		t.Fatalf("error %T %v is not a *reqError", err, err)
	}
	for _, s := range allowed {
		if re.status == s {
			return
		}
	}
	t.Fatalf("status %d (%s), want one of %v", re.status, re.msg, allowed)
}

func FuzzDecodePush(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		slow, slowErr := slowPushItems(b, fuzzMax)
		wantReqError(t, slowErr, http.StatusBadRequest, http.StatusRequestEntityTooLarge)
		fast, ok := fastPushItems(b, fuzzMax)
		if ok {
			if slowErr != nil {
				t.Fatalf("fast path accepted what the slow path refuses (%v): %+v", slowErr, fast)
			}
			if !reflect.DeepEqual(fast, slow) {
				t.Fatalf("fast and slow paths disagree:\nfast %+v\nslow %+v", fast, slow)
			}
		}
		if len(slow) > fuzzMax || len(fast) > fuzzMax {
			t.Fatalf("%d / %d items accepted, max %d", len(fast), len(slow), fuzzMax)
		}
		for _, it := range slow {
			if !json.Valid(it.Payload) || !validText(it.Queue) || checkName("queue", it.Queue) != nil {
				t.Fatalf("accepted an unstorable item %+v", it)
			}
		}
	})
}

func FuzzDecodeAckBatch(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		slow, slowErr := slowAckItems(b, fuzzMax)
		wantReqError(t, slowErr, http.StatusBadRequest, http.StatusRequestEntityTooLarge)
		fast, ok := fastAckItems(b, fuzzMax)
		if ok {
			if slowErr != nil {
				t.Fatalf("fast path accepted what the slow path refuses (%v): %+v", slowErr, fast)
			}
			if !reflect.DeepEqual(fast, slow) {
				t.Fatalf("fast and slow paths disagree:\nfast %+v\nslow %+v", fast, slow)
			}
		}
		if len(slow) > fuzzMax || len(fast) > fuzzMax {
			t.Fatalf("%d / %d items accepted, max %d", len(fast), len(slow), fuzzMax)
		}
	})
}

func FuzzDecodeAck(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		o, err := parseObject(b, "request body")
		wantReqError(t, err, http.StatusBadRequest)
		if err != nil {
			return
		}
		it, err := parseAckItem(o, "g")
		wantReqError(t, err, http.StatusBadRequest)
		if err == nil && (it.TransactionID == "" || it.PartitionID == "" || it.Group == "" ||
			!validText(it.TransactionID) || !validText(it.PartitionID) || !validText(it.Error)) {
			t.Fatalf("accepted an unstorable ack %+v", it)
		}
	})
}

func FuzzDecodeTransaction(f *testing.F) {
	addSeeds(f)
	cfg := DefaultConfig()
	cfg.MaxPushItems, cfg.MaxTxOps = fuzzMax, fuzzMax
	s := newFakeServer(cfg)
	f.Fuzz(func(t *testing.T, b []byte) {
		o, err := parseObject(b, "request body")
		wantReqError(t, err, http.StatusBadRequest)
		if err != nil {
			return
		}
		ops, leases, err := s.parseTransaction(o)
		var tf *txFailure
		if !errors.As(err, &tf) {
			wantReqError(t, err, http.StatusBadRequest, http.StatusRequestEntityTooLarge)
		}
		pushed := 0
		for _, op := range ops {
			pushed += len(op.Items)
		}
		if len(ops) > fuzzMax || len(leases) > fuzzMax || pushed > fuzzMax {
			t.Fatalf("accepted %d ops, %d leases, %d pushed items; max %d", len(ops), len(leases), pushed, fuzzMax)
		}
	})
}

func FuzzDecodeConfigure(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		o, err := parseObject(b, "request body")
		wantReqError(t, err, http.StatusBadRequest)
		if err != nil {
			return
		}
		req, err := parseConfigure(o)
		wantReqError(t, err, http.StatusBadRequest)
		if err == nil && checkName("queue", req.Queue) != nil {
			t.Fatalf("accepted queue %q", req.Queue)
		}
	})
}

// countElements must agree with encoding/json on every valid array.
func FuzzCountElements(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		n, isArray := countElements(b)
		var elems []json.RawMessage
		if err := json.Unmarshal(b, &elems); err != nil || elems == nil {
			return
		}
		if !isArray || n != len(elems) {
			t.Fatalf("countElements = %d, %v; encoding/json found %d elements", n, isArray, len(elems))
		}
	})
}
