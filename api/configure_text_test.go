package api

import "testing"

// Issue 9 item 6: a NUL byte in configure's namespace or task, at the top
// level or inside options, reached PostgreSQL and answered 500. It must be a
// 400 with a JSON error body, and never reach the broker.
func TestConfigureNamespaceTaskNULIsBadRequest(t *testing.T) {
	for _, body := range []string{
		`{"queue":"q","namespace":"a\u0000b"}`,
		`{"queue":"q","task":"\u0000"}`,
		`{"queue":"q","options":{"namespace":"ns\u0000"}}`,
		`{"queue":"q","options":{"task":"t\u0000x"}}`,
		`{"queue":"q","namespace":null,"task":null,"options":{"task":"t\u0000x"}}`,
	} {
		tb := setup(t)
		r := tb.do("POST", "/api/v1/configure", body)
		r.wantError(t, 400, "")
		tb.noBrokerCalls()
	}
}
