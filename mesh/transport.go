package mesh

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"time"

	"queen-node/protocol"
)

// The hint transport is one persistent TCP stream per peer, written by a
// sender goroutine fed through a bounded queue. Each message on the stream
// is a 4-byte big-endian length followed by a (sealed) frame. See
// docs/mesh.md for why not memberlist's SendReliable (a TCP dial per
// message) or SendBestEffort (one UDP packet, ~1,400 bytes).

const lengthPrefix = 4

// maxWireBytes bounds one message on the stream.
const maxWireBytes = MaxFrameBytes + SealOverhead

// maxPerIP bounds the inbound streams from one address that have not yet
// named their member (a sender writes its first frame right after the
// dial), so nobody can take every pending slot from one host. A stream
// that named its member holds that member's slot instead (claim).
const maxPerIP = 8

func remoteIP(c net.Conn) string {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.IP.String()
	}
	return c.RemoteAddr().String()
}

// isMember tells whether ip is the address of a current member other than
// this node (alive, which includes suspect: see Members): its gossip address
// or the host of its advertised hint address. Senders dial from their own bind or advertise address (see
// New), so a member's stream comes from an address the others know even
// when the route to the peer would pick another source (loopback, a
// multi-homed host). Checked once per accepted stream.
func (m *Mesh) isMember(ip string) bool {
	from := net.ParseIP(ip)
	if from == nil {
		return false
	}
	m.memMu.Lock()
	defer m.memMu.Unlock()
	for _, mb := range m.members {
		if memberAt(mb, from) {
			return true
		}
	}
	return false
}

// memberAt tells whether mb is a current member other than this node whose
// gossip address or hint host is from.
func memberAt(mb *Member, from net.IP) bool {
	if mb.Self || mb.State != protocol.MemberAlive {
		return false
	}
	for _, hp := range []string{mb.Addr, mb.hint} {
		if h, _, err := net.SplitHostPort(hp); err == nil && net.ParseIP(h).Equal(from) {
			return true
		}
	}
	return false
}

// memberNamed tells whether name is a current member other than this node
// at address ip, and returns the incarnation it advertises (0: none).
func (m *Mesh) memberNamed(name, ip string) (inc uint64, ok bool) {
	from := net.ParseIP(ip)
	if from == nil {
		return 0, false
	}
	m.memMu.Lock()
	defer m.memMu.Unlock()
	mb := m.members[name]
	if mb == nil || !memberAt(mb, from) {
		return 0, false
	}
	return mb.inc, true
}

// inConn is one inbound hint stream. It is pending until its first frame,
// which must name a member at the stream's source address: from then on it
// is that member's stream, and holds the member's slot (docs/mesh.md, "Hint
// port limits").
type inConn struct {
	conn net.Conn
	ip   string
	at   time.Time    // accepted
	last atomic.Int64 // when the last whole frame was read (Unix ns); 0 = none yet

	// Under Mesh.inMu.
	member  string    // the member it named; "" while pending
	inc     uint64    // the incarnation its first frame carried (0: a version 1 frame)
	since   time.Time // when it took the member's slot
	dropped bool      // no longer counted: evicted, replaced, refused or ended

	gone chan struct{} // closed when dropped
}

// idleFor is how long the stream has gone without a whole frame.
func (ic *inConn) idleFor(now time.Time) time.Duration {
	if l := ic.last.Load(); l != 0 {
		return now.Sub(time.Unix(0, l))
	}
	return now.Sub(ic.at)
}

// admit registers a new stream as pending. At the per-address limit the
// address's oldest pending stream is closed to make room (a sender's first
// frame follows its dial within milliseconds; a stalled or garbage
// connection never names anyone), so pending streams never lock a member
// out. At the total limit room is made the same way anywhere, or from a
// member stream idle for StreamIdleBeats heartbeats; only when every open
// stream is a live member's is the new one refused.
func (m *Mesh) admit(ic *inConn) bool {
	m.inMu.Lock()
	defer m.inMu.Unlock()
	if m.inOpen >= m.maxInbound && !m.makeRoom(time.Now()) {
		return false
	}
	if list := m.pending[ic.ip]; len(list) >= maxPerIP {
		m.drop(list[0])
		m.inEvicted.Add(1)
	}
	m.pending[ic.ip] = append(m.pending[ic.ip], ic)
	m.inOpen++
	m.inbound.Store(int32(m.inOpen))
	return true
}

