package broker

import (
	"context"

	"time"

	"github.com/google/uuid"

	"queen-node/pg"
	"queen-node/protocol"
)

// Pop claims up to req.Batch messages for the group. With req.Wait it parks
// until messages arrive or req.Timeout passes; it returns nil when there is
// nothing (the API answers 204).
func (b *Broker) Pop(ctx context.Context, tenant string, req PopRequest) (res *PopResult, err error) {
	b.stats.Pops.Add(1)
	args := b.popArgs(tenant, req)

	key := queueKey(tenant, req.Queue)
	var deadline time.Time
	if req.Wait {
		deadline = time.Now().Add(req.Timeout)
	}
	backoff := b.cfg.PopBackoffMin
	if b.pre != nil {
		if pk, ok := prefetchKeyOf(args); ok {
			// Its ack may take the next claim of its line ahead.
			defer func() {
				if res != nil {
					b.leases.setNext(res.LeaseID, pk, req.LeaseID != "")
				}
			}()
			if _, pausedNow := b.popGate(); !pausedNow {
				// A claim taken ahead for this pop's line, or for the
				// lease its forwarding peer chose (prefetch.go).
				if res, err := b.pre.take(ctx, pk, req.LeaseID); res != nil || err != nil {
					if res != nil {
						b.countPopped(res)
					}
					return res, err
				}
			}
		}
	}
	for {
		var (
			wake    <-chan struct{}
			gen     uint64
			release = func() {}
		)
		// Pop maintenance answers empty; its channel wakes a parked pop.
		paused, pausedNow := b.popGate()
		if pausedNow {
			b.stats.PopsEmpty.Add(1)
			return nil, nil
		}
		if req.Wait {
			// Subscribe before asking PostgreSQL: a push that commits while
			// our query runs then still wakes us.
			wake, gen, release = b.gates.subscribe(key)
		}
		res, err := b.popOnce(ctx, args, req.Wait)
		if err != nil || res != nil || !req.Wait {
			release()
			if err == nil && res == nil {
				b.stats.PopsEmpty.Add(1)
			}
			return res, err
		}
		remaining := time.Until(deadline)
		if remaining <= 0 {
			release()
			b.stats.PopsEmpty.Add(1)
			return nil, nil
		}
		timer := time.NewTimer(min(backoff, remaining))
		select {
		case <-wake:
			backoff = b.cfg.PopBackoffMin
		case <-paused:
		case <-timer.C:
			backoff = min(backoff*2, b.cfg.PopBackoffMax)
		case <-ctx.Done():
		}
		timer.Stop()
		deleted := b.gates.deletedGen(key) != gen
		release()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if deleted {
			b.stats.PopsEmpty.Add(1)
			return nil, nil // the queue was deleted while we were parked
		}
	}
}

// popArgs builds the claim arguments of a pop of req.Queue, with
// req.LeaseID or a fresh lease id unless req.AutoAck.
func (b *Broker) popArgs(tenant string, req PopRequest) pg.PopArgs {
	if req.Group == "" {
		req.Group = QueueMode
	}
	if req.Batch < 1 {
		req.Batch = 1
	}
	if req.Partitions < 1 || req.Partition != "" {
		req.Partitions = 1
	}
	args := pg.PopArgs{
		Tenant: tenant, Queue: req.Queue, Group: req.Group,
		ScanLimit: clamp(req.Partitions*8, 16, 256), Budget: req.Batch, MaxParts: req.Partitions,
		LeaseSeconds: req.LeaseSeconds, AutoAck: req.AutoAck, Owner: b.cfg.NodeName,
		MaxBytes: b.cfg.MaxPopBytes,
	}
	args.SubMode, args.SubFrom = b.subscription(req)
	if req.Partition != "" {
		args.Names = []string{req.Partition}
	}
	if !req.AutoAck {
		args.LeaseID = req.LeaseID
		if args.LeaseID == "" {
			args.LeaseID = uuid.NewString()
		}
	}
	return args
}

// subscription maps the request's subscription parameters to the mode the
// claim core records on a group's first contact. QueueMode always starts at
// the beginning.
func (b *Broker) subscription(req PopRequest) (protocol.SubMode, *time.Time) {
	if req.Group == QueueMode {
		return protocol.SubAll, nil
	}
	if req.SubscriptionFrom != nil {
		return protocol.SubFrom, req.SubscriptionFrom
	}
	mode := req.SubscriptionMode
	if mode == "" {
		mode = b.cfg.DefaultSubscription
	}
	m, _ := protocol.ParseSubMode(mode) // unknown modes mean all (docs/api.md, "Semantics")
	return m, nil
}

// popOnce is one claim attempt. A wildcard pop with the hot-list on asks
// the ring first; everything else is one round trip to the claim core.
func (b *Broker) popOnce(ctx context.Context, args pg.PopArgs, wait bool) (*PopResult, error) {
	if b.hot != nil && args.Names == nil {
		return b.hotPop(ctx, args, wait)
	}
	res, _, err := b.sqlPop(ctx, args)
	return res, err
}

// sqlPop runs the claim core on args.Names, or on the SQL candidate scan
// when Names is nil.
func (b *Broker) sqlPop(ctx context.Context, args pg.PopArgs) (*PopResult, *pg.PopOutcome, error) {
	out, err := b.claim(ctx, args)
	if err != nil {
		return nil, nil, err
	}
	if len(out.Messages) == 0 {
		return nil, out, nil
	}
	return b.popResult(args, out), out, nil
}

