package mesh

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"

	"queen-node/coalesce"
)

// Hint frame wire format, version 2 (docs/mesh.md, "Frames"):
//
//	byte 0       FrameHints
//	byte 1       FrameVersion (2)
//	bytes 2..34  stream header, big-endian: kind u8, incarnation u64,
//	             epoch u32, seq u64, prev u64, overflow u32
//	body         msgpack [sender, [[tenant, queue, [partition, ...]], ...]]
//
// Arrays and strings, no maps, no field names: a frame is mostly partition
// names. A hints frame carries at least one batch and every batch at least
// one partition; a heartbeat carries none. Every name is 1..MaxNameBytes
// bytes of valid UTF-8. The stream header is fixed-size so the flusher
// encodes a body once and stamps each peer's numbers into a copy.
//
// Version 1 (no stream header, always hints) is still decoded, so a node
// applies the hints of a not yet upgraded peer during a rolling upgrade; it
// carries no numbers, so losses on such a stream are left to the reseed
// floor. Nodes send only version 2.
const (
	FrameHints         byte = 1
	FrameVersion       byte = 2
	FrameVersion1      byte = 1
	MaxFrameBytes           = 64 << 10 // a frame never exceeds this, header included
	MaxHintsPerFrame        = 8192
	MaxBatchesPerFrame      = 1024
	MaxNameBytes            = 255 // tenant, queue, partition, sender
)

// ErrBadFrame is wrapped by every error of DecodeFrame, EncodeFrames and
// Sealer.Open, so receivers count rejections with one errors.Is.
var ErrBadFrame = errors.New("mesh: bad hint frame")

// Frame kinds of the stream header.
const (
	KindHints     byte = 0 // dirty hints; Seq numbers it
	KindHeartbeat byte = 1 // no hints; Seq repeats the last hints frame's number
)

// Stream numbers a frame within its sender's stream to one peer, so the
// receiver can tell that frames went missing (docs/mesh.md, "Loss
// detection"). Every value is accepted by the decoder; their meaning is
// the receiver's business.
type Stream struct {
	Kind        byte   // KindHints or KindHeartbeat
	Incarnation uint64 // random, chosen when the sender started: a new one is a restart
	Epoch       uint32 // the sender's connection count to this peer, from 1: a new one is a reconnect
	Seq         uint64 // hints frames numbered from 1 per epoch; a heartbeat repeats the last
	Prev        uint64 // the last Seq of the previous epoch (0 in epoch 1)
	Overflow    uint32 // hints the sender dropped for this peer before numbering since its last frame
}

// Frame is one decoded hint frame.
type Frame struct {
	Sender  string
	Batches []coalesce.Batch
	Version byte   // FrameVersion, or FrameVersion1 from an old sender (Stream is zero)
	Stream  Stream // version 2 only
}

// frameHeaderBytes is the type and version bytes before the stream header
// (version 2) or the msgpack body (version 1); streamHeaderBytes is the
// stream header.
const (
	frameHeaderBytes  = 2
	streamHeaderBytes = 1 + 8 + 4 + 8 + 8 + 4
	frameV2Header     = frameHeaderBytes + streamHeaderBytes
)

// StampStream writes s into the stream header of a version 2 frame made by
// EncodeFrames or EncodeHeartbeat.
func StampStream(frame []byte, s Stream) {
	h := frame[frameHeaderBytes:frameV2Header]
	h[0] = s.Kind
	binary.BigEndian.PutUint64(h[1:], s.Incarnation)
	binary.BigEndian.PutUint32(h[9:], s.Epoch)
	binary.BigEndian.PutUint64(h[13:], s.Seq)
	binary.BigEndian.PutUint64(h[21:], s.Prev)
	binary.BigEndian.PutUint32(h[29:], s.Overflow)
}

func readStream(h []byte) Stream {
	return Stream{Kind: h[0], Incarnation: binary.BigEndian.Uint64(h[1:]), Epoch: binary.BigEndian.Uint32(h[9:]),
		Seq: binary.BigEndian.Uint64(h[13:]), Prev: binary.BigEndian.Uint64(h[21:]), Overflow: binary.BigEndian.Uint32(h[29:])}
}

