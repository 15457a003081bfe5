package forward

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"queen-node/broker"
	"queen-node/protocol"
)

// A queue's pops and acks go to its owner too (docs/api.md, "Queue
// ownership"): every node runs its own pop and ack combiners, so with
// consumers spread over three nodes each flush merged a third of the
// requests, and PostgreSQL paid a flush's fixed cost three times as
// often. At the owner, one combiner merges every consumer of the queue,
// as on a node alone.
//
// As for pushes, nothing depends on a forward: a pop or an ack the owner
// did not answer is served here, and PostgreSQL decides claims, leases and
// cursors wherever a request runs.

// Defaults of the consumer side of Config.
const (
	DefaultPopConns = 256
	DefaultRoutes   = 100_000
)

// PopAnswer is an owner's answer to a forwarded pop: the caller reads it
// with ReadAll, which also releases its connection and its slot.
type PopAnswer struct {
	Status      int
	ContentType string
	body        io.Reader
	close       func()
	settle      func(err error) // records the forward's outcome once the body is read
}

// ReadAll reads the answer's body, at most max bytes (a longer one is an
// error), and releases the answer. An error (the owner broke off, or
// answered more than any pop gives) is the owner's failure: it cools
// down, and the caller serves the pop here.
func (a *PopAnswer) ReadAll(max int64) ([]byte, error) {
	defer a.close()
	body, err := io.ReadAll(io.LimitReader(a.body, max+1))
	if err == nil && int64(len(body)) > max {
		err = fmt.Errorf("%w: more than %d bytes", errAnswer, max)
	}
	a.settle(err)
	return body, err
}

// Close releases the answer without reading it.
func (a *PopAnswer) Close() { a.close() }

// popSlot takes one of peer's PopConns slots; false when they are all
// taken (the pop is then served here rather than queued behind them).
func (f *Forwarder) popSlot(peer string) bool {
	f.popMu.Lock()
	defer f.popMu.Unlock()
	if f.popsOut[peer] >= f.cfg.PopConns {
		return false
	}
	f.popsOut[peer]++
	return true
}

func (f *Forwarder) popUnslot(peer string) {
	f.popMu.Lock()
	defer f.popMu.Unlock()
	if f.popsOut[peer]--; f.popsOut[peer] <= 0 {
		delete(f.popsOut, peer)
	}
}

// consumePeer returns the owner of (tenant, queue) when pops and acks of
// it go there: consume forwarding is on, the owner is a live peer and is
// not cooling down. A true answer may have made the caller the probe of a
// cool-down (coolingDown), which it must settle; with mayProbe false (a
// long-poll) a cool-down entry keeps the request here instead, unless
// nothing else has probed the owner for a cool-down's length after it
// ended (holdsLongPolls).
func (f *Forwarder) consumePeer(tenant, queue string, mayProbe bool) (peer, addr string, ok bool) {
	if !f.cfg.Consume {
		return "", "", false
	}
	t := f.table()
	if t.Len() < 2 {
		return "", "", false
	}
	o := t.Owner(tenant, queue)
	if o < 0 || t.IsSelf(o) {
		return "", "", false
	}
	n := t.Node(o)
	if !mayProbe && f.holdsLongPolls(n.Name) || f.coolingDown(n.Name) {
		return "", "", false
	}
	return n.Name, n.Addr, true
}

// settle records what a forward said of its peer (Push's rules): a
// success sent after a failure ends the cool-down, a failure that blames
// the peer starts one, anything else ends a probe.
func (f *Forwarder) settle(ctx context.Context, peer string, sent time.Time, err error) {
	switch {
	case err == nil:
		f.worked(peer, sent)
	case ctx.Err() != nil:
		f.unprobe(peer)
	case blamesPeer(err):
		f.failed(peer)
	default:
		f.unprobe(peer)
	}
}

