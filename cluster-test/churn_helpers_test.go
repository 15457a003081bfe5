package clustertest

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// ---------------------------------------------------------------------------
// What clients saw: every API response with a 5xx, and transport errors.

// respObserver wraps the cluster's HTTP transport and records, for client
// requests (paths under /api/), every 5xx answer and every transport error
// (refused, reset, EOF). The harness's own /health and /status polls are
// not client traffic: a starting node may answer them 503 by design.
type respObserver struct {
	next http.RoundTripper

	mu        sync.Mutex
	fivexx    []string       // "METHOD path via host: status"
	transport map[string]int // error class -> count
	requests  int
}

// observeResponses installs a respObserver on c's client (before any
// workload starts) and returns it.
func observeResponses(c *Cluster) *respObserver {
	tr := c.client.Transport
	if tr == nil {
		tr = http.DefaultTransport
	}
	o := &respObserver{next: tr, transport: map[string]int{}}
	c.client.Transport = o
	return o
}

func (o *respObserver) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := o.next.RoundTrip(req)
	if !strings.HasPrefix(req.URL.Path, "/api/") {
		return resp, err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.requests++
	switch {
	case err != nil:
		o.transport[errClass(err)]++
	case resp.StatusCode >= 500:
		if len(o.fivexx) < 50 {
			o.fivexx = append(o.fivexx, fmt.Sprintf("%s %s via %s: %d", req.Method, req.URL.Path, req.URL.Host, resp.StatusCode))
		} else {
			o.fivexx[len(o.fivexx)-1] = fmt.Sprintf("... (more than %d)", len(o.fivexx))
		}
	}
	return resp, err
}

// errClass names a transport error briefly for the report.
func errClass(err error) string {
	s := err.Error()
	for _, c := range []string{"connection refused", "connection reset", "EOF", "context deadline exceeded", "context canceled", "broken pipe"} {
		if strings.Contains(s, c) {
			return c
		}
	}
	return "other"
}

func (o *respObserver) snapshot() (requests int, fivexx []string, transport map[string]int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	t := map[string]int{}
	for k, v := range o.transport {
		t[k] = v
	}
	return o.requests, append([]string(nil), o.fivexx...), t
}

// ---------------------------------------------------------------------------
// Hint and reseed rates from every node's /status.

// counters are the cluster-wide sums the rate monitor tracks.
type counters struct {
	HintsSent, HintsReceived, FramesSent, Reseeds, ReseedAdded, Pushed int64
}

func (a counters) sub(b counters) counters {
	return counters{a.HintsSent - b.HintsSent, a.HintsReceived - b.HintsReceived, a.FramesSent - b.FramesSent,
		a.Reseeds - b.Reseeds, a.ReseedAdded - b.ReseedAdded, a.Pushed - b.Pushed}
}

func countersOf(st *Status) counters {
	return counters{int64(st.Mesh.HintsSent), int64(st.Mesh.HintsReceived), int64(st.Mesh.FramesSent),
		st.Hotlist.Reseeds, st.Hotlist.ReseedAdded, st.Requests.PushedItems}
}

type rateSample struct {
	at  time.Time
	sum counters // cumulative over the cluster, across restarts
}

// rateMonitor polls every running node's /status and keeps cluster-wide
// cumulative counters. A node's counters start from 0 when it restarts: a
// value below the last one seen counts from 0 (what the node counted
// between its last poll and its stop is lost, at most one interval).
type rateMonitor struct {
	c     *Cluster
	every time.Duration
	stop  chan struct{}
	done  chan struct{}

	mu      sync.Mutex
	last    map[int]counters
	total   counters
	samples []rateSample
}

func startRateMonitor(c *Cluster, every time.Duration) *rateMonitor {
	m := &rateMonitor{c: c, every: every, stop: make(chan struct{}), done: make(chan struct{}), last: map[int]counters{}}
	m.poll()
	go func() {
		defer close(m.done)
		for {
			select {
			case <-m.stop:
				return
			case <-time.After(every):
			}
			m.poll()
		}
	}()
	return m
}

