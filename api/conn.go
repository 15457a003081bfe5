package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Connection limits (docs/operations.md, "Limits"). net/http's ReadTimeout
// cannot serve as the body timeout: it stays armed while the handler runs,
// and its expiry cancels the request context, which would end every
// long-poll (no body, a long wait) at the same moment. So the body gets its
// own deadline, set when a request with a body starts and cleared once the
// body is read. net/http's WriteTimeout would count a long-poll's wait too,
// so it stays unset: the write deadline is armed at an answer's first byte
// instead (deadlineWriter).

// connStats are the connection counters of /status and /metrics.
type connStats struct {
	open         atomic.Int64 // client connections open now
	refused      atomic.Int64 // connections answered 503 (or closed) beyond MaxConns or their address's share
	refusedShare atomic.Int64 // of refused: those refused because their address held its share
	bodyTimeouts atomic.Int64 // requests cut because their body did not arrive within BodyTimeout
	acceptErrors atomic.Int64 // failed accepts (descriptor exhaustion and the like)

	// Per source address (sourceKey): open connections and refusals in
	// progress. One address (a client flooding idle sockets) can then hold
	// at most MaxConnsPerAddr slots, and at most maxRefusingPerAddr of the
	// refusal goroutines, so the others stay servable.
	mu       sync.Mutex
	byAddr   map[string]int
	refusing map[string]int
}

// take claims a connection slot for the address key: false past MaxConns
// or past the address's share (share is true then).
func (c *connStats) take(key string, maxConns, perAddr int) (ok, share bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.open.Load() >= int64(maxConns) {
		return false, false
	}
	if c.byAddr[key] >= perAddr {
		return false, true
	}
	if c.byAddr == nil {
		c.byAddr = make(map[string]int)
	}
	c.byAddr[key]++
	c.open.Add(1)
	return true, false
}

// give returns a slot taken by take.
func (c *connStats) give(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.open.Add(-1)
	if c.byAddr[key] <= 1 {
		delete(c.byAddr, key) // the map holds only addresses with connections
	} else {
		c.byAddr[key]--
	}
}

// startRefusal counts a refusal in progress for key; false when the
// address already has maxRefusingPerAddr of them.
func (c *connStats) startRefusal(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.refusing[key] >= maxRefusingPerAddr {
		return false
	}
	if c.refusing == nil {
		c.refusing = make(map[string]int)
	}
	c.refusing[key]++
	return true
}

func (c *connStats) endRefusal(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.refusing[key] <= 1 {
		delete(c.refusing, key)
	} else {
		c.refusing[key]--
	}
}

// sourceKey is the address a connection counts against: its IP, or for
// IPv6 its /64 network, which one host usually holds whole.
func sourceKey(a net.Addr) string {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return a.String()
	}
	if ip4 := ta.IP.To4(); ip4 != nil {
		return ip4.String()
	}
	return ta.IP.Mask(net.CIDRMask(64, 128)).String() + "/64"
}

// ConnStatus reports the connection counters (the "http" section of
// /status; their names are in table.go).
func (s *Server) ConnStatus() ConnSnapshot {
	return ConnSnapshot{OpenConns: s.conns.open.Load(), MaxConns: s.cfg.MaxConns, MaxConnsPerAddr: s.cfg.MaxConnsPerAddr,
		ConnsRefused: s.conns.refused.Load(), ConnsRefusedShare: s.conns.refusedShare.Load(),
		BodyTimeouts: s.conns.bodyTimeouts.Load(), AcceptErrors: s.conns.acceptErrors.Load()}
}

// HTTPServer returns an http.Server for Handler with the header and idle
// timeouts of Config; serve it on Listener(ln) so MaxConns applies too.
// The body timeout is part of Handler itself.
func (s *Server) HTTPServer() *http.Server {
	return &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		ErrorLog:          s.log.Named("http").StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}),
	}
}

// errBodyTimeout is what a request body read returns past BodyTimeout.
var errBodyTimeout = errors.New("request body timeout")

// bodyDeadline arms BodyTimeout for requests that carry a body, and
// WriteTimeout at the first byte of every answer (deadlineWriter). Without a
// connection to set deadlines on (httptest recorders) it does nothing.
func (s *Server) bodyDeadline(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A client that does not read its answer must not hold the handler
		// forever; the deadline starts with the answer, so neither a
		// long-poll's wait nor a slow handler counts against it.
		dw := deadlineWriters.Get().(*deadlineWriter)
		dw.ResponseWriter, dw.timeout, dw.armed = w, s.cfg.WriteTimeout, false
		defer func() {
			dw.ResponseWriter = nil
			deadlineWriters.Put(dw)
		}()
		w = dw
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		if err := rc.SetReadDeadline(time.Now().Add(s.cfg.BodyTimeout)); err != nil {
			next.ServeHTTP(w, r)
			return
		}
		r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc, s: s}
		next.ServeHTTP(w, r)
	})
}

