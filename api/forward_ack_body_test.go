package api

import (
	"reflect"
	"strings"
	"testing"

	"queen-node/broker"
	"queen-node/forward"
)

// What an ack forward sends (forward.EncodeAcks) is a batch ack body this
// node's decoders take back unchanged, on both paths: names of control
// characters, quotes and backslashes, non-ASCII, an empty status (absent),
// the default group (named), an unknown status (passed on for the broker
// to refuse), errors with quotes, escapes and non-ASCII.
func TestForwardedAckBodyDecodes(t *testing.T) {
	var ctl strings.Builder
	for c := byte(1); c < 0x20; c++ {
		ctl.WriteByte(c)
	}
	items := []broker.AckItem{
		{TransactionID: `t"\` + ctl.String(), PartitionID: "π/ü\u2028😀", Status: "completed",
			Group: `g"\` + "\t", LeaseID: "lease\\1\u2029", Error: "say \"no\"\\\n\ttab\r\b\f ошибка"},
		{TransactionID: "t2", PartitionID: "p"}, // nothing optional: completed, queue mode
		{TransactionID: "t3", PartitionID: "p", Status: "maybe", Group: broker.QueueMode, Error: `quoted "reason"`},
		{TransactionID: "t4", PartitionID: "p2", Status: "failed", Group: "grp", LeaseID: "L", Error: "plain short"},
		{TransactionID: "t5", PartitionID: "p2", Status: "retry", Group: "grp", LeaseID: "L", Error: "ошибка – π 😀"},
		{TransactionID: "t6", PartitionID: "p2", Status: "failed", Group: "grp", Error: "\x01\x1f"},
	}
	want := make([]broker.AckItem, len(items))
	copy(want, items)
	for i := range want {
		if want[i].Group == "" {
			want[i].Group = broker.QueueMode
		}
	}
	body := forward.EncodeAcks(items)
	fast, ok := fastAckItems(body, 10)
	if !ok {
		t.Fatalf("the one-pass decoder declined %s", body)
	}
	slow, err := slowAckItems(body, 10)
	if err != nil {
		t.Fatalf("the field-by-field decoder refused %s: %v", body, err)
	}
	both, err := decodeAckBatch(body, 10)
	if err != nil {
		t.Fatal(err)
	}
	for name, got := range map[string][]broker.AckItem{"fast": fast, "slow": slow, "decodeAckBatch": both} {
		if len(got) != len(want) {
			t.Fatalf("%s: %d items decoded", name, len(got))
		}
		for i := range want {
			if !reflect.DeepEqual(got[i], want[i]) {
				t.Fatalf("%s: item %d decoded as %+v, sent %+v", name, i, got[i], want[i])
			}
		}
	}
}
