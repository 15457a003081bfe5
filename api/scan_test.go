package api

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// The fast decoders must take the usual shapes of push and batch-ack
// bodies (else the hot path silently runs the slow one) and, whenever they
// do, agree with the field-by-field decoders.
func TestFastDecodersAgree(t *testing.T) {
	pushes := []struct {
		body string
		fast bool // the fast path must accept it
	}{
		{`{"items":[]}`, true},
		{`{"items":[{"queue":"q","payload":{"a":1}}]}`, true},
		{` {"items" : [ {"queue" : "q" , "payload" : { "a" : [1, 2 ,{}] , "b":"x y" } } ] } `, true},
		{`{"items":[{"queue":"q","partition":"p","transactionId":"t","traceId":"0190A0B4-5F2C-7C3E-8A4B-1F2E3D4C5B6A","payload":null}]}`, true},
		{`{"items":[{"queue":"q\u00e9\ud83d\ude00\n\"","partition":null,"transactionId":"","traceId":""}]}`, true},
		{`{"items":[{"queue":"q","payload":"caf\u00e9 \u2028"},{"queue":"q","payload":-1.5e+3}]}`, true},
		{`{"items":[{"queue":"q","queue":"r","payload":1,"payload":true,"x":{"Queue":[null]}}],"other":{}}`, true},
		{`{"items":[{"queue":"a"}],"items":[{"queue":"b"}]}`, true},
		{`{"items":[{"queue":"q","payload":{"名前":"値"}}]}`, true},
		{`{"items":null}`, false},
		{`{"items":[{"queue":"q"}],"items":null}`, false},
		{`{"items":[{"Queue":"q"}]}`, false},
		{`{"items":[{"queue":"q","Payload":1}]}`, false},
		{`{"Items":[{"queue":"q"}]}`, false},
		{`{"it\u0065ms":[{"queue":"q"}]}`, false},
		{`{"items":[{"queue":"q\ud800"}]}`, false},
		{"{\"items\":[{\"queue\":\"q\xff\"}]}", false},
		{`{"items":[{"queue":"q","traceId":"nope"}]}`, false},
		{`{"items":[{"queue":"q","payload":01}]}`, false},
		{`{"items":[{"queue":"q","payload":{"a":1,}}]}`, false},
		{`{"items":[{"queue":"q"}]} x`, false},
		{`{"items":[{"queue":"q"},{"queue":"q"},{"queue":"q"},{"queue":"q"}]}`, false}, // over fuzzMax
		{`{"items":[{"queue":"` + strings.Repeat("q", 256) + `"}]}`, false},
		{`{"items":[{"queue":"q","payload":` + strings.Repeat("[", 2000) + strings.Repeat("]", 2000) + `}]}`, false},
	}
	for _, c := range pushes {
		slow, slowErr := slowPushItems([]byte(c.body), fuzzMax)
		fast, ok := fastPushItems([]byte(c.body), fuzzMax)
		if ok != c.fast {
			t.Errorf("push %.80s: fast path ok=%v, want %v (slow: %v)", c.body, ok, c.fast, slowErr)
		}
		if ok && (slowErr != nil || !reflect.DeepEqual(fast, slow)) {
			t.Errorf("push %.80s: fast %+v, slow %+v (%v)", c.body, fast, slow, slowErr)
		}
	}
	acks := []struct {
		body string
		fast bool
	}{
		{`{"acknowledgments":[]}`, true},
		{`{"acknowledgments":[{"transactionId":"t","partitionId":"p","status":"completed","leaseId":"l"}],"consumerGroup":"g"}`, true},
		{`{"consumerGroup":null,"acknowledgments":[{"transactionId":"t","partitionId":"p","consumerGroup":"h","error":null}]}`, true},
		{`{"acknowledgments":[{"transactionId":"t","partitionId":"p","status":"failed","error":"boom"},{"transactionId":"u","partitionId":"p","error":"tab\there"}]}`, true},
		{`{"acknowledgments":[{"transactionId":"t","partitionId":"p","error":{"why": [1, "x"]}},{"transactionId":"t","partitionId":"p","error":12}]}`, true},
		{`{"acknowledgments":[{"transactionId":"t","partitionId":"p","error":"` + strings.Repeat("é", 3000) + `"}]}`, true},
		{`{"acknowledgments":[{"transactionId":"t","partitionId":"p","status":"weird"}]}`, true},
		{`{"acknowledgments":[{"transactionId":"t","partitionId":"p","error":"nul\u0000"}]}`, true},
		{`{"acknowledgments":[{"transactionId":"","partitionId":"p"}]}`, false},
		{`{"acknowledgments":[{"transactionId":"t"}]}`, false},
		{`{"acknowledgments":[{"transactionId":"t","partitionId":"p","Status":"x"}]}`, false},
		{`{"acknowledgments":[{"transactionId":"t","partitionId":"p"}],"consumerGroup":1}`, false},
		{`{"acknowledgments":[{"transactionId":"t","partitionId":"p","leaseId":7}]}`, false},
		{`{"acknowledgments":[null]}`, false},
	}
	for _, c := range acks {
		slow, slowErr := slowAckItems([]byte(c.body), fuzzMax)
		fast, ok := fastAckItems([]byte(c.body), fuzzMax)
		if ok != c.fast {
			t.Errorf("ack %.80s: fast path ok=%v, want %v (slow: %v)", c.body, ok, c.fast, slowErr)
		}
		if ok && (slowErr != nil || !reflect.DeepEqual(fast, slow)) {
			t.Errorf("ack %.80s: fast %+v, slow %+v (%v)", c.body, fast, slow, slowErr)
		}
	}
}

