package dashboard_test

// Real-browser tests of the dashboard's actions and charts (docs/operations.md,
// "Dashboard"): maintenance toggles, group delete, chart history that
// survives a reload, and the member table's columns. Helpers are in
// browser_test.go.

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"queen-node/internal/nodetest"
	"queen-node/node"
)

// pushStatus pushes one item and returns its answered status ("queued",
// "buffered", ...) and transaction id.
func pushStatus(t *testing.T, n *nodetest.Node, queue string) (status, txID string) {
	t.Helper()
	r := n.Do(t, "POST", "/api/v1/push", map[string]any{"items": []any{
		map[string]any{"queue": queue, "partition": "p1", "payload": map[string]any{"k": "v"}}}})
	if r.Status != 201 {
		t.Fatalf("push: %d %s", r.Status, r.Body)
	}
	it := r.Arr(t)[0]
	s, _ := it["status"].(string)
	id, _ := it["transactionId"].(string)
	return s, id
}

// until polls cond until it holds or uiTimeout passes.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(uiTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s never happened within %v", what, uiTimeout)
		}
		time.Sleep(50 * time.Millisecond) // poll interval
	}
}

// buttonIs is a JavaScript expression: button id reads text.
func buttonIs(id, text string) string {
	return fmt.Sprintf(`(b => !!b && b.textContent === %s)(document.getElementById(%s))`, js(text), js(id))
}

// TestDashboardMaintenanceToggles: push maintenance turned on through node
// 0's page makes a push answer "buffered"; a page opened on node 2 shows it
// ON and turns it off, and the buffered message is replayed to a consumer.
// Pop maintenance likewise: a pop answers 204 while it is on, and the
// message comes once it is off.
func TestDashboardMaintenanceToggles(t *testing.T) {
	b := newBrowser(t)
	nodes := nodetest.StartCluster(t, 3)
	const queue = "mq"

	b.run(t, "open "+nodes[0].URL, chromedp.Navigate(nodes[0].URL+"/"))
	b.waitFor(t, "push maintenance off", buttonIs("maintenance-push", "off"), outer("header"))
	b.run(t, "turn push maintenance on", chromedp.Click(chromedp.CSS("#maintenance-push")))
	b.waitFor(t, "push maintenance ON", buttonIs("maintenance-push", "ON"), outer("header"))
	// Node 0 answered the toggle: it applied it at once.
	st, buffered := pushStatus(t, nodes[0], queue)
	if st != "buffered" {
		t.Fatalf("push under push maintenance answered %q, want buffered", st)
	}
	if st, _ := pop(t, nodes[1], "", queue, "batch=10"); st != 204 {
		t.Fatalf("a buffered message was visible before the replay: pop %d", st)
	}
	b.noErrors(t, "after turning push maintenance on")

	// Another node's page sees the shared switch and turns it off.
	b.run(t, "open "+nodes[2].URL, chromedp.Navigate(nodes[2].URL+"/"))
	b.waitFor(t, "push maintenance ON on node 2's page", buttonIs("maintenance-push", "ON"), outer("header"))
	b.run(t, "turn push maintenance off", chromedp.Click(chromedp.CSS("#maintenance-push")))
	b.waitFor(t, "push maintenance off on node 2's page", buttonIs("maintenance-push", "off"), outer("header"))
	var got string
	until(t, "the buffered message replayed to a consumer", func() bool {
		st, p := pop(t, nodes[1], "", queue, "batch=10&autoAck=true")
		if st == 200 {
			got = p.Messages[0].TransactionID
			return true
		}
		return false
	})
	if got != buffered {
		t.Fatalf("consumer got transaction %s, want the buffered %s", got, buffered)
	}

	// Pop maintenance, from node 2's page: node 2 answers 204 with a
	// message waiting; off again, the message comes.
	if st, _ := pushStatus(t, nodes[2], queue); st != "queued" {
		t.Fatalf("push with maintenance off answered %q, want queued", st)
	}
	b.waitFor(t, "pop maintenance off", buttonIs("maintenance-pop", "off"), outer("header"))
	b.run(t, "turn pop maintenance on", chromedp.Click(chromedp.CSS("#maintenance-pop")))
	b.waitFor(t, "pop maintenance ON", buttonIs("maintenance-pop", "ON"), outer("header"))
	if st, _ := pop(t, nodes[2], "", queue, "batch=10"); st != 204 {
		t.Fatalf("pop under pop maintenance answered %d, want 204", st)
	}
	b.run(t, "open "+nodes[0].URL+" again", chromedp.Navigate(nodes[0].URL+"/"))
	b.waitFor(t, "pop maintenance ON on node 0's page", buttonIs("maintenance-pop", "ON"), outer("header"))
	b.run(t, "turn pop maintenance off", chromedp.Click(chromedp.CSS("#maintenance-pop")))
	b.waitFor(t, "pop maintenance off", buttonIs("maintenance-pop", "off"), outer("header"))
	until(t, "the message popped after pop maintenance", func() bool {
		st, p := pop(t, nodes[0], "", queue, "batch=10&autoAck=true")
		return st == 200 && len(p.Messages) == 1
	})
	b.noErrors(t, "after the maintenance toggles")
}