func (m *rateMonitor) Close() {
	close(m.stop)
	<-m.done
}

func (m *rateMonitor) poll() {
	for _, i := range m.c.Running() {
		st, err := m.c.Status(i)
		if err != nil {
			continue // stopping: its last interval is lost
		}
		cur := countersOf(st)
		m.mu.Lock()
		prev, seen := m.last[i]
		d := cur.sub(prev)
		if !seen || cur.HintsSent < prev.HintsSent || cur.Reseeds < prev.Reseeds || cur.Pushed < prev.Pushed {
			d = cur // first poll of the node, or it restarted: its counters began at 0
			if !seen {
				d = counters{} // the baseline before the monitor started is not counted
			}
		}
		m.total = addCounters(m.total, d)
		m.last[i] = cur
		m.mu.Unlock()
	}
	m.mu.Lock()
	m.samples = append(m.samples, rateSample{time.Now(), m.total})
	m.mu.Unlock()
}

func addCounters(a, b counters) counters {
	return counters{a.HintsSent + b.HintsSent, a.HintsReceived + b.HintsReceived, a.FramesSent + b.FramesSent,
		a.Reseeds + b.Reseeds, a.ReseedAdded + b.ReseedAdded, a.Pushed + b.Pushed}
}

// window returns the counter deltas between the last samples at or before
// t0 and t1, and the peak per-second rates over 1 s sliding windows in
// between.
func (m *rateMonitor) window(t0, t1 time.Time) (d counters, secs float64, peak counters) {
	m.mu.Lock()
	defer m.mu.Unlock()
	at := func(t time.Time) int {
		k := 0
		for i, s := range m.samples {
			if !s.at.After(t) {
				k = i
			}
		}
		return k
	}
	a, b := at(t0), at(t1)
	d = m.samples[b].sum.sub(m.samples[a].sum)
	secs = m.samples[b].at.Sub(m.samples[a].at).Seconds()
	for i := a; i <= b; i++ {
		for j := i + 1; j <= b; j++ {
			if m.samples[j].at.Sub(m.samples[i].at) >= time.Second {
				x := m.samples[j].sum.sub(m.samples[i].sum)
				s := m.samples[j].at.Sub(m.samples[i].at).Seconds()
				peak = maxCounters(peak, scale(x, 1/s))
				break
			}
		}
	}
	return d, secs, peak
}

func scale(c counters, f float64) counters {
	r := func(v int64) int64 { return int64(float64(v)*f + 0.5) }
	return counters{r(c.HintsSent), r(c.HintsReceived), r(c.FramesSent), r(c.Reseeds), r(c.ReseedAdded), r(c.Pushed)}
}

func maxCounters(a, b counters) counters {
	return counters{max(a.HintsSent, b.HintsSent), max(a.HintsReceived, b.HintsReceived), max(a.FramesSent, b.FramesSent),
		max(a.Reseeds, b.Reseeds), max(a.ReseedAdded, b.ReseedAdded), max(a.Pushed, b.Pushed)}
}

// logRates logs one row per window: per-second averages and peaks.
func logRates(t *testing.T, name string, d counters, secs float64, peak counters) {
	t.Helper()
	if secs <= 0 {
		secs = 1
	}
	f := func(v int64) string { return fmt.Sprintf("%.1f", float64(v)/secs) }
	t.Logf("| %s | %.1f s | %s (peak %d) | %s (peak %d) | %s (peak %d) | %s (peak %d) | %s (peak %d) | %s |",
		name, secs, f(d.Pushed), peak.Pushed, f(d.HintsSent), peak.HintsSent, f(d.FramesSent), peak.FramesSent,
		f(d.Reseeds), peak.Reseeds, f(d.ReseedAdded), peak.ReseedAdded, fmt.Sprintf("%d hints / %d pushed", d.HintsSent, d.Pushed))
}
