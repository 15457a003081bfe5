package api_test

import (
	"fmt"
	"sync"
	"testing"

	"queen-node/internal/nodetest"
)

// TestTraceMessageCountConcurrent: message_count of GET
// /api/v1/traces/names counts a (message, name) once (docs/api.md,
// "Traces"), also when several workers trace the same message under the
// same name at the same moment.
func TestTraceMessageCountConcurrent(t *testing.T) {
	n := nodetest.Start(t)
	const msgs, workers = 6, 12
	var items []msg
	for i := range msgs {
		items = append(items, msg{"queue": "rvtr", "transactionId": fmt.Sprintf("m%d", i), "payload": msg{"i": i}})
	}
	r := n.Do(t, "POST", "/api/v1/push", msg{"items": items})
	if r.Status != 201 {
		t.Fatalf("push: %d %s", r.Status, r.Body)
	}
	pid := r.Arr(t)[0]["partitionId"].(string)
	for i := range msgs {
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := n.Do(t, "POST", "/api/v1/traces", msg{"transactionId": fmt.Sprintf("m%d", i), "partitionId": pid,
					"traceNames": []string{"rv-name"}, "data": msg{"w": w}})
				if r.Status != 201 {
					t.Errorf("trace: %d %s", r.Status, r.Body)
				}
			}()
		}
		wg.Wait()
	}
	r = n.Do(t, "GET", "/api/v1/traces/names", nil)
	for _, e := range r.Obj(t)["trace_names"].([]any) {
		m := e.(map[string]any)
		if m["trace_name"] != "rv-name" {
			continue
		}
		if m["trace_count"] != float64(msgs*workers) || m["message_count"] != float64(msgs) {
			t.Fatalf("rv-name: trace_count %v message_count %v, want %d and %d", m["trace_count"], m["message_count"], msgs*workers, msgs)
		}
		return
	}
	t.Fatalf("rv-name missing: %s", r.Body)
}
