package node_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"queen-node/internal/pgtest"
	"queen-node/node"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestDefaultConfigIsValid(t *testing.T) {
	cfg := node.DefaultConfig()
	cfg.Broker.NodeName = "n1"
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	// The node name is the one setting no package can default.
	err := node.DefaultConfig().Validate()
	if err == nil || !strings.Contains(err.Error(), "Broker.NodeName") {
		t.Fatalf("%v", err)
	}
}

func TestValidateNamesEveryBadField(t *testing.T) {
	cfg := node.DefaultConfig()
	cfg.Broker.NodeName = "n1"
	cfg.HTTPAddr = "6632"
	cfg.API.MaxConns = 0
	cfg.Broker.PG.MaxConns = 0
	cfg.Broker.DefaultSubscription = "latest"
	cfg.Mesh.HintCap = 0
	cfg.Mesh.DropRate = 2
	cfg.Mesh.Secret = []byte("short")
	err := cfg.Validate()
	if err == nil {
		t.Fatal("accepted")
	}
	lines := strings.Split(err.Error(), "\n")
	want := []string{"HTTPAddr:", "API.MaxConns:", "Broker.PG.MaxConns:", "Broker.DefaultSubscription:",
		"Mesh.Secret:", "Mesh.HintCap:", "Mesh.DropRate:"}
	if len(lines) != len(want) {
		t.Fatalf("%d errors, want %d:\n%v", len(lines), len(want), err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("no error for %s in:\n%v", w, err)
		}
	}
	// With the mesh off its settings are not checked.
	cfg = node.DefaultConfig()
	cfg.Broker.NodeName = "n1"
	cfg.Mesh.Enabled, cfg.Mesh.HintCap = false, 0
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestStartServesAndStops(t *testing.T) {
	cfg := node.DefaultConfig()
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.Broker.NodeName = "n1"
	cfg.Broker.PG.URL = pgtest.NewDatabase(t)
	cfg.Mesh.Enabled = false
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := node.Start(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n.Mesh() != nil || n.Broker() == nil {
		t.Fatalf("mesh %v broker %v", n.Mesh(), n.Broker())
	}
	for _, path := range []string{"/health", "/status", "/metrics"} {
		resp, err := http.Get(n.URL() + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d", path, resp.StatusCode)
		}
	}
	// A parked long-poll is answered 204 as soon as the stop starts.
	parked := make(chan int, 1)
	go func() {
		resp, err := http.Get(n.URL() + "/api/v1/pop/queue/q?wait=true&timeout=60000")
		if err != nil {
			parked <- 0
			return
		}
		resp.Body.Close()
		parked <- resp.StatusCode
	}()
	for n.Broker().Parked() == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	stopCtx, stopCancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer stopCancel()
	start := time.Now()
	if err := n.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	if got := <-parked; got != http.StatusNoContent {
		t.Fatalf("parked long-poll: %d, want 204", got)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("stop took %v", d)
	}
	if err := <-n.Err(); !errors.Is(err, http.ErrServerClosed) {
		t.Fatalf("serve: %v", err)
	}
}

func TestStartFailsFastOnATakenPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cfg := node.DefaultConfig()
	cfg.HTTPAddr = ln.Addr().String()
	cfg.Broker.NodeName = "n1"
	cfg.Broker.PG.URL = "postgres://nobody@127.0.0.1:1/none" // never reached
	cfg.Mesh.Enabled = false
	start := time.Now()
	_, err = node.Start(context.Background(), cfg, nil)
	if err == nil || !strings.Contains(err.Error(), "listen on") {
		t.Fatalf("%v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("took %v", d)
	}
}

func TestAuthOffWarningAndConfigError(t *testing.T) {
	start := func(addr string, enabled bool) (string, error) {
		cfg := node.DefaultConfig()
		cfg.HTTPAddr = addr
		cfg.Broker.NodeName = "n1"
		cfg.Broker.PG.URL = pgtest.NewDatabase(t)
		cfg.Mesh.Enabled = false
		cfg.Auth.Enabled = enabled
		var buf strings.Builder
		var mu sync.Mutex
		log := hclog.New(&hclog.LoggerOptions{Output: writerFunc(func(p []byte) (int, error) {
			mu.Lock()
			defer mu.Unlock()
			return buf.Write(p)
		})})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		n, err := node.Start(ctx, cfg, log)
		if err == nil {
			_ = n.Stop(ctx)
		}
		mu.Lock()
		defer mu.Unlock()
		return buf.String(), err
	}
	out, err := start("0.0.0.0:0", false)
	if err != nil || strings.Count(out, "AUTHENTICATION IS OFF") != 1 {
		t.Fatalf("non-loopback, auth off: err %v, log:\n%s", err, out)
	}
	out, err = start("127.0.0.1:0", false)
	if err != nil || strings.Contains(out, "AUTHENTICATION IS OFF") {
		t.Fatalf("loopback, auth off: err %v, log:\n%s", err, out)
	}
	_, err = start("0.0.0.0:0", true) // enabled without JWT_SECRET
	if err == nil || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "JWT_SECRET is required") {
		t.Fatalf("auth on without a secret: %v", err)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
