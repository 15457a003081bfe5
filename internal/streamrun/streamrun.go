// Package streamrun is a small in-repo stream runner that talks to a node
// the way Queen's Go streams client does (docs/api.md, "Streams"): it
// registers the query, pops the source with a leased, manual-ack pop,
// groups the messages by partitionId, reads each partition's state, runs
// the user's operators and commits one POST /streams/v1/cycle per
// partition; an idle-flush loop sends ack-less cycles for ripe windows.
// Tests use it to drive the /streams/v1 endpoints end to end.
package streamrun

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Options configure a Runner; zero fields take the client's defaults.
type Options struct {
	URL        string // node base URL
	Name       string // the query name
	Source     string // source queue
	Sink       string // sink queue; "" = none (foreach)
	ConfigHash string // default "h1"
	Reset      bool
	Group      string        // default "streams.<Name>"
	Batch      int           // pop batch; default 200
	Partitions int           // partitions per pop; default 4
	PopTimeout time.Duration // long-poll; default 1 s
	FlushEvery time.Duration // idle-flush tick; 0 = no flush loop
	Client     *http.Client  // default: 30 s timeout per attempt
	// AfterSend, when set, is called after each cycle request was sent and
	// before its answer is read (a crash test cancels the runner there).
	AfterSend func()
}

// Message is one popped source message.
type Message struct {
	TransactionID, PartitionID, LeaseID, Partition string
	Data                                           map[string]any
	CreatedAt                                      time.Time
}

// StateOp is one state operation; Value nil on delete.
type StateOp struct {
	Type  string `json:"type"`
	Key   string `json:"key"`
	Value any    `json:"value,omitempty"`
}

// PushItem is one sink emit; Payload is always an object.
type PushItem struct {
	Queue     string         `json:"queue"`
	Partition string         `json:"partition"`
	Payload   map[string]any `json:"payload"`
}

// Processor is the operator chain of a query.
type Processor interface {
	// Process handles one partition's batch (in createdAt, transactionId
	// order) given its whole state. allowed is how many messages (from the
	// start) it took: all releases the lease, fewer is a partial ack that
	// keeps it, 0 sends no cycle (the batch comes back after the lease).
	Process(partitionID string, state map[string]json.RawMessage, msgs []Message) (ops []StateOp, push []PushItem, allowed int)
}

// Flusher is a Processor with an idle flush: rows under FlushPrefix whose
// windowEnd is at or before now are handed to Flush, whose ops and pushes
// go out as an ack-less cycle.
type Flusher interface {
	FlushPrefix() string
	Flush(partitionID string, now time.Time, ripe map[string]json.RawMessage) (ops []StateOp, push []PushItem)
}

// Stats count what the runner did; Errors are failed pops, state reads
// and cycles.
type Stats struct {
	Popped, Cycles, PartialAcks, FlushCycles, Errors atomic.Int64
}

// Runner runs one query until its context ends.
type Runner struct {
	opt     Options
	proc    Processor
	QueryID string
	Stats   Stats

	mu    sync.Mutex
	parts map[string]*partition // partitions seen, for the flush loop
	errs  []error
}

type partition struct {
	mu   sync.Mutex // one read-modify-write cycle at a time per partition
	name string
}

// New returns a Runner of proc.
func New(opt Options, proc Processor) *Runner {
	if opt.ConfigHash == "" {
		opt.ConfigHash = "h1"
	}
	if opt.Group == "" {
		opt.Group = "streams." + opt.Name
	}
	if opt.Batch <= 0 {
		opt.Batch = 200
	}
	if opt.Partitions <= 0 {
		opt.Partitions = 4
	}
	if opt.PopTimeout <= 0 {
		opt.PopTimeout = time.Second
	}
	if opt.Client == nil {
		opt.Client = &http.Client{Timeout: 30 * time.Second}
	}
	return &Runner{opt: opt, proc: proc, parts: map[string]*partition{}}
}

// LastErrors returns up to the last 10 errors recorded.
func (r *Runner) LastErrors() []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]error(nil), r.errs...)
}

func (r *Runner) fail(err error) {
	r.Stats.Errors.Add(1)
	r.mu.Lock()
	r.errs = append(r.errs, err)
	if len(r.errs) > 10 {
		r.errs = r.errs[1:]
	}
	r.mu.Unlock()
}

// Register registers the query (Run does it first) and sets QueryID.
func (r *Runner) Register(ctx context.Context) error {
	body := map[string]any{"name": r.opt.Name, "source_queue": r.opt.Source,
		"config_hash": r.opt.ConfigHash, "reset": r.opt.Reset}
	if r.opt.Sink != "" {
		body["sink_queue"] = r.opt.Sink
	}
	var out struct {
		Success bool   `json:"success"`
		QueryID string `json:"query_id"`
	}
	if err := r.post(ctx, "/streams/v1/queries", body, &out); err != nil {
		return fmt.Errorf("register: %w", err)
	}
	if !out.Success || out.QueryID == "" {
		return errors.New("register: no query_id")
	}
	r.QueryID = out.QueryID
	return nil
}

