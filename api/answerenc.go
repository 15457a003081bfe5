package api

import "strconv"

// jsonAppender is an answer that writes its own JSON, byte for byte as
// encoding/json writes it with HTML escaping off; writeJSON appends it
// rather than encoding it by reflection. Push and batch-ack answers are
// written on every such request, 100 results each under the benchmark's
// load (TestAnswerAppendersMatchEncodingJSON holds the encodings equal).
type jsonAppender interface {
	appendJSON(b []byte) []byte
}

// pushResults is a push answer.
type pushResults []pushResult

func (rs pushResults) appendJSON(b []byte) []byte {
	if rs == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i := range rs {
		r := &rs[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"index":`...)
		b = strconv.AppendInt(b, int64(r.Index), 10)
		b = append(b, `,"status":`...)
		b = appendJSONString(b, string(r.Status))
		b = append(b, `,"transactionId":`...)
		b = appendJSONString(b, r.TransactionID)
		b = append(b, `,"transaction_id":`...)
		b = appendJSONString(b, r.TransactionIDSn)
		b = append(b, `,"message_id":`...)
		b = appendJSONStringOrNull(b, r.MessageID)
		b = append(b, `,"partition_id":`...)
		b = appendJSONStringOrNull(b, r.PartitionIDSn)
		b = append(b, `,"partitionId":`...)
		b = appendJSONStringOrNull(b, r.PartitionID)
		b = append(b, `,"trace_id":`...)
		b = appendJSONStringOrNull(b, r.TraceID)
		b = append(b, `,"queueName":`...)
		b = appendJSONString(b, r.QueueName)
		if r.Error != "" { // omitempty
			b = append(b, `,"error":`...)
			b = appendJSONString(b, r.Error)
		}
		b = append(b, '}')
	}
	return append(b, ']')
}

// ackResults is a single or batch ack answer.
type ackResults []ackResult

func (rs ackResults) appendJSON(b []byte) []byte {
	if rs == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i := range rs {
		r := &rs[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"index":`...)
		b = strconv.AppendInt(b, int64(r.Index), 10)
		b = append(b, `,"transactionId":`...)
		b = appendJSONString(b, r.TransactionID)
		b = append(b, `,"success":`...)
		b = strconv.AppendBool(b, r.Success)
		b = append(b, `,"error":`...)
		b = appendJSONStringOrNull(b, r.Error)
		b = append(b, `,"queueName":`...)
		b = appendJSONString(b, r.QueueName)
		b = append(b, `,"partitionName":`...)
		b = appendJSONString(b, r.PartitionName)
		b = append(b, `,"leaseReleased":`...)
		b = strconv.AppendBool(b, r.LeaseReleased)
		b = append(b, `,"dlq":`...)
		b = strconv.AppendBool(b, r.DLQ)
		b = append(b, '}')
	}
	return append(b, ']')
}
