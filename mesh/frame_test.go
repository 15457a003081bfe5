package mesh

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"queen-node/coalesce"
)

// frameStream is the stream header frameRaw gives a version 2 frame: the
// first hints frame of a sender's first stream.
var frameStream = Stream{Kind: KindHints, Incarnation: 7, Epoch: 1, Seq: 1}

// frameStreamBytes is frameStream encoded.
func frameStreamBytes(s Stream) []byte {
	b := make([]byte, frameV2Header)
	StampStream(b, s)
	return b[frameHeaderBytes:]
}

// frameRaw builds a frame by hand: type and version, the stream header
// (frameStream) for version 2, then whatever body writes.
func frameRaw(typ, version byte, body func(e *msgpack.Encoder)) []byte {
	var buf bytes.Buffer
	buf.WriteByte(typ)
	buf.WriteByte(version)
	if version == FrameVersion {
		buf.Write(frameStreamBytes(frameStream))
	}
	body(msgpack.NewEncoder(&buf))
	return buf.Bytes()
}

// hv is a version 2 hints frame: header, frameStream, then body bytes.
func hv(body ...byte) []byte {
	return append(append([]byte{FrameHints, FrameVersion}, frameStreamBytes(frameStream)...), body...)
}

// frameBody writes [sender, [[tenant, queue, [parts...]]]] with plain calls.
func frameBody(sender, tenant, queue string, parts ...string) func(e *msgpack.Encoder) {
	return func(e *msgpack.Encoder) {
		_ = e.EncodeArrayLen(2)
		_ = e.EncodeString(sender)
		_ = e.EncodeArrayLen(1)
		_ = e.EncodeArrayLen(3)
		_ = e.EncodeString(tenant)
		_ = e.EncodeString(queue)
		_ = e.EncodeArrayLen(len(parts))
		for _, p := range parts {
			_ = e.EncodeString(p)
		}
	}
}

func frameValid() []byte {
	return frameRaw(FrameHints, FrameVersion, frameBody("node-a", "default", "orders", "p1", "p2"))
}

// frameFlatten lists the hints of frames' batches in order.
func frameFlatten(batches []coalesce.Batch) []coalesce.Hint {
	var out []coalesce.Hint
	for _, b := range batches {
		for _, p := range b.Partitions {
			out = append(out, coalesce.Hint{Tenant: b.Tenant, Queue: b.Queue, Partition: p})
		}
	}
	return out
}

