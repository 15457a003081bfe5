package mesh

import (
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
	a, b := lossPair(t, "127.0.5.12", "127.0.5.13", func(c *Config) { c.HintIdleTimeout = time.Second })
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