// EncodeHeartbeat encodes a heartbeat frame (no hints) stamped with s
// (whose Kind it sets).
func EncodeHeartbeat(sender string, s Stream) ([]byte, error) {
	if err := frameCheckName("sender", sender); err != nil {
		return nil, err
	}
	f, err := frameEncode(sender, framePlan{size: frameV2Header + frameArrSize(2) + frameStrSize(len(sender)) + frameArrSize(0)})
	if err != nil {
		return nil, err
	}
	s.Kind = KindHeartbeat
	StampStream(f, s)
	return f, nil
}

func frameErrorf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrBadFrame}, args...)...)
}

// frameCheckName applies the naming rule both sides enforce, so an encoder
// never produces a frame its peers would reject.
func frameCheckName(what, s string) error {
	switch {
	case s == "":
		return frameErrorf("empty %s", what)
	case len(s) > MaxNameBytes:
		return frameErrorf("%s of %d bytes exceeds %d", what, len(s), MaxNameBytes)
	case !utf8.ValidString(s):
		return frameErrorf("%s is not valid UTF-8", what)
	}
	return nil
}

// frameStrSize is the msgpack size of a string of n <= MaxNameBytes bytes,
// as msgpack/v5 encodes it (shortest form).
func frameStrSize(n int) int {
	if n < 32 {
		return 1 + n
	}
	return 2 + n
}

// frameArrSize is the msgpack size of an array header for n elements
// (n < 1<<16, guaranteed by the per-frame limits).
func frameArrSize(n int) int {
	if n < 16 {
		return 1
	}
	return 3
}

// framePlan is one frame to encode and its exact encoded size.
type framePlan struct {
	batches []coalesce.Batch
	hints   int
	size    int
}

// EncodeFrames encodes the hints of batches into frames of at most
// MaxFrameBytes, MaxBatchesPerFrame and MaxHintsPerFrame each, keeping the
// order of batches and partitions. A batch that does not fit in the current
// frame is split across frames. Batches without partitions are skipped, and
// no batches give no frames. An invalid name (empty, over MaxNameBytes, not
// UTF-8) fails the whole call with an error wrapping ErrBadFrame: peers would
// reject the frame anyway, and callers validate names long before this.
// The frames' stream headers are zero (kind hints): the sender stamps each
// copy with StampStream.
func EncodeFrames(sender string, batches []coalesce.Batch) ([][]byte, error) {
	frames, _, err := encodeFramesCounted(sender, batches)
	return frames, err
}

// encodeFramesCounted is EncodeFrames that also returns each frame's hint
// count, so the flusher need not decode what it just encoded.
func encodeFramesCounted(sender string, batches []coalesce.Batch) ([][]byte, []int, error) {
	if err := frameCheckName("sender", sender); err != nil {
		return nil, nil, err
	}
	// Sizes are computed exactly, not estimated, so that a frame right at
	// the limit is still one frame (the fuzz target relies on it).
	base := frameV2Header + frameArrSize(2) + frameStrSize(len(sender))
	var plans []framePlan
	cur := framePlan{size: base + frameArrSize(0)}
	for _, b := range batches {
		if len(b.Partitions) == 0 {
			continue
		}
		if err := frameCheckName("tenant", b.Tenant); err != nil {
			return nil, nil, err
		}
		if err := frameCheckName("queue", b.Queue); err != nil {
			return nil, nil, err
		}
		fixed := frameArrSize(3) + frameStrSize(len(b.Tenant)) + frameStrSize(len(b.Queue))
		parts := b.Partitions
		for len(parts) > 0 {
			if err := frameCheckName("partition", parts[0]); err != nil {
				return nil, nil, err
			}
			nb := len(cur.batches)
			first := frameArrSize(nb+1) - frameArrSize(nb) + fixed + frameArrSize(1) + frameStrSize(len(parts[0]))
			if nb+1 > MaxBatchesPerFrame || cur.hints+1 > MaxHintsPerFrame || cur.size+first > MaxFrameBytes {
				plans = append(plans, cur)
				cur = framePlan{size: base + frameArrSize(0)}
				first = frameArrSize(1) - frameArrSize(0) + fixed + frameArrSize(1) + frameStrSize(len(parts[0]))
			}
			cur.size += first
			cur.hints++
			k := 1
			for ; k < len(parts) && cur.hints < MaxHintsPerFrame; k++ {
				if err := frameCheckName("partition", parts[k]); err != nil {
					return nil, nil, err
				}
				add := frameArrSize(k+1) - frameArrSize(k) + frameStrSize(len(parts[k]))
				if cur.size+add > MaxFrameBytes {
					break
				}
				cur.size += add
				cur.hints++
			}
			cur.batches = append(cur.batches, coalesce.Batch{Tenant: b.Tenant, Queue: b.Queue, Partitions: parts[:k:k]})
			parts = parts[k:]
		}
	}
	if len(cur.batches) > 0 {
		plans = append(plans, cur)
	}

	frames := make([][]byte, 0, len(plans))
	counts := make([]int, 0, len(plans))
	for _, p := range plans {
		f, err := frameEncode(sender, p)
		if err != nil {
			return nil, nil, err
		}
		frames = append(frames, f)
		counts = append(counts, p.hints)
	}
	return frames, counts, nil
}