// TestDashboardDeleteGroup: a group deleted through the queue page leaves
// the page, and its next pop starts per its subscription (default: from the
// beginning, docs/api.md), so it reads again what it had consumed.
func TestDashboardDeleteGroup(t *testing.T) {
	b := newBrowser(t)
	nodes := nodetest.StartCluster(t, 3)
	const queue, group, keep, n = "dq", "g", "other", 3
	push(t, nodes[1], "", queue, n)
	for _, g := range []string{group, keep} {
		if st, p := pop(t, nodes[2], "", queue, fmt.Sprintf("batch=%d&autoAck=true&consumerGroup=%s", n, g)); st != 200 || len(p.Messages) != n {
			t.Fatalf("group %s's first pop: %d, %d messages", g, st, len(p.Messages))
		}
	}
	if st, _ := pop(t, nodes[2], "", queue, "batch=10&consumerGroup="+group); st != 204 {
		t.Fatalf("the group read everything, yet its pop answered %d", st)
	}

	b.run(t, "open the queue page", chromedp.Navigate(nodes[0].URL+"/#/queue/"+url.PathEscape(queue)))
	rowSel := func(g string) string { return fmt.Sprintf(`#groups tr[data-group=%s]`, js(g)) }
	del := fmt.Sprintf(`button.delete-group[data-group=%s]`, js(group))
	b.waitFor(t, "both groups with a delete button",
		fmt.Sprintf(`!!document.querySelector(%s) && %s`, js(rowSel(keep)), visible(del)), outer("#queue-page"))
	b.run(t, "click delete", chromedp.Click(chromedp.CSS(del)))
	b.waitFor(t, "the deleted group's row gone, the other kept",
		fmt.Sprintf(`!document.querySelector(%s) && !!document.querySelector(%s)`, js(rowSel(group)), js(rowSel(keep))), outer("#queue-page"))
	if st, p := pop(t, nodes[1], "", queue, fmt.Sprintf("batch=10&autoAck=true&consumerGroup=%s", group)); st != 200 || len(p.Messages) != n {
		t.Fatalf("the deleted group's next pop: %d, %d messages (want all %d again)", st, len(p.Messages), n)
	}
	if st, _ := pop(t, nodes[1], "", queue, "batch=10&consumerGroup="+keep); st != 204 {
		t.Fatalf("the other group's cursor moved: pop %d", st)
	}
	b.noErrors(t, "after deleting a group")
}

