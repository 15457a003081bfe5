package forward

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"queen-node/broker"
	"queen-node/protocol"
)

// dropOnce wraps h: the first request that arrives on a connection that
// already served one (a pooled connection, reused) has its connection
// closed without an answer, as an owner closing an idle connection at the
// moment a request goes out on it looks to this node. Every other request
// goes to h. dropped reports whether that happened.
func dropOnce(t *testing.T, h http.HandlerFunc) (http.HandlerFunc, func() bool) {
	var mu sync.Mutex
	served := map[string]bool{} // remote address -> a request was answered on it
	done := false
	return func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			drop := !done && served[r.RemoteAddr]
			if drop {
				done = true
			}
			served[r.RemoteAddr] = true
			mu.Unlock()
			if !drop {
				h(w, r)
				return
			}
			conn, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Errorf("hijack: %v", err)
				return
			}
			conn.Close()
		}, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return done
		}
}

// pooledOwner starts an owner answering with h, a forwarder to it and a
// queue it owns, and sends one pop (under lease first) so that a
// connection to the owner sits in the forwarder's pool.
func pooledOwner(t *testing.T, h http.HandlerFunc, first string) (*Forwarder, *ownerNode, string) {
	t.Helper()
	p := newOwnerNode(t, h)
	owners := table(p.addr())
	f := New(DefaultConfig(), owners, nil)
	t.Cleanup(f.Close)
	q := queueOwnedBy(t, owners, "peer0")
	a, _ := f.Pop(context.Background(), "default", q, popURI(q), "", first, 0, nil)
	if a == nil {
		t.Fatal("the first pop was served here")
	}
	readAnswer(t, a) // its connection goes back to the pool
	return f, p, q
}

// A forwarded pop whose pooled connection the owner closes as it goes
// out is sent once more, on another connection, under the lease renew
// gives (the first one handed to renew, for release); it is not a
// failure and does not cool the owner down. Without renew it is sent
// once: a failure, but still no cool-down.
func TestAPopOnAClosedPooledConnectionIsSentAgain(t *testing.T) {
	for _, withRenew := range []bool{true, false} {
		name := "renew"
		if !withRenew {
			name = "no renew"
		}
		t.Run(name, func(t *testing.T) {
			h, dropped := dropOnce(t, answering(http.StatusOK, "application/json", `{"messages":[]}`))
			f, p, q := pooledOwner(t, h, "lease-1")
			pop := func(lease string, renew func(string) string) (*PopAnswer, bool) {
				return f.Pop(context.Background(), "default", q, popURI(q), "", lease, 0, renew)
			}
			var renewed []string
			var renew func(string) string
			if withRenew {
				renew = func(old string) string { renewed = append(renewed, old); return "lease-3" }
			}
			a, sent := pop("lease-2", renew)
			if !dropped() {
				t.Fatal("the second pop did not go out on the pooled connection")
			}
			st := f.Stats()
			var leases []string
			for _, r := range p.requests() {
				leases = append(leases, r.header.Get(LeaseHeader))
			}
			if !withRenew {
				if a != nil || !sent || st.PopFailures != 1 || st.Resends != 0 {
					t.Fatalf("without renew: answer %v sent %v, stats %+v; want a failure the owner may have seen", a, sent, st)
				}
				if len(leases) != 2 {
					t.Fatalf("the owner saw leases %v, want lease-1 and lease-2 only", leases)
				}
			} else {
				if a == nil || a.Status != http.StatusOK {
					t.Fatalf("the pop was not sent again (answer %v, sent %v)", a, sent)
				}
				readAnswer(t, a)
				if len(renewed) != 1 || renewed[0] != "lease-2" {
					t.Fatalf("renew was handed %v, want [lease-2]", renewed)
				}
				if want := []string{"lease-1", "lease-2", "lease-3"}; len(leases) != 3 || leases[1] != want[1] || leases[2] != want[2] {
					t.Fatalf("the owner saw leases %v, want %v", leases, want)
				}
				if st.Resends != 1 || st.PopFailures != 0 {
					t.Fatalf("stats %+v, want one resend and no failure", st)
				}
			}
			// Not cooling down: the next pop goes to the owner.
			if a, _ := pop("lease-4", nil); a == nil {
				t.Fatal("the owner cools down after a closed pooled connection")
			} else {
				readAnswer(t, a)
			}
		})
	}
}

