package suite

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"queen-node/internal/bench"
	"queen-node/pg"
)

// idleClient carries the parked long-polls: one connection per consumer.
func idleClient(conns int) *http.Client {
	return &http.Client{
		Timeout:   60 * time.Second,
		Transport: &http.Transport{MaxIdleConns: conns, MaxIdleConnsPerHost: conns, DisableCompression: true},
	}
}

// send does one request and returns the status and body.
func send(ctx context.Context, c *http.Client, method, u string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, data, err
}

// populate creates partitions p0..p<n-1> of queue with one message each,
// then drains them (queue mode, autoAck), so the queue has n partitions and
// nothing pending: the state of scenario 3.
func populate(ctx context.Context, base, queue string, n int) (time.Duration, error) {
	start := time.Now()
	c := idleClient(8)
	const batch = 1000
	qname, _ := json.Marshal(queue)
	var next atomic.Int64
	errc := make(chan error, 4)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				from := int(next.Add(batch)) - batch
				if from >= n || ctx.Err() != nil {
					return
				}
				var b bytes.Buffer
				b.WriteString(`{"items":[`)
				for i := from; i < min(from+batch, n); i++ {
					if i > from {
						b.WriteByte(',')
					}
					fmt.Fprintf(&b, `{"queue":%s,"partition":"p%d","transactionId":"seed-%d","payload":{"seed":%d}}`, qname, i, i, i)
				}
				b.WriteString("]}")
				code, body, err := send(ctx, c, http.MethodPost, base+"/api/v1/push", b.Bytes())
				if err == nil && code != http.StatusCreated && code != http.StatusOK {
					err = fmt.Errorf("http %d: %.200s", code, body)
				}
				if err != nil {
					errc <- fmt.Errorf("populate %s: push: %w", queue, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errc:
		return 0, err
	default:
	}

	// Drain: wide pops with autoAck, several partitions per pop.
	q := url.Values{"batch": {"1000"}, "partitions": {"1000"}, "autoAck": {"true"}, "wait": {"false"}}
	popURL := base + "/api/v1/pop/queue/" + url.PathEscape(queue) + "?" + q.Encode()
	var got atomic.Int64
	deadline := time.Now().Add(5 * time.Minute)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for got.Load() < int64(n) && ctx.Err() == nil && time.Now().Before(deadline) {
				code, body, err := send(ctx, c, http.MethodGet, popURL, nil)
				if err != nil || code == http.StatusNoContent {
					time.Sleep(50 * time.Millisecond)
					continue
				}
				var ans struct {
					Messages []json.RawMessage `json:"messages"`
				}
				if code == http.StatusOK && json.Unmarshal(body, &ans) == nil {
					got.Add(int64(len(ans.Messages)))
				} else {
					time.Sleep(50 * time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	if got.Load() < int64(n) {
		return 0, fmt.Errorf("populate %s: drained %d of %d messages", queue, got.Load(), n)
	}
	return time.Since(start), nil
}

// idleSnap is the counters of the idle scenario at one instant.
type idleSnap struct {
	at             time.Time
	xact           int64
	pgCPU, nodeCPU float64
	popSQL         float64
	pops           int64
}

// measureIdle parks consumers long-polling on an idle queue of one node and
// measures what they cost PostgreSQL and the node over the plan's window.
func (s *suite) measureIdle(ctx context.Context, c *cluster, queue string, partitions int, hotlist bool) *IdleCost {
	p := s.rep.Plan
	ic := &IdleCost{ID: idleID(hotlist, partitions), Partitions: partitions, Hotlist: hotlist, Consumers: p.IdleConsumers}
	base := c.URLs()[0]
	popURL := base + "/api/v1/pop/queue/" + url.PathEscape(queue) + "?batch=100&wait=true&timeout=10000"
	hc := idleClient(p.IdleConsumers)
	pctx, cancel := context.WithCancel(ctx)
	var pops, popErrs, unexpected atomic.Int64
	var wg sync.WaitGroup
	for range p.IdleConsumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for pctx.Err() == nil {
				code, _, err := send(pctx, hc, http.MethodGet, popURL, nil)
				switch {
				case pctx.Err() != nil:
					return
				case err != nil || code >= 300:
					popErrs.Add(1)
					time.Sleep(100 * time.Millisecond)
				case code == http.StatusOK:
					unexpected.Add(1)
				}
				pops.Add(1)
			}
		}()
	}
	stop := func() { cancel(); wg.Wait() }

	snap := func() (idleSnap, error) {
		var sn idleSnap
		var err error
		sn.at = time.Now()
		if sn.xact, err = pg.XactCommits(ctx, s.dbURL); err != nil {
			return sn, err
		}
		if sn.pgCPU, err = bench.PGCPUSeconds(s.pgPID); err != nil {
			return sn, err
		}
		if sn.nodeCPU, err = bench.NodeCPUSeconds(ctx, base); err != nil {
			return sn, err
		}
		if sn.popSQL, err = metricSum(ctx, base, metricPopSQL); err != nil {
			return sn, err
		}
		sn.pops = pops.Load()
		return sn, nil
	}
	if hotlist {
		// An autoAck took goes back to ready (docs/hotlist.md), so after
		// the drain the ring still names the drained partitions it holds,
		// and the parked consumers probe them, empty, before the queue is
		// idle. That one-time cost is reported apart from the window.
		settleStart := time.Now()
		before, err := metricSum(ctx, base, metricPopSQL)
		if err == nil {
			err = waitRingSettled(ctx, base, queue, p.IdleSettleMax)
		}
		if err == nil {
			var after float64
			if after, err = metricSum(ctx, base, metricPopSQL); err == nil {
				ic.SettleSec, ic.SettlePopSQL = time.Since(settleStart).Seconds(), after-before
			}
		}
		if err != nil {
			stop()
			ic.Err = "settle: " + err.Error()
			return ic
		}
	}
	if !sleep(ctx, p.IdleWarmup) {
		stop()
		ic.Err = "interrupted"
		return ic
	}
	a, err := snap()
	if err == nil && sleep(ctx, p.IdleWindow) {
		var b idleSnap
		if b, err = snap(); err == nil {
			dt := b.at.Sub(a.at).Seconds()
			ic.Seconds = dt
			ic.XactPerSec = float64(b.xact-a.xact) / dt
			ic.PGCores = (b.pgCPU - a.pgCPU) / dt
			ic.NodeCores = (b.nodeCPU - a.nodeCPU) / dt
			ic.PopSQLPerS = (b.popSQL - a.popSQL) / dt
			ic.PopsPerSec = float64(b.pops-a.pops) / dt
		}
	}
	stop()
	ic.PopErrors = popErrs.Load()
	switch {
	case err != nil:
		ic.Err = err.Error()
	case ctx.Err() != nil:
		ic.Err = "interrupted"
	case unexpected.Load() > 0:
		ic.Err = strconv.FormatInt(unexpected.Load(), 10) + " pops returned messages on the idle queue"
	}
	return ic
}

// waitRingSettled polls the queue's hot-list view until no ring has a
// partition ready or in flight (what the drain left is cleared), for at
// most max.
func waitRingSettled(ctx context.Context, base, queue string, max time.Duration) error {
	deadline := time.Now().Add(max)
	u := base + "/api/v1/status/hotlist/" + url.PathEscape(queue) + "?limit=1"
	for {
		// A failed read (the node busy past the client's timeout) is tried
		// again until the deadline, like a ring that is not clear yet.
		var left int
		body, err := get(ctx, u)
		if err == nil {
			left, err = ringsBusy(body)
		}
		if err == nil && left == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("hot-list view, after %s: %w", max, err)
			}
			return fmt.Errorf("%d partitions still ready or in flight after %s", left, max)
		}
		if !sleep(ctx, 200*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// ringsBusy sums the ready and in-flight entries of a hot-list view
// (GET /api/v1/status/hotlist/:queue).
func ringsBusy(view []byte) (int, error) {
	var v struct {
		Rings []struct {
			Ready    int `json:"ready"`
			Inflight int `json:"inflight"`
		} `json:"rings"`
	}
	if err := json.Unmarshal(view, &v); err != nil {
		return 0, fmt.Errorf("hot-list view: %w", err)
	}
	n := 0
	for _, r := range v.Rings {
		n += r.Ready + r.Inflight
	}
	return n, nil
}

// sleep waits d or until ctx ends; false when ctx ended.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
