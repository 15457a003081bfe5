package main

import (
	"strings"
	"testing"
	"time"
)

// The maintenance settings map onto broker.Config.Maintenance; bad values
// stop the node with a line naming the variable.
func TestLoadConfigMaintenance(t *testing.T) {
	cfg, err := loadConfig(nil, envOf(map[string]string{
		"QUEEN_NODE_NAME": "n1", "QUEEN_BUFFER_DIR": "/var/lib/queen/buf",
		"QUEEN_BUFFER_MAX_BYTES": "2097152", "QUEEN_MAINTENANCE_REFRESH_MS": "250",
	}))
	if err != nil {
		t.Fatal(err)
	}
	m := cfg.Node.Broker.Maintenance
	if m.BufferDir != "/var/lib/queen/buf" || m.BufferMaxBytes != 2<<20 || m.RefreshInterval != 250*time.Millisecond {
		t.Fatalf("%+v", m)
	}
	for env, v := range map[string]string{
		"QUEEN_BUFFER_MAX_BYTES": "1000", "QUEEN_MAINTENANCE_REFRESH_MS": "0",
	} {
		_, err := loadConfig(nil, envOf(map[string]string{"QUEEN_NODE_NAME": "n1", env: v}))
		if err == nil || !strings.Contains(err.Error(), env) {
			t.Fatalf("%s=%s: %v", env, v, err)
		}
	}
	if _, err := loadConfig([]string{"-buffer-max-bytes", "x"}, envOf(map[string]string{"QUEEN_NODE_NAME": "n1"})); err == nil {
		t.Fatal("a non-numeric -buffer-max-bytes was accepted")
	}
}