// LeaseHeader carries, on a forwarded pop, the lease id the forwarding
// node chose for it: the owner claims under that id, so the forwarding
// node can release what its client will not take even when the owner's
// answer never reached it (docs/api.md, "Queue ownership"). A lease id
// is a UUID; the owner honours the header only beside Header's mark.
const LeaseHeader = "X-Queen-Lease"

// Pop sends a pop of (tenant, queue) to the queue's owner: uri is the
// request's path and query as the client sent them, lease the lease id
// the owner is to claim under (LeaseHeader; "" lets the owner choose),
// wait its long-poll. A nil answer means "serve it here": the queue is
// this node's, the owner is cooling down or has PopConns pops of this
// node in flight, or it failed (unreachable, 5xx, 408, 429, slower than
// wait plus Timeout). Any other answer (messages, 204, a 4xx refusal) is
// the client's. The bool is false when the owner certainly saw nothing
// (not tried, or no connection made); when true, the owner may have
// claimed under lease even if the answer is nil.
//
// Once the answer has begun, the client leaving no longer cancels it: the
// caller reads the answer, and releases the lease if its client cannot
// take it (any node can).
//
// When the owner closed the pooled connection as the pop went out
// (stale.go), the pop is sent once more, on another connection, under
// the lease renew returns: renew is handed the first lease, which the
// owner may have claimed under, to release. A nil renew sends it once.
func (f *Forwarder) Pop(ctx context.Context, tenant, queue, uri, authorization, lease string, wait time.Duration, renew func(old string) string) (*PopAnswer, bool) {
	peer, addr, ok := f.consumePeer(tenant, queue, wait <= 0)
	if !ok {
		return nil, false
	}
	if !f.popSlot(peer) {
		f.unprobe(peer)
		f.popsBusy.Add(1)
		return nil, false
	}
	f.pops.Add(1)
	sent := f.now()
	// The client leaving cancels the request while the owner waits, but
	// not the reading of an answer that has begun: the caller needs its
	// lease id to hand back what its client will not take.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), wait+f.cfg.Timeout)
	stop := context.AfterFunc(ctx, cancel)
	done := func() { stop(); cancel(); f.popUnslot(peer) }
	resp, err := f.get(rctx, f.popClient, addr, uri, authorization, lease)
	if renew != nil && isStale(err) && ctx.Err() == nil {
		// The owner most likely never read it (a failure within
		// staleWindow of sending): sent again under a new lease, the
		// first handed to renew to release, unless the client left
		// meanwhile (the caller releases the lease it holds then).
		if next := renew(lease); ctx.Err() == nil {
			f.resent(addr, uri, err)
			resp, err = f.get(rctx, f.freshPop, addr, uri, authorization, next)
		}
	}
	// A client that leaves between the answer's arrival and this stop
	// cancels its reading too: the caller then releases the lease it
	// chose, as for a client that leaves while the owner waits.
	stop()
	if err == nil && (resp.StatusCode < 200 || resp.StatusCode >= 300 && resp.StatusCode < 400 || resp.StatusCode >= 500 ||
		resp.StatusCode == http.StatusRequestTimeout || resp.StatusCode == http.StatusTooManyRequests) {
		// A redirect is an answer that cannot be used (it is not
		// followed), as are the statuses that blame the peer.
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBytes))
		resp.Body.Close()
		err = &refusal{status: resp.StatusCode, msg: string(msg)}
	}
	failed := func(err error) {
		f.settle(ctx, peer, sent, err)
		if ctx.Err() == nil {
			f.popFailures.Add(1)
			f.log.Warn("pop forward failed; serving it here", "peer", peer, "addr", addr, "error", err)
		}
	}
	if err != nil {
		failed(err)
		done()
		return nil, !neverConnected(err) // else the owner may have read it
	}
	var once, settled sync.Once
	status := resp.StatusCode
	return &PopAnswer{Status: status, ContentType: resp.Header.Get("Content-Type"), body: resp.Body,
		close: func() {
			once.Do(func() {
				resp.Body.Close()
				settled.Do(func() { f.unprobe(peer) }) // closed unread: says nothing of the peer
				done()
			})
		},
		settle: func(err error) {
			settled.Do(func() {
				switch {
				case err != nil:
					failed(err)
				case status >= 400:
					f.unprobe(peer) // a refusal of this request, passed to the client
				default:
					f.settle(ctx, peer, sent, nil)
				}
			})
		}}, true
}