// claim is one call of the claim core. The candidates' provisioning state
// goes with it (provisioned); a claim that needs no provisioning joins the
// pop combiner's next flush, any other runs alone.
func (b *Broker) claim(ctx context.Context, args pg.PopArgs) (*pg.PopOutcome, error) {
	b.stats.PopSQLCalls.Add(1)
	if args.Names == nil {
		b.stats.PopScans.Add(1)
	}
	args.Unprov = b.prov.unprov(args)
	if len(args.Unprov) > 0 {
		b.kickProvision(args)
	}
	var (
		out *pg.PopOutcome
		err error
	)
	if b.popc != nil && args.Unprov != nil && len(args.Unprov) == 0 {
		out, err = b.popc.claim(ctx, args)
	} else {
		out, err = b.claimAlone(ctx, args)
	}
	if err == nil {
		b.claimed(args, out)
	}
	return out, err
}

// claimed learns from and counts a claim-core call that returned.
func (b *Broker) claimed(args pg.PopArgs, out *pg.PopOutcome) {
	b.prov.learn(args, out)
	b.countVerdicts(out.Verdicts)
	if out.Fast {
		b.stats.ClaimsFast.Add(1)
	}
}

// claimAlone is one round trip to the claim core. When the request ends during
// it, the claim may have committed anyway: its lease is released at once
// rather than left on messages nobody will read (docs/api.md).
func (b *Broker) claimAlone(ctx context.Context, args pg.PopArgs) (*pg.PopOutcome, error) {
	b.stats.PopFlushes.Add(1)
	// A deadlock, or a foreign-key violation from a queue delete racing
	// this claim, rolled the whole call back: run it again (pg.DB.Retry).
	var out *pg.PopOutcome
	err := b.db.Retry(ctx, func() (err error) {
		out, err = b.db.Pop(ctx, args)
		return err
	})
	if ctx.Err() != nil {
		if !args.AutoAck && (err != nil || len(out.Messages) > 0) {
			b.dropLease(args.Tenant, args.LeaseID)
		}
		return nil, ctx.Err()
	}
	if err != nil {
		return nil, wrap(err)
	}
	return out, nil
}

// countVerdicts adds a claim's verdicts to the per-kind counters.
func (b *Broker) countVerdicts(vs []pg.Verdict) {
	for _, v := range vs {
		switch v.Kind {
		case protocol.VerdictTook:
			b.stats.ClaimTook.Add(1)
		case protocol.VerdictEmpty:
			b.stats.ClaimEmpty.Add(1)
		case protocol.VerdictLeased:
			b.stats.ClaimLeased.Add(1)
		case protocol.VerdictBusy:
			b.stats.ClaimBusy.Add(1)
		default:
			b.stats.ClaimRequeue.Add(1)
		}
	}
}

// popResult is the answer of a claim that took messages, counted as
// delivered.
func (b *Broker) popResult(args pg.PopArgs, out *pg.PopOutcome) *PopResult {
	res := b.buildPopResult(args, out)
	b.countPopped(res)
	return res
}

// countPopped counts a pop answered with res's messages.
func (b *Broker) countPopped(res *PopResult) {
	b.stats.PopsMessages.Add(1)
	b.stats.PoppedItems.Add(int64(len(res.Messages)))
}

// buildPopResult is the answer of a claim that took messages; it
// remembers the served batches for the CAS ack, and counts nothing.
func (b *Broker) buildPopResult(args pg.PopArgs, out *pg.PopOutcome) *PopResult {
	res := &PopResult{Queue: args.Queue, LeaseID: args.LeaseID, ConsumerGroup: args.Group,
		Messages: make([]Message, len(out.Messages))}
	for _, v := range out.Verdicts {
		if v.Kind == protocol.VerdictTook {
			if res.PartitionsClaimed == 0 {
				res.Partition, res.PartitionID = v.Name, v.PartitionID
			}
			res.PartitionsClaimed++
		}
	}
	for i, m := range out.Messages {
		res.Messages[i] = Message{ID: m.ID, TransactionID: m.TxID, TraceID: m.Trace, Data: m.Payload,
			CreatedAt: m.CreatedAt, Queue: args.Queue, Partition: m.Partition, PartitionID: m.PartitionID,
			LeaseID: args.LeaseID, ConsumerGroup: args.Group, ProducerSub: m.Sub, RetryCount: m.Retry}
	}
	b.leases.rememberPop(args, out) // for the CAS ack (ackcas.go)
	return res
}

// ReleaseUndelivered releases the lease of a pop whose response could not be
// written, so its messages are claimable at once instead of at lease expiry.
// Only the tenant's rows are released.
func (b *Broker) ReleaseUndelivered(tenant string, res *PopResult) {
	if res == nil || res.LeaseID == "" {
		return
	}
	b.dropLease(tenant, res.LeaseID)
}

// ReleaseForwarded releases the lease this node chose for a pop it
// forwarded to the queue's owner (api/forward.go), whose answer its client
// did not get: at once, and with again (the owner may still be claiming)
// once more after Config.ReleaseAgain, unless the broker closes first. A lease
// nobody claimed costs one UPDATE that finds no row.
func (b *Broker) ReleaseForwarded(tenant, leaseID string, again bool) {
	if leaseID == "" {
		return
	}
	b.dropLease(tenant, leaseID)
	if again {
		b.after(b.cfg.ReleaseAgain, func() { b.dropLease(tenant, leaseID) })
	}
}

// after runs f once d has passed, in a goroutine Close waits for; Close
// cancels the wait, and after does nothing once Close has begun.
func (b *Broker) after(d time.Duration, f func()) {
	b.afterMu.Lock()
	defer b.afterMu.Unlock()
	if b.life.Err() != nil {
		return
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			f()
		case <-b.life.Done():
		}
	}()
}

func (b *Broker) dropLease(tenant, leaseID string) { b.rel.drop(tenant, leaseID) }

func clamp(v, lo, hi int) int {
	return max(lo, min(v, hi))
}
