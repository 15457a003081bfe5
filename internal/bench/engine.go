package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Progress is what the live line shows, once a second.
type Progress struct {
	Elapsed   time.Duration
	Left      time.Duration // of the push phase; 0 while draining
	Draining  bool
	PushRate  float64 // messages/s over the last tick
	DelivRate float64
	AckRate   float64
	Backlog   int64   // queued x groups - first deliveries
	P99       float64 // ms, deliveries of the last tick
	Errors    int64
}

// Result is every figure of a run (the --json file's "result").
type Result struct {
	Started      time.Time `json:"started"`
	Queue        string    `json:"queue"`
	PushSeconds  float64   `json:"push_seconds"`  // producers' phase
	TotalSeconds float64   `json:"total_seconds"` // start to the last delivery
	// With Config.Backlog: the consumers' phase (end of the pushes to the
	// last delivery) and first deliveries per second over it.
	DrainSeconds  float64 `json:"drain_seconds,omitempty"`
	DrainedPerSec float64 `json:"drained_per_s,omitempty"`

	PushRequests    int64   `json:"push_requests"`
	Pushed          int64   `json:"pushed"` // items answered "queued"
	PushedPerSec    float64 `json:"pushed_per_s"`
	PushDuplicates  int64   `json:"push_duplicates"`
	PushFailed      int64   `json:"push_failed"`
	Pops            int64   `json:"pops"`
	EmptyPops       int64   `json:"empty_pops"`
	Delivered       int64   `json:"delivered"` // first deliveries, summed over groups
	DeliveredPerSec float64 `json:"delivered_per_s"`
	Received        int64   `json:"received"` // every message received, redeliveries included
	Redeliveries    int64   `json:"redeliveries"`
	AckRequests     int64   `json:"ack_requests"`
	Acked           int64   `json:"acked"`
	AckedPerSec     float64 `json:"acked_per_s"`
	AckFailed       int64   `json:"ack_failed"`
	MsgsPerPop      float64 `json:"msgs_per_pop"` // received / non-empty pops

	Latency     LatencySummary `json:"latency"`      // payload timestamp -> delivered
	PushLatency LatencySummary `json:"push_latency"` // push request -> 201

	ServerErrors int64             `json:"server_errors"` // 5xx answers
	Errors       map[string]int64  `json:"errors"`
	ErrorSamples map[string]string `json:"error_samples,omitempty"`
	StatusCodes  map[string]int64  `json:"status_codes"`

	Check CheckResult `json:"check"`
	CPU   []CPUUse    `json:"cpu"`
	// WAL the server wrote during the run per delivered message, bytes
	// (0 = not measured: no --pg-url). The whole server's WAL: other
	// databases' writes count too.
	WALBytesPerMsg float64 `json:"wal_bytes_per_msg,omitempty"`
	OK             bool    `json:"ok"` // check passed and no 5xx
}

// runner is one run's shared state.
type runner struct {
	cfg           Config
	check         *Checker
	cnt           counters
	errs          *errorLog
	lat           *latency // payload timestamp -> delivered, first deliveries
	pushLat       *latency
	producersDone atomic.Bool
	lastDelivery  atomic.Int64 // Unix ns
}

// Run runs the benchmark described by cfg. progress, when not nil, is
// called about once a second from another goroutine. The error is for a
// run that could not happen (bad config, setup failed); a run with lost
// messages or 5xx answers returns a Result with OK false.
func Run(ctx context.Context, cfg Config, progress func(Progress)) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	groups := cfg.GroupNames()
	r := &runner{
		cfg:     cfg,
		check:   NewChecker(cfg.Producers, cfg.Partitions, groups, cfg.AutoAck),
		errs:    newErrorLog(),
		lat:     newLatency(),
		pushLat: newLatency(),
	}
	if cfg.Setup {
		if err := r.setup(ctx); err != nil {
			return nil, err
		}
	}

	cpu0 := r.snapshotCPU(ctx)
	start := time.Now()
	end := start.Add(cfg.Duration)

	// hard ends everything: the caller's ctx, or the drain deadline.
	hard, cancelHard := context.WithCancel(ctx)
	defer cancelHard()

	// Each group's pops end when that group has everything (gcancel);
	// acks run under hard, so a popped batch is acked even then.
	var consumers sync.WaitGroup
	var endGroups []context.CancelFunc
	startConsumers := func() {
		for gi, g := range groups {
			gctx, gcancel := context.WithCancel(hard)
			endGroups = append(endGroups, gcancel)
			for k := range cfg.Consumers {
				consumers.Add(1)
				go func() {
					defer consumers.Done()
					r.consumer(gctx, hard, gi*cfg.Consumers+k, g, gcancel)
				}()
			}
		}
	}
	defer func() {
		for _, end := range endGroups {
			end()
		}
	}()
	if !cfg.Backlog {
		startConsumers()
	}

	stopProgress := make(chan struct{})
	var progressDone sync.WaitGroup
	if progress != nil {
		progressDone.Add(1)
		go func() {
			defer progressDone.Done()
			r.progressLoop(start, end, len(groups), stopProgress, progress)
		}()
	}

	var producers sync.WaitGroup
	for p := range cfg.Producers {
		quota := int64(0)
		if cfg.Messages > 0 {
			quota = int64(cfg.Messages / cfg.Producers)
			if p < cfg.Messages%cfg.Producers {
				quota++
			}
			if quota == 0 {
				continue
			}
		}
		producers.Add(1)
		go func() {
			defer producers.Done()
			r.producer(hard, p, quota, end)
		}()
	}
	producers.Wait()
	pushEnd := time.Now()
	r.producersDone.Store(true)
	if cfg.Backlog {
		startConsumers()
	}

	// Consumers that already hold everything may be parked in a long-poll
	// and never see the flag: end complete groups here.
	drain := time.AfterFunc(cfg.Drain, cancelHard)
	waitDone := make(chan struct{})
	go func() { consumers.Wait(); close(waitDone) }()
	tick := time.NewTicker(50 * time.Millisecond)