// makeRoom closes one stream for a new one at the total limit: the oldest
// pending stream, else the member stream idle longest if it is idle.
// Under inMu.
func (m *Mesh) makeRoom(now time.Time) bool {
	var victim *inConn
	for _, list := range m.pending {
		if victim == nil || list[0].at.Before(victim.at) {
			victim = list[0]
		}
	}
	if victim != nil {
		m.drop(victim)
		m.inEvicted.Add(1)
		return true
	}
	for _, ic := range m.slots {
		if ic.idleFor(now) >= m.cfg.streamIdleAfter() && (victim == nil || ic.idleFor(now) > victim.idleFor(now)) {
			victim = ic
		}
	}
	if victim == nil {
		return false
	}
	m.drop(victim)
	m.inEvictedIdle.Add(1)
	return true
}

// drop forgets a stream and closes it (its serve goroutine then ends).
// Under inMu; a stream already dropped is left alone.
func (m *Mesh) drop(ic *inConn) {
	if ic.dropped {
		return
	}
	ic.dropped = true
	close(ic.gone)
	m.unlink(ic)
	m.inOpen--
	m.inbound.Store(int32(m.inOpen))
	ic.conn.Close()
}

// unlink takes a stream out of its pending list or its member's slot.
// Under inMu.
func (m *Mesh) unlink(ic *inConn) {
	if ic.member == "" {
		list := m.pending[ic.ip]
		for i, c := range list {
			if c == ic {
				list = append(list[:i:i], list[i+1:]...)
				break
			}
		}
		if len(list) == 0 {
			delete(m.pending, ic.ip)
		} else {
			m.pending[ic.ip] = list
		}
	} else if m.slots[ic.member] == ic {
		delete(m.slots, ic.member)
	}
}

// leave is drop for a stream whose serve goroutine ended.
func (m *Mesh) leave(ic *inConn) {
	m.inMu.Lock()
	defer m.inMu.Unlock()
	m.drop(ic)
}

// Outcomes of claim.
const (
	claimed        = iota
	claimNotMember // the name is not a current member at the stream's address
	claimHeld      // the member's live stream keeps its slot
	claimForged    // the same, and this stream lacks the incarnation the member advertises while the holder has it
	claimWait      // held, but the holder may be about to end: wait for it and ask again
	claimGone      // the stream was closed meanwhile (evicted)
)

// claim makes a pending stream the stream of the member its first frame
// names, sender, with that frame's incarnation (docs/mesh.md, "Hint port
// limits"). The name must be a current member whose address is the
// stream's source. The member's slot holds one stream; the one holding it
// gives it up when it has been idle for StreamIdleBeats heartbeats, or
// when the new stream carries the incarnation the member advertises in its
// gossip metadata and the holder does not, or (neither better vouched for)
// when the holder has had it for SlotHoldBeats heartbeats. Otherwise the
// new stream is refused: without the secret anyone on the member's address
// can write its name, and "newest wins" would let such a process cut the
// member's live stream as often as it dials.
//
// With wait, a refusal is claimWait instead, with the holder's gone
// channel: a sender closes its old stream before it dials a new one, but
// the receiver may read the new stream's first frame before the old one's
// end.
func (m *Mesh) claim(ic *inConn, sender string, inc uint64, wait bool) (int, <-chan struct{}) {
	advertised, ok := m.memberNamed(sender, ic.ip)
	now := time.Now()
	m.inMu.Lock()
	defer m.inMu.Unlock()
	if ic.dropped {
		return claimGone, nil
	}
	if !ok {
		m.drop(ic)
		return claimNotMember, nil
	}
	if h := m.slots[sender]; h != nil {
		vouched := func(inc uint64) bool { return advertised != 0 && inc == advertised }
		switch {
		case h.idleFor(now) >= m.cfg.streamIdleAfter():
			m.inEvictedIdle.Add(1)
		case vouched(inc) && !vouched(h.inc):
			m.inReplaced.Add(1)
		case vouched(h.inc) && !vouched(inc), now.Sub(h.since) < m.cfg.slotHold():
			if wait {
				return claimWait, h.gone
			}
			m.drop(ic)
			m.inRefusedHeld.Add(1)
			if vouched(h.inc) && !vouched(inc) {
				return claimForged, nil
			}
			return claimHeld, nil
		default:
			m.inReplaced.Add(1)
		}
		m.drop(h)
	}
	m.unlink(ic) // from pending
	ic.member, ic.inc, ic.since = sender, inc, now
	m.slots[sender] = ic
	return claimed, nil
}

