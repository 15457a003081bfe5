package api

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"queen-node/broker"
)

func TestOptionsPreflight(t *testing.T) {
	tb := setup(t)
	for _, path := range []string{"/api/v1/push", "/api/v1/pop/queue/q", "/anything/at/all", "/"} {
		r := tb.do("OPTIONS", path, "")
		if r.status != http.StatusNoContent || len(r.body) != 0 {
			t.Fatalf("OPTIONS %s: %d %q", path, r.status, r.body)
		}
		checkCORS(t, r.header)
	}
	tb.noBrokerCalls()
}

func TestUnknownRouteIsJSON404(t *testing.T) {
	tb := setup(t)
	for _, path := range []string{"/nope", "/api/v1/push/extra", "/api/v1/pop/queue/"} {
		tb.do("GET", path, "").wantError(t, http.StatusNotFound, "")
	}
	tb.noBrokerCalls()
}

func TestWrongMethodIsJSON405(t *testing.T) {
	tb := setup(t)
	cases := []struct{ method, path string }{
		{"GET", "/api/v1/push"},
		{"POST", "/api/v1/pop/queue/q"},
		{"PUT", "/api/v1/ack"},
		{"PUT", "/api/v1/resources/queues/q"}, // GET and DELETE are routes
		{"HEAD", "/api/v1/pop/queue/q"},       // would lease messages nobody reads
		{"POST", "/health"},
	}
	for _, c := range cases {
		r := tb.do(c.method, c.path, "")
		if r.status != http.StatusMethodNotAllowed {
			t.Fatalf("%s %s: status %d, want 405", c.method, c.path, r.status)
		}
		if c.method != "HEAD" {
			r.wantError(t, http.StatusMethodNotAllowed, "method not allowed")
		}
		if r.header.Get("Allow") == "" {
			t.Errorf("%s %s: no Allow header", c.method, c.path)
		}
	}
	tb.noBrokerCalls()
}

func TestBodyTooLarge(t *testing.T) {
	tb := setup(t, func(c *Config) { c.MaxBodyBytes = 1024 })
	big := `{"items":[{"queue":"q","payload":"` + strings.Repeat("x", 2000) + `"}]}`
	tb.do("POST", "/api/v1/push", big).wantError(t, http.StatusRequestEntityTooLarge, "")

	// Without Content-Length (chunked), MaxBytesReader must still catch it.
	req, _ := http.NewRequest("POST", tb.url+"/api/v1/push", io.MultiReader(strings.NewReader(big)))
	req.ContentLength = -1
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	response{status: resp.StatusCode, header: resp.Header, body: body}.wantError(t, http.StatusRequestEntityTooLarge, "")
	tb.noBrokerCalls()
}

func TestDefaultBodyLimitAcceptsLargePayload(t *testing.T) {
	tb := setup(t)
	// JS pushes ~1.7 MB objects; 9 MiB stays under the 10 MiB default.
	big := `{"items":[{"queue":"q","payload":"` + strings.Repeat("x", 9<<20) + `"}]}`
	r := tb.do("POST", "/api/v1/push", big)
	if r.status != http.StatusCreated {
		t.Fatalf("status %d: %.200s", r.status, r.body)
	}
}

func TestMalformedJSON(t *testing.T) {
	tb := setup(t)
	for _, path := range []string{"/api/v1/push", "/api/v1/configure", "/api/v1/ack", "/api/v1/ack/batch",
		"/api/v1/transaction", "/api/v1/lease/l1/extend", "/api/v1/consumer-groups/g/queues/q/seek"} {
		for _, body := range []string{`{"items": [`, `[1,2]`, `"str"`, `{"a":1}}`} {
			tb.do("POST", path, body).wantError(t, http.StatusBadRequest, "")
		}
	}
	tb.noBrokerCalls()
}

func TestBrokerErrorMapping(t *testing.T) {
	cases := []struct {
		err    error
		status int
		msg    string
	}{
		{broker.ErrQueueDeleted, 409, broker.ErrQueueDeleted.Error()},
		{fmt.Errorf("wrapped: %w", broker.ErrQueueDeleted), 409, broker.ErrQueueDeleted.Error()},
		{fmt.Errorf("push q: %w", broker.ErrUnavailable), 503, "database unavailable"},
		{errors.New("pg: syntax error at or near \"queen.messages\""), 500, ""},
	}
	for _, c := range cases {
		tb := setup(t)
		tb.fb.err = c.err
		for _, r := range []response{
			tb.do("POST", "/api/v1/push", `{"items":[{"queue":"q"}]}`),
			tb.do("POST", "/api/v1/configure", `{"queue":"q"}`),
			tb.do("GET", "/api/v1/pop/queue/q", ""),
			tb.do("GET", "/api/v1/dlq?queue=q", ""),
		} {
			r.wantError(t, c.status, c.msg)
			if c.status != 500 {
				continue
			}
			// A 500 names an error id and nothing of the cause (SQL, tables).
			got := r.object(t)["error"].(string)
			if !regexp.MustCompile(`^internal error [0-9a-f]{16}; the node's log has the detail under error_id=[0-9a-f]{16}$`).MatchString(got) ||
				strings.Contains(got, "syntax") || strings.Contains(got, "queen.") {
				t.Fatalf("500 answer %q", got)
			}
		}
	}
}

