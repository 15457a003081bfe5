package clustertest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"testing"
	"time"
)

// Direct, recorded operations for scenarios that drive requests by hand
// but still want the workload checker's proofs.

// pushKeys pushes the messages ks in one request through node and records
// them; it fails the test unless the push is 201 with every item queued.
func pushKeys(t *testing.T, c *Cluster, rec *Recorder, node int, ks ...key) {
	t.Helper()
	items := make([]map[string]any, len(ks))
	for i, k := range ks {
		pl, _ := json.Marshal(payload{P: k.p, S: k.s, R: rec.run})
		items[i] = map[string]any{"queue": rec.queue, "partition": rec.partName(k.p),
			"payload": json.RawMessage(pl), "transactionId": rec.txID(k)}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	code, body, err := c.do(ctx, node, "POST", "/api/v1/push", map[string]any{"items": items})
	if err != nil || code != 201 {
		t.Fatalf("push via %s: %d %s %v", c.Node(node).Name, code, body, err)
	}
	var res []struct {
		Status string `json:"status"`
	}
	if err := json.Unmarshal(body, &res); err != nil || len(res) != len(ks) {
		t.Fatalf("push: bad body %s", body)
	}
	for i, x := range res {
		if x.Status != "queued" {
			t.Fatalf("push item %d: %s", i, body)
		}
	}
	rec.pushed(ks, pushRec{start: start, done: time.Now(), node: node, attempts: 1})
}

// popKeys pops rec's queue through node with query parameters q (group
// included) and records the delivery. It returns nil on 204.
func popKeys(t *testing.T, c *Cluster, rec *Recorder, node int, group string, q url.Values) []popMsg {
	t.Helper()
	msgs, _, err := popRecorded(c, rec, node, group, q)
	if err != nil {
		t.Fatal(err)
	}
	return msgs
}

// popRecorded is popKeys without the testing.T, for goroutines; it also
// returns when the response arrived.
func popRecorded(c *Cluster, rec *Recorder, node int, group string, q url.Values) ([]popMsg, time.Time, error) {
	q.Set("consumerGroup", group)
	ctx, cancel := context.WithTimeout(context.Background(), 70*time.Second)
	defer cancel()
	t0 := time.Now()
	code, body, err := c.do(ctx, node, "GET", "/api/v1/pop/queue/"+url.PathEscape(rec.queue)+"?"+q.Encode(), nil)
	t1 := time.Now()
	if err != nil {
		return nil, t1, fmt.Errorf("pop via %s: %w", c.Node(node).Name, err)
	}
	switch code {
	case 204:
		return nil, t1, nil
	case 200:
	default:
		return nil, t1, fmt.Errorf("pop via %s: %d %s", c.Node(node).Name, code, body)
	}
	var res struct {
		Messages []popMsg `json:"messages"`
	}
	if err := json.Unmarshal(body, &res); err != nil || len(res.Messages) == 0 {
		return nil, t1, fmt.Errorf("pop: bad 200 body %s", body)
	}
	rec.delivered(group, node, t0, t1, res.Messages)
	return res.Messages, t1, nil
}

// ackKeys acks msgs (completed) for group through node and records the
// outcome; it fails the test unless every item succeeded.
func ackKeys(t *testing.T, c *Cluster, rec *Recorder, node int, group string, msgs []popMsg) {
	t.Helper()
	acks := make([]map[string]any, len(msgs))
	ks := make([]key, len(msgs))
	for i, m := range msgs {
		var pl payload
		if err := json.Unmarshal(m.Data, &pl); err != nil {
			t.Fatalf("ack: bad payload %s", m.Data)
		}
		ks[i] = key{pl.P, pl.S}
		acks[i] = map[string]any{"transactionId": m.TransactionID, "partitionId": m.PartitionID,
			"leaseId": m.LeaseID, "status": "completed"}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	code, body, err := c.do(ctx, node, "POST", "/api/v1/ack/batch", map[string]any{"consumerGroup": group, "acknowledgments": acks})
	end := time.Now()
	if err != nil || code != 200 {
		t.Fatalf("ack via %s: %d %s %v", c.Node(node).Name, code, body, err)
	}
	var res []struct {
		Success bool `json:"success"`
	}
	if err := json.Unmarshal(body, &res); err != nil || len(res) != len(msgs) {
		t.Fatalf("ack: bad body %s", body)
	}
	for i, k := range ks {
		a := ackRec{group: group, part: k.p, seq: k.s, start: start, end: end, node: node, outcome: ackOK}
		if !res[i].Success {
			a.outcome = ackRefused
			t.Errorf("ack item %d refused: %s", i, body)
		}
		rec.ackResult(a)
	}
}

// checkRecorder runs the checker over a hand-driven recorder, logs the
// table and fails the test on violations.
func checkRecorder(t *testing.T, c *Cluster, rec *Recorder, name string, groups []string, lease time.Duration, elapsed time.Duration, o CheckOptions) *Report {
	t.Helper()
	rep := rec.check(c, groups, lease, o)
	rep.Name, rep.Elapsed = name, elapsed
	logReport(t, rep)
	for i, v := range rep.Violations {
		if i == 30 {
			t.Errorf("... and %d more violations", len(rep.Violations)-30)
			break
		}
		t.Error(v)
	}
	return rep
}

func fmtDurations(ds []time.Duration) string {
	p50, p90, p99, mx := percentiles(ds)
	r := func(d time.Duration) time.Duration { return d.Round(100 * time.Microsecond) }
	return fmt.Sprintf("n=%d p50 %v p90 %v p99 %v max %v", len(ds), r(p50), r(p90), r(p99), r(mx))
}
