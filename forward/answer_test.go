package forward

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// ownerPushResult and ownerAckResult mirror what the owner writes (api/push.go
// pushResult, api/ack.go ackResult, through api/respond.go writeJSON): the
// answers the one-pass readers must take, or forwarding silently runs the
// slow path.
type ownerPushResult struct {
	Index           int     `json:"index"`
	Status          string  `json:"status"`
	TransactionID   string  `json:"transactionId"`
	TransactionIDSn string  `json:"transaction_id"`
	MessageID       *string `json:"message_id"`
	PartitionIDSn   *string `json:"partition_id"`
	PartitionID     *string `json:"partitionId"`
	TraceID         *string `json:"trace_id"`
	QueueName       string  `json:"queueName"`
	Error           string  `json:"error,omitempty"`
}

type ownerAckResult struct {
	Index         int     `json:"index"`
	TransactionID string  `json:"transactionId"`
	Success       bool    `json:"success"`
	Error         *string `json:"error"`
	QueueName     string  `json:"queueName"`
	PartitionName string  `json:"partitionName"`
	LeaseReleased bool    `json:"leaseReleased"`
	DLQ           bool    `json:"dlq"`
}

// ownerJSON encodes v as the owner's writeJSON does.
func ownerJSON(t testing.TB, v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func strp(s string) *string { return &s }

// ownerAnswers builds n-item push and ack answers like the owner's under
// the benchmark's load (UUID ids, one queue, a few partitions).
func ownerAnswers(t testing.TB, n int) (push, ack []byte) {
	prs := make([]ownerPushResult, n)
	acks := make([]ownerAckResult, n)
	for i := range n {
		tx := fmt.Sprintf("0190a0b4-5f2c-7c3e-8a4b-%012x", i)
		pid := strp(fmt.Sprintf("0190a0b4-0000-7000-8000-%012x", i/10)) // runs of one partition, as a flush stores them
		prs[i] = ownerPushResult{Index: i, Status: "queued", TransactionID: tx, TransactionIDSn: tx,
			MessageID: strp(fmt.Sprintf("0190a0b5-5f2c-7c3e-8a4b-%012x", i)), PartitionIDSn: pid, PartitionID: pid,
			QueueName: "bench-q"}
		acks[i] = ownerAckResult{Index: i, TransactionID: tx, Success: true, QueueName: "bench-q",
			PartitionName: fmt.Sprintf("p%d", i%7), LeaseReleased: i == n-1}
	}
	prs[n-1].Status, prs[n-1].Error, prs[n-1].MessageID = "failed", `payload refused: "too big" <x>`, nil
	prs[n-2].TraceID = strp("0190a0b4-5f2c-7c3e-8a4b-1f2e3d4c5b6a")
	acks[n-1].Success, acks[n-1].Error = false, strp("lease expired — é")
	return ownerJSON(t, prs), ownerJSON(t, acks)
}

// The owner's answers take the one-pass path and decode as encoding/json
// does.
func TestOwnerAnswersTakeTheFastPath(t *testing.T) {
	push, ack := ownerAnswers(t, 100)
	fast, ok := fastPeerResults(push, 100)
	var slow []peerResult
	if err := json.Unmarshal(push, &slow); err != nil || !ok || !reflect.DeepEqual(fast, slow) {
		t.Fatalf("push answer: fast ok=%v, json err=%v, equal=%v", ok, err, reflect.DeepEqual(fast, slow))
	}
	fa, ok := fastPeerAcks(ack, 100)
	var sa []peerAck
	if err := json.Unmarshal(ack, &sa); err != nil || !ok || !reflect.DeepEqual(fa, sa) {
		t.Fatalf("ack answer: fast ok=%v, json err=%v, equal=%v", ok, err, reflect.DeepEqual(fa, sa))
	}
}

// Results that repeat the previous one's partition id share its bytes,
// not its pointer: setting one result's id changes no other (as with
// encoding/json, which gives each its own).
func TestPeerResultsOwnTheirPointers(t *testing.T) {
	push, _ := ownerAnswers(t, 3)
	res, ok := fastPeerResults(push, 3)
	if !ok || res[0].PartitionID == nil || res[1].PartitionID == nil || *res[0].PartitionID != *res[1].PartitionID {
		t.Fatalf("the owner's answer should repeat one partition id: ok=%v %s", ok, push)
	}
	was := *res[1].PartitionID
	*res[0].PartitionID = "changed"
	if *res[1].PartitionID != was {
		t.Fatalf("setting result 0's partition id changed result 1's to %q", *res[1].PartitionID)
	}
}

// Awkward answers: whenever the one-pass reader accepts one, it agrees with
// encoding/json; the listed ones it must accept, the others decline.
func TestPeerAnswersAgree(t *testing.T) {
	cases := []struct {
		body string
		fast bool
	}{
		{`[]`, true},
		{` [ {"index" : 0 , "status":"queued"} ] ` + "\n", true},
		{`[{"index":0,"status":"queued","status":null,"error":"x","error":null}]`, true},
		{`[{"index":0,"message_id":"m","message_id":null,"trace_id":null,"partitionId":"p"}]`, true},
		{`[{"index":-0,"transactionId":"caf\u00e9 \"q\" \ud83d\ude00","x":{"a":[1,{"b":null}]},"y":-1.5e3}]`, true},
		{`[{"index":1},{"index":0,"queueName":"q\/r"}]`, true},
		{`[{"index":"0"}]`, false},
		{`[{"index":1.0}]`, false},
		{`[{"index":1e2}]`, false},
		{`[{"index":99999999999999999999}]`, false},
		{`[{"Index":0}]`, false},
		{`[{"INDEX":0}]`, false},
		{`[{"ind\u0065x":0}]`, false},
		{`[{"index":0,"status":7}]`, false},
		{`[{"index":0,"transactionId":"\ud800"}]`, false},
		{"[{\"index\":0,\"transactionId\":\"\xff\"}]", false},
		{`[{"index":0,"x":[1,]}]`, false},
		{`[{"index":0}] [`, false},
		{`[{"index":0,"status":"queued","ſtatus":"failed"}]`, false}, // U+017F folds to 's' in encoding/json
		{`[{"index":0,"partitionId":"a\u0041"},{"index":1,"partitionId":"a\u0041"}]`, true},
		{`[{"index":0,"partitionId":"a\\u0041"},{"index":1,"partitionId":"a\u0041"}]`, true},
		{`[null]`, false},
		{`null`, false},
		{`{"index":0}`, false},
		{`[{"index":0},{"index":1},{"index":2}]`, false}, // more than the 2 items sent
	}
	for _, c := range cases {
		fast, ok := fastPeerResults([]byte(c.body), 2)
		var slow []peerResult
		err := json.Unmarshal([]byte(c.body), &slow)
		if ok != c.fast {
			t.Errorf("push %q: fast ok=%v, want %v (json: %v)", c.body, ok, c.fast, err)
		}
		if ok && (err != nil || !reflect.DeepEqual(fast, slow)) {
			t.Errorf("push %q: fast %+v, json %+v (%v)", c.body, fast, slow, err)
		}
	}
	acks := []struct {
		body string
		fast bool
	}{
		{`[{"index":0,"success":true,"success":null,"dlq":false,"leaseReleased":true,"error":null}]`, true},
		{`[{"index":0,"success":false,"error":"e","error":"f","partitionName":"p"}]`, true},
		{`[{"index":0,"success":"true"}]`, false},
		{`[{"index":0,"success":1}]`, false},
		{`[{"index":0,"Success":true}]`, false},
		{`[{"index":0,"dlq":tru}]`, false},
		{`[{"index":0,"success":true,"ſuccess":false}]`, false},
	}
	for _, c := range acks {
		fast, ok := fastPeerAcks([]byte(c.body), 2)
		var slow []peerAck
		err := json.Unmarshal([]byte(c.body), &slow)
		if ok != c.fast {
			t.Errorf("ack %q: fast ok=%v, want %v (json: %v)", c.body, ok, c.fast, err)
		}
		if ok && (err != nil || !reflect.DeepEqual(fast, slow)) {
			t.Errorf("ack %q: fast %+v, json %+v (%v)", c.body, fast, slow, err)
		}
	}
}

// Generated answers with the awkward parts mixed in (escapes, whitespace,
// duplicate, unknown and case-folded keys, nulls, wrong types): whenever
// the one-pass readers accept one, they agree with encoding/json, and the
// parse functions always give encoding/json's result.
func TestPeerAnswersRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(20, 16))
	pick := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	ws := func() string {
		if rng.IntN(4) > 0 {
			return ""
		}
		return pick(" ", "\n", "\t ", "\r\n  ")
	}
	value := func() string {
		return pick(`"q"`, `""`, `"caf\u00e9"`, `"café"`, `"\ud83d\ude00"`, `"x\ny"`, `"\ud800"`, `"\"\\"`,
			`"queued"`, `"failed"`, "null", "true", "false", "0", "1", "-0", "2", "1.5", "1e1", `{}`, `[1,"x",{"a":null}]`)
	}
	keys := []string{"index", "status", "transactionId", "message_id", "partitionId", "trace_id", "queueName",
		"error", "success", "partitionName", "leaseReleased", "dlq", "Index", "STATUS", "other", "transaction_id",
		`ind\u0065x`, "é", "ſtatus", "ſuccess"}
	accepted := [2]int{}
	for range 20000 {
		var b strings.Builder
		b.WriteString(ws() + "[")
		for i := range rng.IntN(5) { // up to one more than the 3 items sent
			if i > 0 {
				b.WriteString("," + ws())
			}
			b.WriteString("{" + ws())
			for j := range rng.IntN(6) {
				if j > 0 {
					b.WriteString(",")
				}
				b.WriteString(ws() + `"` + keys[rng.IntN(len(keys))] + `"` + ws() + ":" + ws() + value() + ws())
			}
			b.WriteString("}")
		}
		b.WriteString("]" + ws())
		body := []byte(b.String())
		if rng.IntN(20) == 0 { // a cut or bent document now and then
			body = body[:rng.IntN(len(body)+1)]
		}

		var slow []peerResult
		err := json.Unmarshal(body, &slow)
		if fast, ok := fastPeerResults(body, 3); ok {
			accepted[0]++
			if err != nil || !reflect.DeepEqual(fast, slow) {
				t.Fatalf("push %s: fast %+v, json %+v (%v)", body, fast, slow, err)
			}
		}
		if got, gotErr := parsePeerResults(body, 3); (gotErr != nil) != (err != nil) || (err == nil && !reflect.DeepEqual(got, slow)) {
			t.Fatalf("push %s: parse %+v (%v), json %+v (%v)", body, got, gotErr, slow, err)
		}

		var slowAcks []peerAck
		err = json.Unmarshal(body, &slowAcks)
		if fast, ok := fastPeerAcks(body, 3); ok {
			accepted[1]++
			if err != nil || !reflect.DeepEqual(fast, slowAcks) {
				t.Fatalf("ack %s: fast %+v, json %+v (%v)", body, fast, slowAcks, err)
			}
		}
		if got, gotErr := parsePeerAcks(body, 3); (gotErr != nil) != (err != nil) || (err == nil && !reflect.DeepEqual(got, slowAcks)) {
			t.Fatalf("ack %s: parse %+v (%v), json %+v (%v)", body, got, gotErr, slowAcks, err)
		}
	}
	// The generator must reach the fast path often enough to test it.
	if accepted[0] < 1000 || accepted[1] < 1000 {
		t.Fatalf("fast path accepted %d push and %d ack answers of 20,000", accepted[0], accepted[1])
	}
	t.Logf("fast path accepted %d push and %d ack answers of 20,000", accepted[0], accepted[1])
}

