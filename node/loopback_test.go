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
