package dashboard_test

// The queue page's dead-letter actions in a real browser: button.dlq-retry
// and button.dlq-drop in the "Recent dead letters" table (docs/operations.md,
// "Dashboard"; docs/api.md, "Retry or drop a dead letter").

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"queen-node/internal/nodetest"
	"queen-node/protocol"
)

// TestDashboardDLQRetryAndDrop: two messages dead-lettered by group g (the
// queue has retryLimit 0, a failed ack dead-letters at once). Retry through
// the page: g's consumer gets the copy. Drop through the page: the row goes
// and GET /api/v1/dlq no longer lists the entry. No console errors.
func TestDashboardDLQRetryAndDrop(t *testing.T) {
	b := newBrowser(t) // skips before starting a cluster when there is no Chromium
	nodes := nodetest.StartCluster(t, 2)
	const queue, group = "dq", "g"
	if r := nodes[0].Do(t, "POST", "/api/v1/configure", map[string]any{"queue": queue, "options": map[string]any{"retryLimit": 0}}); r.Status != 200 {
		t.Fatalf("configure: %d %s", r.Status, r.Body)
	}
	push(t, nodes[0], "", queue, 2)
	deadLetter := func() (txid, pid string) {
		t.Helper()
		st, p := pop(t, nodes[0], "", queue, "batch=1&consumerGroup="+group)
		if st != 200 || len(p.Messages) != 1 {
			t.Fatalf("pop: %d %v", st, p)
		}
		m := p.Messages[0]
		r := nodes[0].Do(t, "POST", "/api/v1/ack", map[string]any{"transactionId": m.TransactionID, "partitionId": m.PartitionID,
			"status": "failed", "leaseId": m.LeaseID, "consumerGroup": group, "error": "boom"})
		if r.Status != 200 || !strings.Contains(string(r.Body), `"dlq":true`) {
			t.Fatalf("failed ack not dead-lettered: %d %s", r.Status, r.Body)
		}
		return m.TransactionID, m.PartitionID
	}
	retryTx, pid := deadLetter()
	dropTx, _ := deadLetter()
	if st, _ := pop(t, nodes[0], "", queue, "batch=10&consumerGroup="+group); st != 204 {
		t.Fatalf("group g has something to pop before the retry: %d", st)
	}

	b.run(t, "open the queue page", chromedp.Navigate(nodes[1].URL+"/#/queue/"+url.PathEscape(queue)))
	btn := func(class, tx string) string {
		return fmt.Sprintf(`#queue-page[data-queue=%s] #dlq button.%s[data-transaction=%s][data-group=%s][data-partition-id=%s]`,
			js(queue), class, js(tx), js(group), js(pid))
	}
	b.waitFor(t, "both dead letters with their buttons",
		visible(btn("dlq-retry", retryTx))+" && "+visible(btn("dlq-drop", dropTx)), outer("#dlq"))
	b.noErrors(t, "on the queue page")

	b.run(t, "click retry", chromedp.Click(chromedp.CSS(btn("dlq-retry", retryTx))))
	deadline := time.Now().Add(uiTimeout)
	for {
		st, p := pop(t, nodes[0], "", queue, "batch=10&autoAck=true&consumerGroup="+group)
		if st == 200 {
			if len(p.Messages) != 1 || !strings.HasPrefix(p.Messages[0].TransactionID, retryTx+protocol.DLQRetrySep) {
				t.Fatalf("g's pop after the retry: %+v", p)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("g's consumer never got the retried copy (retry answered %d)", b.status("/api/v1/dlq/"+pid+"/"+retryTx+"/retry"))
		}
		time.Sleep(100 * time.Millisecond) // poll interval
	}
	b.waitFor(t, "the retried row gone", fmt.Sprintf(`!document.querySelector(%s)`, js(btn("dlq-retry", retryTx))), outer("#dlq"))

	b.run(t, "click drop", chromedp.Click(chromedp.CSS(btn("dlq-drop", dropTx))))
	b.waitFor(t, "the dropped row gone", fmt.Sprintf(`!document.querySelector(%s)`, js(btn("dlq-drop", dropTx))), outer("#dlq"))
	r := nodes[0].Do(t, "GET", "/api/v1/dlq?queue="+queue, nil)
	if r.Status != 200 || strings.Contains(string(r.Body), dropTx) || !strings.Contains(string(r.Body), `"total":0`) {
		t.Fatalf("dlq after the drop: %d %s", r.Status, r.Body)
	}
	// dropped, not redelivered
	if st, _ := pop(t, nodes[0], "", queue, "batch=10&consumerGroup="+group); st != 204 {
		t.Fatalf("group g got something after the drop: %d", st)
	}
	b.noErrors(t, "after the retry and the drop")
}
