package mesh

import (
	"fmt"
	"testing"
	"time"
)

// A peer that syncPeers drops (its member went dead or suspect-then-dead,
// or changed address) and re-creates when it is back must keep numbering
// its stream after the epochs the receiver already saw: a sender that
// restarted its epochs at 1 made the receiver take every frame of the new
// stream for the tail of an older one, so its gaps went unseen. The hints
// flushed while the peer was away were never sent, so the return itself is
// a loss the receiver must learn.
func TestRecreatedPeerKeepsNumbering(t *testing.T) {
	a, b := lossPair(t, newMemNet(), "127.0.5.12", "127.0.5.13", func(c *Config) { c.HintIdleTimeout = time.Second })
	eventually(t, 5*time.Second, "a first hint arrives", func() bool {
		a.m.Enqueue("t", "q", "one")
		return b.rec.count("t/q/one") > 0
	})
	// Two more streams, so the receiver's epoch for a is past 1.
	for _, h := range []string{"two", "three"} {
		eventually(t, 5*time.Second, "a closes its idle stream", func() bool { return b.m.Stats().InboundStreams == 0 })
		a.m.Enqueue("t", "q", h)
		eventually(t, 5*time.Second, "the hint arrives on a new stream", func() bool { return b.rec.count("t/q/"+h) > 0 })
	}
	if st := b.m.Stats(); st.GapsSeen != 0 || b.rec.losses("a") != 0 {
		t.Fatalf("losses on clean reconnects: %+v", st)
	}
	// What syncPeers does when b leaves the live set and comes back.
	a.m.peerMu.Lock()
	old := a.m.peers["b"]
	old.close()
	delete(a.m.peers, "b")
	a.m.peerMu.Unlock()
	if len(a.m.syncPeers()) != 1 {
		t.Fatal("b not re-created")
	}
	eventually(t, 5*time.Second, "the return is reported as a loss", func() bool { return b.rec.losses("a") >= 1 })
	n := b.rec.losses("a")
	// And a frame lost on the new sender's stream is seen too.
	done := dropOnce(a.m, KindHints)
	a.m.Enqueue("t", "q", "lost")
	eventually(t, 5*time.Second, "the frame is dropped", done.Load)
	eventually(t, 5*time.Second, "the loss is noticed", func() bool { return b.rec.losses("a") > n })
}

// Hints the receiver itself drops over the per-peer rate (HintRate) are
// lost as surely as a dropped frame: the receiver must report the loss so
// the broker reseeds early, instead of leaving those partitions dark until
// the reseed floor.
func TestRateLimitedHintsSignalLoss(t *testing.T) {
	nw := newMemNet()
	a := startLoss(t, "a", "127.0.5.14", nil, nw.use, func(c *Config) { c.noFlusher = true })
	b := startLoss(t, "b", "127.0.5.15", []string{a.m.cfg.Bind}, nw.use, func(c *Config) { c.HintRate = 10 })
	eventually(t, 10*time.Second, "a and b see each other", func() bool {
		return len(alive(a.m)) == 2 && len(alive(b.m)) == 2 && a.m.HasPeers()
	})
	for i := range 50 {
		a.m.Enqueue("t", "q", fmt.Sprintf("p%d", i))
	}
	a.m.flush()
	// Received is counted before the rate limit is applied and counted.
	eventually(t, 5*time.Second, "the frame is applied", func() bool {
		st := b.m.Stats()
		return st.HintsReceived >= 50 && st.HintsRateLimited > 0
	})
	st := b.m.Stats()
	if st.HintsRateLimited == 0 {
		t.Fatalf("nothing rate-limited: %+v", st)
	}
	if st.GapsSeen != 0 {
		t.Fatalf("a gap on a clean stream: %+v", st)
	}
	eventually(t, 5*time.Second, "the dropped hints are reported lost", func() bool { return b.rec.losses("a") >= 1 })
}

// A stream a heartbeat opened (to report hints lost while no stream was
// open) is closed when idle like any other: the idle timer, spent on the
// stream before, was not re-armed for it, so it stayed open for good with
// four heartbeats a second (docs/mesh.md: heartbeats do not keep a stream
// open).
func TestHeartbeatOpenedStreamClosesWhenIdle(t *testing.T) {
	a, b := lossPair(t, newMemNet(), "127.0.5.16", "127.0.5.17", func(c *Config) { c.HintIdleTimeout = time.Second })
	eventually(t, 5*time.Second, "a first hint arrives", func() bool {
		a.m.Enqueue("t", "q", "one")
		return b.rec.count("t/q/one") > 0
	})
	eventually(t, 5*time.Second, "a closes its idle stream", func() bool { return b.m.Stats().InboundStreams == 0 })
	// Hints for b dropped before numbering while no stream is open (what
	// peer.send does when b's queue is full).
	a.m.peerMu.Lock()
	a.m.peers["b"].lost.Add(1)
	a.m.peerMu.Unlock()
	eventually(t, 5*time.Second, "the overflow is reported by a heartbeat", func() bool { return b.m.Stats().OverflowSignalsSeen == 1 })
	eventually(t, 5*time.Second, "the heartbeat's stream is closed when idle", func() bool { return b.m.Stats().InboundStreams == 0 })
}
