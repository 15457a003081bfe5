package mesh

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// memNet is an in-memory network for mesh tests (the seam is network.go),
// after memberlist's mock_transport.go: hint listeners, hint streams and
// memberlist's packets and streams, all in this process and addressed by
// IP and port like the real ones, so the membership checks (isMember,
// memberNamed) see the same source addresses as on loopback. Streams are
// buffered pipes (a write never waits for the reader, as with a socket
// buffer) whose ends say when the other end closed them, so a test waits
// for "the receiver closed the forged stream" on a channel instead of
// polling a socket with short read deadlines. Gossip packets are dropped
// when nobody listens or the queue is full, as UDP's are.
//
// No ports are bound and no IP must exist: tests need no loopback aliases
// and cannot collide with one another's ports.
type memNet struct {
	mu       sync.Mutex
	streams  map[string]*memListener // hint listeners and gossip stream listeners, by "ip:port"
	packets  map[string]*memGossip   // gossip packet endpoints, by "ip:port"
	nextPort int
	// accepted is signalled (without blocking) each time a listener queues
	// a new inbound stream: tests that dial wait on it instead of polling.
	accepted chan struct{}
}

func newMemNet() *memNet {
	return &memNet{streams: map[string]*memListener{}, packets: map[string]*memGossip{}, nextPort: 40000,
		accepted: make(chan struct{}, 1)}
}

// use makes a Config run on this network.
func (n *memNet) use(c *Config) { c.network = n }

func (n *memNet) port(port int) int {
	if port == 0 {
		n.nextPort++
		return n.nextPort
	}
	return port
}

func (n *memNet) listenHints(host string, port int) (net.Listener, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.listenLocked(host, port)
}

func (n *memNet) listenLocked(host string, port int) (*memListener, error) {
	ip := net.ParseIP(host)
	if ip == nil {
		return nil, fmt.Errorf("memnet: listen on %q: not an IP", host)
	}
	addr := &net.TCPAddr{IP: ip, Port: n.port(port)}
	if _, used := n.streams[addr.String()]; used {
		return nil, &net.OpError{Op: "listen", Net: "tcp", Addr: addr, Err: syscall.EADDRINUSE}
	}
	l := &memListener{n: n, addr: addr, ch: make(chan net.Conn, 128), done: make(chan struct{})}
	n.streams[addr.String()] = l
	return l, nil
}

func (n *memNet) dialHints(src net.IP, addr string, _ time.Duration) (net.Conn, error) {
	c, err := n.dial(src, addr)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// dial connects from src (nil: 127.0.0.1, as the route picks on loopback)
// to a listener, or fails at once as a refused TCP dial does.
func (n *memNet) dial(src net.IP, addr string) (*memConn, error) {
	if src == nil {
		src = net.IPv4(127, 0, 0, 1)
	}
	n.mu.Lock()
	l := n.streams[canonical(addr)]
	local := &net.TCPAddr{IP: src, Port: n.port(0)}
	n.mu.Unlock()
	if l == nil {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Addr: local, Err: syscall.ECONNREFUSED}
	}
	client, server := memPipe(local, l.addr)
	select {
	case <-l.done:
		return nil, &net.OpError{Op: "dial", Net: "tcp", Addr: local, Err: syscall.ECONNREFUSED}
	case l.ch <- server:
	default: // backlog full
		return nil, &net.OpError{Op: "dial", Net: "tcp", Addr: local, Err: syscall.ECONNREFUSED}
	}
	select {
	case n.accepted <- struct{}{}:
	default:
	}
	return client, nil
}

// canonical spells an "ip:port" the way net.TCPAddr.String does.
func canonical(addr string) string {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(h); ip != nil {
		h = ip.String()
	}
	return net.JoinHostPort(h, p)
}

func (n *memNet) gossip(host string, port int) (memberlist.Transport, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	l, err := n.listenLocked(host, port)
	if err != nil {
		return nil, err
	}
	g := &memGossip{n: n, ln: l, packets: make(chan *memberlist.Packet, 1024)}
	n.packets[l.addr.String()] = g
	return g, nil
}

// memListener is a listener on a memNet.
type memListener struct {
	n    *memNet
	addr *net.TCPAddr
	ch   chan net.Conn
	once sync.Once
	done chan struct{}
}

func (l *memListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: l.addr, Err: net.ErrClosed}
	}
}

