package mesh

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"time"
)

// The hint transport is one persistent TCP stream per peer, written by a
// sender goroutine fed through a bounded queue. Each message on the stream
// is a 4-byte big-endian length followed by a (sealed) frame. See
// docs/mesh.md for why not memberlist's SendReliable (a TCP dial per
// message) or SendBestEffort (one UDP packet, ~1,400 bytes).

const lengthPrefix = 4

// maxWireBytes bounds one message on the stream.
const maxWireBytes = MaxFrameBytes + SealOverhead

// frameBodyTimeout bounds how long a frame may take to arrive once its
// length prefix has; maxPerIP bounds inbound streams from one address (a
// peer needs one), so nobody can take every inbound slot from one host.
const (
	frameBodyTimeout = 10 * time.Second
	maxPerIP         = 8
)

func remoteIP(c net.Conn) string {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.IP.String()
	}
	return c.RemoteAddr().String()
}

// admit counts an inbound stream from ip, refusing beyond maxPerIP.
func (m *Mesh) admit(ip string) bool {
	m.inMu.Lock()
	defer m.inMu.Unlock()
	if m.perIP == nil {
		m.perIP = map[string]int{}
	}
	if m.perIP[ip] >= maxPerIP {
		return false
	}
	m.perIP[ip]++
	return true
}

func (m *Mesh) leave(ip string) {
	m.inMu.Lock()
	defer m.inMu.Unlock()
	if m.perIP[ip]--; m.perIP[ip] <= 0 {
		delete(m.perIP, ip)
	}
}

// peer sends frames to one member.
type peer struct {
	m    *Mesh
	name string
	addr string
	ch   chan []byte
	done chan struct{}
}

func newPeer(m *Mesh, name, addr string) *peer {
	p := &peer{m: m, name: name, addr: addr, ch: make(chan []byte, DefaultPeerQueue), done: make(chan struct{})}
	m.wg.Add(1)
	go p.run()
	return p
}

// send queues a frame without blocking; false when the queue is full.
func (p *peer) send(frame []byte) bool {
	select {
	case p.ch <- frame:
		return true
	default:
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

// run owns the connection: dial on demand, reconnect with back-off, drop
// (and count) frames while the peer is unreachable rather than block.
func (p *peer) run() {
	defer p.m.wg.Done()
	var (
		conn    net.Conn
		w       *bufio.Writer
		backoff = 100 * time.Millisecond
		retryAt time.Time
	)
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	for {
		var frame []byte
		select {
		case <-p.done:
			return
		case <-p.m.stop:
			return
		case frame = <-p.ch:
		}
		if conn == nil {
			if time.Now().Before(retryAt) {
				p.m.queueDropped.Add(1)
				continue
			}
			c, err := net.DialTimeout("tcp", p.addr, DefaultDialTimeout)
			if err != nil {
				p.m.queueDropped.Add(1)
				retryAt = time.Now().Add(backoff)
				backoff = min(backoff*2, 5*time.Second)
				p.m.log.Debug("hint peer unreachable", "peer", p.name, "addr", p.addr, "error", err)
				continue
			}
			conn, w, backoff = c, bufio.NewWriterSize(c, 64<<10), 100*time.Millisecond
		}
		// Write this frame and whatever else is queued, then flush once.
		err := p.write(conn, w, frame)
		for err == nil && len(p.ch) > 0 {
			err = p.write(conn, w, <-p.ch)
		}
		if err == nil {
			err = w.Flush()
		}
		if err != nil {
			p.m.log.Debug("hint stream broken", "peer", p.name, "error", err)
			conn.Close()
			conn, w = nil, nil
			retryAt = time.Now().Add(backoff)
		}
	}
}

func (p *peer) write(conn net.Conn, w *bufio.Writer, frame []byte) error {
	_ = conn.SetWriteDeadline(time.Now().Add(DefaultWriteTimeout))
	var hdr [lengthPrefix]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(len(frame)))
	if _, err := w.Write(hdr[:]); err != nil {
		return err
	}
	if _, err := w.Write(frame); err != nil {
		return err
	}
	p.m.framesSent.Add(1)
	return nil
}

// acceptLoop serves inbound hint streams, at most DefaultMaxInbound at once.
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
			time.Sleep(50 * time.Millisecond)
			continue
		}
		ip := remoteIP(conn)
		if m.inbound.Add(1) > DefaultMaxInbound || !m.admit(ip) {
			m.inbound.Add(-1)
			conn.Close()
			continue
		}
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			defer m.inbound.Add(-1)
			defer m.leave(ip)
			m.serve(conn)
		}()
	}
}

// serve reads frames until the stream ends or misbehaves. A frame that
// fails authentication or decoding is rejected and counted and never
// applied; the stream is closed, since a peer with the wrong key or a
// broken framing will not recover by itself.
func (m *Mesh) serve(conn net.Conn) {
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
	r := bufio.NewReaderSize(conn, 64<<10)
	buf := make([]byte, 0, 4096)
	for {
		var hdr [lengthPrefix]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return
		}
		// An idle stream is normal (no pushes); a frame that has started
		// must arrive promptly, so a trickling sender cannot pin a slot.
		_ = conn.SetReadDeadline(time.Now().Add(frameBodyTimeout))
		n := binary.BigEndian.Uint32(hdr[:])
		if n == 0 || n > maxWireBytes {
			m.framesRejected.Add(1)
			m.log.Warn("rejected a hint frame", "from", conn.RemoteAddr(), "reason", "bad length", "length", n)
			return
		}
		if cap(buf) < int(n) {
			buf = make([]byte, n)
		}
		buf = buf[:n]
		if _, err := io.ReadFull(r, buf); err != nil {
			return
		}
		_ = conn.SetReadDeadline(time.Time{})
		plain, err := m.sealer.Open(buf)
		if err == nil {
			err = m.apply(plain)
		}
		if err != nil {
			m.framesRejected.Add(1)
			m.log.Warn("rejected a hint frame", "from", conn.RemoteAddr(), "error", err)
			return
		}
	}
}

// apply decodes a frame and hands its hints to the receiver. Received
// hints are never forwarded.
func (m *Mesh) apply(frame []byte) error {
	f, err := DecodeFrame(frame)
	if err != nil {
		return err
	}
	m.framesRecv.Add(1)
	for _, b := range f.Batches {
		m.hintsRecv.Add(uint64(len(b.Partitions)))
		if m.recv != nil {
			m.recv.HintsReceived(b.Tenant, b.Queue, b.Partitions)
		}
	}
	return nil
}
