package api_test

// A forwarded pop claims under the lease id its forwarding node chose
// (docs/api.md, "Queue ownership"), so that node can release a claim whose
// answer never reached its client, even one it never saw.

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"queen-node/forward"
	"queen-node/internal/nodetest"
	"queen-node/owner"
)

// The owner honours X-Queen-Lease beside X-Queen-Forwarded (in any UUID
// spelling, answered canonical), refuses one that is not a UUID, and
// ignores it on a pop that is not forwarded.
func TestForwardedPopClaimsUnderTheChosenLease(t *testing.T) {
	n := nodetest.Start(t)
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
		bad := n.DoHeader(t, map[string]string{forward.Header: "1", forward.LeaseHeader: l}, "GET", path, nil)
		if bad.Status != 400 || !strings.Contains(string(bad.Body), forward.LeaseHeader) {
			t.Fatalf("a forwarded pop with lease %q: %d %s, want 400 naming the header", l, bad.Status, bad.Body)
		}
	}

	chosen := uuid.NewString()
	got := leaseOf(n.DoHeader(t, map[string]string{forward.Header: "1", forward.LeaseHeader: strings.ToUpper(chosen)}, "GET", path, nil))
	if got != chosen {
		t.Fatalf("forwarded pop claimed under %q, its forwarding node chose %q", got, chosen)
	}

	other := uuid.NewString()
	if got := leaseOf(n.DoHeader(t, map[string]string{forward.LeaseHeader: other}, "GET", path, nil)); got == other || got == chosen {
		t.Fatalf("a pop that is not forwarded claimed under lease %q (header %q)", got, other)
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
// the owner claims after that node's first release: the second one frees
// the message (api/forward.go, releaseAgain).
func TestForwardedPopAnswerThatNeverArrives(t *testing.T) {
	for _, tc := range []struct {
		name         string
		clientLeaves bool
		claimLate    bool
	}{{"client leaves", true, false}, {"answer lost", false, false}, {"claim after the client left", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			nodes, owned := ownedCluster(t, 2, 1)
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
			tb := owner.New([]owner.Node{{Name: nodes[0].Node.Broker().NodeName(), Addr: "unused:1", Self: true},
				{Name: nodes[1].Node.Broker().NodeName(), Addr: strings.TrimPrefix(proxy.URL, "http://")}})
			f := forward.New(forward.DefaultConfig(), func() *owner.Table { return tb }, nil)
			defer f.Close()
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
			deadline := time.Now().Add(10 * time.Second)
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
