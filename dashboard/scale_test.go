package dashboard_test

// TestDashboardAtScale measures the dashboard against 10,000 queues and
// 100,000 partitions (the issue's figures; docs/benchmarks.md, "Dashboard
// at 10,000 queues and 100,000 partitions"). Gated: it seeds ~500,000
// messages and runs for minutes, so it runs only with QUEEN_UI_SCALE=1:
//
//	QUEEN_UI_SCALE=1 go run ./cmd/pgtemp -- go test -count=1 -run TestDashboardAtScale -v -timeout 30m ./dashboard/

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/performance"
	"github.com/chromedp/chromedp"
	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5/pgxpool"

	"queen-node/internal/nodetest"
	"queen-node/node"
	"queen-node/pg"
)

// The seeded shape: 9,999 small queues (9 of them with 10 partitions, the
// rest with 9) and one queue of 10,000 partitions, 100,000 partitions in
// all, each holding scaleMsgs messages.
const (
	scaleSmall = 9999
	scaleBig   = "scale-big"
	scaleMsgs  = 5
)

// scaleSeed writes, in SQL, the rows the push path writes (a queue row with
// the defaults, a partition row with last_offset and last_write_at, one
// messages row per offset), then the rows pops, acks and failures write: a
// queue-mode cursor and three groups' cursors at different offsets with
// their markers, a few live leases, and dead letters.
var scaleSeed = []string{
	fmt.Sprintf(`INSERT INTO queen.queues (id, tenant, name, namespace)
		SELECT gen_random_uuid(), 'default', 'scale-' || lpad(i::text, 5, '0'), 'ns' || (i %% 20)
		FROM generate_series(0, %d) i`, scaleSmall-1),
	`INSERT INTO queen.queues (id, tenant, name, namespace) VALUES (gen_random_uuid(), 'default', '` + scaleBig + `', 'big')`,
	fmt.Sprintf(`INSERT INTO queen.partitions (id, queue_id, name, last_offset, last_write_at)
		SELECT gen_random_uuid(), q.id, 'p' || lpad(j::text, 5, '0'), %d, now()
		FROM queen.queues q, generate_series(0, CASE WHEN q.name = '%s' THEN 9999
			WHEN q.name < 'scale-00009' THEN 9 ELSE 8 END) j`, scaleMsgs, scaleBig),
	fmt.Sprintf(`INSERT INTO queen.messages (partition_id, off, id, transaction_id, payload, created_at)
		SELECT p.id, g, gen_random_uuid(), 'tx-' || g, '{"order": 12345, "note": "seeded by the scale test"}',
		       now() - interval '1 hour' + g * interval '1 second'
		FROM queen.partitions p, generate_series(1, %d) g`, scaleMsgs),
	// Queue mode consumed 2 of 5 on the big queue and on the first 100 small queues.
	`INSERT INTO queen.consumer_groups_metadata (queue_id, consumer_group)
		SELECT id, '__QUEUE_MODE__' FROM queen.queues WHERE name = '` + scaleBig + `' OR name < 'scale-00100'`,
	`INSERT INTO queen.consumers (partition_id, consumer_group, committed_offset, batch_end)
		SELECT p.id, '__QUEUE_MODE__', 2, 2 FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
		WHERE q.name = '` + scaleBig + `' OR q.name < 'scale-00100'`,
	// Groups on the big queue: g-start read 1, g-mid read 3 (a lease live on
	// 100 partitions), g-end read all; g-start also on the first 100 small queues.
	`INSERT INTO queen.consumer_groups_metadata (queue_id, consumer_group)
		SELECT q.id, g FROM queen.queues q, unnest(ARRAY['g-start', 'g-mid', 'g-end']) g WHERE q.name = '` + scaleBig + `'
		UNION ALL SELECT q.id, 'g-start' FROM queen.queues q WHERE q.name < 'scale-00100'`,
	fmt.Sprintf(`INSERT INTO queen.consumers (partition_id, consumer_group, committed_offset, batch_end, lease_id, lease_expires_at)
		SELECT p.id, g.name, g.off, CASE WHEN g.name = 'g-mid' AND p.name < 'p00100' THEN 4 ELSE g.off END,
		       CASE WHEN g.name = 'g-mid' AND p.name < 'p00100' THEN 'L-' || p.id END,
		       CASE WHEN g.name = 'g-mid' AND p.name < 'p00100' THEN now() + interval '1 hour' END
		FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id,
		     (VALUES ('g-start', 1), ('g-mid', 3), ('g-end', %d)) g(name, off)
		WHERE q.name = '%s'
		UNION ALL
		SELECT p.id, 'g-start', 1, 1, NULL, NULL FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
		WHERE q.name < 'scale-00100'`, scaleMsgs, scaleBig),
	// 30 dead letters of g-end on the big queue, 5 of g-start on a small one.
	`INSERT INTO queen.dead_letters (partition_id, consumer_group, off, message_id, transaction_id, payload, error_message, retry_count, created_at)
		SELECT m.partition_id, x.grp, m.off, m.id, m.transaction_id, m.payload, 'handler failed', 3, m.created_at
		FROM ((SELECT p.id, 'g-end' AS grp FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
		       WHERE q.name = '` + scaleBig + `' ORDER BY p.name LIMIT 30)
		      UNION ALL
		      (SELECT p.id, 'g-start' FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
		       WHERE q.name = 'scale-00001' ORDER BY p.name LIMIT 5)) x
		JOIN queen.messages m ON m.partition_id = x.id AND m.off = 1`,
	`ANALYZE`,
}