// claimFirst claims the stream for the member its first frame names,
// waiting up to one heartbeat interval for a live holder to end, and logs
// and counts a refusal. It tells whether the stream may go on.
func (m *Mesh) claimFirst(ic *inConn, f Frame) bool {
	res, holderGone := m.claim(ic, f.Sender, f.Stream.Incarnation, true)
	if res == claimWait {
		t := time.NewTimer(m.cfg.HeartbeatInterval)
		select {
		case <-holderGone:
		case <-ic.gone:
		case <-m.stop:
		case <-t.C:
		}
		t.Stop()
		res, _ = m.claim(ic, f.Sender, f.Stream.Incarnation, false)
	}
	switch res {
	case claimNotMember:
		m.inRefusedNotMember.Add(1)
		m.logLimited("refused-not-member", "refused a hint stream: its first frame names no member at its address",
			"from", ic.ip, "sender", f.Sender)
	case claimHeld, claimForged:
		m.logLimited("refused-held", "refused a hint stream: its member's live stream holds the slot",
			"from", ic.ip, "sender", f.Sender)
		if res == claimHeld && m.lossRecv != nil {
			// Perhaps the member itself: what it sends until it has its
			// slot back is lost (docs/hotlist.md, "Early reseeds after lost
			// hints"). Not for a stream that is surely someone else's.
			m.lossRecv.HintsLost(f.Sender)
		}
	}
	return res == claimed
}

// peer sends frames to one member.
type peer struct {
	m    *Mesh
	name string
	addr string
	ch   chan outFrame
	done chan struct{}

	// lost counts, since the process started, the times hints for this
	// peer were dropped before numbering (its queue was full, it was
	// unreachable, the coalescing set overflowed, it was out of the live
	// set). Every frame carries it (Stream.Overflow): cumulative, so any
	// later frame that arrives reveals an overflow even when the frame that
	// first carried it was lost. It lives in the peer's sendState.
	lost *atomic.Uint64
	ss   *sendState
}

// sendState is the part of a peer's numbering that outlives the peer:
// syncPeers drops a peer whose member leaves the live set and makes a new
// one when it is back, and the new one must go on numbering after the
// epochs the receiver has seen (a new stream at epoch 1 would be taken for
// the tail of an older one, and its gaps missed). Kept per member name in
// Mesh.sendStates, as bounded as the member table.
type sendState struct {
	epoch atomic.Uint32 // the last epoch handed out for this name
	lost  atomic.Uint64 // peer.lost
}

// outFrame is a frame body shared by every peer (zero stream header, not
// sealed) and its hint count.
type outFrame struct {
	body  []byte
	hints int
}

// newPeer starts a sender to one member. ss is the member's sendState
// (nil: a fresh one); a returning member's carries a lost count one higher,
// since hints flushed while it was away were never sent (syncPeers).
func newPeer(m *Mesh, name, addr string, ss *sendState) *peer {
	if ss == nil {
		ss = &sendState{}
	}
	p := &peer{m: m, name: name, addr: addr, ch: make(chan outFrame, DefaultPeerQueue), done: make(chan struct{}),
		lost: &ss.lost, ss: ss}
	m.wg.Add(1)
	go p.run()
	return p
}

