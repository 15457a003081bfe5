package api

import (
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
)

// zeros is a JSON array of n zeros: the cheapest way to send many items.
func zeros(n int) string {
	return "[" + strings.TrimSuffix(strings.Repeat("0,", n), ",") + "]"
}

// allocOf returns the bytes allocated while the server handles one request
// (in process, so the figure is the handler's, not a client's).
func allocOf(t *testing.T, h http.Handler, path, body string) (int, uint64) {
	t.Helper()
	req := httptest.NewRequest("POST", path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	h.ServeHTTP(rec, req)
	runtime.ReadMemStats(&after)
	return rec.Code, after.TotalAlloc - before.TotalAlloc
}

// Item-count limits must be enforced while decoding, before anything is
// allocated per element: a body of a million zeros used to cost about 200
// bytes of allocation per body byte before its 413 (issue 9, item 7).
func TestItemLimitsBoundAllocation(t *testing.T) {
	tb := setup(t)
	const n = 512 << 10 // elements; the body is about 1 MiB
	arr := zeros(n)
	cases := []struct{ name, path, body string }{
		{"push", "/api/v1/push", `{"items":` + arr + `}`},
		{"ack batch", "/api/v1/ack/batch", `{"acknowledgments":` + arr + `}`},
		{"transaction operations", "/api/v1/transaction", `{"operations":` + arr + `}`},
		{"transaction requiredLeases", "/api/v1/transaction", `{"operations":[{"type":"ack"}],"requiredLeases":` + arr + `}`},
		{"transaction pushed items", "/api/v1/transaction", `{"operations":[{"type":"push","items":` + arr + `}]}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, alloc := allocOf(t, tb.srv.Handler(), c.path, c.body)
			if code != http.StatusRequestEntityTooLarge {
				t.Fatalf("status %d, want 413", code)
			}
			// The body is read once and its array copied once or twice;
			// 8x leaves room without admitting per-element costs.
			limit := uint64(8*len(c.body)) + 1<<20
			t.Logf("body %d bytes, handler allocated %d bytes (%.1fx)", len(c.body), alloc, float64(alloc)/float64(len(c.body)))
			if alloc > limit {
				t.Fatalf("handling a %d-byte body allocated %d bytes (limit %d)", len(c.body), alloc, limit)
			}
		})
	}
	tb.noBrokerCalls()
}

func TestCountElements(t *testing.T) {
	cases := []struct {
		in string
		n  int
		ok bool
	}{
		{`[]`, 0, true}, {` [ ] `, 0, true}, {`[0]`, 1, true}, {`[0,0]`, 2, true},
		{`["a,b",""]`, 2, true}, {`["\"]\\",1]`, 2, true}, {`[[1,2],{"a":[3,4]},[]]`, 3, true},
		{`[{}]`, 1, true}, {`[[]]`, 1, true}, {"[\n0 ,\t0\r]", 2, true},
		{`{}`, 0, false}, {`null`, 0, false}, {`"[1,2]"`, 0, false}, {``, 0, false},
	}
	for _, c := range cases {
		if n, ok := countElements([]byte(c.in)); n != c.n || ok != c.ok {
			t.Errorf("countElements(%q) = %d, %v; want %d, %v", c.in, n, ok, c.n, c.ok)
		}
	}
}