// Run registers and processes until ctx ends; it returns nil then, or the
// registration error.
func (r *Runner) Run(ctx context.Context) error {
	if err := r.Register(ctx); err != nil {
		if ctx.Err() != nil {
			return nil // stopped while registering, as during the loop
		}
		return err
	}
	var wg sync.WaitGroup
	if f, ok := r.proc.(Flusher); ok && r.opt.FlushEvery > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.flushLoop(ctx, f)
		}()
	}
	for ctx.Err() == nil {
		msgs, err := r.pop(ctx)
		if err != nil {
			if ctx.Err() == nil {
				r.fail(err)
				time.Sleep(50 * time.Millisecond) // backoff, not synchronisation
			}
			continue
		}
		r.Stats.Popped.Add(int64(len(msgs)))
		byPart := map[string][]Message{}
		var order []string
		for _, m := range msgs {
			if _, ok := byPart[m.PartitionID]; !ok {
				order = append(order, m.PartitionID)
			}
			byPart[m.PartitionID] = append(byPart[m.PartitionID], m)
		}
		for _, pid := range order {
			if ctx.Err() != nil {
				break
			}
			if err := r.processPartition(ctx, pid, byPart[pid]); err != nil && ctx.Err() == nil {
				r.fail(err)
			}
		}
	}
	wg.Wait()
	return nil
}

func (r *Runner) partition(pid, name string) *partition {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.parts[pid]
	if !ok {
		p = &partition{name: name}
		r.parts[pid] = p
	}
	return p
}

func (r *Runner) processPartition(ctx context.Context, pid string, msgs []Message) error {
	sort.SliceStable(msgs, func(i, j int) bool {
		if !msgs[i].CreatedAt.Equal(msgs[j].CreatedAt) {
			return msgs[i].CreatedAt.Before(msgs[j].CreatedAt)
		}
		return msgs[i].TransactionID < msgs[j].TransactionID
	})
	p := r.partition(pid, msgs[0].Partition)
	p.mu.Lock()
	defer p.mu.Unlock()
	state, err := r.state(ctx, pid, nil, "", nil)
	if err != nil {
		return err
	}
	ops, push, allowed := r.proc.Process(pid, state, msgs)
	if allowed <= 0 {
		return nil // fully denied: redelivered after the lease
	}
	allowed = min(allowed, len(msgs))
	release := allowed == len(msgs)
	ack := map[string]any{"transactionId": msgs[allowed-1].TransactionID, "leaseId": msgs[0].LeaseID,
		"status": "completed", "count": allowed}
	if err := r.cycle(ctx, pid, ops, r.fillPartitions(push, p.name), ack, release); err != nil {
		return err
	}
	r.Stats.Cycles.Add(1)
	if !release {
		r.Stats.PartialAcks.Add(1)
	}
	return nil
}

// fillPartitions applies the client's default: the source partition name.
func (r *Runner) fillPartitions(push []PushItem, name string) []PushItem {
	for i := range push {
		if push[i].Partition == "" {
			push[i].Partition = name
		}
		if push[i].Queue == "" {
			push[i].Queue = r.opt.Sink
		}
	}
	return push
}

func (r *Runner) flushLoop(ctx context.Context, f Flusher) {
	tick := time.NewTicker(r.opt.FlushEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		r.mu.Lock()
		pids := make([]string, 0, len(r.parts))
		for pid := range r.parts {
			pids = append(pids, pid)
		}
		r.mu.Unlock()
		for _, pid := range pids {
			if err := r.flushPartition(ctx, f, pid); err != nil && ctx.Err() == nil {
				r.fail(err)
			}
		}
	}
}

func (r *Runner) flushPartition(ctx context.Context, f Flusher, pid string) error {
	p := r.partition(pid, "")
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	ms := now.UnixMilli()
	rows, err := r.state(ctx, pid, []string{}, f.FlushPrefix(), &ms)
	if err != nil || len(rows) == 0 {
		return err
	}
	ops, push := f.Flush(pid, now, rows)
	if len(ops) == 0 && len(push) == 0 {
		return nil
	}
	if err := r.cycle(ctx, pid, ops, r.fillPartitions(push, p.name), nil, false); err != nil {
		return err
	}
	r.Stats.FlushCycles.Add(1)
	return nil
}