wait:
	for {
		select {
		case <-waitDone:
			break wait
		case <-tick.C:
			for i, g := range groups {
				if r.check.Complete(g) {
					endGroups[i]()
				}
			}
		}
	}
	tick.Stop()
	drain.Stop()
	close(stopProgress)
	progressDone.Wait()

	last := time.Unix(0, r.lastDelivery.Load())
	if last.Before(start) {
		last = time.Now()
	}
	cpu1 := r.snapshotCPU(context.WithoutCancel(ctx))
	return r.result(start, pushEnd, last, cpu0, cpu1), nil
}

// setup configures the queue (POST /api/v1/configure) on the first node.
func (r *runner) setup(ctx context.Context) error {
	body := map[string]any{"queue": r.cfg.Queue}
	if r.cfg.LeaseSeconds > 0 {
		body["options"] = map[string]any{"leaseTime": r.cfg.LeaseSeconds}
	}
	data, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	if _, _, err := do(ctx, newClient(30*time.Second), http.MethodPost, r.cfg.Nodes[0]+"/api/v1/configure", data); err != nil {
		return fmt.Errorf("setup: configure %s: %w", r.cfg.Queue, err)
	}
	return nil
}

func (r *runner) progressLoop(start, end time.Time, groups int, stop <-chan struct{}, fn func(Progress)) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var pushed, deliv, acked int64
	prev := time.Now()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			dt := now.Sub(prev).Seconds()
			prev = now
			p, d, a := r.cnt.pushed.Load(), r.check.FirstDeliveries(), r.cnt.acked.Load()
			p99, _ := r.lat.takeWindow()
			pr := Progress{
				Elapsed:   now.Sub(start),
				Draining:  r.producersDone.Load(),
				PushRate:  float64(p-pushed) / dt,
				DelivRate: float64(d-deliv) / dt,
				AckRate:   float64(a-acked) / dt,
				Backlog:   p*int64(groups) - d,
				P99:       p99,
				Errors:    r.errs.total(),
			}
			if !pr.Draining && r.cfg.Messages == 0 {
				pr.Left = time.Until(end).Round(time.Second)
			}
			pushed, deliv, acked = p, d, a
			fn(pr)
		}
	}
}

func (r *runner) result(start, pushEnd, last time.Time, cpu0, cpu1 cpuSnapshot) *Result {
	res := &Result{
		Started:        start.UTC(),
		Queue:          r.cfg.Queue,
		PushSeconds:    pushEnd.Sub(start).Seconds(),
		TotalSeconds:   last.Sub(start).Seconds(),
		PushRequests:   r.cnt.pushReqs.Load(),
		Pushed:         r.cnt.pushed.Load(),
		PushDuplicates: r.cnt.pushDup.Load(),
		PushFailed:     r.cnt.pushFailed.Load(),
		Pops:           r.cnt.pops.Load(),
		EmptyPops:      r.cnt.emptyPops.Load(),
		Delivered:      r.check.FirstDeliveries(),
		Received:       r.cnt.delivered.Load(),
		AckRequests:    r.cnt.ackReqs.Load(),
		Acked:          r.cnt.acked.Load(),
		AckFailed:      r.cnt.ackFailed.Load(),
		Latency:        r.lat.summary(),
		PushLatency:    r.pushLat.summary(),
		ServerErrors:   r.cnt.serverError.Load(),
	}
	if res.PushSeconds > 0 {
		res.PushedPerSec = float64(res.Pushed) / res.PushSeconds
	}
	if res.TotalSeconds > 0 {
		res.DeliveredPerSec = float64(res.Delivered) / res.TotalSeconds
		res.AckedPerSec = float64(res.Acked) / res.TotalSeconds
	}
	if r.cfg.Backlog {
		// The consumers started at pushEnd: their own rate.
		res.DrainSeconds = last.Sub(pushEnd).Seconds()
		if res.DrainSeconds > 0 {
			res.DrainedPerSec = float64(res.Delivered) / res.DrainSeconds
		}
	}
	if full := res.Pops - res.EmptyPops; full > 0 {
		res.MsgsPerPop = float64(res.Received) / float64(full)
	}
	r.errs.mu.Lock()
	res.Errors = map[string]int64{}
	for k, v := range r.errs.kinds {
		res.Errors[k] = v
	}
	res.ErrorSamples = map[string]string{}
	for k, v := range r.errs.sample {
		res.ErrorSamples[k] = v
	}
	res.StatusCodes = map[string]int64{}
	for k, v := range r.errs.status {
		res.StatusCodes[strconv.Itoa(k)] = v
	}
	r.errs.mu.Unlock()
	res.Check = r.check.Check()
	res.Redeliveries = res.Check.Redeliveries
	res.CPU = cpuUse(cpu0, cpu1, r.cfg.Nodes, res.Delivered)
	if cpu0.walOK && cpu1.walOK && res.Delivered > 0 {
		res.WALBytesPerMsg = float64(cpu1.wal-cpu0.wal) / float64(res.Delivered)
	}
	// A run that queued nothing (every push failed, e.g. the node never
	// came up) proves nothing: it must not pass.
	res.OK = res.Check.OK && res.ServerErrors == 0 && (res.Pushed > 0 || r.cfg.Producers == 0)
	return res
}

// SortedKeys returns a map's keys in order, for stable printing.
func SortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
