package mesh

import (
	"net"
	"testing"
	"time"
)

// stall opens n connections to addr from the source IP src, sends each two
// bytes of a length prefix and then nothing: the slow-loris of issue 9,
// item 10.
func stall(t *testing.T, addr, src string, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 2 * time.Second}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("dial %s from %s: %v", addr, src, err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := c.Write([]byte{0, 0}); err != nil {
			t.Fatalf("write: %v", err)
		}
	}
}

// Issue 9, item 10: connections that send part of a length prefix and stall
// must not hold the hint port's slots forever and lock a real peer out.
func TestStalledHintConnectionsDoNotLockOutAPeer(t *testing.T) {
	short := func(c *Config) {
		c.HintFrameTimeout = 300 * time.Millisecond
		c.HintIdleTimeout = 2 * time.Second
	}
	a := start(t, "a", "127.0.4.2", nil, nil, short)
	b := start(t, "b", "127.0.4.3", nil, []string{a.m.cfg.Bind}, short)
	eventually(t, 10*time.Second, "a and b see each other", func() bool {
		return len(alive(a.m)) == 2 && len(alive(b.m)) == 2
	})
	// Stall every slot a's address (and the loopback default source) has.
	stall(t, b.m.self.Hint, "127.0.4.2", maxPerIP)
	stall(t, b.m.self.Hint, "127.0.0.1", maxPerIP)
	eventually(t, 8*time.Second, "a's hint reaches b despite the stalled connections", func() bool {
		a.m.Enqueue("t", "q", "p") // again: a refused stream loses its frame
		return b.rec.total() >= 1
	})
	// Every stalled stream is closed and counted: one per address made room
	// for a's stream, the others ran out of time for their first frame.
	eventually(t, 10*time.Second, "the stalled streams closed and counted", func() bool {
		st := b.m.Stats()
		return st.InboundTimedOut+st.InboundEvicted == 2*maxPerIP
	})
	if st := b.m.Stats(); st.InboundEvicted == 0 || st.InboundStreams > 1 {
		t.Fatalf("stats: %+v", st)
	}
	// a's stream is healthy and quiet for longer than the frame timeout and
	// than the idle timeout: a closes it itself (at half the idle timeout),
	// b never times it out, and the next hint arrives on a new stream. The
	// sleep is the quiet period under test, not a synchronisation.
	before := b.m.Stats().InboundTimedOut
	time.Sleep(2500 * time.Millisecond)
	got := b.rec.total()
	eventually(t, 5*time.Second, "a hint after the quiet period", func() bool {
		a.m.Enqueue("t", "q", "p2")
		return b.rec.count("t/q/p2") >= 1
	})
	if st := b.m.Stats(); st.InboundTimedOut != before || st.FramesRejected != 0 {
		t.Fatalf("a healthy idle stream was cut: timed out %d -> %d, %+v", before, st.InboundTimedOut, st)
	}
	if b.rec.total() <= got {
		t.Fatal("no hint after the quiet period")
	}
}