func (l *memListener) Close() error {
	l.once.Do(func() {
		close(l.done)
		l.n.mu.Lock()
		if l.n.streams[l.addr.String()] == l {
			delete(l.n.streams, l.addr.String())
		}
		l.n.mu.Unlock()
		// Streams dialled but never accepted are refused now, as a
		// closed socket resets its backlog.
		for {
			select {
			case c := <-l.ch:
				c.Close()
			default:
				return
			}
		}
	})
	return nil
}

func (l *memListener) Addr() net.Addr { return l.addr }

// memGossip is memberlist's Transport on a memNet.
type memGossip struct {
	n       *memNet
	ln      *memListener
	packets chan *memberlist.Packet
}

func (g *memGossip) FinalAdvertiseAddr(ip string, port int) (net.IP, int, error) {
	if ip == "" {
		return g.ln.addr.IP, g.ln.addr.Port, nil
	}
	adv := net.ParseIP(ip)
	if adv == nil {
		return nil, 0, fmt.Errorf("memnet: advertise %q: not an IP", ip)
	}
	if port == 0 {
		port = g.ln.addr.Port
	}
	return adv, port, nil
}

func (g *memGossip) WriteTo(b []byte, addr string) (time.Time, error) {
	now := time.Now()
	g.n.mu.Lock()
	dest := g.n.packets[canonical(addr)]
	g.n.mu.Unlock()
	if dest == nil {
		return now, nil // as UDP: nobody listening, nothing said
	}
	p := &memberlist.Packet{Buf: append([]byte(nil), b...), Timestamp: now,
		From: &net.UDPAddr{IP: g.ln.addr.IP, Port: g.ln.addr.Port}}
	select {
	case dest.packets <- p:
	default: // the receiver's queue is full: dropped, as UDP does
	}
	return now, nil
}

func (g *memGossip) PacketCh() <-chan *memberlist.Packet { return g.packets }

func (g *memGossip) DialTimeout(addr string, _ time.Duration) (net.Conn, error) {
	c, err := g.n.dial(g.ln.addr.IP, addr)
	if err != nil {
		return nil, err
	}
	return c, nil
}

func (g *memGossip) StreamCh() <-chan net.Conn { return g.ln.ch }

func (g *memGossip) Shutdown() error {
	g.n.mu.Lock()
	if g.n.packets[g.ln.addr.String()] == g {
		delete(g.n.packets, g.ln.addr.String())
	}
	g.n.mu.Unlock()
	return g.ln.Close()
}

// memHalf is one direction of a memConn: bytes written by one end, read
// by the other. Unbounded: tests write little, and a write must not wait
// for the reader (a socket buffer does not).
type memHalf struct {
	mu     sync.Mutex
	buf    []byte
	eof    bool          // the writing end closed: reads drain, then io.EOF
	broken bool          // the reading end closed: writes fail
	wake   chan struct{} // capacity 1: data, a close or a new deadline
}

func (h *memHalf) signal() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// memConn is one end of an in-memory stream.
type memConn struct {
	local, remote *net.TCPAddr
	in, out       *memHalf
	closed        chan struct{} // this end closed
	peerClosed    chan struct{} // the other end closed
	once          *sync.Once    // this end's close
	mu            sync.Mutex
	readDeadline  time.Time
}

// memPipe returns both ends of a stream from local to remote.
func memPipe(local, remote *net.TCPAddr) (client, server *memConn) {
	ab := &memHalf{wake: make(chan struct{}, 1)}
	ba := &memHalf{wake: make(chan struct{}, 1)}
	aClosed, bClosed := make(chan struct{}), make(chan struct{})
	client = &memConn{local: local, remote: remote, in: ba, out: ab, closed: aClosed, peerClosed: bClosed, once: &sync.Once{}}
	server = &memConn{local: remote, remote: local, in: ab, out: ba, closed: bClosed, peerClosed: aClosed, once: &sync.Once{}}
	return client, server
}

// ClosedByPeer is closed when the other end closes the stream.
func (c *memConn) ClosedByPeer() <-chan struct{} { return c.peerClosed }

