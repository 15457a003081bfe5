package mesh

import (
	"sync"
)

// Loss detection (docs/mesh.md, "Loss detection"): every version 2 frame
// carries its sender's incarnation, the stream's epoch and a sequence
// number, and a cumulative count of hints the sender dropped for this peer
// before numbering. The receiver keeps the last numbers seen per sender
// and reports a loss when they do not follow.

// LossReceiver is implemented by a Receiver that wants to know when hints
// from a peer were lost (which ones is unknown): a gap in the numbers, a
// reconnect that does not prove continuity, a sender restart, or a sender
// that says it dropped hints. It must not block for long.
type LossReceiver interface {
	HintsLost(sender string)
}

// maxTrackedSenders bounds the per-sender state: a peer names itself in
// its frames, so a misbehaving member could invent names. Past the bound an
// arbitrary entry is forgotten; that sender's next frame then counts as a
// loss (a spurious early reseed, never a missed one).
const maxTrackedSenders = 1024

// seen is the last stream position received from one sender.
type seen struct {
	inc      uint64
	epoch    uint32
	seq      uint64
	overflow uint32
}

// gapTracker is the per-sender numbering state of the receiving side.
type gapTracker struct {
	mu sync.Mutex
	m  map[string]*seen
}

func newGapTracker() *gapTracker { return &gapTracker{m: map[string]*seen{}} }

// epochStart tells whether s is the first frame of its epoch: hints frame
// number 1, or a heartbeat sent before any hints frame.
func epochStart(s Stream) bool {
	if s.Kind == KindHeartbeat {
		return s.Seq == 0
	}
	return s.Seq == 1
}

// observe records a version 2 frame's stream header and tells whether hints
// were lost before it (gap) and whether the sender reports dropped hints
// (overflow).
func (g *gapTracker) observe(sender string, s Stream) (gap, overflow bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	k := g.m[sender]
	if k == nil {
		if len(g.m) >= maxTrackedSenders {
			for name := range g.m {
				delete(g.m, name)
				break
			}
		}
		// First frame from this sender since this node started (or since
		// its entry was forgotten): only the very start of the sender's
		// first stream proves nothing was missed.
		g.m[sender] = &seen{inc: s.Incarnation, epoch: s.Epoch, seq: s.Seq, overflow: s.Overflow}
		return !(s.Epoch == 1 && epochStart(s)), s.Overflow != 0
	}
	switch {
	case s.Incarnation != k.inc:
		// The sender restarted: whatever the old process still held is gone.
		*k = seen{inc: s.Incarnation, epoch: s.Epoch, seq: s.Seq, overflow: s.Overflow}
		return true, s.Overflow != 0
	case s.Epoch < k.epoch:
		// The tail of an older stream read after the new one started: its
		// numbers are behind; the new stream's check already covered it.
		return false, false
	case s.Epoch > k.epoch:
		// A reconnect is continuous only when it is the next stream, the
		// previous one ended at the last number read here, and this is the
		// new stream's first frame.
		cont := s.Epoch == k.epoch+1 && s.Prev == k.seq && epochStart(s)
		overflow = s.Overflow != k.overflow
		*k = seen{inc: s.Incarnation, epoch: s.Epoch, seq: s.Seq, overflow: s.Overflow}
		return !cont, overflow
	}
	want := k.seq + 1
	if s.Kind == KindHeartbeat {
		want = k.seq
	}
	gap = s.Seq != want
	if s.Seq > k.seq {
		k.seq = s.Seq
	}
	overflow = s.Overflow != k.overflow
	k.overflow = s.Overflow
	return gap, overflow
}
