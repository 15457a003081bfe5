// Package forward sends each item of a push to the node that owns its queue
// (package owner) and stores the rest on this node, so that a queue has one
// writer in the cluster (docs/api.md, "Push ownership"). A forwarded push
// goes to the owner's public push endpoint with the client's Authorization
// header and the Header mark; the owner stores it and never forwards it
// again.
//
// Nothing depends on the forward succeeding: when a peer cannot be reached,
// refuses or answers badly, its items are stored here instead. Every
// forwarded item carries a transaction id (one is generated for an item
// without), so an item the owner stored before its answer was lost is
// reported a duplicate by the local store rather than written twice.
package forward

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"

	"queen-node/broker"
	"queen-node/owner"
	"queen-node/protocol"
)

// Header marks a forwarded push; its value is the forwarding node's name.
// A push that carries it is stored where it arrives.
const Header = "X-Queen-Forwarded"

// Defaults of Config.
const (
	DefaultTimeout        = 5 * time.Second
	DefaultIdleConns      = 64
	DefaultMaxAnswerBytes = 32 << 20
)

// Config tunes push forwarding.
type Config struct {
	// Enabled turns forwarding on (QUEEN_PUSH_FORWARD); default true.
	// Off, every node stores every push it receives, and nodes pushing to
	// the same partition wait for each other's transactions.
	Enabled bool
	// Timeout bounds one forwarded request; past it the items are stored
	// here. Default 5 s: a healthy owner answers in milliseconds, and a
	// frozen one is declared dead by memberlist within seconds.
	Timeout time.Duration
	// IdleConns is the keep-alive connections kept per peer; default 64.
	IdleConns int
	// MaxAnswerBytes bounds a peer's answer; default 32 MiB (a push of
	// 10,000 items answers about 3 MiB).
	MaxAnswerBytes int64
}

// DefaultConfig returns a Config with every default filled in.
func DefaultConfig() Config {
	return Config{Enabled: true, Timeout: DefaultTimeout, IdleConns: DefaultIdleConns, MaxAnswerBytes: DefaultMaxAnswerBytes}
}

// Stats are the forwarder's counters since start.
type Stats struct {
	Requests       int64 // forwarded push requests sent
	Items          int64 // items in them
	Failures       int64 // forwarded requests that failed (unreachable, refused, timed out, a bad answer)
	FallbackItems  int64 // items of failed forwards stored on this node instead
	LocalItems     int64 // items this node owned and stored
	OwnersKnown    int64 // members in the owner table now, this node included
	ForwardedInbox int64 // forwarded pushes this node received and stored
}

// Forwarder routes pushes by queue owner.
type Forwarder struct {
	cfg    Config
	self   string
	owners func() *owner.Table
	client *http.Client
	log    hclog.Logger

	requests, items, failures, fallback, local, inbox atomic.Int64
}

// New returns a forwarder for the node named self; owners returns the
// current owner table (mesh.Mesh.Owners), nil or empty meaning "store
// everything here".
func New(cfg Config, self string, owners func() *owner.Table, log hclog.Logger) *Forwarder {
	d := DefaultConfig()
	if cfg.Timeout <= 0 {
		cfg.Timeout = d.Timeout
	}
	if cfg.IdleConns <= 0 {
		cfg.IdleConns = d.IdleConns
	}
	if cfg.MaxAnswerBytes <= 0 {
		cfg.MaxAnswerBytes = d.MaxAnswerBytes
	}
	if log == nil {
		log = hclog.NewNullLogger()
	}
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: cfg.Timeout, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        cfg.IdleConns * 8,
		MaxIdleConnsPerHost: cfg.IdleConns,
		IdleConnTimeout:     90 * time.Second,
	}
	return &Forwarder{cfg: cfg, self: self, owners: owners, client: &http.Client{Transport: tr}, log: log}
}

// Close drops the idle connections to peers.
func (f *Forwarder) Close() { f.client.CloseIdleConnections() }

// Stats reads the counters.
func (f *Forwarder) Stats() Stats {
	return Stats{Requests: f.requests.Load(), Items: f.items.Load(), Failures: f.failures.Load(),
		FallbackItems: f.fallback.Load(), LocalItems: f.local.Load(), OwnersKnown: int64(f.table().Len()),
		ForwardedInbox: f.inbox.Load()}
}

func (f *Forwarder) table() *owner.Table {
	if f.owners == nil {
		return nil
	}
	return f.owners()
}

