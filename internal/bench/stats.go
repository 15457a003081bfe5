package bench

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Latencies are recorded in microseconds from 1 us to 1 hour with 3
// significant digits (relative error <= 0.1%), in HDR histograms.
const (
	histMin    = 1
	histMax    = int64(time.Hour / time.Microsecond)
	histDigits = 3
)

func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(histMin, histMax, histDigits) }

// LatencySummary is a histogram's quantiles, in milliseconds.
type LatencySummary struct {
	Count int64   `json:"count"`
	Mean  float64 `json:"mean_ms"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P99   float64 `json:"p99_ms"`
	P999  float64 `json:"p99_9_ms"`
	Max   float64 `json:"max_ms"`
}

func summarize(h *hdrhistogram.Histogram) LatencySummary {
	ms := func(us int64) float64 { return float64(us) / 1000 }
	return LatencySummary{
		Count: h.TotalCount(),
		Mean:  h.Mean() / 1000,
		P50:   ms(h.ValueAtQuantile(50)),
		P90:   ms(h.ValueAtQuantile(90)),
		P99:   ms(h.ValueAtQuantile(99)),
		P999:  ms(h.ValueAtQuantile(99.9)),
		Max:   ms(h.Max()),
	}
}

// latency is a histogram shared by goroutines, with a second one that the
// progress line resets every tick.
type latency struct {
	mu     sync.Mutex
	total  *hdrhistogram.Histogram
	window *hdrhistogram.Histogram
}

func newLatency() *latency { return &latency{total: newHist(), window: newHist()} }

func (l *latency) record(d time.Duration) {
	us := d.Microseconds()
	if us < histMin {
		us = histMin
	}
	if us > histMax {
		us = histMax
	}
	l.mu.Lock()
	_ = l.total.RecordValue(us)
	_ = l.window.RecordValue(us)
	l.mu.Unlock()
}

// takeWindow returns the window's p99 in ms and resets it.
func (l *latency) takeWindow() (p99 float64, n int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p99, n = float64(l.window.ValueAtQuantile(99))/1000, l.window.TotalCount()
	l.window.Reset()
	return p99, n
}

func (l *latency) summary() LatencySummary {
	l.mu.Lock()
	defer l.mu.Unlock()
	return summarize(l.total)
}

// counters are the running totals, read by the progress line.
type counters struct {
	pushReqs    atomic.Int64
	pushed      atomic.Int64 // items answered "queued"
	pushDup     atomic.Int64 // items answered "duplicate"
	pushFailed  atomic.Int64 // items answered "failed" or lost with their request
	pops        atomic.Int64
	emptyPops   atomic.Int64
	delivered   atomic.Int64 // every message received, redeliveries included
	ackReqs     atomic.Int64
	acked       atomic.Int64 // ack items answered success
	ackFailed   atomic.Int64
	serverError atomic.Int64 // 5xx answers
}

// errorLog counts errors by kind ("push: http 500", "pop: transport", ...)
// and by HTTP status code.
type errorLog struct {
	mu     sync.Mutex
	kinds  map[string]int64
	status map[int]int64
	sample map[string]string
}

func newErrorLog() *errorLog {
	return &errorLog{kinds: map[string]int64{}, status: map[int]int64{}, sample: map[string]string{}}
}

func (e *errorLog) add(kind, detail string) {
	e.mu.Lock()
	e.kinds[kind]++
	if _, ok := e.sample[kind]; !ok && detail != "" {
		if len(detail) > 200 {
			detail = detail[:200]
		}
		e.sample[kind] = detail
	}
	e.mu.Unlock()
}

func (e *errorLog) statusCode(code int) {
	e.mu.Lock()
	e.status[code]++
	e.mu.Unlock()
}

func (e *errorLog) total() int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	var n int64
	for _, v := range e.kinds {
		n += v
	}
	return n
}