func (r *Runner) pop(ctx context.Context) ([]Message, error) {
	q := url.Values{}
	q.Set("batch", strconv.Itoa(r.opt.Batch))
	q.Set("wait", "true")
	q.Set("timeout", strconv.Itoa(int(r.opt.PopTimeout.Milliseconds())))
	q.Set("consumerGroup", r.opt.Group)
	if r.opt.Partitions > 1 {
		q.Set("partitions", strconv.Itoa(r.opt.Partitions))
	}
	ctx, cancel := context.WithTimeout(ctx, r.opt.PopTimeout+5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", r.opt.URL+"/api/v1/pop/queue/"+url.PathEscape(r.opt.Source)+"?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := r.opt.Client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("pop: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("pop: read: %w", err)
	}
	if resp.StatusCode == http.StatusNoContent || len(bytes.TrimSpace(body)) == 0 {
		return nil, nil
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("pop: HTTP %d: %s", resp.StatusCode, body)
	}
	var out struct {
		Messages []struct {
			TransactionID string         `json:"transactionId"`
			PartitionID   string         `json:"partitionId"`
			LeaseID       string         `json:"leaseId"`
			Partition     string         `json:"partition"`
			Data          map[string]any `json:"data"`
			CreatedAt     string         `json:"createdAt"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		return nil, fmt.Errorf("pop: decode: %w", err)
	}
	msgs := make([]Message, len(out.Messages))
	for i, m := range out.Messages {
		ts, err := time.Parse(time.RFC3339, m.CreatedAt)
		if err != nil {
			return nil, fmt.Errorf("pop: createdAt %q: %w", m.CreatedAt, err)
		}
		msgs[i] = Message{TransactionID: m.TransactionID, PartitionID: m.PartitionID, LeaseID: m.LeaseID,
			Partition: m.Partition, Data: m.Data, CreatedAt: ts}
	}
	return msgs, nil
}

// state reads a partition's state; keys nil sends JSON null, as the
// client's ordinary path does, [] as its flush does.
func (r *Runner) state(ctx context.Context, pid string, keys []string, prefix string, ripe *int64) (map[string]json.RawMessage, error) {
	body := map[string]any{"query_id": r.QueryID, "partition_id": pid, "keys": keys}
	if prefix != "" {
		body["key_prefix"] = prefix
	}
	if ripe != nil {
		body["ripe_at_or_before"] = *ripe
	}
	var out struct {
		Rows []struct {
			Key   string          `json:"key"`
			Value json.RawMessage `json:"value"`
		} `json:"rows"`
	}
	if err := r.post(ctx, "/streams/v1/state/get", body, &out); err != nil {
		return nil, fmt.Errorf("state/get: %w", err)
	}
	m := make(map[string]json.RawMessage, len(out.Rows))
	for _, row := range out.Rows {
		m[row.Key] = row.Value
	}
	return m, nil
}

func (r *Runner) cycle(ctx context.Context, pid string, ops []StateOp, push []PushItem, ack map[string]any, release bool) error {
	if ops == nil {
		ops = []StateOp{}
	}
	if push == nil {
		push = []PushItem{}
	}
	body := map[string]any{"query_id": r.QueryID, "partition_id": pid, "consumer_group": r.opt.Group,
		"state_ops": ops, "push_items": push, "ack": ack, "release_lease": release}
	var out struct {
		Success bool   `json:"success"`
		Error   string `json:"error"`
	}
	if err := r.postHook(ctx, "/streams/v1/cycle", body, &out, r.opt.AfterSend); err != nil {
		return fmt.Errorf("cycle: %w", err)
	}
	if !out.Success {
		return fmt.Errorf("cycle: %s", out.Error)
	}
	return nil
}

func (r *Runner) post(ctx context.Context, path string, body, out any) error {
	return r.postHook(ctx, path, body, out, nil)
}

// postHook POSTs with the client's retry policy: up to 3 retries on a
// transport error, 5xx, 408 or 429, backoff from 100 ms doubling.
func (r *Runner) postHook(ctx context.Context, path string, body, out any, afterSend func()) error {
	buf, err := json.Marshal(body)
	if err != nil {
		return err
	}
	backoff := 100 * time.Millisecond
	for attempt := 0; ; attempt++ {
		retry, err := r.postOnce(ctx, path, buf, out, afterSend)
		if err == nil || !retry || attempt == 3 || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff *= 2
	}
}

func (r *Runner) postOnce(ctx context.Context, path string, buf []byte, out any, afterSend func()) (retry bool, err error) {
	req, err := http.NewRequestWithContext(ctx, "POST", r.opt.URL+path, bytes.NewReader(buf))
	if err != nil {
		return false, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.opt.Client.Do(req)
	if err != nil {
		return true, err
	}
	defer resp.Body.Close()
	if afterSend != nil {
		afterSend() // the request is on the server; its answer is unread
	}
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return true, err
	}
	if resp.StatusCode >= 300 {
		var e struct {
			Error string `json:"error"`
		}
		msg := fmt.Sprintf("HTTP %d", resp.StatusCode)
		if json.Unmarshal(data, &e) == nil && e.Error != "" {
			msg = e.Error
		}
		s := resp.StatusCode
		return s >= 500 || s == 408 || s == 429, fmt.Errorf("%s: %s", path, msg)
	}
	if err := json.Unmarshal(data, out); err != nil {
		return false, fmt.Errorf("%s: decode: %w", path, err)
	}
	return false, nil
}