// send queues a frame without blocking; false (and an overflow recorded
// for this peer) when the queue is full.
func (p *peer) send(f outFrame) bool {
	select {
	case p.ch <- f:
		return true
	default:
		p.lost.Add(1)
		return false
	}
}

func (p *peer) close() {
	select {
	case <-p.done:
	default:
		close(p.done)
	}
}

// stream is the numbering state of one peer's stream (docs/mesh.md, "Loss
// detection"), owned by the peer's goroutine.
type stream struct {
	epoch uint32 // connections made so far; the current one's number
	seq   uint64 // last hints frame numbered in this epoch
	prev  uint64 // last seq of the previous epoch
}

// run owns the connection: dial on demand, reconnect with back-off, drop
// (and count) frames while the peer is unreachable rather than block, and
// send a heartbeat every HeartbeatInterval while the stream is open.
func (p *peer) run() {
	defer p.m.wg.Done()
	var (
		conn    net.Conn
		w       *bufio.Writer
		st      stream
		backoff = 100 * time.Millisecond
		retryAt time.Time
		// An idle stream is closed by its sender well before the receiver's
		// idle deadline would cut it (half of it), so the receiver never
		// closes a healthy stream under a frame about to be written; the next
		// frame redials. Heartbeats do not count as activity.
		idleAfter = p.m.cfg.HintIdleTimeout / 2
		idle      = time.NewTimer(idleAfter)
		beat      = time.NewTicker(max(p.m.cfg.HeartbeatInterval, time.Millisecond))
		lastWrite time.Time
		// confirm: for ConfirmWindow after a hints frame (lastHints), a
		// heartbeat whenever the stream was silent for ConfirmInterval, so
		// a lost last frame is learned at once (docs/mesh.md, "Loss
		// detection"). Stopped until the first hints frame.
		confirm   = time.NewTimer(time.Hour)
		lastHints time.Time
		// confirmed: a confirm heartbeat went out since lastHints. The first
		// waits for FlushInterval more quiet, so a busy stream (a frame at
		// least every flush) sends none; later ones come every ConfirmInterval.
		confirmed bool
		stamped   uint64 // p.lost as last written in a frame header
		// verify: a stream broke with frames possibly in flight; a
		// heartbeat on the next stream lets the peer check what arrived
		// (Stream.Prev) even if no hint follows.
		verify bool
	)
	confirm.Stop()
	defer idle.Stop()
	defer beat.Stop()
	defer confirm.Stop()
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	// connect dials when there is no stream; a new stream is a new epoch.
	connect := func() bool {
		if conn != nil {
			return true
		}
		if time.Now().Before(retryAt) {
			return false
		}
		c, err := p.m.nw.dialHints(p.m.src, p.addr, DefaultDialTimeout)
		if err != nil {
			retryAt = time.Now().Add(backoff)
			backoff = min(backoff*2, 5*time.Second)
			p.m.log.Debug("hint peer unreachable", "peer", p.name, "addr", p.addr, "error", err)
			return false
		}
		conn, w, backoff = c, bufio.NewWriterSize(c, 64<<10), 100*time.Millisecond
		st.prev, st.seq = st.seq, 0
		st.epoch = p.ss.epoch.Add(1)
		return true
	}
	broken := func(err error) {
		p.m.log.Debug("hint stream broken", "peer", p.name, "error", err)
		conn.Close()
		conn, w = nil, nil
		retryAt = time.Now().Add(backoff)
		verify = true
	}
	for {
		var frame outFrame
		select {
		case <-p.done:
			return
		case <-p.m.stop:
			return
		case <-idle.C:
			if conn != nil && p.lost.Load() != stamped {
				// An overflow not yet reported: the next heartbeat carries it.
				idle.Reset(2 * p.m.cfg.HeartbeatInterval)
			} else if conn != nil {
				conn.Close()
				conn, w = nil, nil
			}
			continue
		case <-confirm.C:
			if conn == nil || time.Since(lastHints) > p.m.cfg.ConfirmWindow {
				continue // the stream broke (beat's verify covers it) or the window closed
			}
			need := p.m.cfg.ConfirmInterval
			if !confirmed {
				need += p.m.cfg.FlushInterval
			}
			if quiet := time.Since(lastWrite); quiet < need {
				confirm.Reset(need - quiet)
				continue
			}
			if err := p.writeHeartbeat(conn, w, st, &stamped); err != nil {
				broken(err)
				continue
			}
			if err := w.Flush(); err != nil {
				broken(err)
				continue
			}
			lastWrite, confirmed = time.Now(), true
			confirm.Reset(p.m.cfg.ConfirmInterval)
			continue
		case <-beat.C:
			// Idle: tell the peer the last number sent, so a lost last frame
			// is learned without waiting for a later one. With no stream,
			// dial only to report lost hints.
			if time.Since(lastWrite) < p.m.cfg.HeartbeatInterval/2 || (conn == nil && p.lost.Load() == stamped && !verify) {
				continue
			}
			opened := conn == nil
			if !connect() {
				continue
			}
			if opened {
				// The idle timer may have been spent on an earlier stream:
				// this one is closed when idle too.
				idle.Reset(idleAfter)
			}
			if err := p.writeHeartbeat(conn, w, st, &stamped); err != nil {
				broken(err)
				continue
			}
			if err := w.Flush(); err != nil {
				broken(err)
				continue
			}
			lastWrite, verify = time.Now(), false
			continue
		case frame = <-p.ch:
		}
		if !connect() {
			p.lost.Add(1)
			p.m.queueDropped.Add(1)
			continue
		}
		// Write this frame and whatever else is queued, then flush once.
		err := p.writeHints(conn, w, &st, &stamped, frame)
		for err == nil && len(p.ch) > 0 {
			err = p.writeHints(conn, w, &st, &stamped, <-p.ch)
		}
		if err == nil {
			err = w.Flush()
		}
		if err != nil {
			broken(err)
		} else {
			verify = false
		}
		lastWrite = time.Now()
		idle.Reset(idleAfter)
		if err == nil && p.m.cfg.ConfirmInterval > 0 {
			lastHints, confirmed = lastWrite, false
			confirm.Reset(p.m.cfg.ConfirmInterval + p.m.cfg.FlushInterval)
		}
	}
}