// tableStats is PostgreSQL's per-table read counters.
type tableStats struct{ seqScan, seqRead, idxScan, idxFetch int64 }

var scaleTables = []string{"queen.messages", "queen.partitions", "queen.consumers", "queen.queues"}

func readStats(ctx context.Context, t *testing.T, db *pgxpool.Pool) map[string]tableStats {
	t.Helper()
	out := map[string]tableStats{}
	for _, tb := range scaleTables {
		var s tableStats
		if err := db.QueryRow(ctx, `SELECT COALESCE(seq_scan, 0), COALESCE(seq_tup_read, 0), COALESCE(idx_scan, 0), COALESCE(idx_tup_fetch, 0)
			FROM pg_stat_user_tables WHERE relid = $1::regclass`, tb).Scan(&s.seqScan, &s.seqRead, &s.idxScan, &s.idxFetch); err != nil {
			t.Fatalf("read stats of %s: %v", tb, err)
		}
		out[tb] = s
	}
	return out
}

// settledStats reads the counters once they stopped moving: a backend
// publishes its counters when idle, at most once a second
// (PGSTAT_MIN_INTERVAL), so counters unchanged for 1.5 s include every
// request answered before the call.
func settledStats(ctx context.Context, t *testing.T, db *pgxpool.Pool) map[string]tableStats {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	last := readStats(ctx, t, db)
	for {
		time.Sleep(1500 * time.Millisecond) // PostgreSQL's stats publication interval, not a race
		cur := readStats(ctx, t, db)
		same := true
		for k := range cur {
			if cur[k] != last[k] {
				same = false
			}
		}
		if same || time.Now().After(deadline) {
			return cur
		}
		last = cur
	}
}

// tailPlans returns the last n auto_explain entries of a server log, each
// cut to max bytes.
func tailPlans(log string, n, max int) string {
	parts := strings.Split(log, "LOG:  duration:")
	if len(parts) <= 1 {
		return "(none)"
	}
	parts = parts[1:]
	if len(parts) > n {
		parts = parts[len(parts)-n:]
	}
	for i, p := range parts {
		if len(p) > max {
			p = p[:max] + "\n…"
		}
		parts[i] = "duration:" + p
	}
	return strings.Join(parts, "\n---\n")
}

func pct(ds []time.Duration, p float64) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(p*float64(len(s))+0.5) - 1
	if i < 0 {
		i = 0
	}
	if i >= len(s) {
		i = len(s) - 1
	}
	return s[i]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d.Microseconds())/1000) }

