package mesh

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// The receiver's numbering rules, frame by frame.
func TestGapTrackerRules(t *testing.T) {
	hints := func(inc uint64, epoch uint32, seq, prev uint64, over uint32) Stream {
		return Stream{Kind: KindHints, Incarnation: inc, Epoch: epoch, Seq: seq, Prev: prev, Overflow: over}
	}
	beat := func(inc uint64, epoch uint32, seq, prev uint64, over uint32) Stream {
		s := hints(inc, epoch, seq, prev, over)
		s.Kind = KindHeartbeat
		return s
	}
	steps := []struct {
		what          string
		sender        string
		s             Stream
		gap, overflow bool
	}{
		{"first frame of a first stream", "a", hints(1, 1, 1, 0, 0), false, false},
		{"next number", "a", hints(1, 1, 2, 0, 0), false, false},
		{"a skipped number", "a", hints(1, 1, 4, 0, 0), true, false},
		{"heartbeat with the last number", "a", beat(1, 1, 4, 0, 0), false, false},
		{"heartbeat again", "a", beat(1, 1, 4, 0, 0), false, false},
		{"heartbeat revealing a lost last frame", "a", beat(1, 1, 5, 0, 0), true, false},
		{"hints after it", "a", hints(1, 1, 6, 0, 0), false, false},
		{"reconnect proving continuity", "a", hints(1, 2, 1, 6, 0), false, false},
		{"reconnect whose previous stream lost its tail", "a", hints(1, 3, 1, 3, 0), true, false},
		{"reconnect whose first frame was lost", "a", hints(1, 4, 2, 1, 0), true, false},
		{"a skipped epoch", "a", hints(1, 6, 1, 0, 0), true, false},
		{"a heartbeat opening a stream", "a", beat(1, 7, 0, 1, 0), false, false},
		{"the tail of an older stream", "a", hints(1, 5, 9, 0, 0), false, false},
		{"first hints of that stream", "a", hints(1, 7, 1, 1, 0), false, false},
		{"overflow reported", "a", hints(1, 7, 2, 1, 3), false, true},
		{"same overflow count", "a", beat(1, 7, 2, 1, 3), false, false},
		{"overflow grew, by heartbeat", "a", beat(1, 7, 2, 1, 4), false, true},
		{"overflow carried into a new stream", "a", hints(1, 8, 1, 2, 4), false, false},
		{"overflow grew on a reconnect", "a", hints(1, 9, 1, 1, 5), false, true},
		{"a restart, even at its very start", "a", hints(2, 1, 1, 0, 0), true, false},
		{"first sight, not at a stream's start", "b", hints(1, 1, 3, 0, 0), true, false},
		{"first sight, a later stream", "c", hints(1, 2, 1, 5, 0), true, false},
		{"first sight, with an overflow", "d", hints(1, 1, 1, 0, 1), false, true},
		{"first sight, a heartbeat at the start", "e", beat(1, 1, 0, 0, 0), false, false},
	}
	g := newGapTracker()
	for _, st := range steps {
		gap, overflow := g.observe(st.sender, st.s)
		if gap != st.gap || overflow != st.overflow {
			t.Fatalf("%s (%+v): gap %v overflow %v, want %v %v", st.what, st.s, gap, overflow, st.gap, st.overflow)
		}
	}
}

// Invented sender names cannot grow the receiver's state without bound.
func TestGapTrackerBounded(t *testing.T) {
	g := newGapTracker()
	for i := range 3 * maxTrackedSenders {
		g.observe(fmt.Sprintf("s%d", i), Stream{Incarnation: 1, Epoch: 1, Seq: 1})
	}
	if n := len(g.m); n > maxTrackedSenders {
		t.Fatalf("%d senders tracked, bound %d", n, maxTrackedSenders)
	}
}

// lossRec records hints and loss signals.
type lossRec struct {
	recorder
	mu   sync.Mutex
	lost map[string]int
}

func (r *lossRec) HintsLost(sender string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lost == nil {
		r.lost = map[string]int{}
	}
	r.lost[sender]++
}

func (r *lossRec) losses(sender string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lost[sender]
}

type lossNode struct {
	m   *Mesh
	rec *lossRec
}