// writeHints numbers a hints frame and writes it, unless the chaos knob
// drops it: numbering first, so a dropped frame is a gap the peer sees, as
// on a lossy link.
func (p *peer) writeHints(conn net.Conn, w *bufio.Writer, st *stream, stamped *uint64, f outFrame) error {
	st.seq++
	s := Stream{Kind: KindHints, Incarnation: p.m.incarnation, Epoch: st.epoch, Seq: st.seq, Prev: st.prev,
		Overflow: p.stampLost(stamped)}
	if p.m.chaosDrop(KindHints) {
		return nil
	}
	frame := make([]byte, len(f.body))
	copy(frame, f.body)
	StampStream(frame, s)
	if err := p.write(conn, w, frame); err != nil {
		return err
	}
	p.m.framesSent.Add(1)
	p.m.hintsSent.Add(uint64(f.hints))
	return nil
}

// writeHeartbeat writes a heartbeat carrying the stream's last number (and
// any lost-hint count), subject to the chaos knob like any frame.
func (p *peer) writeHeartbeat(conn net.Conn, w *bufio.Writer, st stream, stamped *uint64) error {
	s := Stream{Kind: KindHeartbeat, Incarnation: p.m.incarnation, Epoch: st.epoch, Seq: st.seq, Prev: st.prev,
		Overflow: p.stampLost(stamped)}
	frame, err := EncodeHeartbeat(p.m.cfg.Name, s)
	if err != nil {
		return err
	}
	if p.m.chaosDrop(KindHeartbeat) {
		return nil
	}
	if err := p.write(conn, w, frame); err != nil {
		return err
	}
	p.m.heartbeatsSent.Add(1)
	return nil
}

