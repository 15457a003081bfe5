package api_test

// Read answers bounded in bytes (docs/api.md, "Read answers"): every read
// route against data far larger than the budget, through a real node and
// PostgreSQL.

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"queen-node/api"
	"queen-node/internal/nodetest"
)

const (
	readBudget = api.DefaultMaxReadBytes // the node runs with the default
	// readEnvelope is what an answer may carry beyond its rows' budget:
	// the object around the rows, totals, pagination.
	readEnvelope = 64 << 10
	// bigBlob is the size of each big payload, state value and trace
	// payload: three of them pass the budget, two fit.
	bigBlob = 6 << 20
)

// bigPayload is a JSON object of about n bytes.
func bigPayload(tag string, n int) json.RawMessage {
	return json.RawMessage(`{"tag":"` + tag + `","blob":"` + strings.Repeat("x", n) + `"}`)
}

// TestReadAnswersWithinByteBudget walks every read route of a node holding
// dead letters, traces, state values and messages far past the budget:
// each answer stays within the budget plus a small envelope, the paged
// ones say they were truncated and give the offset a follow-up uses to
// get the rest, and a state read (which the client cannot page) is a 413
// naming the limit. A route the node serves that this test does not know
// fails it, so a new read route gets checked too.
func TestReadAnswersWithinByteBudget(t *testing.T) {
	n := nodetest.Start(t)
	c := rc{t: t, n: n}
	const q = "rb"
	c.configure(q, msg{"retryLimit": 0})

	// Three big messages, pushed one per request (a body is at most 10 MiB).
	var pid string
	txids := []string{"m1", "m2", "m3"}
	for _, tx := range txids {
		var res []msg
		c.ok(201, "POST", "/api/v1/push", msg{"items": []msg{{"queue": q, "partition": "p", "transactionId": tx,
			"payload": bigPayload(tx, bigBlob)}}}).JSON(t, &res)
		pid = res[0]["partitionId"].(string)
	}

	// Traces: each big message carries one trace named "big" (the by-name
	// page returns the message payload with it), and m1 300 traces of
	// 60 KB data.
	for _, tx := range txids {
		c.ok(201, "POST", "/api/v1/traces", msg{"transactionId": tx, "partitionId": pid, "traceNames": []string{"big"},
			"data": msg{"tx": tx}})
	}
	const m1Traces = 300
	for i := range m1Traces {
		c.ok(201, "POST", "/api/v1/traces", msg{"transactionId": "m1", "partitionId": pid,
			"data": msg{"i": i, "pad": strings.Repeat("t", 60000)}})
	}

	// Stream state: three big values on one (query, partition).
	_, reg := register(t, n, "", msg{"name": "rbq", "source_queue": q, "config_hash": "h", "reset": true})
	qid := reg["query_id"].(string)
	for i := 1; i <= 3; i++ {
		st, out := cycle(t, n, "", msg{"query_id": qid, "partition_id": pid, "consumer_group": "streams.rbq", "ack": nil,
			"state_ops": []msg{{"type": "upsert", "key": fmt.Sprintf("k%d", i), "value": bigPayload("s", bigBlob)}}})
		if st != 200 {
			t.Fatalf("cycle: %d %v", st, out)
		}
	}

	// Dead letters: group g fails every message (retryLimit 0). A pop
	// answer is bounded too, so this takes more than one pop.
	for range 5 {
		got, lease := c.pop(q, "p", "g", 10)
		if len(got) == 0 {
			break
		}
		var acks []msg
		for _, tx := range got {
			acks = append(acks, msg{"transactionId": tx, "partitionId": pid, "status": "failed", "leaseId": lease,
				"consumerGroup": "g", "error": "boom"})
		}
		c.ok(200, "POST", "/api/v1/ack/batch", msg{"acknowledgments": acks})
	}

	// The request each route gets. follow names the list a paged answer
	// carries and what its pages must add up to.
	type follow struct {
		list string
		key  string   // a row's key: transactionId, transaction_id, or id
		want []string // the rows' keys, in any order; nil: m1Traces+1 distinct ids
	}
	type spec struct {
		path   string
		status int     // 0: any 2xx
		pages  *follow // a paged answer past the budget
	}
	specs := map[string]spec{
		"GET /api/v1/pop/queue/{queue}":                       {path: "/api/v1/pop/queue/rb?batch=10&wait=false&consumerGroup=reader"},
		"GET /api/v1/pop/queue/{queue}/partition/{partition}": {path: "/api/v1/pop/queue/rb/partition/p?batch=10&wait=false&consumerGroup=reader2"},
		"GET /api/v1/pop":                                     {path: "/api/v1/pop?namespace=none&wait=false", status: 204},
		"GET /api/v1/dlq":                                     {path: "/api/v1/dlq?queue=rb&limit=10000", pages: &follow{"messages", "transactionId", txids}},
		"GET /health":                                         {path: "/health"},
		"GET /api/v1/system/maintenance":                      {path: "/api/v1/system/maintenance"},
		"GET /api/v1/system/maintenance/pop":                  {path: "/api/v1/system/maintenance/pop"},
		"GET /api/v1/status/buffers":                          {path: "/api/v1/status/buffers"},
		"GET /api/v1/resources/overview":                      {path: "/api/v1/resources/overview"},
		"GET /api/v1/resources/queues":                        {path: "/api/v1/resources/queues?limit=1000"},
		"GET /api/v1/resources/queues/{queue}":                {path: "/api/v1/resources/queues/rb"},
		"GET /api/v1/resources/namespaces":                    {path: "/api/v1/resources/namespaces"},
		"GET /api/v1/resources/tasks":                         {path: "/api/v1/resources/tasks"},
		"GET /api/v1/messages":                                {path: "/api/v1/messages?queue=rb&limit=1000"},
		"GET /api/v1/messages/{partitionId}/{transactionId}":  {path: "/api/v1/messages/" + pid + "/m1?consumerGroup=g"},
		"GET /api/v1/consumer-groups":                         {path: "/api/v1/consumer-groups?limit=1000"},
		"GET /api/v1/consumer-groups/lagging":                 {path: "/api/v1/consumer-groups/lagging?minLagSeconds=0"},
		"GET /api/v1/consumer-groups/{group}":                 {path: "/api/v1/consumer-groups/g"},
		"GET /api/v1/traces/names":                            {path: "/api/v1/traces/names?limit=1000"},
		"GET /api/v1/traces/by-name/{name}":                   {path: "/api/v1/traces/by-name/big?limit=1000", pages: &follow{"traces", "transaction_id", txids}},
		"GET /api/v1/traces/{partitionId}/{transactionId}":    {path: "/api/v1/traces/" + pid + "/m1?limit=1000", pages: &follow{"traces", "id", nil}},
		"GET /api/v1/status":                                  {path: "/api/v1/status"},
		"GET /api/v1/status/queues":                           {path: "/api/v1/status/queues?limit=1000"},
		"GET /api/v1/status/queues/{queue}":                   {path: "/api/v1/status/queues/rb?includePartitions=true"},
		"GET /api/v1/status/queues/{queue}/messages":          {path: "/api/v1/status/queues/rb/messages?limit=1000"},
		"GET /api/v1/status/analytics":                        {path: "/api/v1/status/analytics"},
		"GET /api/v1/analytics/queue-ops":                     {path: "/api/v1/analytics/queue-ops"},
		"GET /api/v1/analytics/queue-lag":                     {path: "/api/v1/analytics/queue-lag"},
		"GET /api/v1/analytics/queue-parked-replicas":         {path: "/api/v1/analytics/queue-parked-replicas"},
		"GET /api/v1/analytics/retention":                     {path: "/api/v1/analytics/retention"},
		"GET /api/v1/analytics/system-metrics":                {path: "/api/v1/analytics/system-metrics"},
		"GET /api/v1/analytics/worker-metrics":                {path: "/api/v1/analytics/worker-metrics"},
		"GET /api/v1/analytics/postgres-stats":                {path: "/api/v1/analytics/postgres-stats"},
		"GET /api/v1/status/hotlist/{queue}":                  {path: "/api/v1/status/hotlist/rb?limit=1000"},
		"GET /status":                                         {path: "/status"},
		"GET /metrics":                                        {path: "/metrics"},
		"GET /metrics/prometheus":                             {path: "/metrics/prometheus"},
		"GET /{$}":                                            {path: "/"},
		"GET /assets/":                                        {path: "/assets/none.js", status: 404},
		"POST /streams/v1/state/get":                          {status: 413},
	}

	seen := map[string]bool{}
	for _, r := range n.Node.Routes() {
		method, _, _ := strings.Cut(r.Pattern, " ")
		if method != "GET" && r.Pattern != "POST /streams/v1/state/get" {
			continue // writes answer with what they were sent
		}
		seen[r.Pattern] = true
		s, ok := specs[r.Pattern]
		if !ok {
			t.Errorf("read route %q is not walked by this test", r.Pattern)
			continue
		}
		if r.Pattern == "POST /streams/v1/state/get" {
			checkStateBudget(t, n, qid, pid)
			continue
		}
		res := c.do("GET", s.path, nil)
		checkWithinBudget(t, r.Pattern, res)
		switch {
		case s.status != 0 && res.Status != s.status:
			t.Errorf("%s: status %d, want %d: %.300s", s.path, res.Status, s.status, res.Body)
			continue
		case s.status == 0 && (res.Status < 200 || res.Status > 299):
			t.Errorf("%s: status %d: %.300s", s.path, res.Status, res.Body)
			continue
		}
		if s.pages == nil {
			continue
		}
		got := followPages(t, c, s.path, res, s.pages.list, s.pages.key)
		slices.Sort(got)
		want := slices.Clone(s.pages.want)
		slices.Sort(want)
		if want == nil { // trace ids: each once
			want = slices.Compact(slices.Clone(got))
			if len(want) != m1Traces+1 {
				t.Errorf("%s: the pages brought %d distinct traces, want %d", s.path, len(want), m1Traces+1)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: the pages brought %d rows %.200v, want %d %.200v", s.path, len(got), got, len(want), want)
		}
	}
	for p := range specs {
		if !seen[p] && strings.HasPrefix(p, "GET ") {
			t.Errorf("specs name %q, which the node does not serve", p)
		}
	}
}

// checkWithinBudget: the answer is at most the budget plus the envelope.
func checkWithinBudget(t *testing.T, route string, res nodetest.Response) {
	t.Helper()
	if len(res.Body) > readBudget+readEnvelope {
		t.Errorf("%s: answer of %d bytes, budget %d (+%d envelope)", route, len(res.Body), readBudget, readEnvelope)
	}
}

// followPages reads a paged answer past the budget: it must say truncated
// and give nextOffset, and the follow-ups at nextOffset, each within the
// budget too, until one is not truncated. It returns the rows' keys.
func followPages(t *testing.T, c rc, path string, first nodetest.Response, list, key string) []string {
	t.Helper()
	res := first
	var got []string
	for page := 0; ; page++ {
		body := res.Obj(t)
		rows, _ := body[list].([]any)
		for _, r := range rows {
			got = append(got, r.(msg)[key].(string))
		}
		truncated, _ := body["truncated"].(bool)
		if page == 0 && !truncated {
			t.Errorf("%s: %d rows, and the answer does not say truncated", path, len(rows))
			return got
		}
		if !truncated {
			return got
		}
		next, ok := body["nextOffset"].(float64)
		if !ok || int(next) != len(got) || len(rows) == 0 || page > 1000 {
			t.Errorf("%s: truncated page %d of %d rows with nextOffset %v after %d rows", path, page, len(rows), body["nextOffset"], len(got))
			return got
		}
		res = c.ok(200, "GET", path+"&offset="+strconv.Itoa(int(next)), nil)
		checkWithinBudget(t, path+" (follow-up)", res)
	}
}

// checkStateBudget: a state read past the budget is a 413 with the limit in
// its error (the client cannot page, so a partial answer would lose state);
// a read narrowed by key_prefix under the budget answers.
func checkStateBudget(t *testing.T, n *nodetest.Node, qid, pid string) {
	t.Helper()
	r := n.Do(t, "POST", "/streams/v1/state/get", msg{"query_id": qid, "partition_id": pid, "keys": nil})
	checkWithinBudget(t, "POST /streams/v1/state/get", r)
	if r.Status != 413 {
		t.Errorf("state/get over the budget: status %d (%d bytes), want 413", r.Status, len(r.Body))
	} else if e, _ := r.Obj(t)["error"].(string); !strings.Contains(e, strconv.Itoa(readBudget)) {
		t.Errorf("state/get 413 error %q does not name the limit %d", e, readBudget)
	}
	st, rows := stateGet(t, n, "", msg{"query_id": qid, "partition_id": pid, "keys": []string{}, "key_prefix": "k2"})
	if st != 200 || len(rows) != 1 || rows[0].Key != "k2" || len(rows[0].Value) < bigBlob {
		t.Errorf("state/get key_prefix k2: status %d, %d rows", st, len(rows))
	}
}
