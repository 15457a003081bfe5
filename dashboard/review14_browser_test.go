package dashboard_test

// Review of issue 14: the page's refresh loop (docs/operations.md,
// "Dashboard": one round every 2 s, after the previous one).

import (
	"testing"

	"github.com/chromedp/chromedp"

	"queen-node/internal/nodetest"
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