// FuzzPeerAnswers: whatever the bytes, a document the one-pass readers
// accept decodes as encoding/json decodes it.
func FuzzPeerAnswers(f *testing.F) {
	push, ack := ownerAnswers(f, 3)
	f.Add(push)
	f.Add(ack)
	f.Add([]byte(`[{"index":0,"x":{"y":[1,2]},"error":null}]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		if fast, ok := fastPeerResults(body, 3); ok {
			var slow []peerResult
			if err := json.Unmarshal(body, &slow); err != nil || !reflect.DeepEqual(fast, slow) {
				t.Fatalf("push %q: fast %+v, json %+v (%v)", body, fast, slow, err)
			}
		}
		if fast, ok := fastPeerAcks(body, 3); ok {
			var slow []peerAck
			if err := json.Unmarshal(body, &slow); err != nil || !reflect.DeepEqual(fast, slow) {
				t.Fatalf("ack %q: fast %+v, json %+v (%v)", body, fast, slow, err)
			}
		}
	})
}

// BenchmarkPeerAnswer: the owner's answer to a forwarded push and ack of
// 100 items, read one pass against encoding/json.
func BenchmarkPeerAnswer(b *testing.B) {
	push, ack := ownerAnswers(b, 100)
	b.Run("push/onepass", func(b *testing.B) {
		for b.Loop() {
			if _, ok := fastPeerResults(push, 100); !ok {
				b.Fatal("declined")
			}
		}
	})
	b.Run("push/json", func(b *testing.B) {
		for b.Loop() {
			var prs []peerResult
			if err := json.Unmarshal(push, &prs); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ack/onepass", func(b *testing.B) {
		for b.Loop() {
			if _, ok := fastPeerAcks(ack, 100); !ok {
				b.Fatal("declined")
			}
		}
	})
	b.Run("ack/json", func(b *testing.B) {
		for b.Loop() {
			var pas []peerAck
			if err := json.Unmarshal(ack, &pas); err != nil {
				b.Fatal(err)
			}
		}
	})
}