// startLoss runs a member whose receiver records loss signals.
func startLoss(t *testing.T, name, ip string, join []string, mut ...func(*Config)) *lossNode {
	t.Helper()
	portSeq.Lock()
	portSeq.n += 7
	port := portSeq.n
	portSeq.Unlock()
	cfg := DefaultConfig()
	cfg.Name, cfg.Bind, cfg.Join = name, fmt.Sprintf("%s:%d", ip, port), join
	cfg.Timings = testTimings()
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.Warn})
	for _, f := range mut {
		f(&cfg)
	}
	rec := &lossRec{}
	m, err := New(cfg, rec)
	if err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(m.Close)
	return &lossNode{m: m, rec: rec}
}

// lossPair runs members a and b on nw (nil: real sockets on ipA and ipB).
func lossPair(t *testing.T, nw *memNet, ipA, ipB string, mutA ...func(*Config)) (a, b *lossNode) {
	t.Helper()
	a = startLoss(t, "a", ipA, nil, append(mutA, on(nw))...)
	b = startLoss(t, "b", ipB, []string{a.m.cfg.Bind}, on(nw))
	eventually(t, 10*time.Second, "a and b see each other", func() bool {
		return len(alive(a.m)) == 2 && len(alive(b.m)) == 2 && a.m.HasPeers()
	})
	return a, b
}

// on runs a member on nw; nil leaves it on real sockets.
func on(nw *memNet) func(*Config) {
	return func(c *Config) {
		if nw != nil {
			c.network = nw
		}
	}
}

// dropOnce makes m drop the next frame of kind, once.
func dropOnce(m *Mesh, kind byte) *atomic.Bool {
	var done atomic.Bool
	f := func(k byte) bool { return k == kind && done.CompareAndSwap(false, true) }
	m.dropHook.Store(&f)
	return &done
}

// A lossy link (drop rate 0.5) is noticed by the receiver as gaps and
// reported as losses; the same traffic on a clean link reports none.
func TestLossyLinkGapsSignalLoss(t *testing.T) {
	for _, rate := range []float64{0, 0.5} {
		t.Run(fmt.Sprint("drop-", rate), func(t *testing.T) {
			ipA, ipB := "127.0.5.2", "127.0.5.3"
			if rate > 0 {
				ipA, ipB = "127.0.5.4", "127.0.5.5"
			}
			a, b := lossPair(t, newMemNet(), ipA, ipB, func(c *Config) { c.DropRate, c.noFlusher = rate, true })
			for i := range 60 {
				a.m.Enqueue("t", "q", fmt.Sprintf("p%d", i))
				a.m.flush() // one frame per hint
			}
			// Every hint's frame was either received or dropped.
			eventually(t, 5*time.Second, "every frame accounted for", func() bool {
				return int(a.m.Stats().FramesDropped)+b.rec.total() >= 60 && b.m.Stats().HeartbeatsReceived > 0
			})
			sa, sb := a.m.Stats(), b.m.Stats()
			if rate == 0 {
				if sb.GapsSeen != 0 || b.rec.losses("a") != 0 || sa.FramesDropped != 0 || b.rec.total() != 60 {
					t.Fatalf("clean link: gaps %d, losses %d, dropped %d, hints %d", sb.GapsSeen, b.rec.losses("a"), sa.FramesDropped, b.rec.total())
				}
				return
			}
			if sa.FramesDropped == 0 || sb.GapsSeen == 0 || b.rec.losses("a") == 0 {
				t.Fatalf("lossy link: dropped %d, gaps %d, losses %d", sa.FramesDropped, sb.GapsSeen, b.rec.losses("a"))
			}
			t.Logf("lossy link: %d of 60 hints arrived, %d frames dropped (heartbeats included), %d gaps seen",
				b.rec.total(), sa.FramesDropped, sb.GapsSeen)
		})
	}
}