func TestDashboardAtScale(t *testing.T) {
	if os.Getenv("QUEEN_UI_SCALE") != "1" {
		t.Skip("scale measurement (10,000 queues, 100,000 partitions; minutes): set QUEEN_UI_SCALE=1 to run it (docs/benchmarks.md)")
	}
	ctx := context.Background()
	// The stats sampler off: its queue-sampling round probes every
	// partition and would mix its reads into the per-request figures (it is
	// timed on its own below).
	n := nodetest.StartConfig(t, func(c *node.Config) { c.Stats.Interval = 0 })
	db, err := pgxpool.New(ctx, n.DBURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)

	// The honest path's speed, for the record: 20 pushes of 100 messages
	// (one partition each) through HTTP.
	start := time.Now()
	for i := 0; i < 20; i++ {
		var items []map[string]any
		for j := 0; j < 100; j++ {
			items = append(items, map[string]any{"queue": "pushed", "partition": fmt.Sprintf("p%02d", i), "payload": map[string]any{"order": j}})
		}
		if r := n.Do(t, "POST", "/api/v1/push", map[string]any{"items": items}); r.Status != 201 {
			t.Fatalf("push: %d %s", r.Status, r.Body)
		}
	}
	pushRate := 2000 / time.Since(start).Seconds()
	t.Logf("push path: 2,000 messages in 20 HTTP pushes at %.0f msg/s: %d messages would take ~%.0f s that way",
		pushRate, 100000*scaleMsgs, 100000*scaleMsgs/pushRate)
	if _, err := db.Exec(ctx, `DELETE FROM queen.messages WHERE partition_id IN (SELECT p.id FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'pushed')`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `DELETE FROM queen.queues WHERE name = 'pushed'`); err != nil {
		t.Fatal(err)
	}

	start = time.Now()
	for _, q := range scaleSeed {
		if _, err := db.Exec(ctx, q); err != nil {
			t.Fatalf("seed: %v\n%s", err, q)
		}
	}
	var nq, np, nm int64
	if err := db.QueryRow(ctx, `SELECT (SELECT count(*) FROM queen.queues), (SELECT count(*) FROM queen.partitions), (SELECT count(*) FROM queen.messages)`).Scan(&nq, &np, &nm); err != nil {
		t.Fatal(err)
	}
	if nq != 10000 || np != 100000 {
		t.Fatalf("seeded %d queues and %d partitions, want 10,000 and 100,000", nq, np)
	}
	t.Logf("seeded by SQL: %d queues, %d partitions, %d messages in %v", nq, np, nm, time.Since(start).Round(time.Millisecond))

	t0 := time.Now()
	if err := n.Node.Sampler().SampleNow(ctx); err != nil {
		t.Logf("one stats sampling round (not the dashboard's; for the record): %v after %v", err, time.Since(t0).Round(time.Millisecond))
	} else {
		t.Logf("one stats sampling round (not the dashboard's; for the record): %v", time.Since(t0).Round(time.Millisecond))
	}

	// Every request a round of the page makes (dashboard/assets/app.js).
	lastPage := (10000 - 1) / 50 * 50
	reqs := []struct{ name, path string }{
		{"status", "/status"},
		{"maintenance", "/api/v1/system/maintenance"},
		{"queues first page", "/api/v1/resources/queues?limit=50&offset=0"},
		{"queues last page", fmt.Sprintf("/api/v1/resources/queues?limit=50&offset=%d", lastPage)},
		{"queues search", "/api/v1/resources/queues?limit=50&offset=0&search=0042"},
		{"queue page, 10 partitions", "/api/v1/resources/queues/scale-00001?partitionOrder=busiest&partitionLimit=100"},
		{"queue page, 10,000 partitions", "/api/v1/resources/queues/" + scaleBig + "?partitionOrder=busiest&partitionLimit=100"},
		{"group g-start on the big queue", "/api/v1/consumer-groups/g-start?queue=" + scaleBig + "&limit=50"},
		{"group g-mid on the big queue", "/api/v1/consumer-groups/g-mid?queue=" + scaleBig + "&limit=50"},
		{"hot-list view of the big queue", "/api/v1/status/hotlist/" + scaleBig + "?limit=50"},
		{"system-metrics, 15 min at 10 s", "/api/v1/analytics/system-metrics?interval=10s&from=" + url.QueryEscape(time.Now().Add(-15*time.Minute).UTC().Format(time.RFC3339))},
		{"dlq of the big queue", "/api/v1/dlq?queue=" + url.QueryEscape(scaleBig) + "&limit=20"},
		{"dlq of a small queue", "/api/v1/dlq?queue=scale-00001&limit=20"},
	}
	const reps = 20
	client := &http.Client{Timeout: time.Minute}
	var table []string
	table = append(table, "| request | p50 ms | p95 ms | max ms | bytes | messages: seq scans / rows by index per request | partitions: seq scans, rows seq-read / rows by index | consumers: seq / index rows |")
	table = append(table, "|---|---|---|---|---|---|---|---|")
	for _, rq := range reqs {
		before := settledStats(ctx, t, db)
		var ds []time.Duration
		var size int
		for i := 0; i < reps; i++ {
			t0 := time.Now()
			resp, err := client.Get(n.URL + rq.path)
			if err != nil {
				t.Fatalf("%s: %v", rq.name, err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			ds = append(ds, time.Since(t0))
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("%s: %d %v %s", rq.name, resp.StatusCode, err, body[:min(len(body), 300)])
			}
			size = len(body)
		}
		after := settledStats(ctx, t, db)
		d := func(tb string) tableStats {
			a, b := after[tb], before[tb]
			return tableStats{a.seqScan - b.seqScan, a.seqRead - b.seqRead, a.idxScan - b.idxScan, a.idxFetch - b.idxFetch}
		}
		m, p, c := d("queen.messages"), d("queen.partitions"), d("queen.consumers")
		line := fmt.Sprintf("| %s | %s | %s | %s | %d | %d / %d | %d, %d / %d | %d, %d / %d |", rq.name,
			ms(pct(ds, .5)), ms(pct(ds, .95)), ms(pct(ds, 1)), size,
			m.seqScan, m.idxFetch/reps, p.seqScan, p.seqRead/reps, p.idxFetch/reps, c.seqScan, c.seqRead/reps, c.idxFetch/reps)
		table = append(table, line)
		t.Log(line)
		if m.seqScan != 0 {
			t.Errorf("%s: %d sequential scans of queen.messages over %d requests", rq.name, m.seqScan, reps)
		}
	}
	t.Logf("HTTP, %d requests each, one at a time:\n%s", reps, strings.Join(table, "\n"))

	// Where the big queue's page spends its time: the parts of
	// GET /api/v1/resources/queues/:name (pg.GetQueue) on their own.
	// auto_explain (contrib) writes the plan of every statement over 300 ms,
	// with actual rows and buffers, to the server's log: the connections of
	// this pool load it (database settings apply to new sessions).
	var dbName, dataDir string
	if err := db.QueryRow(ctx, `SELECT current_database(), current_setting('data_directory')`).Scan(&dbName, &dataDir); err != nil {
		t.Fatal(err)
	}
	for _, set := range []string{"session_preload_libraries = 'auto_explain'", "auto_explain.log_min_duration = '300ms'",
		"auto_explain.log_analyze = on", "auto_explain.log_buffers = on"} {
		if _, err := db.Exec(ctx, `ALTER DATABASE "`+dbName+`" SET `+set); err != nil {
			t.Fatalf("auto_explain: %v", err)
		}
	}
	pdb, err := pg.Open(ctx, n.DBURL, 2, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pdb.Close)
	timeIt := func(what string, f func() error) {
		var ds []time.Duration
		for i := 0; i < 5; i++ {
			t0 := time.Now()
			if err := f(); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			ds = append(ds, time.Since(t0))
		}
		t.Logf("pg, %s: p50 %s ms over 5", what, ms(pct(ds, .5)))
	}
	timeIt("GetQueue(big) whole", func() error { _, err := pdb.GetQueue(ctx, "default", scaleBig, pg.DetailOpts{}); return err })
	timeIt("ListGroups(queue big), part of GetQueue", func() error {
		_, err := pdb.ListGroups(ctx, "default", pg.GroupFilter{Queue: scaleBig, Limit: pg.MaxDetailGroups})
		return err
	})
	timeIt("ListQueues(last page)", func() error {
		_, _, err := pdb.ListQueues(ctx, "default", pg.QueueFilter{Limit: 50, Offset: lastPage})
		return err
	})
	timeIt("GroupCursors(g-mid)", func() error { _, err := pdb.GroupCursors(ctx, "default", "g-mid"); return err })
	// The server log is beside the data directory (internal/pgtemp). Run
	// this test alone (-run): the last entries are then its own.
	if logText, err := os.ReadFile(filepath.Join(filepath.Dir(dataDir), "postgres.log")); err != nil {
		t.Logf("no server log to read plans from: %v", err)
	} else {
		t.Logf("slow statement plans (auto_explain, server log, bounded):\n%s", tailPlans(string(logText), 4, 6000))
	}

	scaleBrowser(t, n)
}

// scaleBrowser times the page itself in headless Chromium: navigation to
// the first queue page rendered, steady refresh rounds (the interval
// between two renders of a table is 2 s plus one round), the DOM size and
// the JS heap.
func scaleBrowser(t *testing.T, n *nodetest.Node) {
	b := newBrowser(t)
	if _, err := chromedp.Call(b.ctx, performance.Enable, performance.EnableParams{}); err != nil {
		t.Fatalf("performance.enable: %v", err)
	}
	metrics := func() string {
		t.Helper()
		r, err := chromedp.Call(b.ctx, performance.GetMetrics, cdp.Empty{})
		if err != nil {
			t.Fatalf("performance.getMetrics: %v", err)
		}
		m := map[string]float64{}
		for _, x := range r.Metrics {
			m[x.Name] = x.Value
		}
		live, err := eval[int](b, `document.getElementsByTagName('*').length`)
		if err != nil {
			t.Fatalf("count elements: %v", err)
		}
		return fmt.Sprintf("%d elements in the document, DOM nodes (incl. not yet collected) %.0f, JS heap used %.1f MB of %.1f MB", live, m["Nodes"], m["JSHeapUsedSize"]/1e6, m["JSHeapTotalSize"]/1e6)
	}
	// rounds records, in the page, when the table sel is re-rendered, and
	// returns the intervals between renders after waiting for count of them.
	rounds := func(what, sel string, count int) {
		t.Helper()
		if _, err := eval[bool](b, fmt.Sprintf(`(() => { window.__renders = []; performance.setResourceTimingBufferSize(100000);
			new MutationObserver(() => window.__renders.push(performance.now())).observe(document.querySelector(%s), {childList: true});
			return true })()`, js(sel))); err != nil {
			t.Fatalf("observe %s: %v", sel, err)
		}
		deadline := time.Now().Add(time.Duration(count+5) * 10 * time.Second)
		var rs []float64
		for {
			var err error
			rs, err = eval[[]float64](b, `window.__renders`)
			if err == nil && len(rs) > count {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: only %d renders of %s (%v)", what, len(rs), sel, err)
			}
			time.Sleep(200 * time.Millisecond) // poll interval
		}
		var ds []time.Duration
		for i := 1; i < len(rs); i++ {
			iv := rs[i] - rs[i-1] // round + max(2000, 2*round) ms
			round := iv - 2000
			if round > 1000 {
				round = iv / 3
			}
			ds = append(ds, time.Duration(round*float64(time.Millisecond)))
		}
		// What the rounds fetched: the resource timings of the requests
		// that started between the first and the last render, per round.
		fetched, err := eval[string](b, fmt.Sprintf(`(() => { const e = performance.getEntriesByType('resource')
			.filter(r => r.startTime > %[1]f && r.startTime < %[2]f), k = %[3]d;
			return (e.length / k).toFixed(1) + ' requests and ' + (e.reduce((a, r) => a + r.encodedBodySize, 0) / k / 1e6).toFixed(2) +
				' MB of response bodies per round' })()`, rs[0], rs[len(rs)-1], len(rs)-1))
		if err != nil {
			t.Fatalf("resource timings: %v", err)
		}
		t.Logf("%s: round duration (from the render interval) over %d rounds: p50 %s ms, max %s ms; %s; %s",
			what, len(ds), ms(pct(ds, .5)), ms(pct(ds, 1)), fetched, metrics())
	}

	t0 := time.Now()
	b.run(t, "open the page", chromedp.Navigate(n.URL+"/"))
	b.waitFor(t, "the first 50 queues", `document.querySelectorAll('#queues tr[data-queue]').length === 50`, outer("#page-info"))
	t.Logf("home: navigation to 50 queue rows rendered: %v; %s", time.Since(t0).Round(time.Millisecond), metrics())
	rounds("home page", "#queues", 5)
	b.noErrors(t, "on the home page")

	t0 = time.Now()
	b.run(t, "open the big queue", chromedp.Navigate(n.URL+"/#/queue/"+scaleBig))
	b.waitFor(t, "the big queue's partitions", `document.querySelectorAll('#partitions tr[data-partition]').length > 0 && document.querySelectorAll('#groups tr[data-group]').length >= 3`,
		outer("#queue-summary")+"+'\\n'+"+outer("#groups"))
	t.Logf("queue page (10,000 partitions): hash change to partitions and groups rendered: %v; %s", time.Since(t0).Round(time.Millisecond), metrics())
	if groups, err := eval[[]string](b, `[...document.querySelectorAll('#groups tr[data-group]')].map(r => r.dataset.group)`); err == nil {
		t.Logf("queue page (10,000 partitions): group rows %v (one GET /api/v1/consumer-groups/:group each per round)", groups)
	}
	rounds("queue page (10,000 partitions)", "#partitions", 5)
	b.noErrors(t, "on the big queue's page")
}