// get sends a forwarded GET to the peer at addr, through c.
func (f *Forwarder) get(ctx context.Context, c *http.Client, addr, uri, authorization, lease string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+uri, nil)
	if err != nil {
		return nil, err
	}
	// Not replayable: the transport resends a bodiless GET whose reused
	// connection closed before an answer, and the owner, which may have
	// read the first copy, would then hold two claims under one lease,
	// the first one's release freeing the second's. An empty body without
	// GetBody is sent as none and is never resent.
	req.Body = io.NopCloser(strings.NewReader(""))
	req.Header.Set(Header, f.cfg.Mark)
	if lease != "" {
		req.Header.Set(LeaseHeader, lease)
	}
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	return do(c, req)
}

// routes remembers the queue of each partition this node has acked or
// forwarded a pop answer of, per tenant, so later acks of it can go to the
// queue's owner: an ack names its partition, not its queue, and a
// partition never changes queue.
// Bounded: past max entries an arbitrary one is forgotten (its next ack
// is served here and teaches it again).
type routes struct {
	mu  sync.Mutex
	max int
	m   map[routeKey]string
}

type routeKey struct{ tenant, partitionID string }

// keyOf spells a partition id as the broker does (a UUID in its canonical
// form), so every spelling of one partition takes the same path.
func keyOf(tenant, pid string) routeKey {
	if canonicalUUID(pid) {
		return routeKey{tenant, pid} // the usual spelling: no parse, no copy
	}
	if u, err := uuid.Parse(pid); err == nil {
		pid = u.String()
	}
	return routeKey{tenant, pid}
}

// canonicalUUID reports whether s is a UUID as uuid.UUID.String spells it
// (lower-case hex, dashes at 8, 13, 18 and 23).
func canonicalUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
				return false
			}
		}
	}
	return true
}

func (r *routes) get(tenant, pid string) (string, bool) { return r.getKey(keyOf(tenant, pid)) }

func (r *routes) getKey(k routeKey) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	q, ok := r.m[k]
	return q, ok
}

func (r *routes) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.m)
}

// learn records the queues of the items that res reports (res[j] answers
// items[res[j].Index]).
func (r *routes) learn(tenant string, items []broker.AckItem, res []broker.AckResult) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, a := range res {
		if a.QueueName == "" || a.Index < 0 || a.Index >= len(items) {
			continue
		}
		r.addLocked(keyOf(tenant, items[a.Index].PartitionID), a.QueueName)
	}
}

// LearnRoute records that partitionID belongs to queue (a forwarded pop's
// answer names them), so acks of it go to the queue's owner from the first.
func (f *Forwarder) LearnRoute(tenant, partitionID, queue string) {
	f.routes.add(tenant, partitionID, queue)
}

func (r *routes) add(tenant, pid, queue string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.addLocked(keyOf(tenant, pid), queue)
}

// addLocked records k unless known, forgetting an arbitrary entry when
// full.
func (r *routes) addLocked(k routeKey, queue string) {
	if _, ok := r.m[k]; ok {
		return
	}
	if len(r.m) >= r.max {
		for old := range r.m {
			delete(r.m, old)
			break
		}
	}
	r.m[k] = queue
}

// AckStore applies acks on this node.
type AckStore func(ctx context.Context, items []broker.AckItem) ([]broker.AckResult, error)