func frameEncode(sender string, p framePlan) ([]byte, error) {
	var buf bytes.Buffer
	buf.Grow(p.size)
	buf.WriteByte(FrameHints)
	buf.WriteByte(FrameVersion)
	var zero [streamHeaderBytes]byte
	buf.Write(zero[:])
	enc := msgpack.NewEncoder(&buf)
	// Writes to a bytes.Buffer cannot fail; the size check below catches
	// any drift between the plan and the encoder.
	_ = enc.EncodeArrayLen(2)
	_ = enc.EncodeString(sender)
	_ = enc.EncodeArrayLen(len(p.batches))
	for _, b := range p.batches {
		_ = enc.EncodeArrayLen(3)
		_ = enc.EncodeString(b.Tenant)
		_ = enc.EncodeString(b.Queue)
		_ = enc.EncodeArrayLen(len(b.Partitions))
		for _, s := range b.Partitions {
			_ = enc.EncodeString(s)
		}
	}
	if buf.Len() != p.size || buf.Len() > MaxFrameBytes {
		return nil, fmt.Errorf("mesh: encoded hint frame is %d bytes, planned %d (limit %d)", buf.Len(), p.size, MaxFrameBytes)
	}
	return buf.Bytes(), nil
}

// frameDecoder reads a frame body with the low-level msgpack calls, checking
// every length against the limits and the bytes left before allocating.
type frameDecoder struct {
	r       *bytes.Reader // unbuffered by the decoder (it is an io.ByteScanner), so r.Len() is exact
	d       *msgpack.Decoder
	scratch [MaxNameBytes]byte
}

// arrayLen reads an array header with min <= n <= max. Each element takes
// at least one byte, so n is also checked against the bytes left: a tiny
// input claiming a huge array fails here, before any allocation.
func (fd *frameDecoder) arrayLen(what string, lo, hi int) (int, error) {
	c, err := fd.d.PeekCode()
	if err != nil {
		return 0, frameErrorf("%s: truncated", what)
	}
	if !msgpcode.IsFixedArray(c) && c != msgpcode.Array16 && c != msgpcode.Array32 {
		return 0, frameErrorf("%s: msgpack code 0x%02x is not an array", what, c)
	}
	n, err := fd.d.DecodeArrayLen()
	if err != nil {
		return 0, frameErrorf("%s: %v", what, err)
	}
	if n < lo || n > hi {
		return 0, frameErrorf("%s: %d elements, want %d..%d", what, n, lo, hi)
	}
	if n > fd.r.Len() {
		return 0, frameErrorf("%s: %d elements but only %d bytes left", what, n, fd.r.Len())
	}
	return n, nil
}