// A forwarded push whose pooled connection the owner closes as it goes
// out is sent once more (its items keep their transaction ids): it is
// stored at the owner, nothing here, and the owner does not cool down.
func TestAPushOnAClosedPooledConnectionIsSentAgain(t *testing.T) {
	var p *peer
	h, dropped := dropOnce(t, func(w http.ResponseWriter, r *http.Request) { p.srv.Config.Handler.ServeHTTP(w, r) })
	p = newPeer(t, queuedAnswer)
	drop := newOwnerNode(t, h)
	owners := table(drop.addr())
	f := New(DefaultConfig(), owners, nil)
	defer f.Close()
	local := &localStore{}
	items := func(txid string) []broker.PushItem {
		return []broker.PushItem{{Queue: queueOwnedBy(t, owners, "peer0"), Partition: "p", TransactionID: txid, Payload: []byte(`{"a":1}`)}}
	}
	for i, txid := range []string{"t1", "t2"} {
		res, err := f.Push(context.Background(), "default", "", items(txid), local.store)
		if err != nil || len(res) != 1 || res[0].Status != protocol.PushQueued {
			t.Fatalf("push %d: %+v %v", i, res, err)
		}
	}
	if !dropped() {
		t.Fatal("the second push did not go out on the pooled connection")
	}
	if st := f.Stats(); st.Resends != 1 || st.Failures != 0 || st.FallbackItems != 0 {
		t.Fatalf("stats %+v, want one resend, no failure, nothing stored here", st)
	}
	if got := p.items(); len(got) != 2 {
		t.Fatalf("the owner stored %d items, want 2", len(got))
	}
	if n := len(local.items); n != 0 {
		t.Fatalf("%d items stored here", n)
	}
}

// A forwarded ack is not sent again (a failed ack applied twice would
// count twice): it fails as before, its completions applied here, but
// the owner does not cool down.
func TestAnAckOnAClosedPooledConnectionIsNotSentAgain(t *testing.T) {
	h, dropped := dropOnce(t, ackOwner(t, ackedBy("peer0")))
	o := newOwnerNode(t, h)
	owners := table(o.addr())
	q := queueOwnedBy(t, owners, "peer0")
	local := &ackStore{queues: map[string]string{"pA": q}}
	f := New(DefaultConfig(), owners, nil)
	defer f.Close()
	f.LearnRoute("default", "pA", q)
	ack := func(txid string) []broker.AckResult {
		t.Helper()
		res, err := f.Ack(context.Background(), "default", "", []broker.AckItem{{TransactionID: txid, PartitionID: "pA"}}, local.apply)
		if err != nil || len(res) != 1 {
			t.Fatalf("ack %s: %+v %v", txid, res, err)
		}
		return res
	}
	ack("t1")
	ack("t2")
	if !dropped() {
		t.Fatal("the second ack did not go out on the pooled connection")
	}
	if st := f.Stats(); st.Resends != 0 || st.AckFailures != 1 || st.AckFallbackItems != 1 {
		t.Fatalf("stats %+v, want the ack failed once and its completion applied here, not resent", st)
	}
	if n := o.count(); n != 2 {
		t.Fatalf("the owner saw %d ack requests, want 2", n)
	}
	ack("t3")
	if n := o.count(); n != 3 {
		t.Fatalf("after the closed connection the owner saw %d ack requests, want 3 (no cool-down)", n)
	}
}

