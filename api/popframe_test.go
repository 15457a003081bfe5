package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"queen-node/broker"
)

// TestPopAnswerFraming: a pop answer up to popWhole goes out whole with a
// Content-Length (not chunked: two write system calls fewer per pop), a
// larger one is streamed in chunks; both carry every message, in order, as
// valid JSON. Push and ack answers carry a Content-Length too.
func TestPopAnswerFraming(t *testing.T) {
	tb := setup(t)
	var n, size int
	tb.fb.popFn = func(ctx context.Context, req broker.PopRequest) (*broker.PopResult, error) {
		res := &broker.PopResult{Queue: "q", Partition: "p", PartitionID: "pid", LeaseID: "L", ConsumerGroup: "__QUEUE_MODE__",
			PartitionsClaimed: 1}
		for i := range n {
			data, _ := json.Marshal(map[string]any{"i": i, "pad": string(bytes.Repeat([]byte("x"), size))})
			res.Messages = append(res.Messages, broker.Message{ID: strconv.Itoa(i), TransactionID: "t" + strconv.Itoa(i),
				Queue: "q", Partition: "p", PartitionID: "pid", LeaseID: "L", ConsumerGroup: "__QUEUE_MODE__",
				Data: data, CreatedAt: time.Unix(1700000000, 0)})
		}
		return res, nil
	}
	for _, c := range []struct {
		n, size int
		chunked bool
	}{{1, 10, false}, {100, 256, false}, {600, 1000, true}} {
		t.Run(fmt.Sprintf("%dx%d", c.n, c.size), func(t *testing.T) {
			n, size = c.n, c.size
			resp, err := http.Get(tb.url + "/api/v1/pop/queue/q?batch=1000&wait=false")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d, %v", resp.StatusCode, err)
			}
			isChunked := len(resp.TransferEncoding) > 0 && resp.TransferEncoding[0] == "chunked"
			if isChunked != c.chunked || (!c.chunked && resp.ContentLength != int64(len(body))) {
				t.Fatalf("%d bytes: chunked %v (want %v), Content-Length %d", len(body), isChunked, c.chunked, resp.ContentLength)
			}
			var ans struct {
				Success  bool
				LeaseID  string
				Messages []struct {
					TransactionID string
					Data          struct{ I int }
				}
			}
			if err := json.Unmarshal(body, &ans); err != nil {
				t.Fatalf("answer is not JSON: %v", err)
			}
			if !ans.Success || ans.LeaseID != "L" || len(ans.Messages) != c.n {
				t.Fatalf("success %v, lease %q, %d messages of %d", ans.Success, ans.LeaseID, len(ans.Messages), c.n)
			}
			for i, m := range ans.Messages {
				if m.Data.I != i || m.TransactionID != "t"+strconv.Itoa(i) {
					t.Fatalf("message %d is %+v", i, m)
				}
			}
		})
	}
	items := bytes.Repeat([]byte(`{"queue":"q","partition":"p","payload":{"pad":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}},`), 100)
	push := `{"items":[` + string(items[:len(items)-1]) + `]}`
	for _, r := range []struct{ path, body string }{
		{"/api/v1/push", push},
		{"/api/v1/ack/batch", `{"acknowledgments":[` + string(bytes.Repeat([]byte(`{"transactionId":"t","partitionId":"00000000-0000-0000-0000-000000000000","status":"completed"},`), 99)) +
			`{"transactionId":"t","partitionId":"00000000-0000-0000-0000-000000000000","status":"completed"}]}`},
	} {
		resp, err := http.Post(tb.url+r.path, "application/json", bytes.NewReader([]byte(r.body)))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode >= 300 || len(body) < 2048 || resp.ContentLength != int64(len(body)) {
			t.Fatalf("%s: status %d, %d bytes, Content-Length %d", r.path, resp.StatusCode, len(body), resp.ContentLength)
		}
	}
}
