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

// Header marks a forwarded request; its value is the mesh's mark
// (mark.go). A push that carries the mark is stored where it arrives.
const Header = "X-Queen-Forwarded"

// Defaults of Config.
const (
	DefaultTimeout         = 11 * time.Second
	DefaultCooldown        = 5 * time.Second
	DefaultConns           = 64
	DefaultMaxAnswerBytes  = 32 << 20
	DefaultMaxBodyBytes    = broker.DefaultMaxPushBytes
	DefaultIdleConnTimeout = 90 * time.Second
)

// maxErrorBytes bounds what is read of a refusal, for the log.
const maxErrorBytes = 4 << 10

// Config tunes push forwarding.
type Config struct {
	// Enabled turns forwarding on (QUEEN_PUSH_FORWARD); default true.
	// Off, every node stores every push it receives, and nodes pushing to
	// the same partition wait for each other's transactions.
	Enabled bool
	// Timeout bounds one forwarded request; past it the items are stored
	// here. Default 11 s: longer than the owner's own bound on a push's
	// database work (10 s), so a slow owner answers (503) before the
	// forward is given up, rather than being abandoned while it may still
	// write. A peer that cannot be reached fails at once.
	Timeout time.Duration
	// Cooldown is how long after a failed forward a peer's queues are
	// served here without trying it; default 5 s. Then one request that
	// does not long-poll tries it (coolingDown; a long-poll only after a
	// second cool-down without one). So a hung owner stalls one request
	// per cool-down, not every one until memberlist declares it dead.
	Cooldown time.Duration
	// Conns bounds the connections to one peer (and the idle ones kept);
	// default 64. A push sent again after a stale connection (stale.go)
	// goes on a connection of its own, within another such bound. Peers
	// cap the connections of one address (api.Config.MaxConnsPerAddr),
	// which forwards share with clients on the same host.
	Conns int
	// MaxAnswerBytes bounds a peer's answer; default 32 MiB (a push of
	// 10,000 items answers about 3 MiB).
	MaxAnswerBytes int64
	// Consume sends a queue's pops and acks to its owner too
	// (QUEEN_CONSUME_FORWARD; docs/api.md, "Queue ownership"); default
	// true. Off, each node's consumers are served where they connect, and
	// each node's combiners merge only its own consumers' requests.
	Consume bool
	// PopConns bounds the pops this node has forwarded to one peer at a
	// time (each may wait there for its long-poll); default 256. Past it a
	// pop is served here. Peers cap the connections of one address
	// (api.Config.MaxConnsPerAddr, default 1,024), shared with pushes
	// (Conns) and clients on the same host.
	PopConns int
	// Routes bounds the partitions whose queue this node remembers for
	// routing acks; default 100,000 (about 10 MB). An ack of a partition
	// it does not remember is applied here and teaches it.
	Routes int
	// MaxBodyBytes is the largest body a peer takes (its
	// api.Config.MaxBodyBytes; the node sets its own); default 10 MiB. A
	// forward whose body would pass it is stored here instead.
	MaxBodyBytes int64
	// IdleConnTimeout is how long an unused connection to a peer is kept;
	// default 90 s. Keep it below the peers' QUEEN_HTTP_IDLE_TIMEOUT_MS:
	// a peer that closes a connection as this node reuses it costs a
	// resend (stale.go). The node sets it to three quarters of its own
	// API idle timeout, at most 90 s (every node of a cluster has the
	// same settings).
	IdleConnTimeout time.Duration
	// Mark is the value of Header on forwarded requests, which peers check
	// (Mark, mark.go); the node sets it from the mesh secret. Default
	// "1", which no peer accepts: a forwarder without it suits tests of
	// this package only.
	Mark string
}

// DefaultConfig returns a Config with every default filled in.
func DefaultConfig() Config {
	return Config{Enabled: true, Timeout: DefaultTimeout, Cooldown: DefaultCooldown, Conns: DefaultConns,
		Consume: true, PopConns: DefaultPopConns, Routes: DefaultRoutes,
		MaxAnswerBytes: DefaultMaxAnswerBytes, MaxBodyBytes: DefaultMaxBodyBytes, IdleConnTimeout: DefaultIdleConnTimeout}
}

