package retention_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"queen-node/internal/nodetest"
	"queen-node/node"
)

// TestRetentionSoak is the compressed soak of docs/operations.md,
// "Retention": continuous pushes and pops for QUEEN_RETENTION_SOAK (e.g.
// 4m), the first quarter with no retention pass, the rest with a pass
// every QUEEN_RETENTION_SOAK_INTERVAL (default 5s) on a queue whose dedup
// window is QUEEN_RETENTION_SOAK_DEDUP (default 10s): minutes standing in
// for an hour of Queen's 5-minute interval and one-hour window. It samples
// the size of queen.messages and its indexes, reports push and pop latency
// percentiles without passes, between passes and during passes, and
// checks that the size stays bounded and that both groups received every
// message pushed. QUEEN_RETENTION_SOAK_BATCH and QUEEN_RETENTION_SOAK_PAUSE
// (a duration) set the job's Batch and BatchPause. Skipped unless
// QUEEN_RETENTION_SOAK is set:
//
//	QUEEN_RETENTION_SOAK=4m go run ./cmd/pgtemp -- go test -count=1 -v -timeout 30m -run TestRetentionSoak ./retention/
func TestRetentionSoak(t *testing.T) {
	total := envDuration(t, "QUEEN_RETENTION_SOAK", 0)
	if total == 0 {
		t.Skip("set QUEEN_RETENTION_SOAK (e.g. 4m) to run the retention soak")
	}
	interval := envDuration(t, "QUEEN_RETENTION_SOAK_INTERVAL", 5*time.Second)
	dedup := envDuration(t, "QUEEN_RETENTION_SOAK_DEDUP", 10*time.Second)
	const (
		queue      = "soak"
		partitions = 8
		producers  = 4
		pushBatch  = 10
		pushEvery  = 40 * time.Millisecond // per producer: 4 x 10 / 40 ms = 1000 messages/s
		popBatch   = 100
	)
	groups := []string{"g1", "g2"}

	batch := envInt(t, "QUEEN_RETENTION_SOAK_BATCH", 1000)
	pause := envDuration(t, "QUEEN_RETENTION_SOAK_PAUSE", 0)
	n := nodetest.StartConfig(t, func(c *node.Config) {
		c.Retention.Interval = 0 // passes are run below, on the soak's schedule
		c.Retention.Batch, c.Retention.BatchPause = batch, pause
	})
	c := dbConn(t, n)
	configure(t, n, queue, msg{"dedupWindowSeconds": int(dedup.Seconds())})
	cl := &http.Client{Timeout: 30 * time.Second}

	var pushed atomic.Int64
	var lat latencies
	received := map[string]*sync.Map{}
	for _, g := range groups {
		received[g] = &sync.Map{}
	}
	loadCtx, stopLoad := context.WithCancel(context.Background())
	defer stopLoad()
	var load sync.WaitGroup

	payload := strings.Repeat("x", 200)
	for p := range producers {
		load.Add(1)
		go func() {
			defer load.Done()
			tick := time.NewTicker(pushEvery)
			defer tick.Stop()
			for seq := 0; ; seq++ {
				select {
				case <-loadCtx.Done():
					return
				case <-tick.C:
				}
				items := make([]msg, pushBatch)
				for k := range items {
					id := fmt.Sprintf("p%d-%d-%d", p, seq, k)
					items[k] = msg{"queue": queue, "partition": fmt.Sprintf("part-%d", (seq*pushBatch+k)%partitions),
						"transactionId": id, "payload": msg{"id": id, "pad": payload}}
				}
				start := time.Now()
				status, _, err := post(cl, n.URL+"/api/v1/push", msg{"items": items})
				lat.add('p', start, time.Since(start))
				if err != nil || status != 201 {
					t.Errorf("push: %d %v", status, err)
					return
				}
				pushed.Add(pushBatch)
			}
		}()
	}
	consume := func(ctx context.Context, g string, record bool) {
		for ctx.Err() == nil {
			start := time.Now()
			req, _ := http.NewRequest("GET", fmt.Sprintf("%s/api/v1/pop/queue/%s?consumerGroup=%s&batch=%d&wait=false",
				n.URL, queue, g, popBatch), nil)
			resp, err := cl.Do(req)
			if err != nil {
				t.Errorf("pop: %v", err)
				return
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if record {
				lat.add('o', start, time.Since(start))
			}
			if resp.StatusCode == 204 {
				time.Sleep(20 * time.Millisecond) // an idle consumer's poll interval
				continue
			}
			var res struct {
				Messages []struct {
					TransactionID string `json:"transactionId"`
					PartitionID   string `json:"partitionId"`
					LeaseID       string `json:"leaseId"`
				} `json:"messages"`
			}
			if resp.StatusCode != 200 || json.Unmarshal(body, &res) != nil {
				t.Errorf("pop: %d %s", resp.StatusCode, body)
				return
			}
			acks := make([]msg, len(res.Messages))
			for i, m := range res.Messages {
				acks[i] = msg{"transactionId": m.TransactionID, "partitionId": m.PartitionID, "leaseId": m.LeaseID, "status": "completed"}
			}
			status, out, err := post(cl, n.URL+"/api/v1/ack/batch", msg{"consumerGroup": g, "acknowledgments": acks})
			if err != nil || status != 200 || bytes.Contains(out, []byte(`"success":false`)) {
				t.Errorf("ack: %d %v %s", status, err, out)
				return
			}
			for _, m := range res.Messages {
				received[g].Store(m.TransactionID, true)
			}
		}
	}
	for _, g := range groups {
		for range 2 {
			load.Add(1)
			go func() { defer load.Done(); consume(loadCtx, g, true) }()
		}
	}

	// Passes: none in the first quarter, then every interval; their
	// windows classify the latency samples.
	began := time.Now()
	retentionFrom := began.Add(total / 4)
	var passMu sync.Mutex
	var passes [][2]time.Time
	var deleted int64
	passDone := make(chan struct{})
	go func() {
		defer close(passDone)
		select {
		case <-loadCtx.Done():
			return
		case <-time.After(time.Until(retentionFrom)):
		}
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			start := time.Now()
			p, err := job(n).RunOnce(loadCtx)
			if loadCtx.Err() != nil {
				return
			}
			if err != nil {
				t.Errorf("pass: %v", err)
				return
			}
			passMu.Lock()
			passes = append(passes, [2]time.Time{start, time.Now()})
			deleted += p.Completed + p.Pending
			passMu.Unlock()
			select {
			case <-loadCtx.Done():
				return
			case <-tick.C:
			}
		}
	}()

	type sample struct {
		at                          time.Duration
		rows                        int64
		total, heap, indexes, pkey  int64
		txid                        int64
		deadTup, autovacuums, deltd int64
	}
	var samples []sample
	read := func() sample {
		var s sample
		s.at = time.Since(began).Round(time.Second)
		err := c.QueryRow(context.Background(), `SELECT
				(SELECT count(*) FROM queen.messages),
				pg_total_relation_size('queen.messages'), pg_relation_size('queen.messages'),
				pg_indexes_size('queen.messages'), pg_relation_size('queen.messages_pkey'),
				pg_relation_size('queen.messages_txid'),
				COALESCE((SELECT n_dead_tup + 0 FROM pg_stat_user_tables WHERE relid = 'queen.messages'::regclass), 0),
				COALESCE((SELECT autovacuum_count FROM pg_stat_user_tables WHERE relid = 'queen.messages'::regclass), 0)`).
			Scan(&s.rows, &s.total, &s.heap, &s.indexes, &s.pkey, &s.txid, &s.deadTup, &s.autovacuums)
		if err != nil {
			t.Fatalf("sample: %v", err)
		}
		passMu.Lock()
		s.deltd = deleted
		passMu.Unlock()
		return s
	}
	sampleEvery := max(total/48, 2*time.Second)
	for time.Since(began) < total {
		time.Sleep(min(sampleEvery, total-time.Since(began))) // sampling cadence, not synchronisation
		samples = append(samples, read())
	}
	stopLoad()
	load.Wait()
	<-passDone
	if t.Failed() {
		return
	}

	// Drain: every message pushed reaches both groups (nothing unconsumed
	// was deleted), the latecomers included.
	drainCtx, stopDrain := context.WithTimeout(context.Background(), 2*time.Minute)
	defer stopDrain()
	var drain sync.WaitGroup
	for _, g := range groups {
		drain.Add(1)
		go func() {
			defer drain.Done()
			ctx, cancel := context.WithCancel(drainCtx)
			defer cancel()
			go func() {
				for ctx.Err() == nil {
					if count(received[g]) >= pushed.Load() {
						cancel()
						return
					}
					time.Sleep(50 * time.Millisecond) // progress check's poll interval
				}
			}()
			consume(ctx, g, false)
		}()
	}
	drain.Wait()
	for _, g := range groups {
		if got := count(received[g]); got != pushed.Load() {
			t.Errorf("group %s received %d distinct messages of %d pushed", g, got, pushed.Load())
		}
	}

	t.Logf("soak: %v, %d messages pushed (%d producers x %d per %v), %d partitions, groups %v, pop batch %d; passes every %v from %v on (batch %d, pause %v), dedup window %v",
		total, pushed.Load(), producers, pushBatch, pushEvery, partitions, groups, popBatch, interval, total/4, batch, pause, dedup)
	t.Logf("%6s %8s %10s %10s %10s %10s %10s %9s %5s %9s", "t", "rows", "total", "heap", "indexes", "pkey", "txid", "dead", "avac", "deleted")
	for _, s := range samples {
		t.Logf("%6v %8d %10s %10s %10s %10s %10s %9d %5d %9d", s.at, s.rows, mib(s.total), mib(s.heap), mib(s.indexes),
			mib(s.pkey), mib(s.txid), s.deadTup, s.autovacuums, s.deltd)
	}
	passMu.Lock()
	var passDur []time.Duration
	for _, w := range passes {
		passDur = append(passDur, w[1].Sub(w[0]))
	}
	passMu.Unlock()
	slices.Sort(passDur)
	if len(passDur) > 0 {
		t.Logf("passes: %d, %d messages deleted; duration p50 %v, max %v", len(passDur), deleted,
			passDur[len(passDur)/2].Round(time.Millisecond), passDur[len(passDur)-1].Round(time.Millisecond))
	}
	for _, op := range []struct {
		kind byte
		name string
	}{{'p', "push (10 messages)"}, {'o', "pop (batch 100)"}} {
		// The first pass deletes the backlog of the minutes without passes
		// (a catch-up no steady state has): reported apart.
		off, between, first, during := lat.split(op.kind, retentionFrom, passes)
		t.Logf("%-18s no passes: %s | passes on, between passes: %s | during the first (catch-up) pass: %s | during later passes: %s",
			op.name, pct(off), pct(between), pct(first), pct(during))
	}

	// Bounded: with passes on, the size in the last third does not pass
	// the largest size of the middle third by more than a quarter (the
	// table would grow by half again without them).
	var mid, last int64
	for _, s := range samples {
		switch {
		case s.at > retentionFrom.Sub(began)+(total-total/4)/3 && s.at <= retentionFrom.Sub(began)+2*(total-total/4)/3:
			mid = max(mid, s.total)
		case s.at > retentionFrom.Sub(began)+2*(total-total/4)/3:
			last = max(last, s.total)
		}
	}
	if mid == 0 || last > mid+mid/4 {
		t.Errorf("queen.messages grew with retention on: largest %s in the middle third, %s in the last", mib(mid), mib(last))
	}
}