// Ack applies acks where their queues' owners are: the items of
// partitions whose queue this node knows (routes) and whose owner is a
// peer are forwarded to it, one request per owner, the others applied
// here. A failed forward's items are applied here when the owner
// certainly applied nothing (notApplied); otherwise only its completions
// are (applied twice they change nothing) and the others are answered
// ErrOutcomeUnknown. All items of a partition take the same path, in
// their order, so the per-partition rules of docs/api.md ("Acks") hold.
// Results are in the items' order; once a part went to an owner, a
// failure here is answered per item.
func (f *Forwarder) Ack(ctx context.Context, tenant, authorization string, items []broker.AckItem, local AckStore) ([]broker.AckResult, error) {
	type part struct {
		peer, addr string
		idx        []int
	}
	var own []int
	var parts []part
	at := map[string]int{} // peer -> index in parts
	skip := map[string]bool{}
	t := f.table()
	alone := !f.cfg.Consume || t.Len() < 2
	// A partition's first item decides its path for the whole request:
	// the routes may learn or forget it meanwhile (concurrent requests).
	decided := map[routeKey]int{} // -1: here; else index in parts
	for i, it := range items {
		if alone {
			own = append(own, i)
			continue
		}
		k := keyOf(tenant, it.PartitionID)
		if d, ok := decided[k]; ok {
			if d < 0 {
				own = append(own, i)
			} else {
				parts[d].idx = append(parts[d].idx, i)
			}
			continue
		}
		decided[k] = -1
		q, ok := f.routes.getKey(k)
		if !ok {
			own = append(own, i)
			continue
		}
		o := t.Owner(tenant, q)
		if o < 0 || t.IsSelf(o) {
			own = append(own, i)
			continue
		}
		n := t.Node(o)
		if skip[n.Name] {
			own = append(own, i)
			continue
		}
		p, ok := at[n.Name]
		if !ok {
			if f.coolingDown(n.Name) {
				skip[n.Name] = true
				own = append(own, i)
				continue
			}
			p = len(parts)
			at[n.Name] = p
			parts = append(parts, part{peer: n.Name, addr: n.Addr})
		}
		decided[k] = p
		parts[p].idx = append(parts[p].idx, i)
	}
	out := make([]broker.AckResult, len(items))
	applyHere := func(idx []int) error {
		if len(idx) == 0 {
			return nil
		}
		sub := make([]broker.AckItem, len(idx))
		for j, i := range idx {
			sub[j] = items[i]
		}
		res, err := local(ctx, sub)
		if err != nil {
			return err
		}
		if len(res) != len(idx) {
			return fmt.Errorf("ack: %d results for %d items", len(res), len(idx))
		}
		f.routes.learn(tenant, sub, res)
		for j, r := range res {
			r.Index = idx[j]
			out[idx[j]] = r
		}
		return nil
	}
	if len(parts) == 0 {
		f.ackLocal.Add(int64(len(items)))
		if err := applyHere(own); err != nil {
			return nil, err
		}
		return out, nil
	}
	type answer struct {
		res []broker.AckResult
		err error
	}
	bodies := make([][]byte, len(parts))
	for pi := range parts {
		p := &parts[pi]
		sub := make([]broker.AckItem, len(p.idx))
		for j, i := range p.idx {
			sub[j] = items[i]
		}
		bodies[pi] = EncodeAcks(sub)
		if int64(len(bodies[pi])) > f.cfg.MaxBodyBytes {
			// Naming each item's group can make a part larger than the
			// client's body; the owner would answer 413.
			own = append(own, p.idx...)
			p.idx, bodies[pi] = nil, nil
			f.unprobe(p.peer)
		}
	}
	sent := 0
	for _, b := range bodies {
		if b != nil {
			sent++
		}
	}
	if sent == 0 { // every part was too large to send: as if alone
		f.ackLocal.Add(int64(len(own)))
		if err := applyHere(own); err != nil {
			return nil, err
		}
		return out, nil
	}
	answers := make([]answer, len(parts))
	var wg sync.WaitGroup
	for pi := range parts {
		p := &parts[pi]
		if bodies[pi] == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sent := f.now()
			res, err := f.sendAcks(ctx, p.addr, authorization, bodies[pi], items, p.idx)
			answers[pi] = answer{res, err}
			f.settle(ctx, p.peer, sent, err)
		}()
	}
	f.ackLocal.Add(int64(len(own)))
	// Parts went to owners, which may have applied them: from here a
	// failure here is answered per item, never as the request's error,
	// which a client would answer by sending the owners' parts again.
	unknownHere := func(idx []int, err error) {
		if ctx.Err() != nil {
			return // the client left: Ack returns its error
		}
		f.log.Warn("acks could not be applied here after others went to their owners; answered per item", "items", len(idx), "error", err)
		f.ackUnknown.Add(int64(len(idx)))
		for _, i := range idx {
			out[i] = broker.AckResult{Index: i, TransactionID: items[i].TransactionID, Error: ErrOutcomeUnknownHere}
		}
	}
	if lerr := applyHere(own); lerr != nil {
		unknownHere(own, lerr)
	}
	wg.Wait()
	var again []int
	for pi, a := range answers {
		p := parts[pi]
		if bodies[pi] == nil {
			continue
		}
		if a.err == nil {
			for j, r := range a.res {
				r.Index = p.idx[j]
				out[p.idx[j]] = r
			}
			continue
		}
		if ctx.Err() != nil {
			continue
		}
		f.ackFailures.Add(1)
		if notApplied(a.err) {
			f.log.Warn("ack forward failed; applying the acks here", "peer", p.peer, "addr", p.addr, "items", len(p.idx), "error", a.err)
			again = append(again, p.idx...)
			continue
		}
		// The owner may have applied them. A completed ack applied twice
		// is answered success and changes nothing; a failed one may take
		// a second retry decision on a redelivery, so it is not replayed.
		unknown := 0
		for _, i := range p.idx {
			if completes(items[i].Status) {
				again = append(again, i)
				continue
			}
			out[i] = broker.AckResult{Index: i, TransactionID: items[i].TransactionID, Error: ErrOutcomeUnknown}
			unknown++
		}
		f.ackUnknown.Add(int64(unknown))
		f.log.Warn("ack forward failed after it may have been applied; completed acks applied here, the others answered with an error",
			"peer", p.peer, "addr", p.addr, "items", len(p.idx), "not_replayed", unknown, "error", a.err)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f.ackFallback.Add(int64(len(again)))
	if err := applyHere(again); err != nil {
		unknownHere(again, err)
	}
	return out, nil
}

