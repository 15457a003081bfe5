// Package nodetest starts real in-process queen-node cores (broker + HTTP
// API on a real listener) against a real PostgreSQL database, for tests
// that go through HTTP. Use pgtest.Main in the test package's TestMain.
package nodetest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"queen-node/api"
	"queen-node/broker"
	"queen-node/internal/pgtest"
)

// Node is one running node.
type Node struct {
	URL    string
	DBURL  string
	Broker *broker.Broker
	Server *httptest.Server
}

// Option changes a node's broker configuration before it starts.
type Option func(*broker.Config)

// Start starts a node on a fresh database.
func Start(t testing.TB, opts ...Option) *Node {
	t.Helper()
	return StartOn(t, pgtest.NewDatabase(t), opts...)
}

// StartOn starts a node on an existing database (several nodes may share it).
func StartOn(t testing.TB, dbURL string, opts ...Option) *Node {
	t.Helper()
	cfg := broker.DefaultConfig()
	cfg.PGURL = dbURL
	cfg.NodeName = t.Name()
	cfg.PoolMaxConns = 16
	for _, o := range opts {
		o(&cfg)
	}
	level := hclog.Warn
	if os.Getenv("QUEEN_TEST_LOG") != "" {
		level = hclog.Debug
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "node", Level: level, Output: os.Stderr})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := broker.New(ctx, cfg, log.Named("broker"))
	if err != nil {
		t.Fatalf("start broker: %v", err)
	}
	acfg := api.DefaultConfig()
	srv := httptest.NewServer(api.New(b, acfg, log.Named("api")).Handler())
	n := &Node{URL: srv.URL, DBURL: dbURL, Broker: b, Server: srv}
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		b.Close()
	})
	return n
}

// Response is an HTTP answer.
type Response struct {
	Status int
	Body   []byte
	Header http.Header
}

// JSON decodes the body into v, failing the test on error.
func (r Response) JSON(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("decode %d response %q: %v", r.Status, r.Body, err)
	}
}

// Obj decodes the body as a JSON object.
func (r Response) Obj(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	r.JSON(t, &m)
	return m
}

// Arr decodes the body as a JSON array of objects.
func (r Response) Arr(t testing.TB) []map[string]any {
	t.Helper()
	var a []map[string]any
	r.JSON(t, &a)
	return a
}

// Do sends a request; body is marshalled unless it is a string or []byte.
func (n *Node) Do(t testing.TB, method, path string, body any) Response {
	t.Helper()
	return n.DoCtx(context.Background(), t, method, path, body)
}

// DoCtx is Do with a context (to cancel long-polls).
func (n *Node) DoCtx(ctx context.Context, t testing.TB, method, path string, body any) Response {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = bytes.NewBufferString(b)
	case []byte:
		rd = bytes.NewBuffer(b)
	default:
		buf, err := json.Marshal(b)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		rd = bytes.NewBuffer(buf)
	}
	req, err := http.NewRequestWithContext(ctx, method, n.URL+path, rd)
	if err != nil {
		t.Fatalf("request: %v", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return Response{Status: 0}
		}
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil && ctx.Err() == nil {
		t.Fatalf("%s %s: read: %v", method, path, err)
	}
	return Response{Status: resp.StatusCode, Body: data, Header: resp.Header}
}
