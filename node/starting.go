package node

import (
	"context"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"queen-node/api"
)

// startupServer serves api.StartingHandler on the node's listener while the
// broker connects, then hands the listener, still open, to the API server.
// Without it a node waiting for PostgreSQL holds a bound port that accepts
// connections and never answers them (docs/operations.md, "Starting").
type startupServer struct {
	srv    *http.Server
	ln     *handoffListener
	done   chan struct{}
	reason atomic.Pointer[string]
}

// startStartup serves on ln until stop; nil when ln is not a TCP listener
// (nothing to hand off then).
func startStartup(ln net.Listener, version string, readHeader time.Duration) *startupServer {
	tl, ok := ln.(*net.TCPListener)
	if !ok {
		return nil
	}
	if readHeader <= 0 {
		readHeader = api.DefaultReadHeaderTimeout
	}
	s := &startupServer{ln: &handoffListener{TCPListener: tl}, done: make(chan struct{})}
	s.srv = &http.Server{
		Handler: api.StartingHandler(version, func() string {
			if p := s.reason.Load(); p != nil {
				return *p
			}
			return ""
		}),
		ReadHeaderTimeout: readHeader,
		IdleTimeout:       time.Second, // clients reconnect to the API server soon anyway
	}
	go func() {
		defer close(s.done)
		_ = s.srv.Serve(s.ln)
	}()
	return s
}

// setReason records the latest connect failure for /health.
func (s *startupServer) setReason(err error) {
	if s == nil {
		return
	}
	msg := err.Error()
	s.reason.Store(&msg)
}

// stop ends serving: the listener stays open (connections queue in its
// backlog) for the API server to serve next.
func (s *startupServer) stop() {
	if s == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		_ = s.srv.Close()
	}
	<-s.done
	_ = s.ln.TCPListener.SetDeadline(time.Time{})
}

// handoffListener's Close wakes a pending Accept with a deadline instead of
// closing the socket, so the port is never released between the two servers.
type handoffListener struct {
	*net.TCPListener
	closed atomic.Bool
}

func (l *handoffListener) Accept() (net.Conn, error) {
	c, err := l.TCPListener.Accept()
	if err != nil && l.closed.Load() {
		return nil, net.ErrClosed
	}
	return c, err
}

func (l *handoffListener) Close() error {
	l.closed.Store(true)
	return l.TCPListener.SetDeadline(time.Now())
}
