package api

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"queen-node/broker"
	"queen-node/hotlist"
)

// HotlistView: the fake broker has no hot-list (as with QUEEN_HOTLIST=0),
// unless a test sets hotlistView.
func (f *fakeBroker) HotlistView(tenant, queue string, maxParts int) broker.HotlistView {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.hotlistView != nil {
		return *f.hotlistView
	}
	return broker.HotlistView{Node: "fake"}
}

// TestHotlistViewWithinReadBudget: a view whose rings list more than the
// read budget holds stops listing at it and says so per ring and for the
// rings (docs/api.md, "Read answers"); the counts stay whole.
func TestHotlistViewWithinReadBudget(t *testing.T) {
	const budget = 64 << 10
	tb := setup(t, func(c *Config) { c.MaxReadBytes = budget })
	v := broker.HotlistView{Node: "fake", Enabled: true, Registered: true}
	for g := range 10 {
		r := hotlist.RingView{Group: fmt.Sprintf("g%d", g), Ready: 1000}
		for i := range 1000 {
			r.Entries = append(r.Entries, hotlist.EntryView{Name: fmt.Sprintf("%0255d", i), State: hotlist.Ready})
		}
		v.Rings = append(v.Rings, r)
	}
	tb.fb.hotlistView = &v
	res := tb.do("GET", "/api/v1/status/hotlist/q?limit=1000", "")
	if res.status != 200 || len(res.body) > budget+4096 {
		t.Fatalf("status %d, %d bytes for a budget of %d", res.status, len(res.body), budget)
	}
	var out struct {
		Rings []struct {
			Ready               int
			Partitions          []json.RawMessage
			PartitionsTruncated bool
		}
		RingsTruncated bool
	}
	if err := json.Unmarshal(res.body, &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Rings) != 1 || !out.Rings[0].PartitionsTruncated || !out.RingsTruncated || out.Rings[0].Ready != 1000 ||
		len(out.Rings[0].Partitions) == 0 || !strings.Contains(string(out.Rings[0].Partitions[0]), "000") {
		t.Fatalf("rings %d, ring 0: %d partitions, truncated %v, ready %d; rings truncated %v",
			len(out.Rings), len(out.Rings[0].Partitions), out.Rings[0].PartitionsTruncated, out.Rings[0].Ready, out.RingsTruncated)
	}
}
