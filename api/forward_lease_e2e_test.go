package api_test

// A forwarded pop claims under the lease id its forwarding node chose
// (docs/api.md, "Queue ownership"), so that node can release a claim whose
// answer never reached its client, even one it never saw.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"queen-node/forward"
	"queen-node/internal/nodetest"
	"queen-node/node"
)

// The owner honours X-Queen-Lease beside X-Queen-Forwarded carrying the
// mesh's mark (in any UUID spelling, answered canonical), refuses one that
// is not a UUID, and ignores it on a pop that is not forwarded, or whose
// X-Queen-Forwarded is not the mark: a client cannot choose its lease.
// A node that forwards nothing itself (both forwarding switches off) is
// still an owner peers forward to, and honours the header the same way.
func TestForwardedPopClaimsUnderTheChosenLease(t *testing.T) {
	for _, forwarding := range []bool{true, false} {
		t.Run(fmt.Sprintf("forwarding %v", forwarding), func(t *testing.T) {
			testChosenLease(t, func(c *node.Config) { c.Forward.Enabled, c.Forward.Consume = forwarding, forwarding })
		})
	}
}

func testChosenLease(t *testing.T, edit func(*node.Config)) {
	nodes, _ := ownedCluster(t, 1, 0, edit)
	n := nodes[0]
	mark := forward.Mark(meshKey)
	const q = "chosen-lease"
	for _, p := range []string{"a", "b"} {
		if code, body, err := postJSON(n.URL+"/api/v1/push", map[string]any{"items": []map[string]any{
			{"queue": q, "partition": p, "payload": map[string]string{"p": p}}}}); err != nil || code != 201 {
			t.Fatalf("push: %d %s %v", code, body, err)
		}
	}
	path := "/api/v1/pop/queue/" + q + "?batch=1"
	leaseOf := func(r nodetest.Response) string {
		t.Helper()
		if r.Status != 200 {
			t.Fatalf("pop: %d %s", r.Status, r.Body)
		}
		var a struct {
			LeaseID  string `json:"leaseId"`
			Messages []struct {
				LeaseID string `json:"leaseId"`
			} `json:"messages"`
		}
		r.JSON(t, &a)
		if len(a.Messages) != 1 || a.Messages[0].LeaseID != a.LeaseID {
			t.Fatalf("pop answer %s", r.Body)
		}
		return a.LeaseID
	}

	for _, l := range []string{"lease-1", "00000000-0000-0000-0000-000000000000"} {
		bad := n.DoHeader(t, map[string]string{forward.Header: mark, forward.LeaseHeader: l}, "GET", path, nil)
		if bad.Status != 400 || !strings.Contains(string(bad.Body), forward.LeaseHeader) {
			t.Fatalf("a forwarded pop with lease %q: %d %s, want 400 naming the header", l, bad.Status, bad.Body)
		}
	}

	chosen := uuid.NewString()
	got := leaseOf(n.DoHeader(t, map[string]string{forward.Header: mark, forward.LeaseHeader: strings.ToUpper(chosen)}, "GET", path, nil))
	if got != chosen {
		t.Fatalf("forwarded pop claimed under %q, its forwarding node chose %q", got, chosen)
	}

	other := uuid.NewString()
	if got := leaseOf(n.DoHeader(t, map[string]string{forward.LeaseHeader: other}, "GET", path, nil)); got == other || got == chosen {
		t.Fatalf("a pop that is not forwarded claimed under lease %q (header %q)", got, other)
	}

	// Without the mark the headers are a client's: ignored, not refused.
	for _, fake := range []string{"1", forward.Mark([]byte("another mesh's secret, 32 bytes.")), mark[:len(mark)-1]} {
		if r := n.DoHeader(t, map[string]string{forward.Header: fake, forward.LeaseHeader: "lease-1"}, "GET", path, nil); r.Status != 204 {
			t.Fatalf("a pop marked %q with a bad lease: %d %s, want the queue's answer (204: it is empty)", fake, r.Status, r.Body)
		}
	}
	for _, p := range []string{"c", "d"} {
		if code, body, err := postJSON(n.URL+"/api/v1/push", map[string]any{"items": []map[string]any{
			{"queue": q, "partition": p, "payload": map[string]string{"p": p}}}}); err != nil || code != 201 {
			t.Fatalf("push: %d %s %v", code, body, err)
		}
	}
	fake := uuid.NewString()
	if got := leaseOf(n.DoHeader(t, map[string]string{forward.Header: "1", forward.LeaseHeader: fake}, "GET", path, nil)); got == fake {
		t.Fatalf("a pop marked \"1\" claimed under the lease it chose")
	}
}

