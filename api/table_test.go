package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"queen-node/broker"
	"queen-node/hotlist"
	"queen-node/mesh"
)

// The table's own rules: a number always has a series, text never does,
// and no field or series is defined twice.
func TestTableRules(t *testing.T) {
	paths := map[string]bool{}
	series := map[string]bool{}
	for _, r := range Table {
		switch {
		case r.Kind == Doc && r.Metric != "":
			t.Errorf("%s: a Doc row names metric %s", r.Status, r.Metric)
		case r.Kind != Doc && r.Metric == "":
			t.Errorf("%s: kind %v without a metric", r.Status, r.Kind)
		case (r.Field == nil) == (r.Count == nil):
			t.Errorf("%s: want exactly one of Field and Count", r.Status)
		case r.Count != nil && r.Kind == Info:
			t.Errorf("%s: an Info row takes its label from a Field", r.Status)
		}
		if r.Field != nil {
			if paths[r.Status] {
				t.Errorf("%s: two rows write this field", r.Status)
			}
			paths[r.Status] = true
		}
		if r.Metric != "" {
			k := r.Metric + "{" + r.Label.Name + "=" + r.Label.Value + "}"
			if series[k] {
				t.Errorf("%s: series %s defined twice", r.Status, k)
			}
			series[k] = true
		}
	}
}

// A document written from a snapshot reads back into the same snapshot:
// the CLI sees what the node wrote.
func TestStatusRoundTrip(t *testing.T) {
	s := &Snapshot{
		Snapshot: broker.Snapshot{
			Hotlist: broker.HotlistSnapshot{TopRings: []hotlist.RingStat{{Tenant: "t", Queue: "q", Group: "g", Ready: 1, Wheel: 2, Inflight: 3}}},
			Mesh:    broker.MeshSnapshot{Members: []mesh.Member{{Name: "a", Addr: "h:1", HTTPAddr: "h:2", State: "alive", Self: true}}},
		},
		Version: "v<&>", HTTPAddr: "h:2", Tenant: "t", StartedAt: time.Unix(0, 0).UTC().Format(time.RFC3339),
	}
	// A distinct value in every number and flag.
	for i, r := range Table {
		if r.Field == nil || r.Kind == Doc || r.Kind == Info {
			continue
		}
		if r.Kind == Histogram {
			raw := fmt.Appendf(nil, `{"counts":[%d,0,0,0,0,0,0,0,0,0,0,0,0],"count":%d,"sum_ms":%d}`, i, i, 2*i)
			if err := r.Field.set(s, raw); err != nil {
				t.Fatalf("%s: %v", r.Status, err)
			}
			continue
		}
		if err := r.Field.set(s, json.RawMessage(strconv.Itoa(i+1))); err != nil {
			if err := r.Field.set(s, json.RawMessage("true")); err != nil {
				t.Fatalf("%s: %v", r.Status, err)
			}
		}
	}
	doc, err := EncodeStatus(s)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(doc, []byte("{\n  \"node\": {\n    \"name\"")) || !bytes.Contains(doc, []byte(`"v<&>"`)) {
		t.Errorf("not the indented, unescaped document:\n%s", doc)
	}
	back, err := DecodeStatus(doc)
	if err != nil {
		t.Fatal(err)
	}
	again, err := EncodeStatus(back)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(doc, again) {
		t.Errorf("round trip changed the document:\n%s\nthen\n%s", doc, again)
	}
	if back.Requests.AcksRefused == 0 || back.Mesh.InboundRefusedNotMember == 0 || !back.Mesh.Enabled {
		t.Errorf("fields lost: %+v", back)
	}
}

// A document that lacks fields (an older node) or has nulls still reads.
func TestDecodeStatusTolerates(t *testing.T) {
	s, err := DecodeStatus([]byte(`{"node":{"name":"old"},"mesh":{"members":null},"extra":1}`))
	if err != nil || s.Name != "old" || s.Mesh.Members != nil {
		t.Fatalf("%+v %v", s, err)
	}
	if _, err := DecodeStatus([]byte(`{"requests":{"pushes":"many"}}`)); err == nil {
		t.Fatal("a text count decoded")
	}
}
