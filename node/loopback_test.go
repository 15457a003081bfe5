package node

import "testing"

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:6632": true, "[::1]:6632": true, "localhost:6632": true, "127.0.0.2:0": true,
		":6632": false, "0.0.0.0:6632": false, "[::]:6632": false, "10.0.0.1:6632": false, "example.com:80": false, "bad": false,
	} {
		if got := isLoopback(addr); got != want {
			t.Errorf("isLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

// QUEEN_TENANT (and the node name) follow the JWT tenant claim's rule: no
// control characters; \x1f separates tenant and queue in the broker's ring
// and long-poll keys (hotlist.KeyOf), NUL cannot be stored.
func TestCheckNameRefusesControlCharacters(t *testing.T) {
	for _, v := range []string{"a\x1fb", "a\x00b", "a\x7f", "\x01"} {
		if CheckName(v) == nil {
			t.Errorf("CheckName(%q) accepted", v)
		}
	}
	if err := CheckName("acme-prod.eu_1"); err != nil {
		t.Fatal(err)
	}
}
