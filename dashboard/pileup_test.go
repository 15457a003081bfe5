package dashboard_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"queen-node/internal/nodetest"
)

// inflight is a reverse proxy in front of a node that counts, per request
// path, how many requests are in flight at once, and can hold the answers
// of chosen paths back (a slow node, as seen by the page).
type inflight struct {
	delay atomic.Int64 // nanoseconds added before proxying a slow path; 0: none
	slow  map[string]bool

	mu    sync.Mutex
	now   map[string]int // in flight at this moment
	max   map[string]int // most ever in flight at once
	total map[string]int // requests seen
}

func newInflight(target string, slow ...string) (*inflight, *httptest.Server, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, nil, fmt.Errorf("parse node URL: %w", err)
	}
	p := &inflight{slow: map[string]bool{}, now: map[string]int{}, max: map[string]int{}, total: map[string]int{}}
	for _, s := range slow {
		p.slow[s] = true
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path := r.URL.Path
		p.mu.Lock()
		p.now[path]++
		p.total[path]++
		if p.now[path] > p.max[path] {
			p.max[path] = p.now[path]
		}
		p.mu.Unlock()
		defer func() {
			p.mu.Lock()
			p.now[path]--
			p.mu.Unlock()
		}()
		if d := time.Duration(p.delay.Load()); d > 0 && p.slow[path] {
			// The simulated slow node: hold the answer (or give up with
			// the client).
			select {
			case <-time.After(d):
			case <-r.Context().Done():
				return
			}
		}
		rp.ServeHTTP(w, r)
	}))
	return p, srv, nil
}

func (p *inflight) snapshot() (maxes, totals map[string]int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	maxes, totals = map[string]int{}, map[string]int{}
	for k, v := range p.max {
		maxes[k] = v
	}
	for k, v := range p.total {
		totals[k] = v
	}
	return maxes, totals
}

// TestDashboardNeverPilesUpRequests: the page refreshes every 2 s with a
// setTimeout armed after the previous round completes (docs/operations.md,
// "Dashboard"), so a node slower than the period never sees a second
// request for the same path while one is in flight. Through a proxy that
// holds /status and the queue list for 3 s, for 16 s, no path ever has more
// than one request in flight (a setInterval of 2 s would start a second
// one after 2 s); once the delay is gone, rounds go on at their pace. (A
// slow round also lengthens the pause after it, to twice its duration: two
// slow rounds of 3 s fit in the window, with room to spare.)
func TestDashboardNeverPilesUpRequests(t *testing.T) {
	b := newBrowser(t)
	n := nodetest.Start(t)
	push(t, n, "", "q", 1)
	const delay = 3 * time.Second
	slow := []string{"/status", "/api/v1/resources/queues"}
	p, srv, err := newInflight(n.URL, slow...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	p.delay.Store(int64(delay))

	// Chromium holds a second GET of a URL whose first is still loading
	// behind its HTTP cache lock: with the cache on, a page that piles up
	// requests would still show one at a time at the proxy.
	if _, err := chromedp.Call(b.ctx, network.SetCacheDisabled, network.SetCacheDisabledParams{CacheDisabled: true}); err != nil {
		t.Fatalf("disable the browser cache: %v", err)
	}
	b.run(t, "open the page through the slow proxy", chromedp.Navigate(srv.URL+"/"))
	// The observation window starts at the page's first slow request (a
	// loaded machine may take seconds to start the page); its own pace is
	// what is measured here.
	deadline := time.Now().Add(uiTimeout)
	for {
		if _, totals := p.snapshot(); totals[slow[0]] > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the page never asked for %s through the proxy", slow[0])
		}
		time.Sleep(50 * time.Millisecond) // poll interval
	}
	window := 16 * time.Second
	end := time.Now().Add(window)
	for time.Now().Before(end) {
		maxes, _ := p.snapshot()
		for path, m := range maxes {
			if m > 1 {
				t.Fatalf("%d requests for %s in flight at once (after %v of a %v window): the page piles up requests", m, path, window-time.Until(end), window)
			}
		}
		time.Sleep(50 * time.Millisecond) // sampling the counters, not synchronisation
	}
	maxes, totals := p.snapshot()
	t.Logf("slow window (%v answers, %v): most in flight per path %v; requests per path %v", delay, window, maxes, totals)
	for _, s := range slow {
		// Two slow rounds fit in the window (3 s, a 6 s pause, 3 s); the
		// page must have kept asking (a stalled page would also never pile
		// up).
		if totals[s] < 2 {
			t.Fatalf("only %d requests for %s in %v with %v answers: the page stopped refreshing", totals[s], s, window, delay)
		}
	}
	// The queue list rendered from the slow answers.
	b.waitFor(t, "queue q listed", `!!document.querySelector('#queues tr[data-queue="q"]')`, outer("#queues"))

	// The delay removed: rounds continue, about one per 2 s after the
	// pause that follows the last slow round.
	p.delay.Store(0)
	_, before := p.snapshot()
	deadline = time.Now().Add(2 * uiTimeout)
	for {
		maxes, after := p.snapshot()
		done := true
		for _, s := range slow {
			if maxes[s] > 1 {
				t.Fatalf("%d requests for %s in flight at once after the delay was removed", maxes[s], s)
			}
			if after[s]-before[s] < 3 {
				done = false
			}
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rounds did not continue after the delay was removed: requests before %v, now %v", before, after)
		}
		time.Sleep(100 * time.Millisecond) // poll interval
	}
	maxes, totals = p.snapshot()
	var paths []string
	for k := range totals {
		paths = append(paths, fmt.Sprintf("%s=%d(max %d)", k, totals[k], maxes[k]))
	}
	sort.Strings(paths)
	t.Logf("end: %s", strings.Join(paths, " "))
	b.noErrors(t, "through the slow proxy")
}
