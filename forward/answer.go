package forward

import (
	"encoding/json"

	"queen-node/internal/jsonscan"
	"queen-node/protocol"
)

// The owner's answers to forwarded pushes and acks are decoded on every
// forwarded request: with encoding/json that was 16-26% of a non-owner's
// CPU (docs/benchmarks.md, "sixteenth session"). parsePeerResults and
// parsePeerAcks read them in one pass and fall back to encoding/json for
// anything the one-pass readers decline (jsonscan), so what they return is
// always what encoding/json would.

// parsePeerResults decodes the owner's push answer as
// json.Unmarshal(body, &out) does.
func parsePeerResults(body []byte, n int) ([]peerResult, error) {
	if prs, ok := fastPeerResults(body, n); ok {
		return prs, nil
	}
	var prs []peerResult
	err := json.Unmarshal(body, &prs)
	return prs, err
}

// parsePeerAcks decodes the owner's ack answer as json.Unmarshal(body,
// &out) does.
func parsePeerAcks(body []byte, n int) ([]peerAck, error) {
	if pas, ok := fastPeerAcks(body, n); ok {
		return pas, nil
	}
	var pas []peerAck
	err := json.Unmarshal(body, &pas)
	return pas, err
}

// peerResultKeys and peerAckKeys are the members the one-pass readers
// decode; another key that matches one of them but for case declines.
var (
	peerResultKeys = []string{"index", "status", "transactionId", "message_id", "partitionId", "trace_id", "queueName", "error"}
	peerAckKeys    = []string{"index", "transactionId", "success", "error", "queueName", "partitionName", "leaseReleased", "dlq"}
)

// fastPeerResults reads a push answer: an array of flat objects. n, the
// items sent, only sizes the slice and bounds it (a longer answer is
// wrong anyway, and is left to the general path to say so). Names that
// repeat from one result to the next share the previous one's string.
func fastPeerResults(body []byte, n int) ([]peerResult, bool) {
	s := jsonscan.Scanner{Data: body}
	if s.Peek() != '[' {
		return nil, false
	}
	prs, ok := jsonscan.Array(&s, n, func(prev peerResult) (peerResult, bool) {
		return peerResultAt(&s, &prev)
	})
	return prs, ok && s.AtEnd()
}

func peerResultAt(s *jsonscan.Scanner, prev *peerResult) (p peerResult, ok bool) {
	if !objectStart(s) {
		return p, false
	}
	for first := true; ; first = false {
		key, escaped, done, ok := s.Member(first)
		switch {
		case !ok:
			return p, false
		case done:
			return p, true
		}
		switch string(key) {
		case "index":
			ok = intPtr(s, &p.Index)
		case "status":
			st := string(p.Status)
			ok = plainString(s, &st, string(prev.Status))
			p.Status = protocol.PushStatus(st)
		case "transactionId":
			ok = plainString(s, &p.TransactionID, "")
		case "message_id":
			ok = stringPtr(s, &p.MessageID, nil)
		case "partitionId":
			ok = stringPtr(s, &p.PartitionID, prev.PartitionID)
		case "trace_id":
			ok = stringPtr(s, &p.TraceID, nil)
		case "queueName":
			ok = plainString(s, &p.QueueName, prev.QueueName)
		case "error":
			ok = plainString(s, &p.Error, "")
		default:
			ok = skipMember(s, key, escaped, peerResultKeys)
		}
		if !ok {
			return p, false
		}
	}
}

// fastPeerAcks reads an ack answer, as fastPeerResults a push answer.
func fastPeerAcks(body []byte, n int) ([]peerAck, bool) {
	s := jsonscan.Scanner{Data: body}
	if s.Peek() != '[' {
		return nil, false
	}
	pas, ok := jsonscan.Array(&s, n, func(prev peerAck) (peerAck, bool) {
		return peerAckAt(&s, &prev)
	})
	return pas, ok && s.AtEnd()
}

func peerAckAt(s *jsonscan.Scanner, prev *peerAck) (p peerAck, ok bool) {
	if !objectStart(s) {
		return p, false
	}
	for first := true; ; first = false {
		key, escaped, done, ok := s.Member(first)
		switch {
		case !ok:
			return p, false
		case done:
			return p, true
		}
		switch string(key) {
		case "index":
			ok = intPtr(s, &p.Index)
		case "transactionId":
			ok = plainString(s, &p.TransactionID, "")
		case "success":
			ok = boolean(s, &p.Success)
		case "error":
			ok = stringPtr(s, &p.Error, nil)
		case "queueName":
			ok = plainString(s, &p.QueueName, prev.QueueName)
		case "partitionName":
			ok = plainString(s, &p.PartitionName, prev.PartitionName)
		case "leaseReleased":
			ok = boolean(s, &p.LeaseReleased)
		case "dlq":
			ok = boolean(s, &p.DLQ)
		default:
			ok = skipMember(s, key, escaped, peerAckKeys)
		}
		if !ok {
			return p, false
		}
	}
}

// objectStart reads the '{' of an object at Pos.
func objectStart(s *jsonscan.Scanner) bool {
	if s.Pos >= len(s.Data) || s.Data[s.Pos] != '{' {
		return false
	}
	s.Pos++
	return true
}

// skipMember skips the value of a member the reader does not use, and
// declines a key that encoding/json might match to a known one.
func skipMember(s *jsonscan.Scanner, key []byte, escaped bool, known []string) bool {
	return !jsonscan.UnknownKey(key, escaped, known...) && s.SkipValue(2)
}

// plainString reads a string into *v; null leaves *v as it was, as
// encoding/json does for a string field. A value equal to prev (the same
// field of the result before) is prev's string.
func plainString(s *jsonscan.Scanner, v *string, prev string) bool {
	if s.Null() {
		return true
	}
	var f jsonscan.Field
	if !s.StringField(&f) {
		return false
	}
	t, ok := f.Text(prev)
	*v = t
	return ok
}

// stringPtr reads a string or null into *v (null is nil). A value equal
// to *prev shares prev's bytes (strings are immutable) under a pointer of
// its own, so a caller that sets one result's field changes no other.
func stringPtr(s *jsonscan.Scanner, v **string, prev *string) bool {
	if s.Null() {
		*v = nil
		return true
	}
	var f jsonscan.Field
	if !s.StringField(&f) {
		return false
	}
	if prev != nil && !f.Escaped && string(f.Raw) == *prev {
		t := *prev
		*v = &t
		return true
	}
	t, ok := f.Text("")
	*v = &t
	return ok
}

// intPtr reads an integer or null into *v (null is nil).
func intPtr(s *jsonscan.Scanner, v **int) bool {
	if s.Null() {
		*v = nil
		return true
	}
	n, ok := s.Int()
	if ok {
		*v = &n
	}
	return ok
}

// boolean reads true, false or null (which leaves *v as it was).
func boolean(s *jsonscan.Scanner, v *bool) bool {
	switch {
	case s.Null():
	case s.Literal("true"):
		*v = true
	case s.Literal("false"):
		*v = false
	default:
		return false
	}
	return true
}
