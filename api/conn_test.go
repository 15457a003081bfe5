package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"queen-node/broker"
)

// serveTCP serves a Server on a real loopback listener, as the binary does.
func serveTCP(t *testing.T, fb *fakeBroker, mutate func(*Config)) (*Server, string) {
	t.Helper()
	cfg := DefaultConfig()
	mutate(&cfg)
	srv := New(fb, fb, cfg, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := srv.HTTPServer()
	go func() { _ = hs.Serve(srv.Listener(ln)) }()
	t.Cleanup(func() { _ = hs.Close() })
	return srv, ln.Addr().String()
}

// rawRequest writes one request on c and reads its response, within 5 s.
func rawRequest(t *testing.T, c net.Conn, br *bufio.Reader, req string) *http.Response {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatalf("write: %v", err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no response: %v", err)
	}
	// Read the body now so the connection is ready for the next request.
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("response body: %v", err)
	}
	resp.Body = io.NopCloser(bytes.NewReader(b))
	return resp
}

const healthReq = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"

// A client that sends its headers and then trickles the body (slowloris)
// used to hold its connection forever (issue 9, item 9). It is cut with a
// 408 once the body timeout passes.
func TestSlowBodyIsCut(t *testing.T) {
	srv, addr := serveTCP(t, &fakeBroker{}, func(c *Config) {
		c.BodyTimeout = 300 * time.Millisecond
	})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "POST /api/v1/push HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"); err != nil {
		t.Fatal(err)
	}
	// Trickle a byte every 50 ms, faster than any per-read timeout would
	// catch, until the server closes the connection.
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if _, err := io.WriteString(c, " "); err != nil {
					return
				}
			}
		}
	}()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("slow body not cut within 5 s: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(body), `"error"`) {
		t.Fatalf("status %d body %s, want 408 with a JSON error", resp.StatusCode, body)
	}
	if !resp.Close {
		t.Fatalf("want Connection: close")
	}
	if _, err := br.ReadByte(); err == nil {
		t.Fatalf("connection still open after the 408")
	}
	if n := srv.ConnStatus().BodyTimeouts; n != 1 {
		t.Fatalf("body timeouts counted %d, want 1", n)
	}
	if v := gathered(t, srv, "queen_http_body_timeouts_total"); v != 1 {
		t.Fatalf("queen_http_body_timeouts_total = %v, want 1", v)
	}
}

// A long-poll has no body and a long wait for its answer: the body timeout
// must not apply to it, nor end its context.
func TestLongPollOutlivesTimeouts(t *testing.T) {
	const wait = 1200 * time.Millisecond
	fb := &fakeBroker{popFn: func(ctx context.Context, req broker.PopRequest) (*broker.PopResult, error) {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait): // stands for a long-poll that finds nothing
			return nil, nil
		}
	}}
	_, addr := serveTCP(t, fb, func(c *Config) {
		c.BodyTimeout = 200 * time.Millisecond
		c.ReadHeaderTimeout = 200 * time.Millisecond
		c.IdleTimeout = 200 * time.Millisecond
	})
	start := time.Now()
	resp, err := http.Get("http://" + addr + "/api/v1/pop/queue/q?wait=true&timeout=5000")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent || time.Since(start) < wait {
		t.Fatalf("status %d after %v, want 204 after the whole %v wait", resp.StatusCode, time.Since(start), wait)
	}
	// A POST with a body, answered quickly, keeps its keep-alive
	// connection usable past the body timeout as well.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	push := "POST /api/v1/push HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 12\r\n\r\n{\"items\":[]}"
	if resp := rawRequest(t, c, br, push); resp.StatusCode != http.StatusCreated {
		t.Fatalf("push: %d", resp.StatusCode)
	}
}