// stampLost returns the overflow count for a frame header (its low 32
// bits: the receiver compares values, so wrapping is harmless) and counts
// an overflow signal when it changed since the last frame.
func (p *peer) stampLost(stamped *uint64) uint32 {
	n := p.lost.Load()
	if n != *stamped {
		p.m.overflowSent.Add(1)
		*stamped = n
	}
	return uint32(n)
}

// write seals a stamped frame and writes it with its length prefix.
func (p *peer) write(conn net.Conn, w *bufio.Writer, plain []byte) error {
	frame := p.m.sealer.Seal(plain)
	_ = conn.SetWriteDeadline(time.Now().Add(DefaultWriteTimeout))
	var hdr [lengthPrefix]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(len(frame)))
	if _, err := w.Write(hdr[:]); err != nil {
		return err
	}
	_, err := w.Write(frame)
	return err
}

// acceptLoop serves inbound hint streams: at most maxInbound at once,
// maxPerIP pending per address, one per member (admit, claim).
func (m *Mesh) acceptLoop() {
	defer m.wg.Done()
	for {
		conn, err := m.ln.Accept()
		if err != nil {
			select {
			case <-m.stop:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			m.logLimited("accept", "hint listener accept failed", "error", err)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		ic := &inConn{conn: conn, ip: remoteIP(conn), at: time.Now(), gone: make(chan struct{})}
		if !m.isMember(ic.ip) {
			m.inRefusedNotMember.Add(1)
			m.logLimited("refused-not-member", "refused a hint stream: not from a current member", "from", ic.ip)
			conn.Close()
			continue
		}
		if !m.admit(ic) {
			m.inRefusedLimit.Add(1)
			m.logLimited("refused-limit", "refused a hint stream: every slot is held by a live member stream", "from", ic.ip,
				"total", m.maxInbound)
			conn.Close()
			continue
		}
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			defer m.leave(ic)
			m.serve(ic)
		}()
	}
}

// serve reads frames until the stream ends or misbehaves. A frame that
// fails authentication or decoding is rejected and counted and never
// applied; the stream is closed, since a peer with the wrong key or a
// broken framing will not recover by itself.
//
// The first frame names the stream's member (claim); a later frame naming
// another sender is rejected like a malformed one. A frame is applied only
// once its stream holds its member's slot.
//
// Read deadlines: a new stream must deliver its first whole frame within
// HintFrameTimeout of the accept (a sender dials only when it has a frame to
// write). Once it has, the wait for the first byte of the next frame is
// bounded by HintIdleTimeout (generous: the sender closes an idle stream
// itself at half of it; a version 1 sender writes no heartbeats), and the
// rest of the frame by HintFrameTimeout again, so a stream that starts a
// frame and trickles cannot pin a slot. A stream silent for
// StreamIdleBeats heartbeats is not cut by a deadline: it loses its slot
// when another stream needs it (claim, makeRoom), so a dropped heartbeat or
// a peer with a longer heartbeat costs nothing while nobody is waiting.
func (m *Mesh) serve(ic *inConn) {
	conn := ic.conn
	defer conn.Close()
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-m.stop:
			conn.Close() // unblock the read on shutdown
		case <-done:
		}
	}()
	frameTimeout, idleTimeout := m.cfg.HintFrameTimeout, m.cfg.HintIdleTimeout
	_ = conn.SetReadDeadline(ic.at.Add(frameTimeout))
	r := bufio.NewReaderSize(conn, 64<<10)
	buf := make([]byte, 0, 4096)
	phase := "first frame"
	member := "" // whom the stream speaks for, from its first frame
	timedOut := func(err error) {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			m.inTimedOut.Add(1)
			m.logLimited("timeout", "closed a hint stream: read deadline passed", "from", conn.RemoteAddr(), "phase", phase)
		}
	}
	for {
		var hdr [lengthPrefix]byte
		if member != "" {
			phase = "idle"
			_ = conn.SetReadDeadline(time.Now().Add(idleTimeout))
			if _, err := io.ReadFull(r, hdr[:1]); err != nil {
				timedOut(err)
				return
			}
			phase = "frame"
			_ = conn.SetReadDeadline(time.Now().Add(frameTimeout))
		} else if _, err := io.ReadFull(r, hdr[:1]); err != nil {
			timedOut(err)
			return
		}
		if _, err := io.ReadFull(r, hdr[1:]); err != nil {
			timedOut(err)
			return
		}
		n := binary.BigEndian.Uint32(hdr[:])
		if n == 0 || n > maxWireBytes {
			m.framesRejected.Add(1)
			m.logLimited("rejected", "rejected a hint frame", "from", conn.RemoteAddr(), "reason", "bad length", "length", n)
			return
		}
		if cap(buf) < int(n) {
			buf = make([]byte, n)
		}
		buf = buf[:n]
		if _, err := io.ReadFull(r, buf); err != nil {
			timedOut(err)
			return
		}
		plain, err := m.sealer.Open(buf)
		var f Frame
		if err == nil {
			f, err = DecodeFrame(plain)
		}
		if err == nil && member != "" && f.Sender != member {
			err = fmt.Errorf("%w: sender %q on the stream of %q", ErrBadFrame, f.Sender, member)
		}
		if err != nil {
			m.framesRejected.Add(1)
			m.logLimited("rejected", "rejected a hint frame", "from", conn.RemoteAddr(), "error", err)
			return
		}
		// A whole frame arrived: the stream is not idle, also while its
		// first frame's claim is decided.
		ic.last.Store(time.Now().UnixNano())
		if member == "" {
			if !m.claimFirst(ic, f) {
				return
			}
			member = f.Sender
		}
		select {
		case <-ic.gone:
			// Replaced or evicted meanwhile: frames already buffered are
			// not applied; only the slot's stream speaks for its member.
			return
		default:
		}
		m.apply(f, ic.ip)
	}
}

