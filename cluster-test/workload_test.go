package clustertest

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// ---------------------------------------------------------------------------
// Recorder: what was pushed, delivered and acked, with client-side times.

// key names one message: partition index and its sequence (from 1).
type key struct{ p, s int }

// payload is what every workload message carries.
type payload struct {
	P int    `json:"p"` // partition index
	S int    `json:"s"` // sequence in the partition, from 1
	W int    `json:"w"` // producer
	R string `json:"r"` // run id
}

type pushRec struct {
	start, done time.Time // first attempt sent, 2xx received
	node        int
	attempts    int
}

// delivery is one pop response's messages of one partition.
type delivery struct {
	group  string
	node   int
	lease  string
	t0, t1 time.Time // pop sent, response received
	part   int
	seqs   []int
	retry  []int
}

type ackOutcome int

const (
	ackOK      ackOutcome = iota // 200 and success:true for the item
	ackRefused                   // 200 and success:false
	ackUnknown                   // transport error or non-200: may or may not have applied
)

type ackRec struct {
	group      string
	part, seq  int
	start, end time.Time
	node       int
	outcome    ackOutcome
	err        string
}

// Recorder collects the workload's observations; safe for concurrent use.
type Recorder struct {
	run   string
	queue string
	parts int

	mu         sync.Mutex
	pushes     map[key]pushRec
	deliveries []delivery
	acks       []ackRec
	acked      map[string]map[key]bool // definite acks per group
	pops       map[string]int          // pops with messages per group
	bogus      []string                // messages that do not belong to this run
}

func newRecorder(queue string, parts int) *Recorder {
	return &Recorder{
		run:    fmt.Sprintf("%x", rand.Uint32()),
		queue:  queue,
		parts:  parts,
		pushes: map[key]pushRec{},
		acked:  map[string]map[key]bool{},
		pops:   map[string]int{},
	}
}

func (r *Recorder) partName(p int) string { return fmt.Sprintf("p-%03d", p) }
func (r *Recorder) txID(k key) string     { return fmt.Sprintf("%s-%d-%d", r.run, k.p, k.s) }

func (r *Recorder) pushed(ks []key, rec pushRec) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range ks {
		r.pushes[k] = rec
	}
}

func (r *Recorder) pushedCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pushes)
}

func (r *Recorder) ackedCount(group string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.acked[group])
}

// popMsg is the part of a pop response message the workload reads.
type popMsg struct {
	TransactionID string          `json:"transactionId"`
	PartitionID   string          `json:"partitionId"`
	Partition     string          `json:"partition"`
	Queue         string          `json:"queue"`
	LeaseID       string          `json:"leaseId"`
	RetryCount    int             `json:"retryCount"`
	Data          json.RawMessage `json:"data"`
}

// delivered records one pop response and returns its messages' keys (in
// response order, -1 for foreign messages).
func (r *Recorder) delivered(group string, node int, t0, t1 time.Time, msgs []popMsg) []key {
	keys := make([]key, len(msgs))
	byPart := map[int]*delivery{}
	var order []int
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pops[group]++
	for i, m := range msgs {
		var pl payload
		if err := json.Unmarshal(m.Data, &pl); err != nil || pl.R != r.run || m.Queue != r.queue || m.Partition != r.partName(pl.P) {
			r.bogus = append(r.bogus, fmt.Sprintf("group %s: foreign or malformed message %s/%s %s", group, m.Queue, m.Partition, m.Data))
			keys[i] = key{-1, -1}
			continue
		}
		keys[i] = key{pl.P, pl.S}
		d := byPart[pl.P]
		if d == nil {
			d = &delivery{group: group, node: node, lease: m.LeaseID, t0: t0, t1: t1, part: pl.P}
			byPart[pl.P] = d
			order = append(order, pl.P)
		}
		d.seqs = append(d.seqs, pl.S)
		d.retry = append(d.retry, m.RetryCount)
	}
	for _, p := range order {
		r.deliveries = append(r.deliveries, *byPart[p])
	}
	return keys
}