// Beyond MaxConns a new client gets a prompt 503 with a JSON error and
// Connection: close, while clients already connected keep being served.
func TestConnectionCap(t *testing.T) {
	srv, addr := serveTCP(t, &fakeBroker{}, func(c *Config) { c.MaxConns = 2 })
	var held []net.Conn
	var readers []*bufio.Reader
	for i := 0; i < 2; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		br := bufio.NewReader(c)
		if resp := rawRequest(t, c, br, healthReq); resp.StatusCode != http.StatusOK {
			t.Fatalf("conn %d: health %d", i, resp.StatusCode)
		}
		held, readers = append(held, c), append(readers, br)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	resp := rawRequest(t, c, br, "GET /api/v1/resources/queues HTTP/1.1\r\nHost: x\r\n\r\n")
	body, _ := io.ReadAll(resp.Body)
	var eb struct{ Error string }
	if resp.StatusCode != http.StatusServiceUnavailable || json.Unmarshal(body, &eb) != nil || eb.Error == "" ||
		!resp.Close || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("over the cap: status %d close %v body %s, want 503 with a JSON error and Connection: close", resp.StatusCode, resp.Close, body)
	}
	if _, err := br.ReadByte(); err == nil {
		t.Fatalf("refused connection left open")
	}
	for i, c := range held {
		if resp := rawRequest(t, c, readers[i], healthReq); resp.StatusCode != http.StatusOK {
			t.Fatalf("existing conn %d: health %d", i, resp.StatusCode)
		}
	}
	if st := srv.ConnStatus(); st.ConnsRefused != 1 || st.MaxConns != 2 || st.OpenConns != 2 {
		t.Fatalf("status %+v, want 1 refused, 2 open, max 2", st)
	}
	if v := gathered(t, srv, "queen_http_connections_refused_total"); v != 1 {
		t.Fatalf("queen_http_connections_refused_total = %v, want 1", v)
	}
	// A slot freed by a client that leaves is usable again.
	held[0].Close()
	deadline := time.Now().Add(5 * time.Second)
	for srv.conns.open.Load() > 1 {
		if time.Now().After(deadline) {
			t.Fatalf("open connections %d after a close", srv.conns.open.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	resp2, err := http.Get("http://" + addr + "/health")
	if err != nil || resp2.StatusCode != http.StatusOK {
		t.Fatalf("after a slot freed: %v %v", resp2, err)
	}
	resp2.Body.Close()
}

// gathered reads one unlabelled metric from the Server's registry.
func gathered(t *testing.T, srv *Server, name string) float64 {
	t.Helper()
	mfs, err := srv.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		m := mf.GetMetric()[0]
		if c := m.GetCounter(); c != nil {
			return c.GetValue()
		}
		return m.GetGauge().GetValue()
	}
	t.Fatalf("metric %s not registered", name)
	return 0
}

// A client that asks for a large pop and then does not read it: the write
// deadline (armed when the answer starts, so the long-poll's wait does not
// count) cuts the connection, and the lease of the undelivered answer is
// released at once.
func TestUnreadPopAnswerIsCutAndReleased(t *testing.T) {
	fb := &fakeBroker{released: make(chan string, 1)}
	big := json.RawMessage(`"` + strings.Repeat("x", 8<<20) + `"`)
	fb.popFn = func(ctx context.Context, req broker.PopRequest) (*broker.PopResult, error) {
		// The long-poll waits longer than WriteTimeout before answering.
		select {
		case <-time.After(600 * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return &broker.PopResult{Queue: "q", LeaseID: "L", PartitionsClaimed: 1,
			Messages: []broker.Message{{ID: "m", Data: big, LeaseID: "L"}, {ID: "n", Data: big, LeaseID: "L"}}}, nil
	}
	_, addr := serveTCP(t, fb, func(c *Config) { c.WriteTimeout, c.PopMinReadRate = 300*time.Millisecond, 1<<30 })
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.(*net.TCPConn).SetReadBuffer(4 << 10)
	if _, err := io.WriteString(c, "GET /api/v1/pop/queue/q?wait=true&timeout=5000 HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	// Never read: the 16 MiB answer cannot fit the socket buffers.
	select {
	case id := <-fb.released:
		if id != "L" {
			t.Fatalf("released %q", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("an unread pop answer still holds its lease after 10 s")
	}
}

// slowPushBroker commits a push slowly (a lock wait, a queue behind other
// pushes): longer than the body and write timeouts together.
type slowPushBroker struct{ *fakeBroker }

func (s slowPushBroker) Push(ctx context.Context, tenant string, sub *string, items []broker.PushItem) ([]broker.PushResult, error) {
	time.Sleep(700 * time.Millisecond)
	return s.fakeBroker.Push(ctx, tenant, sub, items)
}

// The write deadline counts from the answer's first byte: a slow handler
// whose client is reading still gets its answer delivered (before, the
// deadline ran from the request's start and the committed push's answer was
// lost).
func TestSlowHandlerAnswerDelivered(t *testing.T) {
	cfg := DefaultConfig()
	cfg.WriteTimeout, cfg.BodyTimeout = 300*time.Millisecond, 200*time.Millisecond
	fb := &fakeBroker{}
	srv := New(slowPushBroker{fb}, fb, cfg, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := srv.HTTPServer()
	go func() { _ = hs.Serve(srv.Listener(ln)) }()
	t.Cleanup(func() { _ = hs.Close() })
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	body := `{"items":[{"queue":"q","payload":{"a":1}}]}`
	resp := rawRequest(t, c, bufio.NewReader(c), fmt.Sprintf("POST /api/v1/push HTTP/1.1\r\nHost: x\r\n"+
		"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body))
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("status %d", resp.StatusCode)
	}
}

// dialFrom opens a connection to addr from the loopback source address src
// (127.0.0.0/8 is all local on Linux), as if from another client host.
func dialFrom(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial from %s: %v", src, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// waitOpen polls until the server counts n open connections.
func waitOpen(t *testing.T, srv *Server, n int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for srv.conns.open.Load() != n {
		if time.Now().After(deadline) {
			t.Fatalf("open connections %d, want %d", srv.conns.open.Load(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// One address holding idle sockets (issue 21: 4,096 of them locked every
// client out, /health included, for each header-timeout wave) gets its
// share of the slots and no more; a client from another address is served.
func TestConnectionShareKeepsOtherAddressesServed(t *testing.T) {
	srv, addr := serveTCP(t, &fakeBroker{}, func(c *Config) { c.MaxConns, c.MaxConnsPerAddr = 8, 4 })
	for i := 0; i < 12; i++ {
		dialFrom(t, "127.0.0.2", addr) // idle: never sends a request
	}
	deadline := time.Now().Add(5 * time.Second)
	for srv.conns.refused.Load() < 8 {
		if time.Now().After(deadline) {
			t.Fatalf("refused %d of the flood, want 8", srv.conns.refused.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	waitOpen(t, srv, 4)
	c := dialFrom(t, "127.0.0.3", addr)
	br := bufio.NewReader(c)
	for _, req := range []string{healthReq, "GET /api/v1/resources/queues HTTP/1.1\r\nHost: x\r\n\r\n"} {
		if resp := rawRequest(t, c, br, req); resp.StatusCode != http.StatusOK {
			t.Fatalf("client beside the flood: %q answered %d, want 200", req, resp.StatusCode)
		}
	}
	st := srv.ConnStatus()
	if st.ConnsRefusedShare != 8 || st.ConnsRefused != 8 || st.MaxConnsPerAddr != 4 {
		t.Fatalf("status %+v, want 8 refused for the share", st)
	}
	if v := gathered(t, srv, "queen_http_connections_refused_share_total"); v != 8 {
		t.Fatalf("queen_http_connections_refused_share_total = %v, want 8", v)
	}
}

// With every slot taken (by two addresses at their share), a health probe
// from a third is still answered with the node's health, and closed; any
// other request there gets the 503.
func TestHealthAnsweredBeyondTheCap(t *testing.T) {
	srv, addr := serveTCP(t, &fakeBroker{}, func(c *Config) { c.MaxConns, c.MaxConnsPerAddr = 4, 2 })
	for _, src := range []string{"127.0.0.2", "127.0.0.2", "127.0.0.3", "127.0.0.3"} {
		dialFrom(t, src, addr)
	}
	waitOpen(t, srv, 4)
	c := dialFrom(t, "127.0.0.4", addr)
	br := bufio.NewReader(c)
	resp := rawRequest(t, c, br, "GET /health?probe=1 HTTP/1.1\r\nHost: x\r\n\r\n")
	body, _ := io.ReadAll(resp.Body)
	var hr healthResponse
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &hr) != nil || hr.Status != "healthy" || !resp.Close {
		t.Fatalf("health beyond the cap: %d %s close=%v, want 200 healthy with Connection: close", resp.StatusCode, body, resp.Close)
	}
	c2 := dialFrom(t, "127.0.0.4", addr)
	resp = rawRequest(t, c2, bufio.NewReader(c2), "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("other request beyond the cap: %d, want 503", resp.StatusCode)
	}
}

func TestSourceKey(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.2:5000":                   "127.0.0.2",
		"[::ffff:10.0.0.1]:80":             "10.0.0.1",
		"[2001:db8:1:2:aaaa:bbbb:c:d]:443": "2001:db8:1:2::/64",
		"[2001:db8:1:2::9]:443":            "2001:db8:1:2::/64",
	} {
		a, err := net.ResolveTCPAddr("tcp", in)
		if err != nil {
			t.Fatal(err)
		}
		if got := sourceKey(a); got != want {
			t.Errorf("sourceKey(%s) = %s, want %s", in, got, want)
		}
	}
}
