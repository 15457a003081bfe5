package api

import (
	"strconv"
	"unicode/utf8"

	"queen-node/broker"
)

// appendPopMessage appends one message of a pop answer as encoding/json
// would write popMessage (HTML escaping off), without encoding/json: its
// RawMessage path re-validates and compacts every payload, which cost the
// node most of its CPU per delivered message. Payloads come from
// PostgreSQL's json column, valid and stored as the push sent them
// (compact: the API compacts them), so they are copied as they are.
// TestAppendPopMessageMatchesEncodingJSON holds the two encodings equal.
func appendPopMessage(b []byte, m *broker.Message) []byte {
	b = append(b, `{"id":`...)
	b = appendJSONString(b, m.ID)
	b = append(b, `,"transactionId":`...)
	b = appendJSONString(b, m.TransactionID)
	b = append(b, `,"traceId":`...)
	b = appendJSONStringOrNull(b, m.TraceID)
	b = append(b, `,"data":`...)
	if len(m.Data) == 0 {
		b = append(b, "null"...)
	} else {
		b = append(b, m.Data...)
	}
	b = append(b, `,"createdAt":"`...)
	b = m.CreatedAt.UTC().AppendFormat(b, layoutMicro)
	b = append(b, `","queue":`...)
	b = appendJSONString(b, m.Queue)
	b = append(b, `,"partition":`...)
	b = appendJSONString(b, m.Partition)
	b = append(b, `,"partitionId":`...)
	b = appendJSONString(b, m.PartitionID)
	b = append(b, `,"leaseId":`...)
	b = appendJSONString(b, m.LeaseID)
	b = append(b, `,"consumerGroup":`...)
	b = appendJSONString(b, m.ConsumerGroup)
	b = append(b, `,"producerSub":`...)
	b = appendJSONStringOrNull(b, m.ProducerSub)
	b = append(b, `,"retryCount":`...)
	b = strconv.AppendInt(b, int64(m.RetryCount), 10)
	return append(b, '}')
}

func appendJSONStringOrNull(b []byte, s *string) []byte {
	if s == nil {
		return append(b, "null"...)
	}
	return appendJSONString(b, *s)
}

const hexDigits = "0123456789abcdef"

// appendJSONString quotes s as encoding/json does with HTML escaping off:
// `"` and `\` escaped, control characters as \n, \r, \t, \b, \f or \u00XX, U+2028
// and U+2029 as \u2028 and \u2029, invalid UTF-8 as \ufffd.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
