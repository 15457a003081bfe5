package dashboard_test

// Review of issue 14: the page's refresh loop (docs/operations.md,
// "Dashboard": one round every 2 s, after the previous one).

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"queen-node/internal/localnet"
	"queen-node/internal/nodetest"
	"queen-node/mesh"
	"queen-node/node"
)

// TestMalformedHashDoesNotStopRefresh: a hand-edited address with
// a bad percent escape (#/queue/%) makes currentQueue's decodeURIComponent
// throw inside round(), after now() set running = true and before done()
// is attached: every later round, timer or click, only sets again, so the
// page never refreshes again, even once the address is fixed.
func TestMalformedHashDoesNotStopRefresh(t *testing.T) {
	b := newBrowser(t) // skips before starting a node when there is no Chromium
	n := nodetest.Start(t)
	push(t, n, "", "rv-first", 1)

	b.run(t, "open "+n.URL, chromedp.Navigate(n.URL+"/"))
	b.waitFor(t, "the first queue", `!!document.querySelector('#queues tr[data-queue="rv-first"]')`, outer("#queues"))

	if _, err := eval[bool](b, `(location.hash = '#/queue/%', true)`); err != nil {
		t.Fatalf("a malformed queue address: %v", err)
	}
	// The hashchange of the first assignment fires before this one.
	b.waitFor(t, "the hash set", `location.hash === '#/queue/%'`, `location.hash`)
	if _, err := eval[bool](b, `(location.hash = '#/', true)`); err != nil {
		t.Fatalf("back to the cluster page: %v", err)
	}
	push(t, n, "", "rv-second", 2)
	b.waitFor(t, "a queue pushed after the address was fixed",
		`(r => !!r && r.dataset.pending === '2')(document.querySelector('#queues tr[data-queue="rv-second"]'))`, outer("#queues"))
}

type noHints struct{}

func (noHints) HintsReceived(tenant, queue string, partitions []string) {}

// TestHungMemberDoesNotFreezePage: a member that is alive in the
// mesh but whose HTTP address accepts connections and never answers (a
// stopped process, a half-open network path) holds the round's per-member
// /status fetch open with no timeout. The round never completes, so the
// next one is never scheduled: the page stops updating (queues, members,
// charts) for as long as the browser keeps the request open.
func TestHungMemberDoesNotFreezePage(t *testing.T) {
	b := newBrowser(t) // skips before starting a node when there is no Chromium
	nodes := nodetest.StartCluster(t, 1)
	n := nodes[0]
	var seed string
	for _, m := range n.Mesh.Members() {
		if m.Self {
			seed = m.Addr
		}
	}

	b.run(t, "open "+n.URL, chromedp.Navigate(n.URL+"/"))
	b.waitFor(t, "the node alive", `!!document.querySelector('#members tr[data-node][data-state="alive"]')`, outer("#members"))

	// The hung member's HTTP address: accepts, never answers.
	hang, err := net.Listen("tcp", "127.0.1.9:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hang.Close() })
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := hang.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	port, err := localnet.FreePort("127.0.1.9", true)
	if err != nil {
		t.Fatal(err)
	}
	mc := mesh.DefaultConfig()
	mc.Name, mc.Bind, mc.Join, mc.Timings = "zz-hung", fmt.Sprintf("127.0.1.9:%d", port), []string{seed}, mesh.FastTimings()
	mc.HTTPAddr = hang.Addr().String()
	hm, err := mesh.New(mc, noHints{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hm.Close)
	deadline := time.Now().Add(15 * time.Second)
	for n.Mesh.Stats().LivePeers != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the hung member never joined: %+v", n.Mesh.Members())
		}
		time.Sleep(10 * time.Millisecond) // poll interval
	}

	// A round asked the hung member (its refreshQueues was sent with
	// refreshCluster's first /status, before this): the page is stuck now.
	for {
		mu.Lock()
		asked := len(conns) > 0
		mu.Unlock()
		if asked {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the page never asked the hung member")
		}
		time.Sleep(10 * time.Millisecond) // poll interval
	}
	push(t, n, "", "rv-after-hang", 3)
	b.waitFor(t, "a queue pushed while a member hangs",
		`(r => !!r && r.dataset.pending === '3')(document.querySelector('#queues tr[data-queue="rv-after-hang"]'))`, outer("#queues"))
}

