package dashboard_test

// Real-browser tests of the dashboard: a real three-node cluster (in-process
// nodes with the mesh, internal/nodetest) and headless Chromium driven
// through chromedp. They use only the page's DOM contract:
// #members tr[data-node][data-state], #queues tr[data-queue][data-pending],
// the queue page #queue-page / #groups tr[data-group] / button.seek-end, and
// #login / input#token / button#login-submit / #error when JWT is on.
//
// Chromium comes from scripts/ensure-chromium.sh (make test runs it
// best-effort); without a binary the tests skip with one message.
// QUEEN_SCREENSHOTS=1 writes docs/dashboard-cluster.png and
// docs/dashboard-queue.png.
//
// The package's TestMain (pgtest.Main) is in dashboard_test.go: one test
// binary may have only one.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/golang-jwt/jwt/v5"

	"queen-node/internal/nodetest"
	"queen-node/node"
)

// The page polls every 2 s; a few rounds plus gossip timings fit easily.
const uiTimeout = 20 * time.Second

// chromiumPath finds the browser: $QUEEN_CHROMIUM, then the names Debian
// and Google use (the order scripts/ensure-chromium.sh uses).
func chromiumPath() string {
	if p := os.Getenv("QUEEN_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// browser is one headless Chromium tab with what the page logged.
type browser struct {
	ctx context.Context

	mu        sync.Mutex
	errs      []string       // console.error/assert calls, uncaught exceptions, network errors
	responses map[string]int // last HTTP status per request path (network events)
}

// newBrowser starts headless Chromium (skipping the test when none is
// installed), records console errors and exceptions, accepts every
// confirm() dialog, and records the status of every response.
func newBrowser(t *testing.T) *browser {
	t.Helper()
	bin := chromiumPath()
	if bin == "" {
		t.Skip("no Chromium binary found: run scripts/ensure-chromium.sh (apt-get install -y chromium) or set QUEEN_CHROMIUM; browser tests skipped")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin),
		chromedp.WindowSize(1400, 1000),
	)
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses to run as root with its sandbox
	}
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	b := &browser{responses: map[string]int{}}
	// WithListener sees every event of the tab from its start; it runs on
	// the tab's reading goroutine, so it only records (Listen's rules).
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithListener(b.onEvent))
	t.Cleanup(func() { cancel(); acancel() })
	b.ctx = ctx
	// Every action asks confirm() first: accept each dialog, from another
	// goroutine (the Click that opened it waits for it to close).
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		for _, err := range dialogs {
			if err != nil {
				return
			}
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
		}
	}()
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[string](`navigator.userAgent`)); err != nil {
		t.Fatalf("start Chromium (%s): %v", bin, err)
	}
	return b
}

// onEvent records console errors, uncaught exceptions, error entries of the
// browser log (a failed load, a 404 asset) and each response's status.
func (b *browser) onEvent(ev any) {
	switch e := ev.(type) {
	case *runtime.EventConsoleAPICalled:
		if e.Type == runtime.ConsoleAPICalledTypeError || e.Type == runtime.ConsoleAPICalledTypeAssert {
			var parts []string
			for _, a := range e.Args {
				if len(a.Value) > 0 {
					parts = append(parts, string(a.Value))
				} else {
					parts = append(parts, a.Description)
				}
			}
			b.addErr(fmt.Sprintf("console.%s: %s", e.Type, strings.Join(parts, " ")))
		}
	case *runtime.EventExceptionThrown:
		d := e.ExceptionDetails
		msg := d.Text
		if d.Exception != nil {
			msg += " " + d.Exception.Description
		}
		b.addErr("uncaught exception: " + msg)
	case *log.EventEntryAdded:
		// Chromium asks for /favicon.ico on its own; that is not the page's doing.
		if e.Entry.Level == log.EntryLevelError && !strings.HasSuffix(e.Entry.URL, "/favicon.ico") {
			b.addErr(fmt.Sprintf("browser log (%s): %s %s", e.Entry.Source, e.Entry.Text, e.Entry.URL))
		}
	case *network.EventLoadingFailed:
		if !e.Canceled {
			b.addErr("network failure: " + e.ErrorText)
		}
	case *network.EventResponseReceived:
		if u, err := url.Parse(e.Response.URL); err == nil {
			b.mu.Lock()
			b.responses[u.Path] = int(e.Response.Status)
			b.mu.Unlock()
		}
	}
}