// A forwarded pop whose empty body arrives chunked (the forwarding
// node's transport sends it so when its probe of the body is slow) still
// ends its long-poll when the forwarding node hangs up: the owner reads
// the body to its end, after which its server watches the connection.
// Otherwise the owner could claim long after both of the forwarding
// node's releases. A body that is not empty is refused.
func TestForwardedPopWithAChunkedBodySeesItsClientLeave(t *testing.T) {
	nodes, _ := ownedCluster(t, 1, 0)
	n := nodes[0]
	parked := func() float64 {
		r := n.Do(t, "GET", "/status", nil)
		var st struct {
			Requests map[string]any `json:"requests"`
		}
		r.JSON(t, &st)
		v, _ := st.Requests["parked_long_polls"].(float64)
		return v
	}
	mark := forward.Mark(meshKey)
	send := func(body string) net.Conn {
		conn, err := net.Dial("tcp", strings.TrimPrefix(n.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "GET /api/v1/pop/queue/chunked?wait=true&timeout=20000 HTTP/1.1\r\nHost: x\r\n"+
			"%s: %s\r\n%s: %s\r\nTransfer-Encoding: chunked\r\n\r\n%s", forward.Header, mark, forward.LeaseHeader, uuid.NewString(), body)
		return conn
	}
	waitParked := func(want float64, what string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for parked() != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %v long-polls parked, want %v", what, parked(), want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	conn := send("0\r\n\r\n")
	waitParked(1, "the forwarded long-poll")
	conn.Close()
	waitParked(0, "after the forwarding node hung up")

	// A node of an older version marks its forwards "1", a client's
	// header here: its long-poll ends the same way.
	mark = "1"
	conn = send("0\r\n\r\n")
	waitParked(1, "the older node's forwarded long-poll")
	conn.Close()
	waitParked(0, "after the older node hung up")
	mark = forward.Mark(meshKey)

	conn = send("1\r\nx\r\n0\r\n\r\n")
	defer conn.Close()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(body), "no body") {
		t.Fatalf("a forwarded pop with a body: %d %s, want 400", resp.StatusCode, body)
	}
}

// The window stop 33 left open: the owner claims and answers, and the
// forwarding node never reads the answer. A proxy in front of the owner
// relays the forwarded pop without the forwarding node's cancel, keeps the
// owner's answer, and then either waits for the forwarding node to give up
// (its client left) or answers 502 (the answer was lost). Either way the
// forwarding node releases the lease it chose: the message is claimable at
// once, not after the lease's 300 s. When the client is still there, it is
// served on the forwarding node, from the same message. In the third case
// the proxy relays the pop only once the forwarding node has given up, so
// the owner claims after that node's first release (in most runs: both
// start at the close): the second one frees the message. Its delay is 5 s
// here, far more than a claim takes even on a loaded machine
// (broker.Config.ReleaseAgain).
func TestForwardedPopAnswerThatNeverArrives(t *testing.T) {
	for _, tc := range []struct {
		name         string
		clientLeaves bool
		claimLate    bool
	}{{"client leaves", true, false}, {"answer lost", false, false}, {"claim after the client left", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			nodes, owned := ownedCluster(t, 2, 1, func(c *node.Config) { c.Broker.ReleaseAgain = 5 * time.Second })
			q := owned[1][0] // node 1's
			if code, body, err := postJSON(nodes[1].URL+"/api/v1/push", map[string]any{"items": []map[string]any{
				{"queue": q, "partition": "p", "payload": map[string]int{"p": 0}}}}); err != nil || code != 201 {
				t.Fatalf("push: %d %s %v", code, body, err)
			}
			type claim struct{ chosen, answered string }
			claimed := make(chan claim, 1)
			arrived := make(chan struct{}, 1)
			proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				arrived <- struct{}{}
				if tc.claimLate {
					<-r.Context().Done()
				}
				req, _ := http.NewRequestWithContext(context.WithoutCancel(r.Context()), r.Method, nodes[1].URL+r.URL.RequestURI(), nil)
				req.Header = r.Header.Clone()
				c := claim{chosen: r.Header.Get(forward.LeaseHeader)}
				if resp, err := http.DefaultClient.Do(req); err == nil {
					body, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					var a struct {
						LeaseID string `json:"leaseId"`
					}
					_ = json.Unmarshal(body, &a)
					c.answered = a.LeaseID
				}
				claimed <- c
				if tc.clientLeaves && !tc.claimLate {
					<-r.Context().Done() // the forwarding node gives up once its client left
					return
				}
				http.Error(w, "bad gateway", http.StatusBadGateway)
			}))
			defer proxy.Close()
			f := forwarderVia(t, nodes[0], nodes[1], proxy.URL)
			nodes[0].Node.API().SetPushForwarder(f)

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			type popped struct {
				msgs []poppedMsg
				code int
				err  error
			}
			done := make(chan popped, 1)
			go func() {
				msgs, code, err := popVia(ctx, nodes[0].URL, q, "batch=10&wait=true&timeout=10000")
				done <- popped{msgs, code, err}
			}()
			if tc.claimLate {
				// The pop has reached the proxy: the client leaves.
				select {
				case <-arrived:
				case <-time.After(15 * time.Second):
					t.Fatal("the pop was never forwarded")
				}
				cancel()
			}
			var c claim
			select {
			case c = <-claimed:
			case <-time.After(15 * time.Second):
				t.Fatal("the pop never reached the owner")
			}
			if c.chosen == "" || c.answered != c.chosen {
				t.Fatalf("the owner claimed under %q; the forwarding node chose %q", c.answered, c.chosen)
			}
			if !tc.clientLeaves {
				// The forwarding node hands the lease back and serves the
				// pop itself: its client gets the message, under a lease
				// of its own.
				p := <-done
				if p.err != nil || len(p.msgs) != 1 || p.msgs[0].LeaseID == c.chosen {
					t.Fatalf("pop after the owner's answer was lost: %d %+v %v, want the message under a new lease", p.code, p.msgs, p.err)
				}
				return
			}
			cancel()
			<-done
			deadline := time.Now().Add(20 * time.Second)
			for {
				msgs, code, err := popVia(context.Background(), nodes[1].URL, q, "batch=10")
				if err != nil {
					t.Fatal(err)
				}
				if len(msgs) == 1 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the message stayed leased after its client left (last pop %d)", code)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

// A forwarded pop whose pooled connection to the owner breaks as it goes
// out (the owner closing it as idle at that moment) is sent once more,
// under a new lease, and the first lease is released first: when the
// owner did read the first copy and claimed, the second copy claims the
// same message at once. A proxy in front of the real owner relays the
// first request of each connection; on a reused connection it relays the
// pop, lets the owner claim, and closes the connection without answering.
// The client gets the message from the owner, under the second lease, and
// the owner does not cool down. Without the release the second copy finds
// the message leased (204); without the resend the pop is served on the
// forwarding node and counted a failure.
func TestForwardedPopOnAClosedPooledConnection(t *testing.T) {
	nodes, owned := ownedCluster(t, 2, 2)
	warm, q := owned[1][0], owned[1][1] // node 1's
	if code, body, err := postJSON(nodes[1].URL+"/api/v1/push", map[string]any{"items": []map[string]any{
		{"queue": q, "partition": "p", "payload": map[string]int{"p": 0}}}}); err != nil || code != 201 {
		t.Fatalf("push: %d %s %v", code, body, err)
	}
	var mu sync.Mutex
	served := map[string]bool{}
	var leases []string // as the owner received them
	dropped := false
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		drop := !dropped && served[r.RemoteAddr]
		dropped = dropped || drop
		served[r.RemoteAddr] = true
		leases = append(leases, r.Header.Get(forward.LeaseHeader))
		mu.Unlock()
		req, _ := http.NewRequestWithContext(r.Context(), r.Method, nodes[1].URL+r.URL.RequestURI(), nil)
		req.Header = r.Header.Clone()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if drop {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		w.Write(body)
	}))
	defer proxy.Close()
	f := forwarderVia(t, nodes[0], nodes[1], proxy.URL)
	nodes[0].Node.API().SetPushForwarder(f)

	if msgs, code, err := popVia(context.Background(), nodes[0].URL, warm, "batch=10"); err != nil || code != 204 || len(msgs) != 0 {
		t.Fatalf("warm-up pop: %d %v %v", code, msgs, err)
	}
	msgs, code, err := popVia(context.Background(), nodes[0].URL, q, "batch=10")
	if err != nil || len(msgs) != 1 {
		t.Fatalf("pop over the closed connection: %d %+v %v, want the message", code, msgs, err)
	}
	mu.Lock()
	got := append([]string(nil), leases...)
	mu.Unlock()
	if !dropped || len(got) != 3 {
		t.Fatalf("the owner received leases %v (dropped %v), want the warm-up, the dropped pop and its resend", got, dropped)
	}
	if msgs[0].LeaseID != got[2] || got[1] == got[2] {
		t.Fatalf("the message came under lease %q; the owner saw %q then %q", msgs[0].LeaseID, got[1], got[2])
	}
	if st := f.Stats(); st.Resends != 1 || st.PopFailures != 0 {
		t.Fatalf("forwarder stats %+v, want one resend and no failure", st)
	}
}