// Store is the local push: it stores items on this node.
type Store func(ctx context.Context, items []broker.PushItem) ([]broker.PushResult, error)

// group is the items of one push that one owner stores.
type group struct {
	peer, addr string // "" for this node
	idx        []int  // indices into the push's items
}

// plan splits a push's items by owner; the first group is this node's
// (possibly empty). Items keep their order within a group, so a queue's
// items reach its owner in the order they were pushed.
func (f *Forwarder) plan(tenant string, items []broker.PushItem) []group {
	t := f.table()
	if t.Len() < 2 {
		return nil // alone: everything is ours
	}
	groups := []group{{}}
	at := make(map[int]int, t.Len()) // owner index -> group index
	for i, it := range items {
		o := t.Owner(tenant, it.Queue)
		if o < 0 || t.IsSelf(o) {
			groups[0].idx = append(groups[0].idx, i)
			continue
		}
		g, ok := at[o]
		if !ok {
			n := t.Node(o)
			g = len(groups)
			at[o] = g
			groups = append(groups, group{peer: n.Name, addr: n.Addr})
		}
		groups[g].idx = append(groups[g].idx, i)
	}
	return groups
}

// Push stores items where their queues' owners are: the peers' items
// are forwarded (concurrently), this node's go to local, and a failed
// forward's items go to local too. Results are in the items' order. An
// error from local is the push's error, as without forwarding; forwards
// that succeeded meanwhile stay stored (docs/api.md, "a push's
// transactions").
func (f *Forwarder) Push(ctx context.Context, tenant, authorization string, items []broker.PushItem, local Store) ([]broker.PushResult, error) {
	groups := f.plan(tenant, items)
	if len(groups) <= 1 {
		f.local.Add(int64(len(items)))
		return local(ctx, items)
	}
	type answer struct {
		res []broker.PushResult
		err error
	}
	remote := groups[1:]
	answers := make([]answer, len(remote))
	var wg sync.WaitGroup
	for gi := range remote {
		g := &remote[gi]
		sub := make([]broker.PushItem, len(g.idx))
		for j, i := range g.idx {
			it := items[i]
			if it.TransactionID == "" {
				// Fixed before the first attempt: a fallback after an
				// answer that was lost is then a duplicate, not a copy.
				id, err := uuid.NewV7()
				if err != nil {
					return nil, fmt.Errorf("transaction id: %w", err)
				}
				it.TransactionID = id.String()
				items[i].TransactionID = it.TransactionID
			}
			sub[j] = it
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := f.send(ctx, g.addr, authorization, sub)
			answers[gi] = answer{res, err}
		}()
	}
	out := make([]broker.PushResult, len(items))
	var lerr error
	if own := groups[0].idx; len(own) > 0 {
		f.local.Add(int64(len(own)))
		lerr = storeAt(ctx, local, items, own, out)
	}
	wg.Wait()
	if lerr != nil {
		return nil, lerr
	}
	var again []int
	for gi, a := range answers {
		g := remote[gi]
		if a.err == nil {
			for j, r := range a.res {
				r.Index = g.idx[j]
				out[g.idx[j]] = r
			}
			continue
		}
		f.failures.Add(1)
		if ctx.Err() != nil {
			return nil, ctx.Err() // the client left: store nothing more
		}
		f.log.Warn("push forward failed; storing the items here", "peer", g.peer, "addr", g.addr, "items", len(g.idx), "error", a.err)
		again = append(again, g.idx...)
	}
	if len(again) > 0 {
		f.fallback.Add(int64(len(again)))
		if err := storeAt(ctx, local, items, again, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// storeAt stores items[idx...] with local and puts each result at its
// item's index in out.
func storeAt(ctx context.Context, local Store, items []broker.PushItem, idx []int, out []broker.PushResult) error {
	sub := make([]broker.PushItem, len(idx))
	for j, i := range idx {
		sub[j] = items[i]
	}
	res, err := local(ctx, sub)
	if err != nil {
		return err
	}
	if len(res) != len(idx) {
		return fmt.Errorf("push: %d results for %d items", len(res), len(idx))
	}
	for j, r := range res {
		r.Index = idx[j]
		out[idx[j]] = r
	}
	return nil
}

// Received counts a forwarded push this node stored (the receiving side's
// figure of Stats).
func (f *Forwarder) Received() { f.inbox.Add(1) }

// errAnswer is a peer's answer that cannot be used.
var errAnswer = errors.New("unusable answer")

// send posts items to the peer at addr and reads its per-item results.
func (f *Forwarder) send(ctx context.Context, addr, authorization string, items []broker.PushItem) ([]broker.PushResult, error) {
	f.requests.Add(1)
	f.items.Add(int64(len(items)))
	ctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/api/v1/push", bytes.NewReader(encodeBody(items)))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(Header, f.self)
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, f.cfg.MaxAnswerBytes+1))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusCreated {
		return nil, fmt.Errorf("%w: status %d: %.200s", errAnswer, resp.StatusCode, body)
	}
	if int64(len(body)) > f.cfg.MaxAnswerBytes {
		return nil, fmt.Errorf("%w: more than %d bytes", errAnswer, f.cfg.MaxAnswerBytes)
	}
	return decodeAnswer(body, items)
}

// peerResult is what the push endpoint answers per item (docs/api.md).
type peerResult struct {
	Index         *int                `json:"index"`
	Status        protocol.PushStatus `json:"status"`
	TransactionID string              `json:"transactionId"`
	MessageID     *string             `json:"message_id"`
	PartitionID   *string             `json:"partitionId"`
	TraceID       *string             `json:"trace_id"`
	QueueName     string              `json:"queueName"`
	Error         string              `json:"error"`
}

// decodeAnswer checks that the answer names every sent item once, with a
// known status and the item's own transaction id, and returns the results
// in the items' order.
func decodeAnswer(body []byte, items []broker.PushItem) ([]broker.PushResult, error) {
	var prs []peerResult
	if err := json.Unmarshal(body, &prs); err != nil {
		return nil, fmt.Errorf("%w: %v", errAnswer, err)
	}
	if len(prs) != len(items) {
		return nil, fmt.Errorf("%w: %d results for %d items", errAnswer, len(prs), len(items))
	}
	out := make([]broker.PushResult, len(items))
	seen := make([]bool, len(items))
	for _, p := range prs {
		if p.Index == nil || *p.Index < 0 || *p.Index >= len(items) || seen[*p.Index] {
			return nil, fmt.Errorf("%w: bad or repeated index", errAnswer)
		}
		i := *p.Index
		seen[i] = true
		switch p.Status {
		case protocol.PushQueued, protocol.PushDuplicate, protocol.PushFailed, broker.PushBuffered:
		default:
			return nil, fmt.Errorf("%w: status %q", errAnswer, p.Status)
		}
		if p.TransactionID != items[i].TransactionID {
			return nil, fmt.Errorf("%w: item %d: transaction id %q, sent %q", errAnswer, i, p.TransactionID, items[i].TransactionID)
		}
		r := broker.PushResult{Index: i, Status: p.Status, TransactionID: p.TransactionID,
			TraceID: p.TraceID, Queue: p.QueueName, Error: p.Error}
		if p.MessageID != nil {
			r.MessageID = *p.MessageID
		}
		if p.PartitionID != nil {
			r.PartitionID = *p.PartitionID
		}
		out[i] = r
	}
	return out, nil
}

// encodeBody writes the public push body for items. Names and ids are
// JSON strings; payloads are compact JSON already (the API layer decoded
// them) and are copied as they are.
func encodeBody(items []broker.PushItem) []byte {
	n := 16
	for _, it := range items {
		n += 96 + len(it.Queue) + len(it.Partition) + len(it.TransactionID) + len(it.Payload)
	}
	b := make([]byte, 0, n)
	b = append(b, `{"items":[`...)
	for i, it := range items {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"queue":`...)
		b = appendString(b, it.Queue)
		if it.Partition != "" {
			b = append(b, `,"partition":`...)
			b = appendString(b, it.Partition)
		}
		b = append(b, `,"transactionId":`...)
		b = appendString(b, it.TransactionID)
		if it.TraceID != nil {
			b = append(b, `,"traceId":`...)
			b = appendString(b, *it.TraceID)
		}
		b = append(b, `,"payload":`...)
		if it.Payload == nil {
			b = append(b, "{}"...)
		} else {
			b = append(b, it.Payload...)
		}
		b = append(b, '}')
	}
	return append(b, "]}"...)
}

// appendString appends s as a JSON string. s is valid UTF-8 (the API layer
// checked it); only quotes, backslashes and control characters need
// escaping.
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}