func (r *Recorder) ackResult(a ackRec) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.acks = append(r.acks, a)
	if a.outcome == ackOK {
		g := r.acked[a.group]
		if g == nil {
			g = map[key]bool{}
			r.acked[a.group] = g
		}
		g[key{a.part, a.seq}] = true
	}
}

// ---------------------------------------------------------------------------
// Workload: producers and consumers through random nodes.

// WorkloadSpec describes one workload. Zero fields take the defaults in
// (*WorkloadSpec).defaults.
type WorkloadSpec struct {
	Queue             string
	Partitions        int
	Messages          int           // total to push; 0 with Duration = push until Duration passed
	Duration          time.Duration // producers stop after this (soak)
	Rate              float64       // messages/s over all producers, 0 = as fast as possible
	Producers         int
	PushBatch         [2]int // items per push request, min..max
	Groups            []string
	ConsumersPerGroup int
	PopBatches        []int   // batch sizes consumers pick from
	MultiPartition    float64 // fraction of pops with partitions=3
	LeaseTime         int     // seconds, configured on the queue
	ForgetRate        float64 // fraction of batches never acked (redelivered after the lease)
	AckDelay          time.Duration
	WaitTimeoutMS     int
	ProducerNodes     func() []int // default: the running nodes
	ConsumerNodes     func() []int // default: the running nodes
	Timeout           time.Duration
	ConfigureOn       int // node index that configures the queue

	// RetryUnknownAcks sends an ack whose outcome is unknown (5xx or
	// transport error) again, through any node, until a definite answer,
	// as a client should: a completed ack of a resolved message answers
	// success (docs/api.md, "Acks", rule 5). Without it such an ack is
	// left to lease expiry, which stalls the workload when the ack did
	// apply (the message is never redelivered, so never acked "for sure"),
	// as a statement cut by a killed primary can.
	RetryUnknownAcks bool
}

func (s *WorkloadSpec) defaults() {
	if s.Partitions == 0 {
		s.Partitions = 20
	}
	if s.Producers == 0 {
		s.Producers = 3
	}
	if s.PushBatch == [2]int{} {
		s.PushBatch = [2]int{1, 50}
	}
	if len(s.Groups) == 0 {
		s.Groups = []string{"g1", "g2"}
	}
	if s.ConsumersPerGroup == 0 {
		s.ConsumersPerGroup = 4
	}
	if len(s.PopBatches) == 0 {
		s.PopBatches = []int{1, 5, 20, 100}
	}
	if s.LeaseTime == 0 {
		s.LeaseTime = 10
	}
	if s.WaitTimeoutMS == 0 {
		s.WaitTimeoutMS = 1500
	}
	if s.Timeout == 0 {
		s.Timeout = 2 * time.Minute
	}
}

// Workload runs producers and consumers until every group acked every
// pushed message, or the timeout.
type Workload struct {
	t    *testing.T
	c    *Cluster
	spec WorkloadSpec
	rec  *Recorder

	ctx     context.Context
	cancel  context.CancelFunc
	started time.Time
	pushEnd atomic.Int64 // unix nanos when the producers finished
	prodWG  sync.WaitGroup
	consWG  sync.WaitGroup
	prodOK  atomic.Bool

	errMu sync.Mutex
	errs  []string

	pushRetries atomic.Int64
	popErrors   atomic.Int64
	ackUnknown  atomic.Int64
	stopPush    atomic.Bool // StopPushing
}

// StopPushing ends the producers at their next batch, for a test whose
// load lasts as long as its events do rather than a set count or time.
func (w *Workload) StopPushing() { w.stopPush.Store(true) }

