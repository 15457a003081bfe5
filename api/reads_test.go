package api

import (
	"net/http"
	"strings"
	"testing"

	"queen-node/broker"
	"queen-node/reads"
)

// Bad parameters of the resource, message and consumer-group endpoints are
// 400s with a JSON error that never reach the broker.
func TestReadsRejectBadParams(t *testing.T) {
	pid := "0190b3e0-7d6b-7c3e-9d6f-2f7a4b8c9d0e"
	long := strings.Repeat("q", broker.MaxNameBytes+1)
	cases := []struct{ method, path, body string }{
		{"GET", "/api/v1/resources/queues?limit=0", ""},
		{"GET", "/api/v1/resources/queues?limit=ten", ""},
		{"GET", "/api/v1/resources/queues?offset=-1", ""},
		{"GET", "/api/v1/resources/queues?namespace=" + long, ""},
		{"GET", "/api/v1/resources/queues/" + long, ""},
		{"GET", "/api/v1/messages", ""}, // queue is required
		{"GET", "/api/v1/messages?queue=q&status=failed", ""},
		{"GET", "/api/v1/messages?queue=q&offset=100001", ""},
		{"GET", "/api/v1/messages?queue=q&limit=-5", ""},
		{"GET", "/api/v1/messages?queue=q&consumerGroup=" + long, ""},
		{"GET", "/api/v1/messages/not-a-uuid/tx", ""},
		{"DELETE", "/api/v1/messages/not-a-uuid/tx", ""},
		{"GET", "/api/v1/messages/" + pid + "/" + long, ""},
		{"GET", "/api/v1/consumer-groups?limit=x", ""},
		{"GET", "/api/v1/consumer-groups/lagging?minLagSeconds=-1", ""},
		{"GET", "/api/v1/consumer-groups/lagging?minLagSeconds=soon", ""},
		{"POST", "/api/v1/consumer-groups/g/subscription", `{}`},
		{"POST", "/api/v1/consumer-groups/g/subscription", `{"subscriptionTimestamp":"yesterday"}`},
		{"POST", "/api/v1/consumer-groups/g/subscription", `{"subscriptionTimestamp":5}`},
		{"POST", "/api/v1/consumer-groups/g/subscription", `[1]`},
		{"POST", "/api/v1/consumer-groups/g/queues/q/partitions/" + long + "/seek", ""},
	}
	for _, tc := range cases {
		tb := setup(t)
		r := tb.do(tc.method, tc.path, tc.body)
		if r.status != http.StatusBadRequest {
			t.Fatalf("%s %s %s: status %d, want 400; body %s", tc.method, tc.path, tc.body, r.status, r.body)
		}
		r.wantError(t, http.StatusBadRequest, "")
		tb.noBrokerCalls()
	}
}

// A large limit is clamped to the cap rather than refused, and the
// broker's not-found is a 404 with a JSON error.
func TestReadsClampAndNotFound(t *testing.T) {
	tb := setup(t)
	r := tb.do("GET", "/api/v1/resources/queues?limit=99999", "")
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	if got := r.object(t)["pagination"].(map[string]any)["limit"]; got.(interface{ String() string }).String() != "1000" {
		t.Fatalf("limit = %v, want the cap 1000", got)
	}
	tb.fb.err = reads.ErrNotFound
	tb.do("GET", "/api/v1/resources/queues/nope", "").wantError(t, http.StatusNotFound, "Queue not found")
	tb.do("GET", "/api/v1/messages?queue=nope", "").wantError(t, http.StatusNotFound, "Queue not found")
	tb.do("DELETE", "/api/v1/messages/0190b3e0-7d6b-7c3e-9d6f-2f7a4b8c9d0e/tx", "").wantError(t, http.StatusNotFound, "Message not found")
	tb.do("POST", "/api/v1/consumer-groups/g/queues/q/partitions/p/seek", "").wantError(t, http.StatusNotFound, "Partition not found")
}