// TestDashboardSeekToTime: a time typed in #seek-time and "seek to time"
// on a group moves only that group back to the last message at or before
// it: a time before the pushes makes its consumer read every message
// again, the other group's cursor stays. Without a time the page says so
// and sends nothing.
func TestDashboardSeekToTime(t *testing.T) {
	b := newBrowser(t)
	nodes := nodetest.StartCluster(t, 2)
	const queue, group, keep, n = "tq", "g", "other", 4
	push(t, nodes[0], "", queue, n)
	for _, g := range []string{group, keep} {
		if st, p := pop(t, nodes[1], "", queue, fmt.Sprintf("batch=%d&autoAck=true&consumerGroup=%s", n, g)); st != 200 || len(p.Messages) != n {
			t.Fatalf("group %s's first pop: %d, %d messages", g, st, len(p.Messages))
		}
	}

	b.run(t, "open the queue page", chromedp.Navigate(nodes[1].URL+"/#/queue/"+url.PathEscape(queue)))
	btn := fmt.Sprintf(`button.seek-time[data-group=%s]`, js(group))
	b.waitFor(t, "the group's seek-to-time button", visible(btn)+" && "+visible("#seek-time"), outer("#queue-page"))
	seekPath := "/api/v1/consumer-groups/" + group + "/queues/" + queue + "/seek"

	b.run(t, "seek without a time", chromedp.Click(chromedp.CSS(btn)))
	b.waitFor(t, "asked for a time", visible("#error")+` && document.querySelector('#error').textContent.includes('Pick a time')`, outer("#error"))
	if st := b.status(seekPath); st != 0 {
		t.Fatalf("a seek was sent without a time: %d", st)
	}

	// A datetime-local input takes its value as the picker leaves it.
	if v, err := eval[string](b, `(e => (e.value = '2000-01-01T00:00:00', e.value))(document.getElementById('seek-time'))`); err != nil || v == "" {
		t.Fatalf("set the time: %q %v", v, err)
	}
	b.run(t, "seek to a time before the pushes", chromedp.Click(chromedp.CSS(btn)))
	deadline := time.Now().Add(uiTimeout)
	for b.status(seekPath) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the page never sent the seek")
		}
		time.Sleep(50 * time.Millisecond) // poll interval
	}
	if st := b.status(seekPath); st != 200 {
		t.Fatalf("seek to time answered %d", st)
	}
	if st, p := pop(t, nodes[0], "", queue, fmt.Sprintf("batch=10&autoAck=true&consumerGroup=%s", group)); st != 200 || len(p.Messages) != n {
		t.Fatalf("the group after the seek: %d, %d messages (want all %d again)", st, len(p.Messages), n)
	}
	if st, _ := pop(t, nodes[0], "", queue, "batch=10&consumerGroup="+keep); st != 204 {
		t.Fatalf("the other group's cursor moved: pop %d", st)
	}
	// The cleared error bar: the action succeeded.
	b.waitFor(t, "no error after the seek", `document.getElementById('error').hidden`, outer("#error"))
}

// chartsJS reads every chart's DOM hooks.
const chartsJS = `[...document.querySelectorAll('#charts svg[data-metric]')].map(s => ({
	metric: s.dataset.metric, points: +s.dataset.points, history: +s.dataset.historyPoints,
	oldest: +(s.dataset.oldest || 0), lines: s.querySelectorAll('polyline[data-node]').length}))`