// startWorkload configures the queue and starts producers and consumers.
func startWorkload(t *testing.T, c *Cluster, spec WorkloadSpec) *Workload {
	t.Helper()
	spec.defaults()
	if spec.Queue == "" {
		spec.Queue = "wl-" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))
	}
	c.Configure(spec.ConfigureOn, spec.Queue, map[string]any{"leaseTime": spec.LeaseTime, "retryLimit": 100})
	w := &Workload{t: t, c: c, spec: spec, rec: newRecorder(spec.Queue, spec.Partitions)}
	w.ctx, w.cancel = context.WithTimeout(context.Background(), spec.Timeout)
	t.Cleanup(w.cancel)
	w.started = time.Now()
	perProducer := spec.Messages / spec.Producers
	for j := 0; j < spec.Producers; j++ {
		n := perProducer
		if j == spec.Producers-1 {
			n = spec.Messages - perProducer*(spec.Producers-1)
		}
		w.prodWG.Add(1)
		go w.producer(j, n)
	}
	go func() {
		w.prodWG.Wait()
		w.pushEnd.Store(time.Now().UnixNano())
		w.prodOK.Store(true)
	}()
	for _, g := range spec.Groups {
		for k := 0; k < spec.ConsumersPerGroup; k++ {
			w.consWG.Add(1)
			go w.consumer(g)
		}
	}
	return w
}

func (w *Workload) fail(format string, args ...any) {
	w.errMu.Lock()
	defer w.errMu.Unlock()
	if len(w.errs) < 50 {
		w.errs = append(w.errs, fmt.Sprintf(format, args...))
	}
}

func pick(nodes []int) int {
	if len(nodes) == 0 {
		return -1
	}
	return nodes[rand.IntN(len(nodes))]
}

func (w *Workload) producerNode() int {
	if w.spec.ProducerNodes != nil {
		return pick(w.spec.ProducerNodes())
	}
	return pick(w.c.Running())
}

func (w *Workload) consumerNode() int {
	if w.spec.ConsumerNodes != nil {
		return pick(w.spec.ConsumerNodes())
	}
	return pick(w.c.Running())
}

// producer j owns the partitions p with p % Producers == j and pushes n
// messages (or until Duration) in batches to random nodes; a batch is
// retried with the same transaction ids until a 2xx.
func (w *Workload) producer(j, n int) {
	defer w.prodWG.Done()
	var owned []int
	for p := j; p < w.spec.Partitions; p += w.spec.Producers {
		owned = append(owned, p)
	}
	next := make([]int, w.spec.Partitions)
	rate := w.spec.Rate / float64(w.spec.Producers)
	sent := 0
	begin := time.Now()
	for {
		if w.spec.Duration > 0 {
			if time.Since(begin) > w.spec.Duration {
				return
			}
		} else if sent >= n {
			return
		}
		if w.ctx.Err() != nil || w.stopPush.Load() {
			return
		}
		if rate > 0 { // pace: sent/rate must not run ahead of the clock
			if ahead := time.Duration(float64(sent)/rate*float64(time.Second)) - time.Since(begin); ahead > 0 {
				time.Sleep(ahead)
			}
		}
		k := w.spec.PushBatch[0] + rand.IntN(w.spec.PushBatch[1]-w.spec.PushBatch[0]+1)
		if w.spec.Duration == 0 {
			k = min(k, n-sent)
		}
		keys := make([]key, k)
		items := make([]map[string]any, k)
		for i := range keys {
			p := owned[rand.IntN(len(owned))]
			next[p]++
			keys[i] = key{p, next[p]}
			pl, _ := json.Marshal(payload{P: p, S: next[p], W: j, R: w.rec.run})
			items[i] = map[string]any{"queue": w.spec.Queue, "partition": w.rec.partName(p),
				"payload": json.RawMessage(pl), "transactionId": w.rec.txID(keys[i])}
		}
		if !w.push(keys, items) {
			return
		}
		sent += k
	}
}