// TestTokenNotSentToMeshAdvertisedAddress: with JWT on and an open
// mesh (no QUEEN_MESH_SECRET), anyone who reaches the mesh port can join
// advertising an address of their own. The page must not send the tab's
// token there: it does not ask other members for live figures at all and
// says why (#members-note), while its own rounds go on.
func TestTokenNotSentToMeshAdvertisedAddress(t *testing.T) {
	b := newBrowser(t) // skips before starting a node when there is no Chromium
	nodes := nodetest.StartClusterConfig(t, 1, func(c *node.Config) {
		c.Auth.Enabled = true
		c.Auth.Secret = jwtSecret
	})
	n := nodes[0]
	admin := token(t, "admin")
	var gotAuth []string
	var mu sync.Mutex
	asked := 0
	addr := rogueMember(t, n, "zz-rogue", func(r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		asked++
		if a := r.Header.Get("Authorization"); a != "" {
			gotAuth = append(gotAuth, a)
		}
	})

	b.run(t, "open "+n.URL, chromedp.Navigate(n.URL+"/"))
	b.waitFor(t, "the login form", visible("#login")+" && "+visible("input#token"), `document.body.outerHTML.slice(0, 4000)`)
	b.run(t, "log in as admin", chromedp.SendKeys(chromedp.CSS("input#token"), admin), chromedp.Click(chromedp.CSS("button#login-submit")))
	b.waitFor(t, "the rogue member listed, and why it is not asked",
		`!!document.querySelector('#members tr[data-node="zz-rogue"]') && `+visible("#members-note"), outer("#members"))
	// Two more rounds (each shows a queue pushed after the previous one).
	for i, q := range []string{"rv-round-1", "rv-round-2"} {
		push(t, n, admin, q, i+1)
		b.waitFor(t, "a round after "+q, fmt.Sprintf(`!!document.querySelector('#queues tr[data-queue=%q]')`, q), outer("#queues"))
	}
	mu.Lock()
	defer mu.Unlock()
	if len(gotAuth) > 0 || asked > 0 {
		t.Fatalf("the page asked the mesh-advertised address %s %d times, %d with its admin token", addr, asked, len(gotAuth))
	}
}

// TestSecretMeshMembersAsked: with QUEEN_MESH_SECRET set, only
// holders of the secret can join, so the page asks every alive member for
// its own /status with the token: a three-node cluster with JWT on shows
// every member's figures, and no note.
func TestSecretMeshMembersAsked(t *testing.T) {
	b := newBrowser(t) // skips before starting a cluster when there is no Chromium
	nodes := nodetest.StartClusterConfig(t, 3, func(c *node.Config) {
		c.Auth.Enabled = true
		c.Auth.Secret = jwtSecret
		c.Mesh.Secret = []byte("0123456789abcdef0123456789abcdef")
	})
	admin := token(t, "admin")
	b.run(t, "open "+nodes[0].URL, chromedp.Navigate(nodes[0].URL+"/"))
	b.waitFor(t, "the login form", visible("#login")+" && "+visible("input#token"), `document.body.outerHTML.slice(0, 4000)`)
	b.run(t, "log in as admin", chromedp.SendKeys(chromedp.CSS("input#token"), admin), chromedp.Click(chromedp.CSS("button#login-submit")))
	// The uptime cell (4th) is filled only from a member's own /status.
	b.waitFor(t, "three members with their own figures",
		`(() => { const rows = [...document.querySelectorAll('#members tr[data-node][data-state="alive"]')];
			return rows.length === 3 && rows.every(r => r.children[3].textContent !== ''); })()`, outer("#members"))
	if v, err := eval[bool](b, `document.getElementById('members-note').hidden`); err != nil || !v {
		t.Fatalf("the open-mesh note shows on an encrypted mesh (%v)", err)
	}
}

// rogueMember joins n's mesh as name, advertising an HTTP address of its
// own that answers CORS permissively and calls seen for every request. It
// returns the advertised address.
func rogueMember(t *testing.T, n *nodetest.Node, name string, seen func(*http.Request)) string {
	t.Helper()
	var seed string
	for _, m := range n.Mesh.Members() {
		if m.Self {
			seed = m.Addr
		}
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Access-Control-Allow-Origin", "*")
		w.Header().Set("Access-Control-Allow-Headers", "Authorization, Content-Type")
		seen(r)
		if r.Method == http.MethodOptions {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{}`))
	}))
	ln, err := net.Listen("tcp", "127.0.1.8:0")
	if err != nil {
		t.Fatal(err)
	}
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	httpAddr := ln.Addr().String()
	port, err := localnet.FreePort("127.0.1.8", true)
	if err != nil {
		t.Fatal(err)
	}
	mc := mesh.DefaultConfig()
	mc.Name, mc.Bind, mc.Join, mc.Timings = name, fmt.Sprintf("127.0.1.8:%d", port), []string{seed}, mesh.FastTimings()
	mc.HTTPAddr = httpAddr
	rm, err := mesh.New(mc, noHints{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rm.Close)
	return httpAddr
}