// A lost last frame is learned from the next heartbeat, with no later hint.
func TestHeartbeatRevealsTrailingLoss(t *testing.T) {
	a, b := lossPair(t, newMemNet(), "127.0.5.6", "127.0.5.7")
	eventually(t, 5*time.Second, "a first hint arrives", func() bool {
		a.m.Enqueue("t", "q", "first")
		return b.rec.count("t/q/first") > 0
	})
	eventually(t, 5*time.Second, "a heartbeat arrives", func() bool { return b.m.Stats().HeartbeatsReceived > 0 })
	if st := b.m.Stats(); st.GapsSeen != 0 {
		t.Fatalf("gaps on a clean stream: %+v", st)
	}
	// The loop above may have enqueued "first" again after it arrived, and
	// that frame may still wait in a's queue to b: the drop below would take
	// it and "lost" would go in the next frame (seen under -race). A last
	// hint, sent after every other, is a barrier: a peer's frames are
	// written in order, so once it arrived nothing is left to send.
	a.m.Enqueue("t", "q", "barrier")
	eventually(t, 5*time.Second, "the barrier arrives", func() bool { return b.rec.count("t/q/barrier") > 0 })
	done := dropOnce(a.m, KindHints)
	a.m.Enqueue("t", "q", "lost")
	eventually(t, 5*time.Second, "the frame is dropped", done.Load)
	beats := b.m.Stats().HeartbeatsReceived
	// The loss is reported before the heartbeat that revealed it is counted.
	eventually(t, 5*time.Second, "the loss is noticed", func() bool {
		return b.rec.losses("a") == 1 && b.m.Stats().HeartbeatsReceived > beats
	})
	st := b.m.Stats()
	if st.GapsSeen != 1 || st.HeartbeatsReceived <= beats || b.rec.count("t/q/lost") != 0 {
		t.Fatalf("gaps %d (want 1), heartbeats %d (were %d), lost hint applied %d times",
			st.GapsSeen, st.HeartbeatsReceived, beats, b.rec.count("t/q/lost"))
	}
}

// A sender whose coalescing set overflowed says so in its next frame: the
// receiver reports a loss although no frame went missing.
func TestOverflowSignal(t *testing.T) {
	a, b := lossPair(t, newMemNet(), "127.0.5.8", "127.0.5.9", func(c *Config) {
		c.HintCap = 4
		c.noFlusher = true // the test flushes
	})
	eventually(t, 5*time.Second, "a first hint arrives", func() bool {
		a.m.Enqueue("t", "q", "first")
		a.m.flush()
		return b.rec.count("t/q/first") > 0
	})
	for i := range 10 {
		a.m.Enqueue("t", "q", fmt.Sprintf("p%d", i))
	}
	if d := a.m.Stats().CoalescerDropped; d != 6 {
		t.Fatalf("coalescer dropped %d, want 6", d)
	}
	a.m.flush()
	// The receiver reports the loss before it applies the frame's hints.
	eventually(t, 5*time.Second, "the overflow is reported and the frame applied", func() bool {
		return b.rec.losses("a") > 0 && b.rec.total() >= 5
	})
	sa, sb := a.m.Stats(), b.m.Stats()
	if sb.OverflowSignalsSeen != 1 || sb.GapsSeen != 0 || sa.OverflowSignalsSent != 1 || b.rec.total() < 5 {
		t.Fatalf("sender %+v\nreceiver %+v\nhints %d", sa, sb, b.rec.total())
	}
	// Reported once: later frames carry the same count.
	a.m.Enqueue("t", "q", "after")
	a.m.flush()
	eventually(t, 5*time.Second, "a later hint arrives", func() bool { return b.rec.count("t/q/after") > 0 })
	if sb := b.m.Stats(); sb.OverflowSignalsSeen != 1 || b.rec.losses("a") != 1 {
		t.Fatalf("the same overflow reported again: %+v, losses %d", sb, b.rec.losses("a"))
	}
}

// A stream the sender closed because it was idle reopens without a loss:
// the new stream's first frame proves the old one ended where the receiver
// stopped reading.
func TestIdleReconnectIsContinuous(t *testing.T) {
	a, b := lossPair(t, newMemNet(), "127.0.5.10", "127.0.5.11", func(c *Config) { c.HintIdleTimeout = time.Second })
	eventually(t, 5*time.Second, "a first hint arrives", func() bool {
		a.m.Enqueue("t", "q", "one")
		return b.rec.count("t/q/one") > 0
	})
	eventually(t, 5*time.Second, "a closes its idle stream", func() bool { return b.m.Stats().InboundStreams == 0 })
	a.m.Enqueue("t", "q", "two")
	eventually(t, 5*time.Second, "the next hint arrives on a new stream", func() bool { return b.rec.count("t/q/two") > 0 })
	if st := b.m.Stats(); st.GapsSeen != 0 || b.rec.losses("a") != 0 {
		t.Fatalf("a clean reconnect counted as a loss: %+v", st)
	}
	// A reconnect whose first frame is lost is a loss.
	eventually(t, 5*time.Second, "a closes its idle stream again", func() bool { return b.m.Stats().InboundStreams == 0 })
	dropOnce(a.m, KindHints)
	a.m.Enqueue("t", "q", "three")
	a.m.Enqueue("t", "q", "four")
	eventually(t, 5*time.Second, "the loss is noticed", func() bool { return b.rec.losses("a") == 1 })
}