func (b *browser) addErr(s string) {
	b.mu.Lock()
	b.errs = append(b.errs, s)
	b.mu.Unlock()
}

// noErrors fails the test when the page logged any error so far.
func (b *browser) noErrors(t *testing.T, when string) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.errs) > 0 {
		t.Fatalf("console errors %s:\n%s", when, strings.Join(b.errs, "\n"))
	}
}

func (b *browser) status(path string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.responses[path]
}

func (b *browser) run(t *testing.T, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, uiTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// eval evaluates a JavaScript expression.
func eval[T any](b *browser, expr string) (T, error) {
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	return chromedp.Run(ctx, chromedp.Evaluate[T](expr))
}

// waitFor polls a boolean JavaScript expression until it holds; on timeout
// it fails with what the diag expression (a string) shows.
func (b *browser) waitFor(t *testing.T, what, cond, diag string) {
	t.Helper()
	deadline := time.Now().Add(uiTimeout)
	var lastErr error
	for time.Now().Before(deadline) {
		var ok bool
		if ok, lastErr = eval[bool](b, cond); lastErr == nil && ok {
			return
		}
		time.Sleep(100 * time.Millisecond) // poll interval, not synchronisation
	}
	shown, err := eval[string](b, diag)
	if err != nil {
		shown = "(diagnostic failed: " + err.Error() + ")"
	}
	t.Fatalf("page never showed %s within %v (last eval error: %v); page shows:\n%s", what, uiTimeout, lastErr, shown)
}

// screenshot writes ../docs/<name> when QUEEN_SCREENSHOTS=1.
func (b *browser) screenshot(t *testing.T, name string) {
	t.Helper()
	if os.Getenv("QUEEN_SCREENSHOTS") != "1" {
		return
	}
	ctx, cancel := context.WithTimeout(b.ctx, uiTimeout)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join("..", "docs", name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatalf("write %s: %v", path, err)
	}
	t.Logf("wrote %s", path)
}

// clearInput empties an input as a user deleting its text would (an
// input event follows); chromedp.Clear leaves the live value of a typed-in
// input as it was.
func clearInput(sel string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := chromedp.Evaluate[bool](fmt.Sprintf(`(e => { e.value = ''; e.dispatchEvent(new Event('input', {bubbles: true})); return true })(document.querySelector(%s))`, js(sel)))(ctx, t)
		return err
	})
}

// js quotes s as a JavaScript string literal (JSON is valid JavaScript).
func js(s string) string {
	q, _ := json.Marshal(s)
	return string(q)
}

// visible is a JavaScript expression: the element matching sel is rendered.
func visible(sel string) string {
	return fmt.Sprintf(`(e => !!e && !e.hidden && e.getClientRects().length > 0 && getComputedStyle(e).visibility !== 'hidden')(document.querySelector(%s))`, js(sel))
}

// outer is a diagnostic expression: the outerHTML of sel (bounded).
func outer(sel string) string {
	return fmt.Sprintf(`(e => e ? e.outerHTML.slice(0, 4000) : 'no element %s')(document.querySelector(%s))`, strings.ReplaceAll(sel, "'", ""), js(sel))
}

func push(t *testing.T, n *nodetest.Node, token, queue string, count int) {
	t.Helper()
	var items []map[string]any
	for i := 0; i < count; i++ {
		items = append(items, map[string]any{"queue": queue, "partition": "p1", "payload": map[string]any{"i": i}})
	}
	if r := n.DoAuth(t, token, "POST", "/api/v1/push", map[string]any{"items": items}); r.Status != 201 {
		t.Fatalf("push: %d %s", r.Status, r.Body)
	}
}

type popped struct {
	Messages []struct {
		TransactionID string `json:"transactionId"`
		PartitionID   string `json:"partitionId"`
		LeaseID       string `json:"leaseId"`
	} `json:"messages"`
}

// pop pops once without waiting; query adds batch, consumerGroup, autoAck.
func pop(t *testing.T, n *nodetest.Node, token, queue, query string) (int, popped) {
	t.Helper()
	r := n.DoAuth(t, token, "GET", "/api/v1/pop/queue/"+url.PathEscape(queue)+"?wait=false&"+query, nil)
	var p popped
	if r.Status == 200 {
		r.JSON(t, &p)
	} else if r.Status != 204 {
		t.Fatalf("pop %s: %d %s", query, r.Status, r.Body)
	}
	return r.Status, p
}

