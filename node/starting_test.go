package node_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"queen-node/internal/pgtest"
	"queen-node/node"
)

// freePort reserves a loopback port and frees it: nothing listens there.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// forward serves a TCP forwarder on addr to target until the test ends: a
// PostgreSQL that "comes up" at addr.
func forward(t *testing.T, addr, target string) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("forwarder: %v", err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			wg.Add(2)
			go func() { defer wg.Done(); _, _ = io.Copy(u, c); u.Close() }()
			go func() { defer wg.Done(); _, _ = io.Copy(c, u); c.Close() }()
		}
	}()
}

// A node waiting for PostgreSQL answers /health with 503 and the reason,
// and every other request with a 503 JSON error, instead of a port that
// accepts and never answers (issue 21); once the database is up the same
// port serves the API.
func TestHealthAnswersWhileDatabaseIsDown(t *testing.T) {
	dbURL, err := url.Parse(pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	target := dbURL.Host
	dbURL.Host = freePort(t)
	cfg := node.DefaultConfig()
	cfg.HTTPAddr = freePort(t)
	cfg.Broker.NodeName = "n1"
	cfg.Broker.PG.URL = dbURL.String()
	cfg.Mesh.Enabled = false
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	type started struct {
		n   *node.Node
		err error
	}
	res := make(chan started, 1)
	go func() {
		n, err := node.Start(ctx, cfg, nil)
		res <- started{n, err}
	}()

	base := "http://" + cfg.HTTPAddr
	client := &http.Client{Timeout: 15 * time.Second}
	var health struct{ Status, Database, Error string }
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := client.Get(base + "/health")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusServiceUnavailable {
				t.Fatalf("health before the database: %d %s", resp.StatusCode, body)
			}
			if err := json.Unmarshal(body, &health); err != nil {
				t.Fatalf("health body %s: %v", body, err)
			}
			// The reason arrives with the first failed connect.
			if strings.Contains(health.Error, "connect") {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no 503 health with a reason: last %v %+v", err, health)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if health.Status != "unhealthy" || health.Database != "disconnected" || !strings.HasPrefix(health.Error, "starting: ") {
		t.Fatalf("health while starting: %+v", health)
	}
	// Other requests wait for the start up to 5 s, then get a 503 to retry.
	sent := time.Now()
	resp, err := client.Post(base+"/api/v1/push", "application/json", strings.NewReader(`{"items":[{"queue":"q","payload":1}]}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var eb struct{ Error string }
	if resp.StatusCode != http.StatusServiceUnavailable || json.Unmarshal(body, &eb) != nil || !strings.Contains(eb.Error, "starting") {
		t.Fatalf("push while starting: %d %s, want 503 with a JSON error", resp.StatusCode, body)
	}
	if d := time.Since(sent); d < 4*time.Second {
		t.Fatalf("push while starting answered after %v, want it held about 5 s first", d)
	}
	// A push sent while starting that the start overtakes is served.
	held := make(chan int, 1)
	go func() {
		resp, err := client.Post(base+"/api/v1/push", "application/json", strings.NewReader(`{"items":[{"queue":"q","payload":2}]}`))
		if err != nil {
			held <- 0
			return
		}
		resp.Body.Close()
		held <- resp.StatusCode
	}()
	select {
	case r := <-res:
		t.Fatalf("Start returned before the database came up: %v", r.err)
	default:
	}
	// A connection opened while starting (a load balancer's, pre-connected)
	// is served by the API once it is up, not reset: one server throughout.
	early, err := net.Dial("tcp", cfg.HTTPAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer early.Close()
	earlyR := bufio.NewReader(early)
	if code := rawGet(t, early, earlyR, "/health"); code != http.StatusServiceUnavailable {
		t.Fatalf("early connection, health while starting: %d", code)
	}

	forward(t, dbURL.Host, target)
	var r started
	select {
	case r = <-res:
	case <-ctx.Done():
		t.Fatal("Start did not return once the database came up")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.n.Stop(context.Background())
	if code := rawGet(t, early, earlyR, "/health"); code != http.StatusOK {
		t.Fatalf("connection opened while starting, once started: %d", code)
	}
	if code := <-held; code != http.StatusCreated {
		t.Fatalf("push held while starting: %d, want 201 once started", code)
	}
	if r.n.Addr() != cfg.HTTPAddr {
		t.Fatalf("node serves %s, want the port it held while starting, %s", r.n.Addr(), cfg.HTTPAddr)
	}
	resp, err = client.Get(base + "/health")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("health once started: %d %s", resp.StatusCode, body)
	}
	resp, err = client.Post(base+"/api/v1/push", "application/json", strings.NewReader(`{"items":[{"queue":"q","payload":1}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("push once started: %d", resp.StatusCode)
	}
}

// A server that refuses the database or the role stops the start at once
// with one clear error, instead of "not ready" retries forever (issue 21).
func TestStartStopsWhenTheServerRefuses(t *testing.T) {
	base, err := url.Parse(pgtest.ServerURL())
	if err != nil {
		t.Fatal(err)
	}
	noDB := *base
	noDB.Path = "/queen_no_such_database"
	noRole := *base
	noRole.User = url.User("queen_no_such_role")
	for name, u := range map[string]string{"database": noDB.String(), "role": noRole.String()} {
		t.Run(name, func(t *testing.T) {
			cfg := node.DefaultConfig()
			cfg.HTTPAddr = "127.0.0.1:0"
			cfg.Broker.NodeName = "n1"
			cfg.Broker.PG.URL = u
			cfg.Mesh.Enabled = false
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			start := time.Now()
			n, err := node.Start(ctx, cfg, nil)
			if err == nil {
				_ = n.Stop(ctx)
				t.Fatal("started")
			}
			if ctx.Err() != nil || !strings.Contains(err.Error(), "not retrying") || !strings.Contains(err.Error(), "does not exist") {
				t.Fatalf("after %v: %v", time.Since(start), err)
			}
		})
	}
}

// A node whose HTTP port is taken fails before it joins the mesh: peers
// never see it join and then leave (issue 21).
func TestTakenPortNeverJoinsTheMesh(t *testing.T) {
	cfgA := node.DefaultConfig()
	cfgA.HTTPAddr = "127.0.0.1:0"
	cfgA.Broker.NodeName = "a"
	cfgA.Broker.PG.URL = pgtest.NewDatabase(t)
	cfgA.Mesh.Bind = freePort(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, err := node.Start(ctx, cfgA, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop(context.Background())

	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	cfgB := cfgA
	cfgB.HTTPAddr = taken.Addr().String()
	cfgB.Broker.NodeName = "b"
	cfgB.Mesh.Bind = freePort(t)
	cfgB.Mesh.Join = []string{cfgA.Mesh.Bind}
	if _, err := node.Start(ctx, cfgB, nil); err == nil || !strings.Contains(err.Error(), "listen on") {
		t.Fatalf("start on a taken port: %v", err)
	}
	// A join would be tried at once (mesh joinLoop) and a joined-then-left
	// member stays listed, so two seconds without "b" is a clear answer.
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		for _, m := range a.Mesh().Members() {
			if m.Name == "b" {
				t.Fatalf("peer lists the node that failed to bind: %+v", m)
			}
		}
	}
}

// rawGet sends one keep-alive GET on c and returns the status.
func rawGet(t *testing.T, c net.Conn, br *bufio.Reader, path string) int {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatalf("write: %v", err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// With several hosts in the URL the same refusal is retried: the host that
// answered may be a replica that has not replayed the database's creation
// yet (pgx stops at the first host that refuses). The start runs until its
// context ends, with the reason on /health.
func TestMultiHostRefusalIsRetried(t *testing.T) {
	base, err := url.Parse(pgtest.ServerURL())
	if err != nil {
		t.Fatal(err)
	}
	u := *base
	u.Host = base.Host + ",127.0.0.1:1" // a second host, never reached: pgx stops at the first refusal
	u.Path = "/queen_no_such_database"
	cfg := node.DefaultConfig()
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.Broker.NodeName = "n1"
	cfg.Broker.PG.URL = u.String()
	cfg.Mesh.Enabled = false
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	n, err := node.Start(ctx, cfg, nil)
	if err == nil {
		_ = n.Stop(context.Background())
		t.Fatal("started")
	}
	if ctx.Err() == nil || strings.Contains(err.Error(), "not retrying") {
		t.Fatalf("multi-host refusal: %v (want retries until the context ends)", err)
	}
}
