package dashboard_test

// Review of issue 14: the page's refresh loop (docs/operations.md,
// "Dashboard": one round every 2 s, after the previous one).

import (
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"queen-node/internal/localnet"
	"queen-node/internal/nodetest"
	"queen-node/mesh"
)

// TestReview14MalformedHashDoesNotStopRefresh: a hand-edited address with
// a bad percent escape (#/queue/%) makes currentQueue's decodeURIComponent
// throw inside round(), after now() set running = true and before done()
// is attached: every later round, timer or click, only sets again, so the
// page never refreshes again, even once the address is fixed.
func TestReview14MalformedHashDoesNotStopRefresh(t *testing.T) {
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

// TestReview14HungMemberDoesNotFreezePage: a member that is alive in the
// mesh but whose HTTP address accepts connections and never answers (a
// stopped process, a half-open network path) holds the round's per-member
// /status fetch open with no timeout. The round never completes, so the
// next one is never scheduled: the page stops updating (queues, members,
// charts) for as long as the browser keeps the request open.
func TestReview14HungMemberDoesNotFreezePage(t *testing.T) {
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