// groupLag is the group's summed offsetLag on queue, from the group's
// cursors (GET /api/v1/consumer-groups/:group), and its committed offsets.
func groupLag(t *testing.T, n *nodetest.Node, token, group, queue string) (lag int64, committed string) {
	t.Helper()
	r := n.DoAuth(t, token, "GET", "/api/v1/consumer-groups/"+url.PathEscape(group), nil)
	if r.Status != 200 {
		t.Fatalf("group %s: %d %s", group, r.Status, r.Body)
	}
	var doc map[string]struct {
		Partitions []struct {
			CommittedOffset json.Number `json:"committedOffset"`
			OffsetLag       json.Number `json:"offsetLag"`
		} `json:"partitions"`
	}
	r.JSON(t, &doc)
	q, ok := doc[queue]
	if !ok || len(q.Partitions) == 0 {
		t.Fatalf("group %s has no cursor on %s: %s", group, queue, r.Body)
	}
	var offs []string
	for _, p := range q.Partitions {
		l, err := p.OffsetLag.Int64()
		if err != nil {
			t.Fatalf("offsetLag %q: %v", p.OffsetLag, err)
		}
		lag += l
		offs = append(offs, p.CommittedOffset.String())
	}
	return lag, strings.Join(offs, ",")
}

// TestDashboardCluster: node 0's page, JWT off, against a three-node
// cluster: no console errors, three alive members, a push shows as pending,
// pop+ack brings it to zero, a seek through the queue page is seen by a
// consumer of that group, and a stopped node turns dead (or left).
func TestDashboardCluster(t *testing.T) {
	b := newBrowser(t) // skips before starting a cluster when there is no Chromium
	nodes := nodetest.StartCluster(t, 3)
	const queue, group, n = "q", "g", 5

	b.run(t, "open "+nodes[0].URL, chromedp.Navigate(nodes[0].URL+"/"))

	// Three members, all alive, by the names the mesh knows them by.
	var names []string
	for i := range nodes {
		names = append(names, fmt.Sprintf("%s-%d", t.Name(), i))
	}
	namesJS, _ := json.Marshal(names)
	b.waitFor(t, "three alive members",
		fmt.Sprintf(`(() => { const rows = [...document.querySelectorAll('#members tr[data-node]')];
			const want = %s;
			return rows.length === 3 && want.every(n => rows.some(r => r.dataset.node === n && r.dataset.state === 'alive')); })()`, namesJS),
		outer("#members"))
	b.noErrors(t, "after the cluster page loaded")

	// A push (through another node: the list comes from PostgreSQL) shows
	// as n pending.
	push(t, nodes[1], "", queue, n)
	row := fmt.Sprintf(`#queues tr[data-queue=%s]`, js(queue))
	pendingIs := func(want int) string {
		return fmt.Sprintf(`(r => !!r && r.dataset.pending === %s)(document.querySelector(%s))`, js(fmt.Sprint(want)), js(row))
	}
	b.waitFor(t, fmt.Sprintf("queue %s with %d pending", queue, n), pendingIs(n), outer("#queues"))

	// The search filters the list: a name that matches nothing hides the row,
	// the queue's own name shows it again.
	b.run(t, "search for a missing queue", clearInput("#queue-search"),
		chromedp.SendKeys(chromedp.CSS("#queue-search"), "no-such-queue-xyz"))
	b.waitFor(t, "the queue filtered out", fmt.Sprintf(`!document.querySelector(%s) || !(%s)`, js(row), visible(row)), outer("#queues"))
	b.run(t, "search for the queue", clearInput("#queue-search"),
		chromedp.SendKeys(chromedp.CSS("#queue-search"), queue))
	b.waitFor(t, "the queue found by search", visible(row), `'search box: ' + JSON.stringify(document.querySelector('#queue-search').value) + '\n' + `+outer("#queues"))

	// Pop (on node 2) and ack them all: pending goes to 0.
	st, p := pop(t, nodes[2], "", queue, fmt.Sprintf("batch=%d", n))
	if st != 200 || len(p.Messages) != n {
		t.Fatalf("pop: %d, %d messages", st, len(p.Messages))
	}
	var acks []map[string]any
	for _, m := range p.Messages {
		acks = append(acks, map[string]any{"transactionId": m.TransactionID, "partitionId": m.PartitionID, "leaseId": m.LeaseID, "status": "completed"})
	}
	if r := nodes[2].Do(t, "POST", "/api/v1/ack/batch", map[string]any{"acknowledgments": acks}); r.Status != 200 {
		t.Fatalf("ack: %d %s", r.Status, r.Body)
	}
	b.waitFor(t, fmt.Sprintf("queue %s with 0 pending", queue), pendingIs(0), outer("#queues"))
	b.noErrors(t, "after push, pop and ack")
	b.screenshot(t, "dashboard-cluster.png")

	// A stopped node turns dead (or left, after a graceful leave) on node 0's page.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := nodes[2].Node.Stop(ctx); err != nil {
		t.Fatalf("stop node 2: %v", err)
	}
	b.waitFor(t, "node 2 dead or left",
		fmt.Sprintf(`(r => !!r && (r.dataset.state === 'dead' || r.dataset.state === 'left'))(document.querySelector('#members tr[data-node=' + %s + ']'))`,
			js(js(names[2]))),
		outer("#members"))
	b.waitFor(t, "nodes 0 and 1 still alive",
		fmt.Sprintf(`%s.every(n => (r => !!r && r.dataset.state === 'alive')(document.querySelector('#members tr[data-node=' + JSON.stringify(n) + ']')))`, mustJSON(names[:2])),
		outer("#members"))
	// The page may fail to reach the stopped member's own /status: network
	// errors from here on are expected, script errors are not.
	b.mu.Lock()
	for _, e := range b.errs {
		if !strings.HasPrefix(e, "network failure") && !strings.Contains(e, "Failed to") {
			b.mu.Unlock()
			t.Fatalf("script error after stopping a node: %s", e)
		}
	}
	b.errs = nil
	b.mu.Unlock()

	// A group that has read one message of three new ones has lag 2; its
	// seek to the end through the queue page leaves its consumer nothing.
	push(t, nodes[0], "", queue, 3)
	if st, p := pop(t, nodes[1], "", queue, "batch=1&autoAck=true&consumerGroup="+group); st != 200 || len(p.Messages) != 1 {
		t.Fatalf("group's first pop: %d, %d messages", st, len(p.Messages))
	}
	if lag, _ := groupLag(t, nodes[0], "", group, queue); lag == 0 {
		t.Fatal("the group has no lag before the seek: the test would prove nothing")
	}
	b.run(t, "open the queue page", chromedp.Navigate(nodes[0].URL+"/#/queue/"+url.PathEscape(queue)))
	groupRow := fmt.Sprintf(`#queue-page[data-queue=%s] #groups tr[data-group=%s]`, js(queue), js(group))
	seekBtn := fmt.Sprintf(`button.seek-end[data-group=%s]`, js(group))
	b.waitFor(t, "the group's row with its seek button",
		fmt.Sprintf(`!!document.querySelector(%s) && %s`, js(groupRow), visible(seekBtn)), outer("#queue-page"))
	b.screenshot(t, "dashboard-queue.png")
	b.run(t, "click seek", chromedp.Click(chromedp.CSS(seekBtn)))
	deadline := time.Now().Add(uiTimeout)
	for {
		lag, _ := groupLag(t, nodes[0], "", group, queue)
		if lag == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the seek through the page never moved the cursor (lag %d; seek answered %d)", lag,
				b.status("/api/v1/consumer-groups/"+group+"/queues/"+queue+"/seek"))
		}
		time.Sleep(100 * time.Millisecond) // poll interval
	}
	if st, _ := pop(t, nodes[1], "", queue, "batch=10&consumerGroup="+group); st != 204 {
		t.Fatalf("the group's consumer after the seek: %d, want 204", st)
	}
	// A queue-mode consumer is not affected by the group's seek.
	if st, p := pop(t, nodes[1], "", queue, "batch=10&autoAck=true"); st != 200 || len(p.Messages) != 3 {
		t.Fatalf("queue-mode consumer after the group's seek: %d, %d messages (want 3)", st, len(p.Messages))
	}
	b.mu.Lock()
	for _, e := range b.errs {
		if !strings.HasPrefix(e, "network failure") && !strings.Contains(e, "Failed to") {
			b.mu.Unlock()
			t.Fatalf("script error on the queue page: %s", e)
		}
	}
	b.mu.Unlock()
}