func (c *memConn) Read(b []byte) (int, error) {
	for {
		select {
		case <-c.closed:
			return 0, c.opErr("read", net.ErrClosed)
		default:
		}
		h := c.in
		h.mu.Lock()
		if len(h.buf) > 0 {
			n := copy(b, h.buf)
			h.buf = h.buf[n:]
			h.mu.Unlock()
			return n, nil
		}
		eof := h.eof
		h.mu.Unlock()
		if eof {
			return 0, io.EOF
		}
		c.mu.Lock()
		dl := c.readDeadline
		c.mu.Unlock()
		var timer *time.Timer
		var timeout <-chan time.Time
		if !dl.IsZero() {
			wait := time.Until(dl)
			if wait <= 0 {
				return 0, c.opErr("read", os.ErrDeadlineExceeded)
			}
			timer = time.NewTimer(wait)
			timeout = timer.C
		}
		select {
		case <-h.wake:
		case <-c.closed:
		case <-timeout:
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

func (c *memConn) Write(b []byte) (int, error) {
	select {
	case <-c.closed:
		return 0, c.opErr("write", net.ErrClosed)
	default:
	}
	h := c.out
	h.mu.Lock()
	if h.broken {
		h.mu.Unlock()
		return 0, c.opErr("write", syscall.EPIPE)
	}
	h.buf = append(h.buf, b...)
	h.mu.Unlock()
	h.signal()
	return len(b), nil
}

func (c *memConn) Close() error {
	c.once.Do(func() {
		close(c.closed)
		c.out.mu.Lock()
		c.out.eof = true
		c.out.mu.Unlock()
		c.out.signal()
		c.in.mu.Lock()
		c.in.broken, c.in.buf = true, nil
		c.in.mu.Unlock()
		c.in.signal()
	})
	return nil
}

func (c *memConn) opErr(op string, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Source: c.local, Addr: c.remote, Err: err}
}

func (c *memConn) LocalAddr() net.Addr  { return c.local }
func (c *memConn) RemoteAddr() net.Addr { return c.remote }

func (c *memConn) SetDeadline(t time.Time) error {
	_ = c.SetWriteDeadline(t)
	return c.SetReadDeadline(t)
}

func (c *memConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.readDeadline = t
	c.mu.Unlock()
	c.in.signal() // a blocked Read re-reads its deadline
	return nil
}

// SetWriteDeadline is accepted and ignored: writes never wait.
func (c *memConn) SetWriteDeadline(time.Time) error { return nil }

// waitClosed waits until c's other end closes it, and fails the test after
// within.
func waitClosed(t testing.TB, c *memConn, within time.Duration, what string) {
	t.Helper()
	select {
	case <-c.peerClosed:
	case <-time.After(within):
		t.Fatalf("timed out after %v: %s", within, what)
	}
}

// isClosed tells, without waiting, whether c's other end closed it.
func isClosed(c *memConn) bool {
	select {
	case <-c.peerClosed:
		return true
	default:
		return false
	}
}

// memnet's own contract: what the mesh relies on from a stream.
func TestMemNetStreams(t *testing.T) {
	n := newMemNet()
	l, err := n.listenHints("10.0.0.1", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.listenHints("10.0.0.1", l.Addr().(*net.TCPAddr).Port); !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("second listen on one address: %v", err)
	}
	if _, err := n.dial(nil, "10.0.0.9:1"); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial to nobody: %v", err)
	}
	c, err := n.dial(net.ParseIP("10.0.0.2"), l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	sc, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	s := sc.(*memConn)
	if got := remoteIP(s); got != "10.0.0.2" {
		t.Fatalf("source IP %q", got)
	}
	if _, err := c.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(s, buf); err != nil || string(buf) != "hello" {
		t.Fatalf("read %q, %v", buf, err)
	}
	_ = s.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
	var ne net.Error
	if _, err := s.Read(buf); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read past the deadline: %v", err)
	}
	_ = s.SetReadDeadline(time.Time{})
	_, _ = c.Write([]byte("x"))
	c.Close()
	if n, err := s.Read(buf); n != 1 || err != nil {
		t.Fatalf("buffered byte after the close: %d, %v", n, err)
	}
	if _, err := s.Read(buf); err != io.EOF {
		t.Fatalf("read after the close: %v", err)
	}
	waitClosed(t, s, time.Second, "the server end sees the close")
	if _, err := s.Write([]byte("y")); err == nil {
		t.Fatal("write to a closed stream succeeded")
	}
	l.Close()
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("accept after close: %v", err)
	}
	if _, err := n.dial(nil, l.Addr().String()); err == nil {
		t.Fatal("dial to a closed listener succeeded")
	}
}