// apply hands a decoded frame's hints to the receiver, as many as the
// sending peer's token bucket allows (the rest are dropped and counted).
// Received hints are never forwarded.
func (m *Mesh) apply(f Frame, from string) {
	var gap, overflow bool
	if f.Version == FrameVersion {
		gap, overflow = m.gaps.observe(f.Sender, f.Stream)
		if gap {
			m.gapsSeen.Add(1)
		}
		if overflow {
			m.overflowSeen.Add(1)
		}
	}
	if (gap || overflow) && m.lossRecv != nil {
		// Before the hints of this frame: they are applied as remote marks
		// either way, and the early reseed runs from another goroutine.
		m.lossRecv.HintsLost(f.Sender)
	}
	if f.Version == FrameVersion && f.Stream.Kind == KindHeartbeat {
		m.heartbeatsRecv.Add(1)
		return
	}
	m.framesRecv.Add(1)
	total := 0
	for _, b := range f.Batches {
		total += len(b.Partitions)
	}
	m.hintsRecv.Add(uint64(total))
	allowed := m.limiter.take(from, total, time.Now())
	if allowed < total {
		m.hintsLimited.Add(uint64(total - allowed))
		m.logLimited("rate-limited", "dropped hints over the per-peer rate", "from", from,
			"rate_per_s", m.cfg.HintRate, "dropped", total-allowed)
		// Dropped here, they are lost like a dropped frame's: reported
		// unless this frame already was (the early reseeds are
		// rate-limited on their own, so a flood costs no more).
		if !gap && !overflow && m.lossRecv != nil {
			m.lossRecv.HintsLost(f.Sender)
		}
	}
	for _, b := range f.Batches {
		if allowed <= 0 {
			break
		}
		parts := b.Partitions[:min(len(b.Partitions), allowed)]
		allowed -= len(parts)
		if m.recv != nil {
			m.recv.HintsReceived(b.Tenant, b.Queue, parts)
		}
	}
}
