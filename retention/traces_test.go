package retention_test

import (
	"testing"
	"time"
)

// TestRetentionDeletesTracesWithTheirMessages: traces belong to a message;
// when a pass deletes the message its traces go too, and the per-name
// counts of GET /api/v1/traces/names drop by what went (otherwise
// queen.traces would grow forever while queen.messages stays bounded).
func TestRetentionDeletesTracesWithTheirMessages(t *testing.T) {
	n := startNode(t)
	c := dbConn(t, n)
	const q = "ret-traces"
	configure(t, n, q, msg{"retentionEnabled": true, "completedRetentionSeconds": 60})
	push(t, n, q, "p", "a", 1, 4)
	ms := pop(t, n, q, "g1", 4)
	if len(ms) != 4 {
		t.Fatalf("popped %d, want 4", len(ms))
	}
	for i, m := range ms {
		names := []string{"all"}
		if i < 2 {
			names = append(names, "early")
		}
		for range 2 {
			r := n.Do(t, "POST", "/api/v1/traces", msg{"transactionId": m["transactionId"], "partitionId": m["partitionId"],
				"consumerGroup": "g1", "traceNames": names, "data": msg{"i": i}})
			if r.Status != 201 {
				t.Fatalf("trace: %d %s", r.Status, r.Body)
			}
		}
	}
	ackOK(t, n, "g1", ms[:2]) // only the first two are completed
	// The first two are past completedRetentionSeconds; the last two are
	// older too but not consumed, so they stay with their traces.
	ageAll(t, c, q, 120*time.Second)
	if p := pass(t, n); p.Completed != 2 {
		t.Fatalf("pass deleted %d completed, want 2", p.Completed)
	}
	wantOffsets(t, c, q, "p", 3, 4)
	var traces int
	if err := c.QueryRow(t.Context(), `SELECT count(*) FROM queen.traces`).Scan(&traces); err != nil {
		t.Fatal(err)
	}
	if traces != 4 {
		t.Fatalf("%d traces left, want the 4 of the two messages still stored", traces)
	}
	r := n.Do(t, "GET", "/api/v1/traces/names", nil)
	var names struct {
		Names []struct {
			Name         string `json:"trace_name"`
			TraceCount   int64  `json:"trace_count"`
			MessageCount int64  `json:"message_count"`
		} `json:"trace_names"`
		Total int64 `json:"total"`
	}
	r.JSON(t, &names)
	if names.Total != 1 || len(names.Names) != 1 || names.Names[0].Name != "all" || names.Names[0].TraceCount != 4 || names.Names[0].MessageCount != 2 {
		t.Fatalf("trace names after the pass: %s; want only \"all\" with 4 traces of 2 messages", r.Body)
	}
	if r := n.Do(t, "GET", "/api/v1/traces/"+ms[0]["partitionId"].(string)+"/"+ms[0]["transactionId"].(string), nil); r.Status == 200 {
		var body struct {
			Traces []any `json:"traces"`
		}
		r.JSON(t, &body)
		if len(body.Traces) != 0 {
			t.Fatalf("traces of a deleted message: %s", r.Body)
		}
	}
}