// name reads a non-empty UTF-8 string of at most MaxNameBytes. It does not
// use DecodeString, which also accepts nil and binary values and allocates
// by the claimed length before reading: the length is checked first here,
// and the bytes land in a fixed scratch buffer.
func (fd *frameDecoder) name(what string) (string, error) {
	c, err := fd.d.PeekCode()
	if err != nil {
		return "", frameErrorf("%s: truncated", what)
	}
	if !msgpcode.IsFixedString(c) && c != msgpcode.Str8 && c != msgpcode.Str16 && c != msgpcode.Str32 {
		return "", frameErrorf("%s: msgpack code 0x%02x is not a string", what, c)
	}
	n, err := fd.d.DecodeBytesLen()
	if err != nil {
		return "", frameErrorf("%s: %v", what, err)
	}
	switch {
	case n <= 0:
		return "", frameErrorf("empty %s", what)
	case n > MaxNameBytes:
		return "", frameErrorf("%s of %d bytes exceeds %d", what, n, MaxNameBytes)
	case n > fd.r.Len():
		return "", frameErrorf("%s: %d bytes claimed, %d left", what, n, fd.r.Len())
	}
	b := fd.scratch[:n]
	if err := fd.d.ReadFull(b); err != nil {
		return "", frameErrorf("%s: %v", what, err)
	}
	if !utf8.Valid(b) {
		return "", frameErrorf("%s is not valid UTF-8", what)
	}
	return string(b), nil
}

// DecodeFrame decodes and validates one frame. It is strict: any deviation
// from the format (size, type, version, structure, counts, names, trailing
// bytes) is an error wrapping ErrBadFrame, and nothing of a bad frame is
// returned. Allocation is bounded by len(b).
func DecodeFrame(b []byte) (Frame, error) {
	if len(b) > MaxFrameBytes {
		return Frame{}, frameErrorf("%d bytes exceeds %d", len(b), MaxFrameBytes)
	}
	if len(b) < frameHeaderBytes {
		return Frame{}, frameErrorf("truncated header (%d bytes)", len(b))
	}
	if b[0] != FrameHints {
		return Frame{}, frameErrorf("unknown frame type %d", b[0])
	}
	var st Stream
	body := b[frameHeaderBytes:]
	switch b[1] {
	case FrameVersion:
		if len(b) < frameV2Header {
			return Frame{}, frameErrorf("truncated stream header (%d bytes)", len(b))
		}
		st = readStream(b[frameHeaderBytes:frameV2Header])
		if st.Kind != KindHints && st.Kind != KindHeartbeat {
			return Frame{}, frameErrorf("unknown frame kind %d", st.Kind)
		}
		body = b[frameV2Header:]
	case FrameVersion1:
	default:
		return Frame{}, frameErrorf("unsupported frame version %d", b[1])
	}
	// A heartbeat has no batches; a hints frame (and every version 1 frame)
	// at least one.
	minBatches, maxBatches := 1, MaxBatchesPerFrame
	if b[1] == FrameVersion && st.Kind == KindHeartbeat {
		minBatches, maxBatches = 0, 0
	}
	fd := &frameDecoder{r: bytes.NewReader(body)}
	fd.d = msgpack.NewDecoder(fd.r)

	if _, err := fd.arrayLen("frame", 2, 2); err != nil {
		return Frame{}, err
	}
	sender, err := fd.name("sender")
	if err != nil {
		return Frame{}, err
	}
	nb, err := fd.arrayLen("batches", minBatches, maxBatches)
	if err != nil {
		return Frame{}, err
	}
	batches := make([]coalesce.Batch, 0, nb)
	hints := 0
	for range nb {
		if _, err := fd.arrayLen("batch", 3, 3); err != nil {
			return Frame{}, err
		}
		tenant, err := fd.name("tenant")
		if err != nil {
			return Frame{}, err
		}
		queue, err := fd.name("queue")
		if err != nil {
			return Frame{}, err
		}
		np, err := fd.arrayLen("partitions", 1, MaxHintsPerFrame-hints)
		if err != nil {
			return Frame{}, err
		}
		hints += np
		parts := make([]string, 0, np)
		for range np {
			p, err := fd.name("partition")
			if err != nil {
				return Frame{}, err
			}
			parts = append(parts, p)
		}
		batches = append(batches, coalesce.Batch{Tenant: tenant, Queue: queue, Partitions: parts})
	}
	if n := fd.r.Len(); n != 0 {
		return Frame{}, frameErrorf("%d trailing bytes", n)
	}
	return Frame{Sender: sender, Batches: batches, Version: b[1], Stream: st}, nil
}