// ErrOutcomeUnknown answers an ack item that was sent to its queue's owner
// whose answer never came, and that is not replayed here (docs/api.md,
// "Queue ownership").
const ErrOutcomeUnknown = "Outcome unknown: the queue's owner did not answer; the ack may have been applied"

// ErrOutcomeUnknownHere answers an ack item this node failed to apply in a
// request whose other items went to their owners: the request cannot fail
// as a whole once those may have been applied.
const ErrOutcomeUnknownHere = "Outcome unknown: this node could not apply the ack; it may have been applied"

// completes reports whether an ack status completes its message ("" is
// completed): such an ack applied twice is answered success and changes
// nothing.
func completes(st protocol.AckStatus) bool {
	return st == "" || strings.EqualFold(string(st), string(protocol.AckCompleted)) ||
		strings.EqualFold(string(st), string(protocol.AckSuccess))
}

// notApplied reports whether a failed forward certainly did nothing at the
// owner: the connection was never made, or the owner refused the request
// (4xx: before any ack is applied).
func notApplied(err error) bool {
	var r *refusal
	if errors.As(err, &r) {
		return r.status >= 400 && r.status < 500
	}
	return neverConnected(err)
}

// neverConnected reports whether a forward failed before any connection to
// the owner was made: the owner saw nothing of it.
func neverConnected(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// sendAcks posts body (items[idx...], EncodeAcks) to the peer's batch ack
// endpoint and reads its per-item results.
func (f *Forwarder) sendAcks(ctx context.Context, addr, authorization string, body []byte, items []broker.AckItem, idx []int) ([]broker.AckResult, error) {
	f.acks.Add(1)
	f.ackItems.Add(int64(len(idx)))
	sent := make([]broker.AckItem, len(idx))
	for j, i := range idx {
		sent[j] = items[i]
	}
	// Not sent again after a stale connection: the owner may have
	// applied it, and a failed ack applied twice counts twice.
	answer, err := f.post(ctx, addr, "/api/v1/ack/batch", authorization, nextLeaseHeader(ctx, sent), body, http.StatusOK, false)
	if err != nil {
		return nil, err
	}
	return decodeAcks(answer, sent)
}

// peerAck is what the ack endpoints answer per item (docs/api.md, "Acks").
type peerAck struct {
	Index         *int    `json:"index"`
	TransactionID string  `json:"transactionId"`
	Success       bool    `json:"success"`
	Error         *string `json:"error"`
	QueueName     string  `json:"queueName"`
	PartitionName string  `json:"partitionName"`
	LeaseReleased bool    `json:"leaseReleased"`
	DLQ           bool    `json:"dlq"`
}

// decodeAcks checks that the answer names every sent item once, with its
// own transaction id, and returns the results in the items' order.
func decodeAcks(body []byte, items []broker.AckItem) ([]broker.AckResult, error) {
	pas, err := parsePeerAcks(body, len(items))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errAnswer, err)
	}
	if len(pas) != len(items) {
		return nil, fmt.Errorf("%w: %d results for %d acks", errAnswer, len(pas), len(items))
	}
	out := make([]broker.AckResult, len(items))
	seen := make([]bool, len(items))
	for _, p := range pas {
		i, err := answerIndex(p.Index, seen)
		if err != nil {
			return nil, err
		}
		if p.TransactionID != items[i].TransactionID {
			return nil, fmt.Errorf("%w: ack %d: transaction id %q, sent %q", errAnswer, i, p.TransactionID, items[i].TransactionID)
		}
		r := broker.AckResult{Index: i, TransactionID: p.TransactionID, Success: p.Success, QueueName: p.QueueName,
			PartitionName: p.PartitionName, LeaseReleased: p.LeaseReleased, DLQ: p.DLQ}
		if p.Error != nil {
			r.Error = *p.Error
		}
		out[i] = r
	}
	return out, nil
}

