package dashboard_test

import (
	"fmt"
	"testing"

	"github.com/chromedp/chromedp"

	"queen-node/internal/nodetest"
)

// TestDashboardQueueSearch: with 120 queues (three pages), the search box
// asks the server, so a queue of page 3 shows alone with its pending count,
// and its two consumer groups show their different lags; no console errors.
func TestDashboardQueueSearch(t *testing.T) {
	b := newBrowser(t) // skips before starting a node when there is no Chromium
	n := nodetest.Start(t)
	for i := range 120 {
		if r := n.Do(t, "POST", "/api/v1/configure", map[string]any{"queue": fmt.Sprintf("bq-%03d", i)}); r.Status != 200 {
			t.Fatalf("configure: %d %s", r.Status, r.Body)
		}
	}
	const queue = "bq-107" // on page 3 of 50 by name
	push(t, n, "", queue, 4)
	row := `#queues tr[data-queue="` + queue + `"]`

	b.run(t, "open "+n.URL, chromedp.Navigate(n.URL+"/"))
	b.waitFor(t, "page 1 of the 120 queues", `document.querySelectorAll('#queues tr[data-queue]').length === 50 &&
		document.querySelector('#page-info').textContent.indexOf('of 3 (120 queues)') >= 0`, outer("#page-info"))
	if ok, err := eval[bool](b, `document.querySelector(`+js(row)+`) === null`); err != nil || !ok {
		t.Fatalf("%s on page 1: %v", queue, err)
	}

	b.run(t, "search", clearInput("#queue-search"), chromedp.SendKeys(chromedp.CSS("#queue-search"), "BQ-107"))
	b.waitFor(t, "the page-3 queue alone with its pending count",
		`(rs => rs.length === 1 && rs[0].dataset.queue === `+js(queue)+` && rs[0].dataset.pending === '4' &&
			rs[0].dataset.oldestAge !== '')(document.querySelectorAll('#queues tr[data-queue]'))`, outer("#queues"))

	// g1 takes 3 of the 4 messages, g2 one: lags 1 and 3.
	for group, batch := range map[string]int{"g1": 3, "g2": 1} {
		if st, p := pop(t, n, "", queue, fmt.Sprintf("batch=%d&consumerGroup=%s&autoAck=true", batch, group)); st != 200 || len(p.Messages) != batch {
			t.Fatalf("pop %s: %d, %d messages", group, st, len(p.Messages))
		}
	}
	b.waitFor(t, "both groups with their lags", `(r => !!r && r.dataset.groups === 'g1:1,g2:3' && r.dataset.pending === '3' &&
		/g1: 1 \(\d+s\), g2: 3 \(\d+s\)/.test(r.querySelector('td.groups').textContent))(document.querySelector(`+js(row)+`))`, outer("#queues"))

	// Emptying the box lists every queue again, from page 1.
	b.run(t, "clear the search", clearInput("#queue-search"))
	b.waitFor(t, "page 1 again", `document.querySelectorAll('#queues tr[data-queue]').length === 50 &&
		document.querySelector('#page-info').textContent.indexOf('page 1 of 3') === 0`, outer("#page-info"))
	b.noErrors(t, "on the queue list")
}