// Only a failure within staleWindow of sending is stale: a long-poll the
// owner parked and then lost is the owner's failure, not sent again
// (the owner had read it, and may have claimed). And a client that leaves
// while renew releases the first lease gets no resend.
func TestOnlyAnImmediateFailureIsSentAgain(t *testing.T) {
	t.Run("late", func(t *testing.T) {
		var mu sync.Mutex
		served := map[string]bool{}
		h := func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			reused := served[r.RemoteAddr]
			served[r.RemoteAddr] = true
			mu.Unlock()
			if !reused {
				w.WriteHeader(http.StatusNoContent)
				return
			}
			time.Sleep(staleWindow + 200*time.Millisecond) // parked, then lost
			if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
				c.Close()
			}
		}
		f, p, q := pooledOwner(t, h, "l0")
		renewed := false
		a, sent := f.Pop(context.Background(), "default", q, popURI(q), "", "l1", 5*time.Second,
			func(string) string { renewed = true; return "l2" })
		if st := f.Stats(); a != nil || !sent || renewed || st.Resends != 0 || st.PopFailures != 1 || p.count() != 2 {
			t.Fatalf("answer %v sent %v renewed %v, stats %+v, %d requests; want a failure, not sent again", a, sent, renewed, st, p.count())
		}
	})
	t.Run("client leaves during renew", func(t *testing.T) {
		h, dropped := dropOnce(t, answering(http.StatusNoContent, "", ""))
		f, p, q := pooledOwner(t, h, "l0")
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var renewed []string
		a, _ := f.Pop(ctx, "default", q, popURI(q), "", "l1", 0, func(old string) string {
			renewed = append(renewed, old)
			cancel() // the client leaves while the first lease is released
			return "l2"
		})
		if st := f.Stats(); !dropped() || a != nil || len(renewed) != 1 || st.Resends != 0 || p.count() != 2 {
			t.Fatalf("answer %v renewed %v, stats %+v, %d requests; want the first lease handed back and nothing sent again", a, renewed, st, p.count())
		}
	})
}

// The second attempt goes on a new connection, not another pooled one
// that may be as old as the one that broke: with two connections idle in
// the pool, the pop that breaks on one is sent again on a third.
func TestTheResendGoesOnANewConnection(t *testing.T) {
	var mu sync.Mutex
	var addrs []string // remote address of each request, in order
	both := make(chan struct{})
	arrived := 0
	h, dropped := dropOnce(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrived++
		if arrived == 2 {
			close(both)
		}
		mu.Unlock()
		<-both // the first two are in flight together: two connections
		w.WriteHeader(http.StatusNoContent)
	})
	p := newOwnerNode(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		addrs = append(addrs, r.RemoteAddr)
		mu.Unlock()
		h(w, r)
	})
	owners := table(p.addr())
	f := New(DefaultConfig(), owners, nil)
	defer f.Close()
	q := queueOwnedBy(t, owners, "peer0")
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if a, _ := f.Pop(context.Background(), "default", q, popURI(q), "", "l0", 0, nil); a != nil {
				a.ReadAll(1 << 20)
			}
		}()
	}
	wg.Wait()
	a, _ := f.Pop(context.Background(), "default", q, popURI(q), "", "l1", 0, func(string) string { return "l2" })
	if a == nil || !dropped() {
		t.Fatalf("answer %v, dropped %v: want the pop sent again after its connection broke", a, dropped())
	}
	readAnswer(t, a)
	mu.Lock()
	defer mu.Unlock()
	if len(addrs) != 4 || addrs[0] == addrs[1] {
		t.Fatalf("requests from %v: want two pops on two connections, the dropped one and its resend", addrs)
	}
	if last := addrs[3]; last == addrs[0] || last == addrs[1] {
		t.Fatalf("the resend went on a pooled connection (%s; the pool held %s and %s)", last, addrs[0], addrs[1])
	}
}