// EncodeAcks writes the public batch ack body for items, as a forward
// sends it: every item names its own consumer group, and a status, lease
// or error only when it has one (absent means the same to the endpoint).
func EncodeAcks(items []broker.AckItem) []byte {
	n := 24
	for _, it := range items {
		n += 96 + len(it.TransactionID) + len(it.PartitionID) + len(it.Status) + len(it.Group) + len(it.LeaseID) + len(it.Error)
	}
	b := make([]byte, 0, n)
	b = append(b, `{"acknowledgments":[`...)
	for i, it := range items {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"transactionId":`...)
		b = appendString(b, it.TransactionID)
		b = append(b, `,"partitionId":`...)
		b = appendString(b, it.PartitionID)
		if it.Status != "" {
			b = append(b, `,"status":`...)
			b = appendString(b, string(it.Status))
		}
		group := it.Group
		if group == "" {
			group = broker.QueueMode
		}
		b = append(b, `,"consumerGroup":`...)
		b = appendString(b, group)
		if it.LeaseID != "" {
			b = append(b, `,"leaseId":`...)
			b = appendString(b, it.LeaseID)
		}
		if it.Error != "" {
			b = append(b, `,"error":`...)
			b = appendString(b, it.Error)
		}
		b = append(b, '}')
	}
	return append(b, "]}"...)
}