func TestFrameRoundTrip(t *testing.T) {
	in := []coalesce.Batch{
		{Tenant: "default", Queue: "orders", Partitions: []string{"a", "b", "Default"}},
		{Tenant: "default", Queue: "emails", Partitions: []string{"x"}},
		{Tenant: "tenant-ü", Queue: "队列", Partitions: []string{strings.Repeat("p", MaxNameBytes)}},
	}
	frames, err := EncodeFrames("node-1", in)
	if err != nil {
		t.Fatal(err)
	}
	if len(frames) != 1 {
		t.Fatalf("%d frames, want 1", len(frames))
	}
	if frames[0][0] != FrameHints || frames[0][1] != FrameVersion {
		t.Fatalf("header % x", frames[0][:2])
	}
	got, err := DecodeFrame(frames[0])
	if err != nil {
		t.Fatal(err)
	}
	if want := (Frame{Sender: "node-1", Batches: in, Version: FrameVersion}); !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

func TestFrameEncodeNothing(t *testing.T) {
	for _, in := range [][]coalesce.Batch{nil, {{Tenant: "t", Queue: "q"}}} {
		frames, err := EncodeFrames("n", in)
		if err != nil || len(frames) != 0 {
			t.Fatalf("EncodeFrames(%v) = %d frames, %v", in, len(frames), err)
		}
	}
	// Batches without partitions are skipped, the others kept.
	frames, err := EncodeFrames("n", []coalesce.Batch{{Tenant: "t", Queue: "a"}, {Tenant: "t", Queue: "b", Partitions: []string{"p"}}})
	if err != nil || len(frames) != 1 {
		t.Fatalf("%d frames, %v", len(frames), err)
	}
	if f, _ := DecodeFrame(frames[0]); len(f.Batches) != 1 || f.Batches[0].Queue != "b" {
		t.Fatalf("decoded %+v", f)
	}
}

// frameCheckSplit encodes in, checks every frame against every limit, and
// checks the decoded hints equal the input hints in order.
func frameCheckSplit(t *testing.T, in []coalesce.Batch) [][]byte {
	t.Helper()
	frames, err := EncodeFrames("sender", in)
	if err != nil {
		t.Fatal(err)
	}
	var out []coalesce.Batch
	for i, f := range frames {
		if len(f) > MaxFrameBytes {
			t.Fatalf("frame %d is %d bytes", i, len(f))
		}
		fr, err := DecodeFrame(f)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if fr.Sender != "sender" || len(fr.Batches) > MaxBatchesPerFrame {
			t.Fatalf("frame %d: sender %q, %d batches", i, fr.Sender, len(fr.Batches))
		}
		if n := len(frameFlatten(fr.Batches)); n > MaxHintsPerFrame {
			t.Fatalf("frame %d: %d hints", i, n)
		}
		out = append(out, fr.Batches...)
	}
	if got, want := frameFlatten(out), frameFlatten(in); !reflect.DeepEqual(got, want) {
		t.Fatalf("hints differ after the round trip: %d vs %d", len(got), len(want))
	}
	return frames
}

func TestFrameSplitBySize(t *testing.T) {
	// 2000 partitions of 200 bytes in one queue: ~400 KiB, so at least 7
	// frames, and a Batch split across them.
	var parts []string
	for i := range 2000 {
		parts = append(parts, fmt.Sprintf("%04d-%s", i, strings.Repeat("x", 195)))
	}
	frames := frameCheckSplit(t, []coalesce.Batch{{Tenant: "default", Queue: "big", Partitions: parts}})
	if len(frames) < 7 {
		t.Fatalf("%d frames", len(frames))
	}
	// Frames are packed: all but the last are within one partition of full.
	for i, f := range frames[:len(frames)-1] {
		if len(f) < MaxFrameBytes-(2+200) {
			t.Fatalf("frame %d only %d bytes", i, len(f))
		}
	}
}

func TestFrameSplitByHintCount(t *testing.T) {
	var parts []string
	for i := range 3*MaxHintsPerFrame + 5 {
		parts = append(parts, fmt.Sprint(i)) // short: the count limit binds first
	}
	frames := frameCheckSplit(t, []coalesce.Batch{{Tenant: "t", Queue: "q", Partitions: parts}})
	if len(frames) != 4 {
		t.Fatalf("%d frames, want 4", len(frames))
	}
	for i, f := range frames[:3] {
		fr, _ := DecodeFrame(f)
		if n := len(frameFlatten(fr.Batches)); n != MaxHintsPerFrame {
			t.Fatalf("frame %d: %d hints, want %d", i, n, MaxHintsPerFrame)
		}
	}
}

func TestFrameSplitByBatchCount(t *testing.T) {
	var in []coalesce.Batch
	for i := range 2*MaxBatchesPerFrame + 1 {
		in = append(in, coalesce.Batch{Tenant: "t", Queue: fmt.Sprint("q", i), Partitions: []string{"p"}})
	}
	frames := frameCheckSplit(t, in)
	if len(frames) != 3 {
		t.Fatalf("%d frames, want 3", len(frames))
	}
}

func TestFrameSplitMixed(t *testing.T) {
	// Many queues of varied sizes and name lengths, as a real flush.
	var in []coalesce.Batch
	for q := range 3000 {
		b := coalesce.Batch{Tenant: fmt.Sprint("tenant-", q%3), Queue: fmt.Sprint("queue-", q, strings.Repeat("q", q%200))}
		for p := range q % 37 {
			b.Partitions = append(b.Partitions, fmt.Sprint("p-", p, strings.Repeat("z", (p*q)%240)))
		}
		in = append(in, b)
	}
	frameCheckSplit(t, in)
}

func TestFrameEncodeRejectsBadNames(t *testing.T) {
	long := strings.Repeat("n", MaxNameBytes+1)
	ok := []string{"p"}
	cases := map[string]struct {
		sender string
		b      coalesce.Batch
	}{
		"empty sender":      {"", coalesce.Batch{Tenant: "t", Queue: "q", Partitions: ok}},
		"long sender":       {long, coalesce.Batch{Tenant: "t", Queue: "q", Partitions: ok}},
		"empty tenant":      {"s", coalesce.Batch{Tenant: "", Queue: "q", Partitions: ok}},
		"long queue":        {"s", coalesce.Batch{Tenant: "t", Queue: long, Partitions: ok}},
		"empty partition":   {"s", coalesce.Batch{Tenant: "t", Queue: "q", Partitions: []string{"a", ""}}},
		"long partition":    {"s", coalesce.Batch{Tenant: "t", Queue: "q", Partitions: []string{long}}},
		"invalid utf8 part": {"s", coalesce.Batch{Tenant: "t", Queue: "q", Partitions: []string{"a", "b\xff"}}},
		"invalid utf8 tnt":  {"s", coalesce.Batch{Tenant: "\xc3", Queue: "q", Partitions: ok}},
	}
	for name, c := range cases {
		if _, err := EncodeFrames(c.sender, []coalesce.Batch{c.b}); !errors.Is(err, ErrBadFrame) {
			t.Errorf("%s: err = %v", name, err)
		}
	}
}

// Non-minimal but valid msgpack (str16 for a short name, array16 for a small
// array) is accepted: strictness is about structure and limits, not about
// which of msgpack's equivalent encodings a peer chose.
func TestFrameDecodeAcceptsNonMinimal(t *testing.T) {
	b := hv(
		0xdc, 0, 2, // array16 len 2
		0xda, 0, 1, 's', // str16 "s"
		0x91,                  // [1]
		0x93,                  // [3]
		0xdb, 0, 0, 0, 1, 't', // str32 "t"
		0xd9, 1, 'q', // str8 "q"
		0xdd, 0, 0, 0, 1, // array32 len 1
		0xa1, 'p')
	f, err := DecodeFrame(b)
	if err != nil {
		t.Fatal(err)
	}
	want := Frame{Sender: "s", Batches: []coalesce.Batch{{Tenant: "t", Queue: "q", Partitions: []string{"p"}}},
		Version: FrameVersion, Stream: frameStream}
	if !reflect.DeepEqual(f, want) {
		t.Fatalf("got %+v", f)
	}
}

// frameSeeds are the rejection cases plus a few valid frames; they are the
// table of TestFrameDecodeRejects and the fuzz seed corpus.
func frameSeeds() (valid, invalid map[string][]byte) {
	h := FrameHints
	long := strings.Repeat("n", MaxNameBytes+1)
	withParts := func(n int) []string {
		ps := make([]string, n)
		for i := range ps {
			ps[i] = "p"
		}
		return ps
	}
	valid = map[string][]byte{
		"valid":          frameValid(),
		"valid-max-name": frameRaw(h, FrameVersion, frameBody("s", "t", "q", strings.Repeat("n", MaxNameBytes))),
		"valid-multi": func() []byte {
			fs, _ := EncodeFrames("node", []coalesce.Batch{
				{Tenant: "a", Queue: "b", Partitions: []string{"1", "2", "3"}},
				{Tenant: "a", Queue: "c", Partitions: withParts(20)},
			})
			return fs[0]
		}(),
		// A not yet upgraded sender's frame: no stream header.
		"valid-v1": frameRaw(h, FrameVersion1, frameBody("old", "t", "q", "p1", "p2")),
		"valid-heartbeat": func() []byte {
			f, _ := EncodeHeartbeat("node", Stream{Incarnation: 9, Epoch: 3, Seq: 41, Prev: 17, Overflow: 2})
			return f
		}(),
		"valid-numbers": func() []byte {
			fs, _ := EncodeFrames("node", []coalesce.Batch{{Tenant: "a", Queue: "b", Partitions: []string{"1"}}})
			StampStream(fs[0], Stream{Kind: KindHints, Incarnation: ^uint64(0), Epoch: ^uint32(0), Seq: ^uint64(0), Prev: 1 << 40, Overflow: ^uint32(0)})
			return fs[0]
		}(),
	}
	invalid = map[string][]byte{
		"empty":              {},
		"truncated-header":   {h},
		"header-only":        {h, FrameVersion},
		"truncated-body":     frameValid()[:len(frameValid())-1],
		"wrong-type-0":       append([]byte{0}, frameValid()[1:]...),
		"wrong-type-2":       append([]byte{2}, frameValid()[1:]...),
		"wrong-version-0":    append([]byte{h, 0}, frameValid()[2:]...),
		"wrong-version-3":    append([]byte{h, 3}, frameValid()[2:]...),
		"oversized":          append(frameValid(), bytes.Repeat([]byte("x"), MaxFrameBytes-len(frameValid())+1)...),
		"trailing-garbage":   append(frameValid(), 0xc0),
		"trailing-frame":     append(frameValid(), frameValid()[2:]...),
		"huge-array32-top":   hv(0xdd, 0x80, 0, 0, 0),
		"huge-array32-bat":   hv(0x92, 0xa1, 's', 0xdd, 0x7f, 0xff, 0xff, 0xff),
		"huge-array32-part":  hv(0x92, 0xa1, 's', 0x91, 0x93, 0xa1, 't', 0xa1, 'q', 0xdd, 0xff, 0xff, 0xff, 0xff),
		"huge-str32":         hv(0x92, 0xdb, 0x80, 0, 0, 0, 's'),
		"count-beyond-input": hv(0x92, 0xa1, 's', 0x91, 0x93, 0xa1, 't', 0xa1, 'q', 0xdc, 0, 100, 0xa1, 'p'),
		"too-many-batches": frameRaw(h, FrameVersion, func(e *msgpack.Encoder) {
			_ = e.EncodeArrayLen(2)
			_ = e.EncodeString("s")
			_ = e.EncodeArrayLen(MaxBatchesPerFrame + 1)
			for range MaxBatchesPerFrame + 1 {
				_ = e.EncodeArrayLen(3)
				_ = e.EncodeString("t")
				_ = e.EncodeString("q")
				_ = e.EncodeArrayLen(1)
				_ = e.EncodeString("p")
			}
		}),
		"too-many-parts": frameRaw(h, FrameVersion, frameBody("s", "t", "q", withParts(MaxHintsPerFrame+1)...)),
		"too-many-hints": frameRaw(h, FrameVersion, func(e *msgpack.Encoder) {
			_ = e.EncodeArrayLen(2)
			_ = e.EncodeString("s")
			_ = e.EncodeArrayLen(2)
			for range 2 {
				_ = e.EncodeArrayLen(3)
				_ = e.EncodeString("t")
				_ = e.EncodeString("q")
				_ = e.EncodeArrayLen(MaxHintsPerFrame/2 + 1)
				for range MaxHintsPerFrame/2 + 1 {
					_ = e.EncodeString("p")
				}
			}
		}),
		"no-batches":       hv(0x92, 0xa1, 's', 0x90),
		"no-parts":         frameRaw(h, FrameVersion, frameBody("s", "t", "q")),
		"top-len-1":        hv(0x91, 0xa1, 's'),
		"top-len-3":        hv(0x93, 0xa1, 's', 0x90, 0xc0),
		"batch-len-2":      hv(0x92, 0xa1, 's', 0x91, 0x92, 0xa1, 't', 0xa1, 'q'),
		"batch-len-4":      hv(0x92, 0xa1, 's', 0x91, 0x94, 0xa1, 't', 0xa1, 'q', 0x91, 0xa1, 'p', 0xc0),
		"empty-sender":     frameRaw(h, FrameVersion, frameBody("", "t", "q", "p")),
		"empty-tenant":     frameRaw(h, FrameVersion, frameBody("s", "", "q", "p")),
		"empty-queue":      frameRaw(h, FrameVersion, frameBody("s", "t", "", "p")),
		"empty-part":       frameRaw(h, FrameVersion, frameBody("s", "t", "q", "p", "")),
		"long-sender":      frameRaw(h, FrameVersion, frameBody(long, "t", "q", "p")),
		"long-tenant":      frameRaw(h, FrameVersion, frameBody("s", long, "q", "p")),
		"long-queue":       frameRaw(h, FrameVersion, frameBody("s", "t", long, "p")),
		"long-part":        frameRaw(h, FrameVersion, frameBody("s", "t", "q", "p", long)),
		"utf8-sender":      frameRaw(h, FrameVersion, frameBody("s\xff", "t", "q", "p")),
		"utf8-tenant":      frameRaw(h, FrameVersion, frameBody("s", "\xc3", "q", "p")),
		"utf8-queue":       frameRaw(h, FrameVersion, frameBody("s", "t", "\xed\xa0\x80", "p")),  // a UTF-16 surrogate
		"utf8-part":        frameRaw(h, FrameVersion, frameBody("s", "t", "q", "p", "\xc0\xaf")), // overlong "/"
		"top-is-map":       hv(0x81, 0xa1, 's', 0x90),
		"top-is-nil":       hv(0xc0),
		"sender-int":       hv(0x92, 0x01, 0x91, 0x93, 0xa1, 't', 0xa1, 'q', 0x91, 0xa1, 'p'),
		"sender-bin":       hv(0x92, 0xc4, 1, 's', 0x91, 0x93, 0xa1, 't', 0xa1, 'q', 0x91, 0xa1, 'p'),
		"sender-nil":       hv(0x92, 0xc0, 0x91, 0x93, 0xa1, 't', 0xa1, 'q', 0x91, 0xa1, 'p'),
		"batches-nil":      hv(0x92, 0xa1, 's', 0xc0),
		"batch-is-str":     hv(0x92, 0xa1, 's', 0x91, 0xa1, 't'),
		"tenant-array":     hv(0x92, 0xa1, 's', 0x91, 0x93, 0x90, 0xa1, 'q', 0x91, 0xa1, 'p'),
		"parts-is-map":     hv(0x92, 0xa1, 's', 0x91, 0x93, 0xa1, 't', 0xa1, 'q', 0x81, 0xa1, 'p', 0xa1, 'p'),
		"parts-nil":        hv(0x92, 0xa1, 's', 0x91, 0x93, 0xa1, 't', 0xa1, 'q', 0xc0),
		"part-int":         hv(0x92, 0xa1, 's', 0x91, 0x93, 0xa1, 't', 0xa1, 'q', 0x91, 0x07),
		"part-ext":         hv(0x92, 0xa1, 's', 0x91, 0x93, 0xa1, 't', 0xa1, 'q', 0x91, 0xd4, 1, 'p'),
		"truncated-stream": frameValid()[:frameV2Header-1],
		"stream-only":      frameValid()[:frameV2Header],
		"bad-kind":         append(append([]byte{h, FrameVersion, 2}, frameStreamBytes(frameStream)[1:]...), frameValid()[frameV2Header:]...),
		"heartbeat-with-hints": append(append([]byte{h, FrameVersion}, frameStreamBytes(Stream{Kind: KindHeartbeat, Incarnation: 1, Epoch: 1})...),
			frameValid()[frameV2Header:]...),
		"v1-no-batches":  {h, FrameVersion1, 0x92, 0xa1, 's', 0x90},
		"v1-with-stream": append([]byte{h, FrameVersion1}, frameValid()[frameHeaderBytes:]...),
		"heartbeat-nil":  append(append([]byte{h, FrameVersion}, frameStreamBytes(Stream{Kind: KindHeartbeat})...), 0x92, 0xa1, 's', 0xc0),
		"reserved-c1":    hv(0x92, 0xa1, 's', 0x91, 0x93, 0xa1, 't', 0xa1, 'q', 0x91, 0xc1),
	}
	return valid, invalid
}

func TestFrameDecodeValidSeeds(t *testing.T) {
	valid, _ := frameSeeds()
	for name, b := range valid {
		if _, err := DecodeFrame(b); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestFrameDecodeRejects(t *testing.T) {
	_, invalid := frameSeeds()
	for name, b := range invalid {
		f, err := DecodeFrame(b)
		if !errors.Is(err, ErrBadFrame) {
			t.Errorf("%s: err = %v", name, err)
		}
		if !reflect.DeepEqual(f, Frame{}) {
			t.Errorf("%s: returned a partial frame %+v", name, f)
		}
	}
}

// Every proper prefix of a valid frame is rejected.
func TestFrameDecodeRejectsEveryTruncation(t *testing.T) {
	valid, _ := frameSeeds()
	for name, b := range valid {
		for n := range len(b) {
			if _, err := DecodeFrame(b[:n]); !errors.Is(err, ErrBadFrame) {
				t.Fatalf("%s[:%d]: err = %v", name, n, err)
			}
		}
	}
}

// A few bytes claiming a huge array or string fail without allocating in
// proportion to the claim.
func TestFrameDecodeHugeClaimsDoNotAllocate(t *testing.T) {
	_, invalid := frameSeeds()
	for _, name := range []string{"huge-array32-top", "huge-array32-bat", "huge-array32-part", "huge-str32", "count-beyond-input"} {
		b := invalid[name]
		const runs = 100
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for range runs {
			if _, err := DecodeFrame(b); err == nil {
				t.Fatalf("%s decoded", name)
			}
		}
		runtime.ReadMemStats(&after)
		if per := (after.TotalAlloc - before.TotalAlloc) / runs; per > 4096 {
			t.Errorf("%s: %d bytes allocated per decode", name, per)
		}
	}
}

// frameCorpusDir holds the seed corpus in go-fuzz file format, one file per
// seed, so `go test` replays them and the fuzzer starts from them.
var frameCorpusDir = filepath.Join("testdata", "fuzz", "FuzzDecodeFrame")

func frameCorpusFile(b []byte) []byte {
	return fmt.Appendf(nil, "go test fuzz v1\n[]byte(%q)\n", b)
}

// TestFrameFuzzCorpusFiles checks the corpus files match frameSeeds; with
// QUEEN_UPDATE_FUZZ_CORPUS=1 it (re)writes them.
func TestFrameFuzzCorpusFiles(t *testing.T) {
	valid, invalid := frameSeeds()
	update := os.Getenv("QUEEN_UPDATE_FUZZ_CORPUS") == "1"
	for _, m := range []map[string][]byte{valid, invalid} {
		for name, b := range m {
			path := filepath.Join(frameCorpusDir, "seed-"+name)
			want := frameCorpusFile(b)
			if update {
				if err := os.MkdirAll(frameCorpusDir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, want, 0o644); err != nil {
					t.Fatal(err)
				}
				continue
			}
			got, err := os.ReadFile(path)
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("%s missing or stale; run with QUEEN_UPDATE_FUZZ_CORPUS=1", path)
			}
		}
	}
}

// FuzzDecodeFrame: DecodeFrame never panics, rejects only with ErrBadFrame,
// and whatever it accepts re-encodes (to one frame, no larger than the
// input) and decodes to the same value.
func FuzzDecodeFrame(f *testing.F) {
	valid, invalid := frameSeeds()
	for _, m := range []map[string][]byte{valid, invalid} {
		for _, b := range m {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := DecodeFrame(b)
		if err != nil {
			if !errors.Is(err, ErrBadFrame) {
				t.Fatalf("error does not wrap ErrBadFrame: %v", err)
			}
			return
		}
		// Re-encoded as version 2: a version 1 input grows by the stream
		// header and decodes with a zero one.
		var frames [][]byte
		if fr.Version == FrameVersion && fr.Stream.Kind == KindHeartbeat {
			hb, err := EncodeHeartbeat(fr.Sender, fr.Stream)
			if err != nil {
				t.Fatalf("re-encode heartbeat: %v", err)
			}
			frames = [][]byte{hb}
		} else {
			frames, err = EncodeFrames(fr.Sender, fr.Batches)
			if err != nil {
				t.Fatalf("re-encode: %v", err)
			}
		}
		limit := len(b)
		if fr.Version == FrameVersion1 {
			limit += streamHeaderBytes
		}
		if len(frames) != 1 || len(frames[0]) > limit {
			t.Fatalf("re-encoded into %d frames (first %d bytes) from %d bytes", len(frames), len(frames[0]), len(b))
		}
		StampStream(frames[0], fr.Stream)
		again, err := DecodeFrame(frames[0])
		if err != nil {
			t.Fatalf("decode re-encoded: %v", err)
		}
		if fr.Version == FrameVersion1 {
			fr.Version = FrameVersion
		}
		if !reflect.DeepEqual(fr, again) {
			t.Fatalf("round trip changed the frame:\n%+v\n%+v", fr, again)
		}
	})
}
