package dashboard_test

// Real browser, real cluster with JWT on: a token below admin cannot
// trigger any admin action from the page (docs/operations.md, "Dashboard":
// the server decides; each refusal is shown in #error).

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"queen-node/internal/nodetest"
	"queen-node/node"
)

// TestDashboardBelowAdminCannotAct: a read-write token (one role below
// admin) clicks every admin button of the page: delete group, dead-letter
// retry and drop, push and pop maintenance. Each request answers 403, the
// page shows the refusal, and nothing changed: the group keeps its cursor,
// the dead letter is still listed, maintenance is still off.
func TestDashboardBelowAdminCannotAct(t *testing.T) {
	b := newBrowser(t) // skips before starting a cluster when there is no Chromium
	nodes := nodetest.StartClusterConfig(t, 2, func(c *node.Config) {
		c.Auth.Enabled = true
		c.Auth.Secret = jwtSecret
	})
	const queue, group = "rq", "g"
	admin, rw := "Bearer "+token(t, "admin"), token(t, "read-write")
	if r := nodes[0].DoAuth(t, admin, "POST", "/api/v1/configure", map[string]any{"queue": queue, "options": map[string]any{"retryLimit": 0}}); r.Status != 200 {
		t.Fatalf("configure: %d %s", r.Status, r.Body)
	}
	push(t, nodes[0], admin, queue, 3)
	st, p := pop(t, nodes[0], admin, queue, "batch=1&consumerGroup="+group)
	if st != 200 || len(p.Messages) != 1 {
		t.Fatalf("pop: %d %+v", st, p)
	}
	m := p.Messages[0]
	if r := nodes[0].DoAuth(t, admin, "POST", "/api/v1/ack", map[string]any{"transactionId": m.TransactionID, "partitionId": m.PartitionID,
		"status": "failed", "leaseId": m.LeaseID, "consumerGroup": group, "error": "boom"}); r.Status != 200 || !strings.Contains(string(r.Body), `"dlq":true`) {
		t.Fatalf("failed ack not dead-lettered: %d %s", r.Status, r.Body)
	}
	lagBefore, committedBefore := groupLag(t, nodes[0], admin, group, queue)

	b.run(t, "open the queue page", chromedp.Navigate(nodes[1].URL+"/#/queue/"+url.PathEscape(queue)))
	b.waitFor(t, "the login form", visible("#login")+" && "+visible("input#token"), `document.body.outerHTML.slice(0, 4000)`)
	b.run(t, "log in as read-write", chromedp.SendKeys(chromedp.CSS("input#token"), rw), chromedp.Click(chromedp.CSS("button#login-submit")))
	retry := fmt.Sprintf(`#dlq button.dlq-retry[data-transaction=%s]`, js(m.TransactionID))
	drop := fmt.Sprintf(`#dlq button.dlq-drop[data-transaction=%s]`, js(m.TransactionID))
	del := fmt.Sprintf(`button.delete-group[data-group=%s]`, js(group))
	b.waitFor(t, "the buttons after login", visible(retry)+" && "+visible(drop)+" && "+visible(del)+" && "+
		`document.querySelector('#maintenance-push').textContent === 'off'`, `document.body.outerHTML.slice(0, 4000)`)

	// The maintenance paths are also read every round (GET), so their
	// refusal is seen in #error and in the state checked at the end only.
	for _, a := range []struct{ what, sel, path string }{
		{"delete the group", del, "/api/v1/consumer-groups/" + group + "/queues/" + queue},
		{"retry the dead letter", retry, "/api/v1/dlq/" + m.PartitionID + "/" + m.TransactionID + "/retry"},
		{"drop the dead letter", drop, "/api/v1/dlq/" + m.PartitionID + "/" + m.TransactionID},
		{"turn push maintenance on", "#maintenance-push", ""},
		{"turn pop maintenance on", "#maintenance-pop", ""},
	} {
		// Clear what a previous click showed, so this refusal is seen anew.
		if _, err := eval[bool](b, `(document.getElementById('error').textContent = '', true)`); err != nil {
			t.Fatal(err)
		}
		b.run(t, a.what, chromedp.Click(chromedp.CSS(a.sel)))
		deadline := time.Now().Add(uiTimeout)
		for a.path != "" && b.status(a.path) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the page never sent it", a.what)
			}
			time.Sleep(50 * time.Millisecond) // poll interval
		}
		if st := b.status(a.path); a.path != "" && st != 403 {
			t.Fatalf("%s as read-write answered %d, want 403", a.what, st)
		}
		b.waitFor(t, a.what+": the refusal in #error",
			fmt.Sprintf(`%s && document.querySelector('#error').textContent.includes(%s)`, visible("#error"), js("Insufficient permissions")),
			outer("#error"))
	}

	// Nothing changed.
	if lag, committed := groupLag(t, nodes[0], admin, group, queue); lag != lagBefore || committed != committedBefore {
		t.Fatalf("the group changed: lag %d → %d, committed %s → %s", lagBefore, lag, committedBefore, committed)
	}
	if r := nodes[0].DoAuth(t, admin, "GET", "/api/v1/dlq?queue="+queue, nil); r.Status != 200 || !strings.Contains(string(r.Body), `"total":1`) {
		t.Fatalf("the dead letter: %d %s", r.Status, r.Body)
	}
	if r := nodes[0].DoAuth(t, admin, "GET", "/api/v1/system/maintenance", nil); r.Status != 200 ||
		!strings.Contains(string(r.Body), `"maintenanceMode":false`) || !strings.Contains(string(r.Body), `"popMaintenanceMode":false`) {
		t.Fatalf("maintenance: %d %s", r.Status, r.Body)
	}
}