func mustJSON(v any) string {
	s, _ := json.Marshal(v)
	return string(s)
}

const jwtSecret = "dashboard-browser-test-secret-0123"

func token(t *testing.T, role string) string {
	t.Helper()
	c := jwt.MapClaims{"sub": "acme-" + role, "role": role, "tenant": "acme", "exp": time.Now().Add(time.Hour).Unix()}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString([]byte(jwtSecret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestDashboardReadOnlyCannotSeek: with JWT on, the page asks for a token,
// keeps it only in sessionStorage, and a read-only token's seek is refused:
// the seek answers 403, #error shows the refusal, the cursor stays.
func TestDashboardReadOnlyCannotSeek(t *testing.T) {
	b := newBrowser(t)
	nodes := nodetest.StartClusterConfig(t, 3, func(c *node.Config) {
		c.Auth.Enabled = true
		c.Auth.Secret = jwtSecret
	})
	const queue, group = "q", "g"
	admin, ro := "Bearer "+token(t, "admin"), token(t, "read-only")
	push(t, nodes[1], admin, queue, 3)
	if st, p := pop(t, nodes[1], admin, queue, "batch=1&autoAck=true&consumerGroup="+group); st != 200 || len(p.Messages) != 1 {
		t.Fatalf("group's first pop: %d, %d messages", st, len(p.Messages))
	}
	lagBefore, committedBefore := groupLag(t, nodes[0], admin, group, queue)
	if lagBefore == 0 {
		t.Fatal("the group has no lag: a seek could not be seen")
	}

	b.run(t, "open the queue page", chromedp.Navigate(nodes[0].URL+"/#/queue/"+url.PathEscape(queue)))
	b.waitFor(t, "the login form", visible("#login")+" && "+visible("input#token"), `document.body.outerHTML.slice(0, 4000)`)
	b.run(t, "log in", chromedp.SendKeys(chromedp.CSS("input#token"), ro), chromedp.Click(chromedp.CSS("button#login-submit")))

	seekBtn := fmt.Sprintf(`button.seek-end[data-group=%s]`, js(group))
	b.waitFor(t, "the group's seek button after login",
		fmt.Sprintf(`!!document.querySelector(%s) && %s`, js(fmt.Sprintf(`#groups tr[data-group=%s]`, js(group))), visible(seekBtn)),
		`document.body.outerHTML.slice(0, 4000)`)

	// The token lives in sessionStorage only.
	type storage struct {
		Session string `json:"session"`
		Local   bool   `json:"local"`
		Cookie  bool   `json:"cookie"`
	}
	stored, err := eval[storage](b, fmt.Sprintf(`({session: sessionStorage.getItem('queen-token') || '',
		local: Object.keys(localStorage).some(k => (localStorage.getItem(k) || '').includes(%[1]s)),
		cookie: document.cookie.includes(%[1]s)})`, js(ro)))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stored.Session, ro) || stored.Local || stored.Cookie {
		t.Fatalf("token storage: sessionStorage %q, in localStorage %v, in a cookie %v", stored.Session, stored.Local, stored.Cookie)
	}

	seekPath := "/api/v1/consumer-groups/" + group + "/queues/" + queue + "/seek"
	b.run(t, "click seek", chromedp.Click(chromedp.CSS(seekBtn)))
	deadline := time.Now().Add(uiTimeout)
	for b.status(seekPath) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the page never sent the seek")
		}
		time.Sleep(50 * time.Millisecond) // poll interval
	}
	if st := b.status(seekPath); st != 403 {
		t.Fatalf("the read-only seek answered %d, want 403", st)
	}
	b.waitFor(t, "the refusal in #error",
		fmt.Sprintf(`%s && document.querySelector('#error').textContent.includes(%s)`, visible("#error"), js("Insufficient permissions")),
		outer("#error"))
	if lag, committed := groupLag(t, nodes[0], admin, group, queue); lag != lagBefore || committed != committedBefore {
		t.Fatalf("a refused seek moved the cursor: lag %d → %d, committed %s → %s", lagBefore, lag, committedBefore, committed)
	}
	// The consumer still gets what it had not read.
	if st, p := pop(t, nodes[2], admin, queue, "batch=10&autoAck=true&consumerGroup="+group); st != 200 || int64(len(p.Messages)) != lagBefore {
		t.Fatalf("the group's consumer after the refused seek: %d, %d messages (want %d)", st, len(p.Messages), lagBefore)
	}
	// Script errors are never expected; 401/403 answers are (network log).
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range b.errs {
		if strings.HasPrefix(e, "uncaught exception") {
			t.Fatalf("script error: %s", e)
		}
	}
}
