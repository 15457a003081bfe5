package mesh

import (
	"net"
	"strconv"
	"time"

	"github.com/hashicorp/memberlist"
)

// network is where the mesh meets the network: the hint listener, the dial
// of a hint stream, and the transport memberlist gossips over. Production
// uses tcpNetwork; tests substitute an in-memory network (memnet_test.go)
// so that they can step through streams (accepted, closed, read) instead of
// polling real sockets with deadlines (docs/mesh.md, "Testing").
type network interface {
	// listenHints opens the hint listener on host:port (port 0: any free
	// one). Its Addr and its streams' addresses are *net.TCPAddr: members
	// are recognised by the source IP of a stream (isMember).
	listenHints(host string, port int) (net.Listener, error)
	// dialHints opens a hint stream to addr from the local IP src (nil:
	// the route picks).
	dialHints(src net.IP, addr string, timeout time.Duration) (net.Conn, error)
	// gossip is the transport memberlist binds to host:port, or nil for
	// memberlist's own (UDP and TCP on that address).
	gossip(host string, port int) (memberlist.Transport, error)
}

// tcpNetwork is the real network: TCP hint streams, memberlist's own
// transport.
type tcpNetwork struct{}

func (tcpNetwork) listenHints(host string, port int) (net.Listener, error) {
	return net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
}

func (tcpNetwork) dialHints(src net.IP, addr string, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	if src != nil {
		d.LocalAddr = &net.TCPAddr{IP: src}
	}
	return d.Dial("tcp", addr)
}

func (tcpNetwork) gossip(string, int) (memberlist.Transport, error) { return nil, nil }