func (w *Workload) push(keys []key, items []map[string]any) bool {
	body := map[string]any{"items": items}
	start := time.Now()
	for attempt := 1; ; attempt++ {
		if w.ctx.Err() != nil {
			w.fail("push of %d items never got a 2xx before the workload timeout", len(items))
			return false
		}
		node := w.producerNode()
		if node < 0 {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		ctx, cancel := context.WithTimeout(w.ctx, 20*time.Second)
		code, resp, err := w.c.do(ctx, node, "POST", "/api/v1/push", body)
		cancel()
		if err == nil && code == 201 {
			var res []struct {
				Status string `json:"status"`
				Error  string `json:"error"`
			}
			if err := json.Unmarshal(resp, &res); err != nil || len(res) != len(items) {
				w.fail("push: bad 201 body %q", resp)
				return false
			}
			for i, x := range res {
				if x.Status != "queued" && x.Status != "duplicate" {
					w.fail("push item %d: status %q error %q", i, x.Status, x.Error)
					return false
				}
			}
			w.rec.pushed(keys, pushRec{start: start, done: time.Now(), node: node, attempts: attempt})
			return true
		}
		if err == nil && code >= 400 && code < 500 {
			w.fail("push: %d %s", code, resp)
			return false
		}
		// 5xx or transport error: the same transaction ids again (the
		// server de-duplicates), maybe through another node.
		if n := w.pushRetries.Add(1); n <= 3 {
			w.t.Logf("push via %s retried: status %d, body %.200q, error %v", w.c.Node(node).Name, code, resp, err)
		}
		time.Sleep(time.Duration(50+rand.IntN(150)) * time.Millisecond)
	}
}

func (w *Workload) groupDone(g string) bool {
	return w.prodOK.Load() && w.rec.ackedCount(g) >= w.rec.pushedCount()
}

// consumer long-polls group g through random nodes and acks through
// random nodes.
func (w *Workload) consumer(g string) {
	defer w.consWG.Done()
	for !w.groupDone(g) && w.ctx.Err() == nil {
		node := w.consumerNode()
		if node < 0 {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		batch := w.spec.PopBatches[rand.IntN(len(w.spec.PopBatches))]
		q := url.Values{}
		q.Set("batch", fmt.Sprint(batch))
		q.Set("wait", "true")
		q.Set("timeout", fmt.Sprint(w.spec.WaitTimeoutMS))
		q.Set("consumerGroup", g)
		if w.spec.MultiPartition > 0 && rand.Float64() < w.spec.MultiPartition {
			q.Set("partitions", "3")
		}
		ctx, cancel := context.WithTimeout(w.ctx, time.Duration(w.spec.WaitTimeoutMS)*time.Millisecond+15*time.Second)
		t0 := time.Now()
		code, body, err := w.c.do(ctx, node, "GET", "/api/v1/pop/queue/"+url.PathEscape(w.spec.Queue)+"?"+q.Encode(), nil)
		t1 := time.Now()
		cancel()
		switch {
		case err != nil || code >= 500:
			w.popErrors.Add(1)
			time.Sleep(100 * time.Millisecond)
			continue
		case code == 204:
			continue
		case code != 200:
			w.fail("pop through %s: %d %s", w.c.Node(node).Name, code, body)
			time.Sleep(100 * time.Millisecond)
			continue
		}
		var res struct {
			Messages []popMsg `json:"messages"`
		}
		if err := json.Unmarshal(body, &res); err != nil || len(res.Messages) == 0 {
			w.fail("pop: bad 200 body %q", body)
			continue
		}
		keys := w.rec.delivered(g, node, t0, t1, res.Messages)
		if w.spec.ForgetRate > 0 && rand.Float64() < w.spec.ForgetRate {
			continue // never acked: the lease expires and the batch comes back
		}
		if w.spec.AckDelay > 0 {
			time.Sleep(time.Duration(rand.Int64N(int64(w.spec.AckDelay))))
		}
		w.ack(g, res.Messages, keys)
	}
}

func (w *Workload) ack(g string, msgs []popMsg, keys []key) {
	acks := make([]map[string]any, 0, len(msgs))
	var ks []key
	for i, m := range msgs {
		if keys[i].p < 0 {
			continue
		}
		acks = append(acks, map[string]any{"transactionId": m.TransactionID, "partitionId": m.PartitionID,
			"leaseId": m.LeaseID, "status": "completed"})
		ks = append(ks, keys[i])
	}
	if len(acks) == 0 {
		return
	}
	for !w.ackOnce(g, acks, ks) && w.spec.RetryUnknownAcks && w.ctx.Err() == nil {
		time.Sleep(time.Duration(100+rand.IntN(150)) * time.Millisecond)
	}
}

// ackOnce sends one batch ack and records its outcome per message; it
// tells whether the answer was definite (200 with a result per item).
func (w *Workload) ackOnce(g string, acks []map[string]any, ks []key) bool {
	node := w.consumerNode()
	if node < 0 {
		return false
	}
	ctx, cancel := context.WithTimeout(w.ctx, 20*time.Second)
	start := time.Now()
	code, body, err := w.c.do(ctx, node, "POST", "/api/v1/ack/batch", map[string]any{"consumerGroup": g, "acknowledgments": acks})
	end := time.Now()
	cancel()
	var res []struct {
		Success bool    `json:"success"`
		Error   *string `json:"error"`
	}
	if err == nil && code == 200 {
		if json.Unmarshal(body, &res) != nil || len(res) != len(acks) {
			w.fail("ack: bad 200 body %q", body)
			res = nil
		}
	}
	for i, k := range ks {
		a := ackRec{group: g, part: k.p, seq: k.s, start: start, end: end, node: node, outcome: ackUnknown}
		if res != nil {
			if res[i].Success {
				a.outcome = ackOK
			} else {
				a.outcome = ackRefused
				if res[i].Error != nil {
					a.err = *res[i].Error
				}
			}
		} else {
			w.ackUnknown.Add(1)
		}
		w.rec.ackResult(a)
	}
	return res != nil
}

// Wait waits for the consumers (every group acked everything, or the
// timeout) and returns the elapsed time.
func (w *Workload) Wait() time.Duration {
	w.consWG.Wait()
	w.prodWG.Wait()
	elapsed := time.Since(w.started)
	w.cancel()
	return elapsed
}

// CheckOptions tune the checker.
type CheckOptions struct {
	// DeadNodeReleases accepts a redelivery before the earlier lease's
	// expiry when the node that lease was taken through was killed in
	// between. queen-node keeps leases in PostgreSQL, so no scenario needs
	// it; it exists for products that release a dead owner's leases.
	DeadNodeReleases bool
	ClockMargin      time.Duration // default 250 ms
	MaxLatency       time.Duration // if set: every message's push -> first delivery must be within it
}

// Report is the checker's summary.
type Report struct {
	Name          string
	Messages      int
	Groups        int
	Pops          int
	Deliveries    int // messages delivered, all groups, redeliveries included
	Redeliveries  int
	P50, P90, P99 time.Duration
	Max           time.Duration
	Elapsed       time.Duration
	PushElapsed   time.Duration
	PushRetries   int64
	PopErrors     int64
	AckRefused    int
	AckUnknown    int
	Violations    []string

	// Cross-node delivery (issue 13): messages first delivered through a
	// node other than the one they were pushed to, leaving out those whose
	// partition was held meanwhile by a lease that was never acked (it
	// expired and the batch was redelivered): their wait is the lease, not
	// the hint path.
	Cross                        int
	CrossLeaseHeld               int
	CrossP50, CrossP99, CrossMax time.Duration
	// The same for messages first delivered through the node they were
	// pushed to (no hint involved: the local mark), to tell the hint
	// path's tail from the load's.
	Same                      int
	SameP50, SameP99, SameMax time.Duration
	// Cross-node p99 / max per 30 s of push time: a tail that grows with
	// time is a backlog, not lost hints.
	CrossWindows []string
}

// Check waits for the workload and proves, for every group: delivered set
// == pushed set; per partition each delivered batch is contiguous, starts
// right after an acked message (or at 1) and never at or before a message
// acked before the pop was sent; first deliveries are in sequence order;
// a redelivery comes only after the earlier lease expired. It logs the
// summary table and fails the test on any violation.
func (w *Workload) Check(name string, o CheckOptions) *Report {
	w.t.Helper()
	elapsed := w.Wait()
	rep := w.rec.check(w.c, w.spec.Groups, time.Duration(w.spec.LeaseTime)*time.Second, o)
	rep.Name = name
	rep.Elapsed = elapsed
	if pe := w.pushEnd.Load(); pe > 0 {
		rep.PushElapsed = time.Unix(0, pe).Sub(w.started)
	}
	rep.PushRetries = w.pushRetries.Load()
	rep.PopErrors = w.popErrors.Load()
	w.errMu.Lock()
	rep.Violations = append(append([]string(nil), w.errs...), rep.Violations...)
	w.errMu.Unlock()
	logReport(w.t, rep)
	for i, v := range rep.Violations {
		if i == 30 {
			w.t.Errorf("... and %d more violations", len(rep.Violations)-30)
			break
		}
		w.t.Error(v)
	}
	return rep
}

func logReport(t *testing.T, r *Report) {
	t.Helper()
	thr := 0.0
	if r.Elapsed > 0 {
		thr = float64(r.Messages) / r.Elapsed.Seconds()
	}
	pushThr := 0.0
	if r.PushElapsed > 0 {
		pushThr = float64(r.Messages) / r.PushElapsed.Seconds()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n| %s | value |\n| --- | --- |\n", r.Name)
	row := func(k string, v any) { fmt.Fprintf(&b, "| %s | %v |\n", k, v) }
	row("messages pushed", r.Messages)
	row("groups", r.Groups)
	row("pops with messages", r.Pops)
	row("messages delivered (all groups)", r.Deliveries)
	row("redeliveries", r.Redeliveries)
	row("latency push->first delivery p50", r.P50.Round(100*time.Microsecond))
	row("latency p90", r.P90.Round(100*time.Microsecond))
	row("latency p99", r.P99.Round(100*time.Microsecond))
	row("latency max", r.Max.Round(100*time.Microsecond))
	row("elapsed (until all acked)", r.Elapsed.Round(time.Millisecond))
	row("push phase", r.PushElapsed.Round(time.Millisecond))
	row("push throughput msg/s", fmt.Sprintf("%.0f", pushThr))
	row("end-to-end msg/s (pushed / elapsed)", fmt.Sprintf("%.0f", thr))
	row("push retries (5xx/transport)", r.PushRetries)
	row("pop errors (5xx/transport)", r.PopErrors)
	row("acks refused / unknown", fmt.Sprintf("%d / %d", r.AckRefused, r.AckUnknown))
	row("cross-node first deliveries (not behind an expired lease)", fmt.Sprintf("%d (%d more were behind one)", r.Cross, r.CrossLeaseHeld))
	row("cross-node latency p50 / p99 / max", fmt.Sprintf("%v / %v / %v", r.CrossP50.Round(100*time.Microsecond),
		r.CrossP99.Round(100*time.Microsecond), r.CrossMax.Round(100*time.Microsecond)))
	row("same-node first deliveries (not behind an expired lease)", r.Same)
	row("same-node latency p50 / p99 / max", fmt.Sprintf("%v / %v / %v", r.SameP50.Round(100*time.Microsecond),
		r.SameP99.Round(100*time.Microsecond), r.SameMax.Round(100*time.Microsecond)))
	if len(r.CrossWindows) > 0 {
		row("cross-node p99 / max per 30 s of push time", strings.Join(r.CrossWindows, ", "))
	}
	row("violations", len(r.Violations))
	t.Log(b.String())
}

// check runs the proofs over the recorded observations.
func (r *Recorder) check(c *Cluster, groups []string, lease time.Duration, o CheckOptions) *Report {
	if o.ClockMargin == 0 {
		o.ClockMargin = 250 * time.Millisecond
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	rep := &Report{Messages: len(r.pushes), Groups: len(groups)}
	var bad []string
	violate := func(format string, args ...any) {
		if len(bad) < 200 {
			bad = append(bad, fmt.Sprintf(format, args...))
		}
	}
	for _, s := range r.bogus {
		violate("%s", s)
	}
	// Pushed sequences must be 1..n per partition (producer bookkeeping).
	maxSeq := map[int]int{}
	for k := range r.pushes {
		maxSeq[k.p] = max(maxSeq[k.p], k.s)
	}
	for p, m := range maxSeq {
		for s := 1; s <= m; s++ {
			if _, ok := r.pushes[key{p, s}]; !ok {
				violate("partition %d: sequence %d never got a 2xx push (max %d)", p, s, m)
			}
		}
	}
	var lat, cross, same []time.Duration
	var t0 time.Time
	for _, p := range r.pushes {
		if t0.IsZero() || p.start.Before(t0) {
			t0 = p.start
		}
	}
	windows := map[int][]time.Duration{}
	for _, g := range groups {
		rep.Pops += r.pops[g]
		firstNode := map[key]int{}
		held := map[int][][2]time.Time{} // per partition: leases that expired unacked
		// Acks of this group, per partition.
		type okAck struct {
			seq int
			end time.Time
		}
		okAcks := map[int][]okAck{}    // definite acks, sorted by seq, for the suffix minimum
		attempt := map[key]time.Time{} // earliest ack attempt start (any outcome)
		for _, a := range r.acks {
			if a.group != g {
				continue
			}
			k := key{a.part, a.seq}
			if t, ok := attempt[k]; !ok || a.start.Before(t) {
				attempt[k] = a.start
			}
			switch a.outcome {
			case ackOK:
				okAcks[a.part] = append(okAcks[a.part], okAck{a.seq, a.end})
			case ackRefused:
				rep.AckRefused++
			case ackUnknown:
				rep.AckUnknown++
			}
		}
		// suffixMin[p][i] = earliest end of a definite ack with seq >= okAcks[p][i].seq
		suffixMin := map[int][]time.Time{}
		for p, as := range okAcks {
			sort.Slice(as, func(i, j int) bool { return as[i].seq < as[j].seq })
			sm := make([]time.Time, len(as))
			for i := len(as) - 1; i >= 0; i-- {
				sm[i] = as[i].end
				if i+1 < len(as) && sm[i+1].Before(sm[i]) {
					sm[i] = sm[i+1]
				}
			}
			okAcks[p], suffixMin[p] = as, sm
		}
		// earliest definite ack end covering seq s (an ack of s' >= s moves
		// the cursor past s)
		ackedBy := func(p, s int) (time.Time, bool) {
			as := okAcks[p]
			i := sort.Search(len(as), func(i int) bool { return as[i].seq >= s })
			if i == len(as) {
				return time.Time{}, false
			}
			return suffixMin[p][i], true
		}

		var ds []delivery
		for _, d := range r.deliveries {
			if d.group == g {
				ds = append(ds, d)
			}
		}
		sort.SliceStable(ds, func(i, j int) bool { return ds[i].t1.Before(ds[j].t1) })
		type seen struct {
			t0, t1 time.Time
			node   int
			lease  string
		}
		last := map[key]seen{}
		first := map[key]time.Time{}
		maxFirst := map[int]int{}
		for _, d := range ds {
			s0 := d.seqs[0]
			for i := 1; i < len(d.seqs); i++ {
				if d.seqs[i] != d.seqs[i-1]+1 {
					violate("group %s partition %d: batch not contiguous: %v (lease %s via %s)", g, d.part, d.seqs, d.lease, c.Node(d.node).Name)
					break
				}
			}
			// Never at or before a message whose ack completed before the pop was sent.
			if end, ok := ackedBy(d.part, s0); ok && end.Before(d.t0) {
				violate("group %s partition %d: acked message %d redelivered (ack done %s before the pop sent; batch %v via %s)",
					g, d.part, s0, d.t0.Sub(end).Round(time.Millisecond), d.seqs, c.Node(d.node).Name)
			}
			// Starts right after a message someone tried to ack before the response arrived.
			if s0 > 1 {
				if at, ok := attempt[key{d.part, s0 - 1}]; !ok || at.After(d.t1) {
					violate("group %s partition %d: batch %v starts after %d, which was never acked before the pop returned (via %s)",
						g, d.part, d.seqs, s0-1, c.Node(d.node).Name)
				}
			}
			for _, s := range d.seqs {
				k := key{d.part, s}
				rep.Deliveries++
				if _, ok := r.pushes[k]; !ok {
					violate("group %s: delivered %v that was never pushed with a 2xx", g, k)
				}
				if prev, ok := last[k]; ok {
					rep.Redeliveries++
					held[d.part] = append(held[d.part], [2]time.Time{prev.t0, prev.t0.Add(lease)})
					expiry := prev.t0.Add(lease)
					early := d.t1.Add(o.ClockMargin).Before(expiry)
					if early && o.DeadNodeReleases && c.Node(prev.node).DownBetween(prev.t0, d.t1) {
						early = false
					}
					if early {
						violate("group %s %v: redelivered %s after the delivery via %s (lease %s) but its lease lasts %v",
							g, k, d.t1.Sub(prev.t0).Round(time.Millisecond), c.Node(prev.node).Name, prev.lease, lease)
					}
				} else {
					first[k] = d.t1
					firstNode[k] = d.node
					if s != maxFirst[d.part]+1 {
						violate("group %s partition %d: first delivery of %d came after first deliveries up to %d (out of order)",
							g, d.part, s, maxFirst[d.part])
					}
					maxFirst[d.part] = max(maxFirst[d.part], s)
				}
				last[k] = seen{d.t0, d.t1, d.node, d.lease}
			}
		}
		// Delivered set == pushed set, everything acked.
		missing := 0
		for k, p := range r.pushes {
			ft, ok := first[k]
			if !ok {
				missing++
				if missing <= 10 {
					violate("group %s: %v pushed via %s never delivered", g, k, c.Node(p.node).Name)
				}
				continue
			}
			l := ft.Sub(p.start)
			if l < 0 {
				l = 0
			}
			lat = append(lat, l)
			blocked := false
			for _, iv := range held[k.p] {
				blocked = blocked || (iv[0].Before(ft) && iv[1].After(p.start))
			}
			switch {
			case firstNode[k] != p.node && blocked:
				rep.CrossLeaseHeld++
			case firstNode[k] != p.node:
				cross = append(cross, l)
				wi := int(p.start.Sub(t0) / (30 * time.Second))
				windows[wi] = append(windows[wi], l)
			case !blocked:
				same = append(same, l)
			}
			if o.MaxLatency > 0 && l > o.MaxLatency {
				violate("group %s %v: first delivered %v after its push (bound %v)", g, k, l.Round(time.Millisecond), o.MaxLatency)
			}
			if _, ok := r.acked[g][k]; !ok {
				violate("group %s %v: never acked", g, k)
			}
		}
		if missing > 10 {
			violate("group %s: %d pushed messages never delivered in all", g, missing)
		}
	}
	sort.Slice(same, func(i, j int) bool { return same[i] < same[j] })
	if n := len(same); n > 0 {
		rep.Same, rep.SameP50, rep.SameP99, rep.SameMax = n, same[n*50/100], same[min(n-1, n*99/100)], same[n-1]
	}
	for wi := 0; len(windows) > 1 && wi <= len(windows); wi++ {
		ws := windows[wi]
		if len(ws) == 0 {
			continue
		}
		sort.Slice(ws, func(i, j int) bool { return ws[i] < ws[j] })
		rep.CrossWindows = append(rep.CrossWindows, fmt.Sprintf("%ds: %v / %v", wi*30,
			ws[min(len(ws)-1, len(ws)*99/100)].Round(time.Millisecond), ws[len(ws)-1].Round(time.Millisecond)))
	}
	sort.Slice(cross, func(i, j int) bool { return cross[i] < cross[j] })
	if n := len(cross); n > 0 {
		rep.Cross, rep.CrossP50, rep.CrossP99, rep.CrossMax = n, cross[n*50/100], cross[min(n-1, n*99/100)], cross[n-1]
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	if n := len(lat); n > 0 {
		rep.P50, rep.P90, rep.P99, rep.Max = lat[n*50/100], lat[n*90/100], lat[min(n-1, n*99/100)], lat[n-1]
	}
	rep.Violations = bad
	return rep
}

// percentiles returns p50, p90, p99 and max of ds (sorted in place).
func percentiles(ds []time.Duration) (p50, p90, p99, mx time.Duration) {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	n := len(ds)
	if n == 0 {
		return
	}
	return ds[n*50/100], ds[n*90/100], ds[min(n-1, n*99/100)], ds[n-1]
}
