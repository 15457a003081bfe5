package jsonscan

import (
	"encoding/json"
	"testing"
)

// Int takes what encoding/json decodes into an int and nothing else.
func TestIntAgreesWithEncodingJSON(t *testing.T) {
	for _, lit := range []string{"0", "-0", "7", "-12", "2147483648", "9223372036854775807", "9223372036854775808",
		"-9223372036854775809", "1.0", "1e2", "1E+2", "-", "01", "", "x", "1.", ".5"} {
		s := Scanner{Data: []byte(lit)}
		n, ok := s.Int()
		ok = ok && s.AtEnd()
		var want int
		err := json.Unmarshal([]byte(lit), &want)
		if ok != (err == nil) || (ok && n != want) {
			t.Errorf("%q: Int %d, %v; encoding/json %d, %v", lit, n, ok, want, err)
		}
	}
}