// deadlineWriter arms the write deadline (WriteTimeout) at the first byte
// of an answer. Pooled: the request path allocates nothing for it.
type deadlineWriter struct {
	http.ResponseWriter
	timeout time.Duration
	armed   bool
}

var deadlineWriters = sync.Pool{New: func() any { return new(deadlineWriter) }}

func (w *deadlineWriter) arm() {
	if w.armed {
		return
	}
	w.armed = true
	// net/http's own writer has the method; asserting it spares the
	// allocation of ResponseController's not-supported error.
	if d, ok := w.ResponseWriter.(interface{ SetWriteDeadline(time.Time) error }); ok {
		_ = d.SetWriteDeadline(time.Now().Add(w.timeout))
	}
}

func (w *deadlineWriter) WriteHeader(code int) { w.arm(); w.ResponseWriter.WriteHeader(code) }

func (w *deadlineWriter) Write(p []byte) (int, error) { w.arm(); return w.ResponseWriter.Write(p) }

// Unwrap lets http.ResponseController reach the connection (Flush, deadlines).
func (w *deadlineWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// deadlineBody clears the read deadline once the body is read: net/http's
// background read, which notices a client that leaves, starts then, and a
// deadline left armed would cancel a slow broker call that follows.
type deadlineBody struct {
	io.ReadCloser
	rc       *http.ResponseController
	s        *Server
	finished bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	switch {
	case err == nil || b.finished:
	case errors.Is(err, io.EOF):
		b.finished = true
		_ = b.rc.SetReadDeadline(time.Time{})
	case errors.Is(err, os.ErrDeadlineExceeded):
		b.finished = true
		b.s.conns.bodyTimeouts.Add(1)
		return n, errBodyTimeout
	}
	return n, err
}

// Listener wraps ln: at most MaxConns client connections are open at once,
// and at most MaxConnsPerAddr from one source address (sourceKey); a
// connection beyond gets a 503 with a JSON error and is closed, so the
// client learns why at once instead of waiting in the accept backlog. A
// refused `GET /health` is answered for real instead, so probes see the
// node's health while its slots are full. Failed accepts (EMFILE when descriptors run out) are retried with a
// back-off and logged as errors, at most one line per acceptLogEvery.
func (s *Server) Listener(ln net.Listener) net.Listener {
	return &capListener{Listener: ln, s: s, log: s.log.Named("http"), refusing: make(chan struct{}, maxRefusing)}
}

const (
	maxRefusing        = 64               // refusals answered at once; beyond, a refused connection is just closed
	maxRefusingPerAddr = 4                // of those, from one source address
	refuseLinger       = time.Second      // how long a refusal waits for the request and the client's close
	acceptLogEvery     = 10 * time.Second // at most one accept-error line per this interval
	acceptBackoff      = time.Second      // cap of the retry delay after a failed accept
)

type capListener struct {
	net.Listener
	s        *Server
	log      hclog.Logger
	refusing chan struct{} // semaphore of refusals in progress

	mu              sync.Mutex
	lastLog         time.Time
	suppressed      int64
	lastShareLog    time.Time
	shareSuppressed int64
}

func (l *capListener) Accept() (net.Conn, error) {
	var delay time.Duration
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if !retryableAccept(err) {
				return nil, err
			}
			l.s.conns.acceptErrors.Add(1)
			l.logAcceptError(err)
			delay = min(max(2*delay, 5*time.Millisecond), acceptBackoff)
			time.Sleep(delay) // nothing to wait on: the kernel frees descriptors silently
			continue
		}
		delay = 0
		key := sourceKey(c.RemoteAddr())
		if ok, share := l.s.conns.take(key, l.s.cfg.MaxConns, l.s.cfg.MaxConnsPerAddr); !ok {
			l.s.conns.refused.Add(1)
			if share {
				l.s.conns.refusedShare.Add(1)
				l.logShare(key)
			}
			l.refuse(c, key)
			continue
		}
		return &countedConn{Conn: c, key: key, stats: &l.s.conns}, nil
	}
}

