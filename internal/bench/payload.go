package bench

import "strconv"

// Payload is what every message carries: who pushed it, its sequence number
// in that producer's stream, and the time the latency is measured from (the
// scheduled send time in open loop, the send time otherwise; Unix ns).
type Payload struct {
	P int   // "p"
	S int64 // "s"
	T int64 // "t"
}

// appendPayload appends the message's JSON to buf, padded with an "x"
// string so the object is about size bytes.
func appendPayload(buf []byte, p int, s, t int64, size int) []byte {
	start := len(buf)
	buf = append(buf, `{"p":`...)
	buf = strconv.AppendInt(buf, int64(p), 10)
	buf = append(buf, `,"s":`...)
	buf = strconv.AppendInt(buf, s, 10)
	buf = append(buf, `,"t":`...)
	buf = strconv.AppendInt(buf, t, 10)
	buf = append(buf, `,"x":"`...)
	for pad := size - (len(buf) - start) - 2; pad > 0; pad-- {
		buf = append(buf, 'x')
	}
	return append(buf, `"}`...)
}