// Stats are the forwarder's counters since start.
type Stats struct {
	Requests       int64 // forwarded push requests sent
	Items          int64 // items in them
	Failures       int64 // forwarded requests that failed (unreachable, refused, timed out, a bad answer)
	FallbackItems  int64 // items stored here because their owner failed: in a failed forward, or while its owner cools down after one
	LocalItems     int64 // items this node owned and stored, and forwards too large for the owner's body limit
	OwnersKnown    int64 // members in the owner table now, this node included
	ForwardedInbox int64 // forwarded pushes this node received and stored

	Pops             int64 // pops forwarded to the owners of their queues
	PopFailures      int64 // forwarded pops that failed and were served here
	PopsBusy         int64 // pops served here because PopConns of them were in flight to their owner
	Acks             int64 // ack requests forwarded to owners
	AckItems         int64 // items in them
	AckFailures      int64 // forwarded ack requests that failed
	AckFallbackItems int64 // items of failed ack forwards, applied here
	AckLocalItems    int64 // ack items applied here: this node owns their queue, does not know it, or the owner cools down
	AckUnknownItems  int64 // items of failed ack forwards the owner may have applied, not completions: answered ErrOutcomeUnknown
	Routes           int64 // partitions whose queue this node remembers for acks
	ConsumeInbox     int64 // pops and acks peers forwarded to this node
	Resends          int64 // pushes and pops sent again because the peer closed their pooled connection as they went out
}

// Forwarder routes pushes by queue owner.
type Forwarder struct {
	cfg    Config
	owners func() *owner.Table
	client *http.Client
	log    hclog.Logger
	now    func() time.Time // time.Now; tests move it

	downMu sync.Mutex
	down   map[string]*cooling // peers that failed, by name

	popClient *http.Client // forwarded pops: their own bound of connections (PopConns)
	// A request sent again after a stale connection goes on a new one
	// (stale.go): pushes and pops each with their own bound, so resent
	// long-polls cannot hold up resent pushes.
	freshPush, freshPop *http.Client
	popMu               sync.Mutex
	popsOut             map[string]int // forwarded pops in flight, by peer
	routes              routes

	requests, items, failures, fallback, local, inbox                                                         atomic.Int64
	pops, popFailures, popsBusy, acks, ackItems, ackFailures, ackFallback, ackLocal, ackUnknown, consumeInbox atomic.Int64
	resends                                                                                                   atomic.Int64
}

// New returns a forwarder; owners returns the
// current owner table (mesh.Mesh.Owners), nil or empty meaning "store
// everything here".
func New(cfg Config, owners func() *owner.Table, log hclog.Logger) *Forwarder {
	d := DefaultConfig()
	if cfg.Timeout <= 0 {
		cfg.Timeout = d.Timeout
	}
	if cfg.Cooldown <= 0 {
		cfg.Cooldown = d.Cooldown
	}
	if cfg.Conns <= 0 {
		cfg.Conns = d.Conns
	}
	if cfg.MaxAnswerBytes <= 0 {
		cfg.MaxAnswerBytes = d.MaxAnswerBytes
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = d.MaxBodyBytes
	}
	if cfg.PopConns <= 0 {
		cfg.PopConns = d.PopConns
	}
	if cfg.Routes <= 0 {
		cfg.Routes = d.Routes
	}
	if cfg.IdleConnTimeout <= 0 {
		cfg.IdleConnTimeout = d.IdleConnTimeout
	}
	if cfg.Mark == "" {
		cfg.Mark = defaultMark
	}
	if log == nil {
		log = hclog.NewNullLogger()
	}
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: cfg.Timeout, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        cfg.Conns * 8,
		MaxIdleConnsPerHost: cfg.Conns,
		MaxConnsPerHost:     cfg.Conns,
		IdleConnTimeout:     cfg.IdleConnTimeout,
	}
	client := &http.Client{Transport: tr,
		// A peer's redirect is an answer that cannot be used, never a
		// reason to send the body and token elsewhere.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	popTr := tr.Clone()
	popTr.MaxIdleConnsPerHost, popTr.MaxConnsPerHost = cfg.PopConns, cfg.PopConns
	popClient := &http.Client{Transport: popTr, CheckRedirect: client.CheckRedirect}
	fresh := func(t *http.Transport) *http.Client {
		t = t.Clone()
		t.DisableKeepAlives = true
		return &http.Client{Transport: t, CheckRedirect: client.CheckRedirect}
	}
	return &Forwarder{cfg: cfg, owners: owners, client: client, log: log, now: time.Now,
		down: map[string]*cooling{}, popClient: popClient, freshPush: fresh(tr), freshPop: fresh(popTr), popsOut: map[string]int{},
		routes: routes{max: cfg.Routes, m: map[routeKey]string{}}}
}

// Close drops the idle connections to peers.
func (f *Forwarder) Close() {
	f.client.CloseIdleConnections()
	f.popClient.CloseIdleConnections()
	f.freshPush.CloseIdleConnections()
	f.freshPop.CloseIdleConnections()
}

