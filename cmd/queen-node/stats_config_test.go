package main

import (
	"strings"
	"testing"
	"time"
)

// TestLoadConfigStats: the QUEEN_STATS_* settings reach node.Config.Stats,
// and out-of-range values stop the node naming the variable.
func TestLoadConfigStats(t *testing.T) {
	cfg, err := loadConfig(nil, envOf(map[string]string{
		"QUEEN_STATS_INTERVAL_MS":       "0",
		"QUEEN_STATS_QUEUE_INTERVAL_MS": "5000",
		"QUEEN_STATS_KEEP_HOURS":        "24",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if s := cfg.Node.Stats; s.Interval != 0 || s.QueueInterval != 5*time.Second || s.Keep != 24*time.Hour {
		t.Fatalf("stats %+v", s)
	}
	for env, val := range map[string]string{
		"QUEEN_STATS_INTERVAL_MS":       "-1",
		"QUEEN_STATS_QUEUE_INTERVAL_MS": "10",
		"QUEEN_STATS_KEEP_HOURS":        "0",
	} {
		_, err := loadConfig(nil, envOf(map[string]string{env: val}))
		if err == nil || !strings.Contains(err.Error(), env) {
			t.Errorf("%s=%s: %v, want an error naming it", env, val, err)
		}
	}
}