// TestDashboardChartsAndMembers: with a fast sampler, a reloaded page's
// charts start with the sampler's history (points older than the reload,
// before any live point), one line per node for every figure; the member
// table fills every column of the alive members, and the hint columns move
// after pushes that other nodes hear about.
func TestDashboardChartsAndMembers(t *testing.T) {
	b := newBrowser(t)
	nodes := nodetest.StartClusterConfig(t, 3, func(c *node.Config) { c.Stats.Interval = 200 * time.Millisecond })
	const queue = "cq"

	b.run(t, "open "+nodes[0].URL, chromedp.Navigate(nodes[0].URL+"/"))
	b.waitFor(t, "three alive members", `document.querySelectorAll('#members tr[data-state=alive]').length === 3`, outer("#members"))
	// Pushes on node 0 are hints to nodes 1 and 2 (docs/hotlist.md).
	for range 3 {
		push(t, nodes[0], "", queue, 2)
	}
	until(t, "node 1 receiving hints", func() bool { return nodes[1].Mesh.Stats().HintsReceived > 0 })

	// Every column of every alive row is filled; node 0's hints sent and
	// the others' hints received are not zero. Columns: docs/operations.md.
	names := []string{}
	for i := range nodes {
		names = append(names, fmt.Sprintf("%s-%d", t.Name(), i))
	}
	b.waitFor(t, "every column filled, hint counts moved", fmt.Sprintf(`(() => {
		const rows = [...document.querySelectorAll('#members tr[data-state=alive]')];
		if (rows.length !== 3) return false;
		const cell = (n, i) => document.querySelector('#members tr[data-node=' + JSON.stringify(n) + ']').children[i].textContent;
		const moved = s => !/^0 fr \/ 0$/.test(s);
		return rows.every(r => r.children.length === 14 && [...r.children].every(c => c.textContent.trim() !== '')) &&
			moved(cell(%[1]s, 9)) && moved(cell(%[2]s, 10)) && moved(cell(%[3]s, 10)); })()`,
		js(names[0]), js(names[1]), js(names[2])), outer("#members"))
	b.noErrors(t, "with the member table filled")

	// Samples written before the reload: wait for them in PostgreSQL.
	ctx, cancel := context.WithTimeout(context.Background(), uiTimeout)
	defer cancel()
	until(t, "samples of every node", func() bool {
		r := nodes[0].DoCtx(ctx, t, "GET", "/api/v1/analytics/system-metrics?interval=10s", nil)
		return r.Status == 200 && r.Obj(t)["replicaCount"] == 3.0
	})
	reloadAt, err := eval[float64](b, `Date.now()`)
	if err != nil {
		t.Fatal(err)
	}
	b.run(t, "reload", chromedp.Reload())
	type chartHooks struct {
		Metric  string  `json:"metric"`
		Points  int     `json:"points"`
		History int     `json:"history"`
		Oldest  float64 `json:"oldest"`
		Lines   int     `json:"lines"`
	}
	b.waitFor(t, "twelve charts", `document.querySelectorAll('#charts svg[data-metric]').length === 12`, outer("#charts"))
	charts, err := eval[[]chartHooks](b, chartsJS)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"push": true, "pop": true, "ack": true, "parked": true, "pool": true, "frames_sent": true,
		"frames_received": true, "hints_sent": true, "hints_received": true, "drops": true, "gaps": true, "reseeds": true}
	for _, c := range charts {
		if !want[c.Metric] {
			t.Errorf("unexpected chart %q", c.Metric)
		}
		delete(want, c.Metric)
		if c.History < 3 || c.Oldest == 0 || c.Oldest >= reloadAt || c.Lines != 3 {
			t.Errorf("chart %s after a reload: %+v, want history points of 3 nodes older than the reload (%.0f)", c.Metric, c, reloadAt)
		}
	}
	if len(want) > 0 {
		t.Errorf("charts missing: %v", want)
	}
	// The y-axis label and the legend name every node.
	legend, err := eval[string](b, `document.querySelector('#charts .chart').textContent`)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if !strings.Contains(legend, n) {
			t.Errorf("legend %q lacks %s", legend, n)
		}
	}
	// Live points follow the history.
	b.waitFor(t, "live points after the history", `[...document.querySelectorAll('#charts svg[data-metric]')].every(s => +s.dataset.points > +s.dataset.historyPoints)`, outer("#charts"))
	b.noErrors(t, "after the reload")
}

// TestDashboardReadOnlyCharts: with JWT on, a read-only token cannot read
// /status (the table says so), yet system-metrics is read-only: the charts
// show the sampler's history of every node.
func TestDashboardReadOnlyCharts(t *testing.T) {
	b := newBrowser(t)
	nodes := nodetest.StartClusterConfig(t, 3, func(c *node.Config) {
		c.Auth.Enabled = true
		c.Auth.Secret = jwtSecret
		c.Stats.Interval = 200 * time.Millisecond
	})
	admin, ro := "Bearer "+token(t, "admin"), token(t, "read-only")
	until(t, "samples of every node", func() bool {
		r := nodes[0].DoAuth(t, admin, "GET", "/api/v1/analytics/system-metrics?interval=10s", nil)
		return r.Status == 200 && r.Obj(t)["replicaCount"] == 3.0
	})

	b.run(t, "open "+nodes[0].URL, chromedp.Navigate(nodes[0].URL+"/"))
	b.waitFor(t, "the login form", visible("#login")+" && "+visible("input#token"), `document.body.outerHTML.slice(0, 4000)`)
	b.run(t, "log in", chromedp.SendKeys(chromedp.CSS("input#token"), ro), chromedp.Click(chromedp.CSS("button#login-submit")))
	b.waitFor(t, "the table saying /status needs admin",
		`document.querySelector('#members').textContent.includes('needs an admin token')`, outer("#members"))
	b.waitFor(t, "twelve charts with every node's history",
		`(c => c.length === 12 && c.every(s => +s.dataset.historyPoints >= 3 && s.dataset.points === s.dataset.historyPoints &&
			s.querySelectorAll('polyline[data-node]').length === 3))([...document.querySelectorAll('#charts svg[data-metric]')])`,
		outer("#charts"))
	// 401 before the login and 403 from /status are answers, not script errors.
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range b.errs {
		if strings.HasPrefix(e, "uncaught exception") || strings.HasPrefix(e, "console.") {
			t.Fatalf("script error: %s", e)
		}
	}
}
