package api

import (
	"encoding/json"
	"strings"
	"testing"

	"queen-node/broker"
	"queen-node/forward"
)

// What a forward sends (forward.EncodeBody) is a push body this node's
// decoders take back unchanged, on both paths: a name of every control
// character, quotes and backslashes, non-ASCII, a null payload, a trace id.
func TestForwardedBodyDecodes(t *testing.T) {
	trace := "0190b6f4-7c3a-7d1e-9a4b-2f6c8d0e1a2b"
	var ctl strings.Builder
	for c := byte(1); c < 0x20; c++ {
		ctl.WriteByte(c)
	}
	items := []broker.PushItem{
		{Queue: `q"\` + ctl.String(), Partition: "π/ü\u2028", TransactionID: "t\tx", TraceID: &trace,
			Payload: json.RawMessage(`{"a":[1,"x\"y"],"b":null}`)},
		{Queue: "q", Partition: "p", TransactionID: "t", Payload: json.RawMessage(`null`)},
		{Queue: "q", Partition: "p", TransactionID: "u", Payload: json.RawMessage(`{}`)},
	}
	body := forward.EncodeBody(items)
	fast, ok := fastPushItems(body, 10)
	if !ok {
		t.Fatalf("the one-pass decoder declined %s", body)
	}
	slow, err := slowPushItems(body, 10)
	if err != nil {
		t.Fatalf("the field-by-field decoder refused %s: %v", body, err)
	}
	for _, got := range [][]broker.PushItem{fast, slow} {
		if len(got) != len(items) {
			t.Fatalf("%d items decoded", len(got))
		}
		for i, it := range items {
			g := got[i]
			if g.Queue != it.Queue || g.Partition != it.Partition || g.TransactionID != it.TransactionID ||
				string(g.Payload) != string(it.Payload) || (g.TraceID == nil) != (it.TraceID == nil) {
				t.Fatalf("item %d decoded as %+v, sent %+v", i, g, it)
			}
		}
	}
	// Short escapes: a name of tabs grows by one byte per tab, not five.
	tabs := strings.Repeat("\t", 100)
	if n := len(forward.EncodeBody([]broker.PushItem{{Queue: tabs, TransactionID: "t"}})); n > 200+60 {
		t.Fatalf("a name of 100 tabs takes %d bytes", n)
	}
}