// latencies records request latencies with their start times.
type latencies struct {
	mu sync.Mutex
	s  []latSample
}

type latSample struct {
	kind  byte
	start time.Time
	d     time.Duration
}

func (l *latencies) add(kind byte, start time.Time, d time.Duration) {
	l.mu.Lock()
	l.s = append(l.s, latSample{kind, start, d})
	l.mu.Unlock()
}

// split sorts one kind's samples into: ended before passes began; after,
// overlapping no pass; overlapping the first pass; overlapping a later one.
func (l *latencies) split(kind byte, from time.Time, passes [][2]time.Time) (off, between, first, later []time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	overlaps := func(s latSample, ws [][2]time.Time) bool {
		end := s.start.Add(s.d)
		return slices.ContainsFunc(ws, func(w [2]time.Time) bool { return s.start.Before(w[1]) && end.After(w[0]) })
	}
	n := min(1, len(passes))
	for _, s := range l.s {
		switch {
		case s.kind != kind:
		case s.start.Add(s.d).Before(from):
			off = append(off, s.d)
		case overlaps(s, passes[:n]):
			first = append(first, s.d)
		case overlaps(s, passes[n:]):
			later = append(later, s.d)
		default:
			between = append(between, s.d)
		}
	}
	return off, between, first, later
}

func pct(ds []time.Duration) string {
	if len(ds) == 0 {
		return "no samples"
	}
	slices.Sort(ds)
	q := func(p float64) time.Duration {
		return ds[min(len(ds)-1, int(p*float64(len(ds))))].Round(10 * time.Microsecond)
	}
	return fmt.Sprintf("n=%d p50 %v p99 %v", len(ds), q(0.50), q(0.99))
}

func mib(b int64) string { return fmt.Sprintf("%.1fMiB", float64(b)/(1<<20)) }

func count(m *sync.Map) int64 {
	var n int64
	m.Range(func(any, any) bool { n++; return true })
	return n
}

func post(cl *http.Client, url string, body any) (int, []byte, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return 0, nil, err
	}
	resp, err := cl.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	return resp.StatusCode, out, err
}

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return d
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return n
}