func TestHandleRegistersExtraRoute(t *testing.T) {
	tb := setup(t)
	tb.srv.Handle("GET /status", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"node": "n1"})
	}))
	r := tb.do("GET", "/status", "")
	if r.status != 200 || r.object(t)["node"] != "n1" {
		t.Fatalf("%d %s", r.status, r.body)
	}
	checkJSONHeaders(t, r)
	tb.do("POST", "/status", "").wantError(t, http.StatusMethodNotAllowed, "")
}

func TestAuthenticatorSeam(t *testing.T) {
	var needs []Access
	tb := setup(t, func(c *Config) {
		c.Auth = func(r *http.Request, need Access) (Identity, error) {
			needs = append(needs, need)
			switch r.Header.Get("Authorization") {
			case "Bearer good":
				return Identity{Subject: "user-1", Tenant: "t-jwt"}, nil
			case "Bearer anon":
				return Identity{}, nil
			case "Bearer low":
				return Identity{}, &AuthError{Status: 403, Msg: "Insufficient permissions"}
			}
			return Identity{}, errors.New("no token")
		}
	})
	tb.do("POST", "/api/v1/push", `{"items":[{"queue":"q"}]}`).wantError(t, 401, "Authentication required")
	if r := tb.do("GET", "/health", ""); r.status != 200 {
		t.Fatalf("health needs no auth: %d", r.status)
	}
	req, _ := http.NewRequest("POST", tb.url+"/api/v1/push", strings.NewReader(`{"items":[{"queue":"q","producerSub":"spoof"}]}`))
	req.Header.Set("Authorization", "Bearer good")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 201 || tb.fb.pushSub == nil || *tb.fb.pushSub != "user-1" || tb.fb.tenant != "t-jwt" {
		t.Fatalf("status %d, producerSub %v, tenant %q", resp.StatusCode, tb.fb.pushSub, tb.fb.tenant)
	}
	// Transactions stamp the subject and use the identity's tenant too.
	req, _ = http.NewRequest("POST", tb.url+"/api/v1/transaction", strings.NewReader(`{"operations":[{"type":"push","items":[{"queue":"q","payload":1}]}]}`))
	req.Header.Set("Authorization", "Bearer good")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || tb.fb.txSub == nil || *tb.fb.txSub != "user-1" || tb.fb.tenant != "t-jwt" {
		t.Fatalf("transaction: status %d, producerSub %v, tenant %q", resp.StatusCode, tb.fb.txSub, tb.fb.tenant)
	}
	// An identity without a tenant gets Config.Tenant, without a subject no producerSub.
	req, _ = http.NewRequest("POST", tb.url+"/api/v1/push", strings.NewReader(`{"items":[{"queue":"q"}]}`))
	req.Header.Set("Authorization", "Bearer anon")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 201 || tb.fb.pushSub != nil || tb.fb.tenant != "t1" {
		t.Fatalf("anon: status %d, producerSub %v, tenant %q", resp.StatusCode, tb.fb.pushSub, tb.fb.tenant)
	}
	req, _ = http.NewRequest("DELETE", tb.url+"/api/v1/resources/queues/q", nil)
	req.Header.Set("Authorization", "Bearer low")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 {
		t.Fatalf("status %d, want 403", resp.StatusCode)
	}
	if fmt.Sprint(needs) != fmt.Sprint([]Access{AccessReadWrite, AccessReadWrite, AccessReadWrite, AccessReadWrite, AccessAdmin}) {
		t.Fatalf("access levels asked: %v", needs)
	}
}

func TestConfigDefaults(t *testing.T) {
	got := Config{}.withDefaults()
	want := DefaultConfig()
	got.Auth, want.Auth = nil, nil
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("zero Config defaults to %+v, want %+v", got, want)
	}
	if want.Tenant != broker.DefaultTenant || want.MaxBodyBytes != 10<<20 || want.MaxPopBatch != broker.DefaultMaxPopBatch {
		t.Fatalf("unexpected defaults %+v", want)
	}
}