// Pushes reports whether pushes are forwarded (Config.Enabled).
func (f *Forwarder) Pushes() bool { return f.cfg.Enabled }

// ReceivedConsume counts a pop or an ack a peer forwarded here.
func (f *Forwarder) ReceivedConsume() { f.consumeInbox.Add(1) }

// Stats reads the counters.
func (f *Forwarder) Stats() Stats {
	return Stats{Requests: f.requests.Load(), Items: f.items.Load(), Failures: f.failures.Load(),
		FallbackItems: f.fallback.Load(), LocalItems: f.local.Load(), OwnersKnown: int64(f.table().Len()),
		ForwardedInbox: f.inbox.Load(),
		Pops:           f.pops.Load(), PopFailures: f.popFailures.Load(), PopsBusy: f.popsBusy.Load(),
		Acks: f.acks.Load(), AckItems: f.ackItems.Load(), AckFailures: f.ackFailures.Load(),
		AckFallbackItems: f.ackFallback.Load(), AckLocalItems: f.ackLocal.Load(), AckUnknownItems: f.ackUnknown.Load(),
		Routes:       int64(f.routes.len()),
		ConsumeInbox: f.consumeInbox.Load(), Resends: f.resends.Load()}
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
// (possibly empty), with the items of owners cooling down after a failure
// (cooled counts those). Items keep their order within a group, so a
// queue's items reach its owner in the order they were pushed.
func (f *Forwarder) plan(tenant string, items []broker.PushItem) (groups []group, cooled int) {
	t := f.table()
	if t.Len() < 2 {
		return nil, 0 // alone: everything is ours
	}
	groups = []group{{}}
	at := make(map[int]int, t.Len()) // owner index -> group index; -1: cooling down
	for i, it := range items {
		o := t.Owner(tenant, it.Queue)
		if o < 0 || t.IsSelf(o) {
			groups[0].idx = append(groups[0].idx, i)
			continue
		}
		if g, ok := at[o]; ok && g < 0 || !ok && f.coolingDown(t.Node(o).Name) {
			at[o] = -1
			groups[0].idx = append(groups[0].idx, i)
			cooled++
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
	return groups, cooled
}

// cooling is a peer's state after a failed forward.
type cooling struct {
	at      time.Time // when the failure was recorded
	until   time.Time // end of the cool-down
	probing bool      // the cool-down ended and one push went to try the peer
}

// coolingDown reports whether peer's items must be stored here: it failed
// a forward less than Cooldown ago, or since then one request is trying it
// (half-open: a hung peer stalls that push, not every push that comes
// while it hangs). The push that finds the cool-down over becomes that
// probe (false).
func (f *Forwarder) coolingDown(peer string) bool {
	f.downMu.Lock()
	defer f.downMu.Unlock()
	c, ok := f.down[peer]
	if !ok {
		return false
	}
	if c.probing || f.now().Before(c.until) {
		return true
	}
	c.probing = true
	return false
}

// holdsLongPolls reports whether a long-poll to peer must be served here:
// the peer cools down, is being probed, or its cool-down ended less than a
// cool-down ago. A long-poll may wait minutes before it says anything of
// the peer, so it probes only an owner nothing else has tried since (a
// node whose only requests to it are long-polls would otherwise never go
// back to it).
func (f *Forwarder) holdsLongPolls(peer string) bool {
	f.downMu.Lock()
	defer f.downMu.Unlock()
	c, ok := f.down[peer]
	return ok && (c.probing || f.now().Before(c.until.Add(f.cfg.Cooldown)))
}

// failed starts or restarts peer's cool-down. Entries of peers that are
// cold again long since are dropped here, so departed members do not
// accumulate.
func (f *Forwarder) failed(peer string) {
	f.downMu.Lock()
	defer f.downMu.Unlock()
	now := f.now()
	for name, c := range f.down {
		if !c.probing && now.Sub(c.until) > time.Hour {
			delete(f.down, name)
		}
	}
	f.down[peer] = &cooling{at: now, until: now.Add(f.cfg.Cooldown)}
}

// unprobe ends a probe that says nothing of the peer (its request was
// refused for reasons of its own, its client left, or it was not sent):
// the next push may try the peer again. Without a probe, nothing changes.
func (f *Forwarder) unprobe(peer string) {
	f.downMu.Lock()
	defer f.downMu.Unlock()
	if c, ok := f.down[peer]; ok {
		c.probing = false
	}
}

// worked ends peer's cool-down when the forward that worked was sent after
// the failure that started it (an older, slower forward says nothing about
// the peer now).
func (f *Forwarder) worked(peer string, sent time.Time) {
	f.downMu.Lock()
	defer f.downMu.Unlock()
	if c, ok := f.down[peer]; ok && !sent.Before(c.at) {
		delete(f.down, peer)
	}
}

// blamesPeer tells whether a failed forward says the peer cannot take
// pushes now (unreachable, slow, 5xx, a bad answer, 408, 429), as against
// a refusal of this request (another 4xx: a body or token another node
// judges differently), which falls back without a cool-down.
func blamesPeer(err error) bool {
	if isStale(err) {
		return false // a connection the peer closed as idle says nothing of it
	}
	var r *refusal
	if errors.As(err, &r) {
		return r.status >= 500 || r.status == http.StatusRequestTimeout || r.status == http.StatusTooManyRequests || r.status < 400
	}
	return true
}

// Push stores items where their queues' owners are: the peers' items
// are forwarded (concurrently), this node's go to local, and a failed
// forward's items go to local too. Results are in the items' order. An
// error from local is the push's error, as without forwarding; forwards
// that succeeded meanwhile stay stored (docs/api.md, "a push's
// transactions").
func (f *Forwarder) Push(ctx context.Context, tenant, authorization string, items []broker.PushItem, local Store) ([]broker.PushResult, error) {
	groups, cooled := f.plan(tenant, items)
	if len(groups) <= 1 {
		f.local.Add(int64(len(items) - cooled))
		f.fallback.Add(int64(cooled))
		return local(ctx, items)
	}
	// Every id is fixed, and every body encoded, before anything is sent:
	// an error here must not leave forwards in flight.
	remote := groups[1:]
	bodies := make([][]byte, len(remote))
	for gi := range remote {
		g := &remote[gi]
		sub := make([]broker.PushItem, len(g.idx))
		for j, i := range g.idx {
			if items[i].TransactionID == "" {
				// Fixed before the first attempt: a fallback after an
				// answer that was lost is then a duplicate, not a copy.
				id, err := uuid.NewV7()
				if err != nil {
					for _, g := range remote {
						f.unprobe(g.peer) // nothing is sent
					}
					return nil, fmt.Errorf("transaction id: %w", err)
				}
				items[i].TransactionID = id.String()
			}
			sub[j] = items[i]
		}
		bodies[gi] = EncodeBody(sub)
		if int64(len(bodies[gi])) > f.cfg.MaxBodyBytes {
			// The owner would answer 413: store it here at once.
			f.log.Debug("push forward larger than the body limit; storing the items here", "peer", g.peer, "bytes", len(bodies[gi]))
			groups[0].idx = append(groups[0].idx, g.idx...)
			g.idx, bodies[gi] = nil, nil
			f.unprobe(g.peer) // not sent: the next push may try the peer
		}
	}
	type answer struct {
		res []broker.PushResult
		err error
	}
	answers := make([]answer, len(remote))
	var wg sync.WaitGroup
	for gi := range remote {
		if bodies[gi] == nil {
			continue
		}
		g := &remote[gi]
		wg.Add(1)
		go func() {
			defer wg.Done()
			sent := f.now()
			res, err := f.send(ctx, g.addr, authorization, bodies[gi], items, g.idx)
			answers[gi] = answer{res, err}
			// At once, not after the whole push: concurrent pushes learn
			// of a failing peer as soon as it fails.
			switch {
			case err == nil:
				f.worked(g.peer, sent)
			case ctx.Err() != nil: // the client left: says nothing of the peer
				f.unprobe(g.peer)
			case blamesPeer(err):
				f.failed(g.peer)
			default:
				f.unprobe(g.peer)
			}
		}()
	}
	out := make([]broker.PushResult, len(items))
	var lerr error
	if own := groups[0].idx; len(own) > 0 {
		f.local.Add(int64(len(own) - cooled))
		f.fallback.Add(int64(cooled))
		lerr = storeAt(ctx, local, items, own, out)
	}
	wg.Wait()
	var again []int
	for gi, a := range answers {
		g := remote[gi]
		if bodies[gi] == nil {
			continue
		}
		if a.err == nil {
			for j, r := range a.res {
				r.Index = g.idx[j]
				out[g.idx[j]] = r
			}
			continue
		}
		if ctx.Err() != nil || lerr != nil {
			continue // the client left, or the push failed here: nothing more is stored
		}
		f.failures.Add(1)
		cool := time.Duration(0)
		if blamesPeer(a.err) {
			cool = f.cfg.Cooldown
		}
		f.log.Warn("push forward failed; storing the items here", "peer", g.peer, "addr", g.addr, "items", len(g.idx),
			"cooldown", cool, "error", a.err)
		again = append(again, g.idx...)
	}
	if lerr != nil {
		return nil, lerr
	}
	if err := ctx.Err(); err != nil {
		return nil, err
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

// refusal is a peer's answer other than 201.
type refusal struct {
	status int
	msg    string
}

func (r *refusal) Error() string {
	return fmt.Sprintf("%v: status %d: %.200s", errAnswer, r.status, r.msg)
}

// send posts body (the items items[idx...]) to the peer at addr and reads
// its per-item results.
func (f *Forwarder) send(ctx context.Context, addr, authorization string, body []byte, items []broker.PushItem, idx []int) ([]broker.PushResult, error) {
	f.requests.Add(1)
	f.items.Add(int64(len(idx)))
	// Sent again after a stale connection: every item has its
	// transaction id, so a copy the owner did store is a duplicate.
	answer, err := f.post(ctx, addr, "/api/v1/push", authorization, nil, body, http.StatusCreated, true)
	if err != nil {
		return nil, err
	}
	sent := make([]broker.PushItem, len(idx))
	for j, i := range idx {
		sent[j] = items[i]
	}
	return decodeAnswer(answer, sent)
}

// post sends a forwarded JSON body to path on the peer at addr, within
// Timeout, and returns the answer's body when its status is want: another
// status is a refusal (its body read up to maxErrorBytes, for the log), a
// body past MaxAnswerBytes an unusable answer.
func (f *Forwarder) post(ctx context.Context, addr, path, authorization string, extra http.Header, body []byte, want int, resend bool) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
	defer cancel()
	var resp *http.Response
	for try := 0; ; try++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+path, bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(Header, f.cfg.Mark)
		if authorization != "" {
			req.Header.Set("Authorization", authorization)
		}
		for k, v := range extra {
			req.Header[k] = v
		}
		c := f.client
		if try > 0 {
			c = f.freshPush
		}
		resp, err = do(c, req)
		if err != nil && resend && try == 0 && isStale(err) {
			f.resent(addr, path, err)
			continue
		}
		if err != nil {
			return nil, err
		}
		break
	}
	defer resp.Body.Close()
	if resp.StatusCode != want {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBytes))
		return nil, &refusal{status: resp.StatusCode, msg: string(msg)}
	}
	answer, err := io.ReadAll(io.LimitReader(resp.Body, f.cfg.MaxAnswerBytes+1))
	if err != nil {
		return nil, err
	}
	if int64(len(answer)) > f.cfg.MaxAnswerBytes {
		return nil, fmt.Errorf("%w: more than %d bytes", errAnswer, f.cfg.MaxAnswerBytes)
	}
	return answer, nil
}

// resent counts and logs a request sent again after a stale connection.
func (f *Forwarder) resent(addr, path string, err error) {
	f.resends.Add(1)
	f.log.Debug("peer closed a pooled connection as the request went out; sending it again", "addr", addr, "path", path, "error", err)
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
	prs, err := parsePeerResults(body, len(items))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errAnswer, err)
	}
	if len(prs) != len(items) {
		return nil, fmt.Errorf("%w: %d results for %d items", errAnswer, len(prs), len(items))
	}
	out := make([]broker.PushResult, len(items))
	seen := make([]bool, len(items))
	for _, p := range prs {
		i, err := answerIndex(p.Index, seen)
		if err != nil {
			return nil, err
		}
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

// answerIndex checks an answer's item index against the items sent (seen
// marks those answered already) and marks it.
func answerIndex(index *int, seen []bool) (int, error) {
	if index == nil || *index < 0 || *index >= len(seen) || seen[*index] {
		return 0, fmt.Errorf("%w: bad or repeated index", errAnswer)
	}
	seen[*index] = true
	return *index, nil
}

// EncodeBody writes the public push body for items, as a forward sends it. Names and ids are
// JSON strings; payloads are compact JSON already (the API layer decoded
// them) and are copied as they are.
func EncodeBody(items []broker.PushItem) []byte {
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
		if len(it.Payload) == 0 { // as the broker stores it
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
// escaping, with the short escapes where JSON has one (a name of tabs
// stays as long as the client sent it).
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c == '\b':
			b = append(b, '\\', 'b')
		case c == '\f':
			b = append(b, '\\', 'f')
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '\r':
			b = append(b, '\\', 'r')
		case c == '\t':
			b = append(b, '\\', 't')
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}