// The benchmark bodies take the fast path and decode as the slow path does.
func TestFastDecodersBenchBodies(t *testing.T) {
	push := benchPushBody()
	fast, ok := fastPushItems(push, 10000)
	slow, err := slowPushItems(push, 10000)
	if !ok || err != nil || !reflect.DeepEqual(fast, slow) {
		t.Fatalf("push: fast ok=%v, slow err=%v, equal=%v", ok, err, reflect.DeepEqual(fast, slow))
	}
	ack := benchAckBody()
	fa, ok := fastAckItems(ack, 10000)
	sa, err := slowAckItems(ack, 10000)
	if !ok || err != nil || !reflect.DeepEqual(fa, sa) {
		t.Fatalf("ack: fast ok=%v, slow err=%v, equal=%v", ok, err, reflect.DeepEqual(fa, sa))
	}
}

// The byte-level fuzzers rarely build a body the fast path accepts (a few
// in a million runs), so this test generates well-formed bodies with the
// awkward parts mixed in (escapes, whitespace, duplicate and unknown keys,
// nulls, bad names and trace ids) and checks that whenever the fast path
// accepts one it agrees with the field-by-field path.
func TestFastDecodersRandomBodies(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	pick := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	ws := func() string {
		if rng.IntN(4) > 0 {
			return ""
		}
		return pick(" ", "\n", "\t ", "\r\n  ")
	}
	str := func() string {
		return pick(`"q"`, `"p1"`, `""`, `"a b"`, `"caf\u00e9"`, `"café"`, `"\ud83d\ude00"`, `"😀"`, `"x\ny"`,
			`"x\u0000"`, `"\ud800"`, `"\/"`, `"\"\\"`, `"0190a0b4-5f2c-7c3e-8a4b-1f2e3d4c5b6a"`,
			`"0190A0B4-5F2C-7C3E-8A4B-1F2E3D4C5B6A"`, `"{0190a0b4-5f2c-7c3e-8a4b-1f2e3d4c5b6a}"`, `"completed"`,
			`"`+strings.Repeat("n", 255)+`"`, `"`+strings.Repeat("n", 256)+`"`)
	}
	var value func(depth int) string
	value = func(depth int) string {
		switch n := rng.IntN(10); {
		case n < 3 || depth > 3:
			return pick(str(), "null", "true", "false", "0", "-1.5e+3", "12345678901234567890")
		case n < 6:
			var b strings.Builder
			b.WriteString("{" + ws())
			for i := range rng.IntN(3) {
				if i > 0 {
					b.WriteString("," + ws())
				}
				b.WriteString(pick(`"a"`, `"Queue"`, `"名"`, `"a\"b"`) + ws() + ":" + ws() + value(depth+1) + ws())
			}
			return b.String() + "}"
		default:
			var b strings.Builder
			b.WriteString("[" + ws())
			for i := range rng.IntN(3) {
				if i > 0 {
					b.WriteString("," + ws())
				}
				b.WriteString(value(depth+1) + ws())
			}
			return b.String() + "]"
		}
	}
	// object writes the members, each drawn from keys with its value
	// maker; some are left out, some repeated.
	object := func(keys []string, val func(key string) string) string {
		var b strings.Builder
		b.WriteString("{" + ws())
		n := 0
		for _, k := range keys {
			for range rng.IntN(3) {
				if n > 0 {
					b.WriteString("," + ws())
				}
				n++
				b.WriteString(`"` + k + `"` + ws() + ":" + ws() + val(k) + ws())
			}
		}
		return b.String() + "}"
	}
	array := func(elem func() string) string {
		parts := make([]string, rng.IntN(fuzzMax+2))
		for i := range parts {
			parts[i] = elem()
		}
		return "[" + ws() + strings.Join(parts, ","+ws()) + ws() + "]"
	}
	name := func() string {
		if rng.IntN(3) == 0 {
			return pick(str(), "null", "1")
		}
		return pick(`"q"`, `"p1"`, `"0190a0b4-5f2c-7c3e-8a4b-1f2e3d4c5b6a"`)
	}
	pushItem := func() string {
		return object([]string{"queue", "partition", "transactionId", "traceId", "payload", "other"}, func(k string) string {
			if k == "payload" || k == "other" {
				return value(0)
			}
			return name()
		})
	}
	ackItem := func() string {
		return object([]string{"transactionId", "partitionId", "status", "consumerGroup", "leaseId", "error", "other"}, func(k string) string {
			if k == "error" || k == "other" {
				return value(0)
			}
			return name()
		})
	}
	accepted := [2]int{}
	const runs = 20000
	for range runs {
		body := ws() + object([]string{"items", "other"}, func(k string) string {
			if k == "items" && rng.IntN(8) > 0 {
				return array(pushItem)
			}
			return value(0)
		}) + ws()
		slow, slowErr := slowPushItems([]byte(body), fuzzMax)
		if fast, ok := fastPushItems([]byte(body), fuzzMax); ok {
			accepted[0]++
			if slowErr != nil || !reflect.DeepEqual(fast, slow) {
				t.Fatalf("push %s:\nfast %+v\nslow %+v (%v)", body, fast, slow, slowErr)
			}
		}
		body = ws() + object([]string{"consumerGroup", "acknowledgments", "other"}, func(k string) string {
			switch {
			case k == "acknowledgments" && rng.IntN(8) > 0:
				return array(ackItem)
			case k == "consumerGroup":
				return name()
			}
			return value(0)
		}) + ws()
		slowAcks, slowErr := slowAckItems([]byte(body), fuzzMax)
		if fast, ok := fastAckItems([]byte(body), fuzzMax); ok {
			accepted[1]++
			if slowErr != nil || !reflect.DeepEqual(fast, slowAcks) {
				t.Fatalf("ack %s:\nfast %+v\nslow %+v (%v)", body, fast, slowAcks, slowErr)
			}
		}
	}
	t.Logf("fast path accepted %d push and %d ack bodies of %d each", accepted[0], accepted[1], runs)
	if accepted[0] < runs/50 || accepted[1] < runs/50 {
		t.Fatalf("the generator rarely reaches the fast path: %v of %d", accepted, runs)
	}
}