// retryableAccept tells the errors after which accepting may work again.
func retryableAccept(err error) bool {
	if errors.Is(err, net.ErrClosed) {
		return false
	}
	for _, e := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED} {
		if errors.Is(err, e) {
			return true
		}
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func (l *capListener) logAcceptError(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if time.Since(l.lastLog) < acceptLogEvery {
		l.suppressed++
		return
	}
	l.log.Error("cannot accept connections (out of file descriptors? raise the limit or lower QUEEN_HTTP_MAX_CONNS)",
		"error", err, "open_conns", l.s.conns.open.Load(), "max_conns", l.s.cfg.MaxConns, "suppressed", l.suppressed)
	l.lastLog, l.suppressed = time.Now(), 0
}

// logShare says, at most once per acceptLogEvery, that an address was held
// to its share: behind a proxy every client has the proxy's address, and
// the operator must raise QUEEN_HTTP_MAX_CONNS_PER_ADDR there.
func (l *capListener) logShare(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if time.Since(l.lastShareLog) < acceptLogEvery {
		l.shareSuppressed++
		return
	}
	l.log.Warn("refusing connections from an address at its share (behind a proxy or load balancer, raise QUEEN_HTTP_MAX_CONNS_PER_ADDR)",
		"addr", key, "max_conns_per_addr", l.s.cfg.MaxConnsPerAddr, "suppressed", l.shareSuppressed)
	l.lastShareLog, l.shareSuppressed = time.Now(), 0
}

// refuse answers a connection beyond the cap or its address's share. It
// reads the request head first and lingers for the client's close, so the
// client reads the answer rather than a connection reset. A `GET /health`
// gets the health answer (with Connection: close): a load balancer's probe
// must not mark a healthy node down because clients filled its slots.
func (l *capListener) refuse(c net.Conn, key string) {
	if !l.s.conns.startRefusal(key) {
		_ = c.Close() // this address already has its refusals in progress
		return
	}
	select {
	case l.refusing <- struct{}{}:
	default:
		l.s.conns.endRefusal(key)
		_ = c.Close() // a flood of refusals: spend nothing more on them
		return
	}
	go func() {
		defer func() { <-l.refusing; l.s.conns.endRefusal(key) }()
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(refuseLinger))
		code, body := http.StatusServiceUnavailable,
			fmt.Sprintf(`{"error":"too many connections (max %d, %d per address); retry later"}`, l.s.cfg.MaxConns, l.s.cfg.MaxConnsPerAddr)
		if isHealthHead(readHead(c)) {
			ctx, cancel := context.WithTimeout(context.Background(), refuseLinger)
			var hr healthResponse
			code, hr = l.s.health(ctx)
			cancel()
			b, _ := json.Marshal(hr)
			body = string(b)
			// The check may have used the deadline up: the answer gets its own.
			_ = c.SetWriteDeadline(time.Now().Add(refuseLinger))
		}
		body += "\n"
		resp := fmt.Sprintf("HTTP/1.1 %d %s\r\n", code, http.StatusText(code)) +
			"Content-Type: application/json\r\nConnection: close\r\n" +
			"Retry-After: 1\r\nAccess-Control-Allow-Origin: *\r\n" +
			fmt.Sprintf("Content-Length: %d\r\n\r\n", len(body)) + body
		if _, err := io.WriteString(c, resp); err != nil {
			return
		}
		if tc, ok := c.(interface{ CloseWrite() error }); ok {
			_ = tc.CloseWrite()
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(c, 64<<10))
	}()
}

// readHead reads until the end of a request head, 8 KiB or the deadline,
// and returns what it read.
func readHead(c net.Conn) []byte {
	buf := make([]byte, 0, 8<<10)
	for len(buf) < cap(buf) {
		n, err := c.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if bytes.Contains(buf, []byte("\r\n\r\n")) || err != nil {
			break
		}
	}
	return buf
}

// isHealthHead tells a complete `GET /health` request head.
func isHealthHead(head []byte) bool {
	if !bytes.Contains(head, []byte("\r\n\r\n")) {
		return false
	}
	line, _, _ := bytes.Cut(head, []byte("\r\n"))
	target, ok := bytes.CutPrefix(line, []byte("GET /health"))
	return ok && (bytes.HasPrefix(target, []byte(" ")) || bytes.HasPrefix(target, []byte("?")))
}

// countedConn gives its slot back once, however often it is closed.
type countedConn struct {
	net.Conn
	key   string
	stats *connStats
	once  sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.stats.give(c.key) })
	return c.Conn.Close()
}
