package bench

import (
	"errors"
	"fmt"

	"github.com/valyala/fastjson"

	"queen-node/protocol"
)

// The load generator shares the machine's cores with the node and
// PostgreSQL, so its own CPU per message lowers what it measures. Decoding
// pop, ack and push answers with encoding/json (reflection, a validating
// pre-pass, then a second parse of each payload) was about 40% of its CPU
// (docs/benchmarks.md, "ninth session"). fastjson validates each answer,
// parses it once into a reused tree, and the payload's fields are read
// from that tree.

// decoder holds one worker's parser; the values it returns do not alias
// the parser's memory, so they outlive the next call.
type decoder struct {
	p fastjson.Parser
}

// parse validates an answer and parses it. The parser alone lets invalid
// escapes and numbers such as 01 through, which encoding/json refused, and
// catching a node's malformed output is part of the benchmark's job;
// fastjson's validator refuses those and raw control characters in strings.
func (d *decoder) parse(body []byte) (*fastjson.Value, error) {
	if err := fastjson.ValidateBytes(body); err != nil {
		return nil, err
	}
	return d.p.ParseBytes(body)
}

// objects returns the elements of an array of objects.
func objects(v *fastjson.Value) ([]*fastjson.Value, error) {
	arr, err := v.Array()
	if err != nil {
		return nil, err
	}
	for i, a := range arr {
		if a.Type() != fastjson.TypeObject {
			return nil, fmt.Errorf("item %d is not an object", i)
		}
	}
	return arr, nil
}

// popDecoded is one message of a pop answer: what the ack needs, where it
// came from, and its payload (ok false: not a payload of this benchmark).
type popDecoded struct {
	msg     popMsg
	payload Payload
	ok      bool
	foreign string // !ok: the start of the data, for the error log
}

// pop decodes a 200 pop answer: {"messages":[{transactionId, partitionId,
// partition, leaseId, data}, ...], ...}.
func (d *decoder) pop(body []byte) ([]popDecoded, error) {
	v, err := d.parse(body)
	if err != nil {
		return nil, err
	}
	ms := v.Get("messages")
	if ms == nil {
		return nil, errors.New(`no "messages" array`)
	}
	arr, err := objects(ms)
	if err != nil {
		return nil, fmt.Errorf("messages: %w", err)
	}
	out := make([]popDecoded, len(arr))
	for i, m := range arr {
		out[i].msg = popMsg{
			TransactionID: string(m.GetStringBytes("transactionId")),
			PartitionID:   string(m.GetStringBytes("partitionId")),
			Partition:     string(m.GetStringBytes("partition")),
			LeaseID:       string(m.GetStringBytes("leaseId")),
		}
		data := m.Get("data")
		out[i].payload, out[i].ok = payloadOf(data)
		if !out[i].ok {
			raw := "(none)"
			if data != nil {
				raw = string(data.MarshalTo(nil))
			}
			out[i].foreign = raw[:min(len(raw), 40)]
		}
	}
	return out, nil
}

// payloadOf reads a Payload from a message's data: an object whose "p",
// "s" and "t" are integers.
func payloadOf(v *fastjson.Value) (Payload, bool) {
	if v == nil || v.Type() != fastjson.TypeObject {
		return Payload{}, false
	}
	var n [3]int64
	for i, k := range [3]string{"p", "s", "t"} {
		f := v.Get(k)
		if f == nil {
			return Payload{}, false
		}
		var err error
		if n[i], err = f.Int64(); err != nil {
			return Payload{}, false
		}
	}
	return Payload{P: int(n[0]), S: n[1], T: n[2]}, true
}

// items decodes an answer that is an array of objects, one item each.
func items[T any](d *decoder, body []byte, item func(*fastjson.Value) T) ([]T, error) {
	v, err := d.parse(body)
	if err != nil {
		return nil, err
	}
	arr, err := objects(v)
	if err != nil {
		return nil, err
	}
	out := make([]T, len(arr))
	for i, a := range arr {
		out[i] = item(a)
	}
	return out, nil
}

// acks decodes a batch ack answer: [{"success":bool,"error":string|null}, ...].
func (d *decoder) acks(body []byte) ([]ackResult, error) {
	return items(d, body, func(a *fastjson.Value) ackResult {
		return ackResult{Success: a.GetBool("success"), Error: string(a.GetStringBytes("error"))}
	})
}

// push decodes a push answer: [{"status":..., "error":...}, ...].
func (d *decoder) push(body []byte) ([]pushItem, error) {
	return items(d, body, func(a *fastjson.Value) pushItem {
		return pushItem{Status: protocol.PushStatus(a.GetStringBytes("status")), Error: string(a.GetStringBytes("error"))}
	})
}
