package broker

import (
	"context"
	"time"

	"queen-node/hotlist"
	"queen-node/pg"
	"queen-node/protocol"
)

// Reseed walk bounds: pages of 10,000 partitions, at most 200 pages.
const (
	reseedPageSize = 10000
	reseedMaxPages = 200
)

// Background cadences of the hot-list (hotlist.md, "Background ticks").
const (
	wheelTick   = 50 * time.Millisecond
	wakeTick    = 5 * time.Millisecond
	reseedTick  = 2 * time.Second
	reportEvery = 30 * time.Second
)

func newHotlist(cfg Config, log func(key hotlist.Key, event string, kv ...any)) *hotlist.Hotlist {
	hc := cfg.Hotlist.Config // zero fields take hotlist's defaults in hotlist.New
	if hc.TracePrefix != "" && hc.Trace == nil {
		hc.Trace = log
	}
	return hotlist.New(hc)
}

// startHotLoops starts the wheel tick, the wake tick, the reseed floor, the
// idle sweep and the periodic report.
func (b *Broker) startHotLoops() {
	b.hot.SetEarlyWake(b.kickEarly) // before any loop can defer a ring
	b.every(wheelTick, func(now time.Time) {
		for _, key := range b.hot.WheelTick(now) {
			b.gates.notify(key)
		}
	})
	b.startWakeLoop()
	b.every(reseedTick, func(now time.Time) {
		for _, w := range b.hot.DueReseeds(now) {
			b.runReseed(w)
		}
	})
	b.startEarlyLoop()
	if b.cfg.Hotlist.IdleSweep > 0 {
		b.every(b.cfg.Hotlist.IdleSweep, func(now time.Time) {
			if n := b.hot.Sweep(now); n > 0 {
				b.hotLog.Debug("idle sweep", "queues_dropped", n)
			}
		})
	}
	b.every(reportEvery, b.report)
}

// every runs fn on a ticker until Close.
func (b *Broker) every(d time.Duration, fn func(time.Time)) {
	b.spawn(func(ctx context.Context) {
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-t.C:
				fn(now)
			}
		}
	})
}

// runReseed runs a claimed reseed of a background loop with its own
// deadline; Close cancels it (the walk then ends as failed).
func (b *Broker) runReseed(w *hotlist.Walk) {
	ctx, cancel := context.WithTimeout(b.life, 30*time.Second)
	defer cancel()
	if err := b.reseed(ctx, w); err != nil && !pg.IsUnavailable(err) && b.life.Err() == nil {
		r := w.Ring()
		b.hotLog.Warn("reseed failed", "queue", queueName(r.Key()), "group", r.Group(), "error", err)
	}
}

// reseed re-derives a ring's contents from PostgreSQL: the keyset-paginated
// walk of its probably-pending partitions, applied as reseed marks. Every
// claimed walk (BeginReseed, BeginPrune, DueReseeds, EarlyReseeds) is run
// here, which ends it on every path, a panic included (docs/hotlist.md,
// "Reseed walks").
func (b *Broker) reseed(ctx context.Context, w *hotlist.Walk) (err error) {
	r := w.Ring()
	tenant, queue := r.Key().Split()
	after, added, complete, returned := "", 0, false, false
	defer func() {
		// Only a walk that read every page without error warms the ring,
		// and only one that reached the end may prune what it did not list.
		ok := returned && err == nil
		w.End(ok, ok && complete, time.Now())
		if added > 0 {
			b.gates.notify(r.Key())
		}
	}()
	for page := 0; page < reseedMaxPages; page++ {
		var rows []pg.ReseedRow
		rows, err = b.db.ReseedPage(ctx, tenant, queue, r.Group(), after, reseedPageSize)
		if err != nil {
			break
		}
		hr := make([]hotlist.ReseedRow, len(rows))
		for i, row := range rows {
			hr[i] = hotlist.ReseedRow{Name: row.Name, PartitionID: row.PartitionID}
			if row.AgeMs != nil {
				hr[i].Age, hr[i].AgeKnown = time.Duration(*row.AgeMs)*time.Millisecond, true
			}
		}
		added += w.Reseed(hr, time.Now())
		if len(rows) < reseedPageSize {
			complete = true
			break
		}
		after = rows[len(rows)-1].PartitionID
	}
	returned = true
	return err
}

// hotPop is the pop path with the hot-list on.
func (b *Broker) hotPop(ctx context.Context, args pg.PopArgs, wait bool) (*PopResult, error) {
	key := queueKey(args.Tenant, args.Queue)
	ring := b.hot.Lookup(key, args.Group)
	if ring == nil {
		var res *PopResult
		var err error
		if ring, res, err = b.firstContact(ctx, key, args); ring == nil {
			return res, err
		}
	}
	if ring.Cold() {
		if w := b.hot.BeginReseed(ring, time.Now(), false); w != nil {
			// Opportunistic: a cold ring knows nothing yet.
			if err := b.reseed(ctx, w); err != nil {
				return nil, wrap(err)
			}
		}
	}
	// Check out what one claim can use: the MaxParts it may claim plus three
	// spares each for stale entries (empty, leased) in the same round trip.
	// Unevaluated candidates go back to the head of the line, so a small k
	// loses nothing: the next pop is offered them first. A large k hid
	// entries from concurrent pops (issue 20: 8 consumers x 16 > 100
	// partitions) and they were served out of turn.
	k := clamp(args.MaxParts*4, 4, 256)
	for round := 0; round < 8; round++ {
		now := time.Now()
		if w := b.hot.BeginPrune(ring, now); w != nil {
			// Many entries only remote marks vouch for (a flood of fake
			// hints): one walk of the partitions with work drops them all,
			// where probing them would cost one empty claim each.
			if err := b.reseed(ctx, w); err != nil {
				return nil, wrap(err)
			}
		}
		cands := b.hot.Take(ring, k, now)
		if cands == nil {
			if !ring.Ready(now) {
				if w := b.hot.BeginReseed(ring, now, false); w != nil {
					// The floor is due anyway: run it now rather than park.
					if err := b.reseed(ctx, w); err != nil {
						return nil, wrap(err)
					}
					continue
				}
			}
			if !wait {
				// wait=false must see every committed push at once (read-your-
				// writes across nodes), which a ring fed by asynchronous hints
				// cannot promise: ask PostgreSQL.
				return b.scanAndLearn(ctx, args, ring)
			}
			return nil, nil // the quiet path: park with no SQL at all
		}
		res, woke, err := b.probe(ctx, args, ring, cands)
		if woke {
			b.gates.notify(key)
		}
		if err != nil || res != nil {
			return res, err
		}
	}
	if !wait {
		// Every round came back without messages (e.g. a ring full of
		// lease-held partitions): a committed push elsewhere must still be
		// visible to this wait=false pop.
		return b.scanAndLearn(ctx, args, ring)
	}
	return nil, nil
}

// probe asks the claim core about checked-out candidates and checks every
// verdict back in. The drop guard re-appends the candidates when the
// request ends before check-in.
func (b *Broker) probe(ctx context.Context, args pg.PopArgs, ring *hotlist.Ring, cands []hotlist.Candidate) (res *PopResult, woke bool, err error) {
	checkedIn := false
	defer func() {
		if !checkedIn {
			b.hot.Abandon(ring, cands, time.Now())
		}
	}()
	args.Names = candNames(cands)
	out, err := b.claim(ctx, args)
	if err != nil {
		return nil, false, err // the drop guard re-appends
	}
	woke = b.checkIn(ring, cands, args, out)
	checkedIn = true
	if len(out.Messages) == 0 {
		return nil, woke, nil
	}
	return b.popResult(args, out), woke, nil
}

// candNames are the candidates' partition names, the claim's Names.
func candNames(cands []hotlist.Candidate) []string {
	names := make([]string, len(cands))
	for i, c := range cands {
		names[i] = c.Name
	}
	return names
}

// checkIn checks every candidate of a claim back in with its verdict
// (those the claim did not evaluate as requeue); true when a parked pop
// should be woken.
func (b *Broker) checkIn(ring *hotlist.Ring, cands []hotlist.Candidate, args pg.PopArgs, out *pg.PopOutcome) bool {
	byName := make(map[string]hotlist.Candidate, len(cands))
	for _, c := range cands {
		byName[c.Name] = c
	}
	b.hot.SetOpts(ring.Key(), queueOpts(out))
	results := make([]hotlist.Result, 0, len(cands))
	for _, v := range out.Verdicts {
		c, ok := byName[v.Name]
		if !ok {
			continue
		}
		delete(byName, v.Name)
		results = append(results, hotlist.Result{Cand: c, Verdict: verdictOf(v.Kind), Until: v.Until,
			Drained: v.Drained, AutoAck: args.AutoAck, PartitionID: v.PartitionID})
	}
	for _, c := range byName { // not evaluated (e.g. the queue vanished)
		results = append(results, hotlist.Result{Cand: c, Verdict: hotlist.Requeue})
	}
	return b.hot.CheckIn(ring, results, time.Now())
}

// firstContact is a pop of a (queue, group) that has no ring on this
// node. It goes through the SQL wildcard path, which provisions the group
// marker; the ring is registered only once the marker was already
// committed before that call (docs/hotlist.md, "What happens on a pop").
// One pop per pair does it at a time: the scan reads every partition of
// the queue (about 0.8 s of PostgreSQL at 100,000 partitions), and the
// consumers of a restarted node all arrive at once, so each one scanning
// cost PostgreSQL that many scans. The others wait for it and then take
// the ring it registered (ring set, the caller goes on), or its error when
// its call failed; when it registered none for another reason (the marker
// was new, its client left) one of them makes the next call, and so on.
func (b *Broker) firstContact(ctx context.Context, key hotlist.Key, args pg.PopArgs) (*hotlist.Ring, *PopResult, error) {
	pair := firstKey{key, args.Group}
	for {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		b.firstMu.Lock()
		call, busy := b.first[pair]
		if !busy {
			// A pop that looked before the last call registered the ring
			// may come after that call ended.
			if ring := b.hot.Lookup(key, args.Group); ring != nil {
				b.firstMu.Unlock()
				return ring, nil, nil
			}
			call = &firstCall{done: make(chan struct{})}
			b.first[pair] = call
		}
		b.firstMu.Unlock()
		if !busy {
			res, err := b.leadFirstContact(ctx, pair, call, args)
			return nil, res, err
		}
		select {
		case <-call.done:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
		if ring := b.hot.Lookup(key, args.Group); ring != nil {
			return ring, nil, nil
		}
		if call.err != nil {
			return nil, nil, call.err // as the database answered the leader a moment ago
		}
	}
}

// firstCall is one running first contact: done closes when it ends; err
// is its failure, unless its own client left (set before done closes).
type firstCall struct {
	done chan struct{}
	err  error
}

// leadFirstContact is the first contact's SQL call, made by one pop of the
// pair; the others wait on call.done until it ends, whatever its outcome.
func (b *Broker) leadFirstContact(ctx context.Context, pair firstKey, call *firstCall, args pg.PopArgs) (*PopResult, error) {
	var err error
	defer func() {
		if err != nil && ctx.Err() == nil {
			call.err = err
		}
		b.firstMu.Lock()
		delete(b.first, pair)
		b.firstMu.Unlock()
		close(call.done)
	}()
	res, out, err := b.sqlPop(ctx, args)
	if err == nil && out != nil && out.Seeded {
		b.hot.Register(pair.key, pair.group, queueOpts(out), time.Now())
	}
	return res, err
}

// firstKey names a (queue, group) pair whose first contact is running.
type firstKey struct {
	key   hotlist.Key
	group string
}

// scanAndLearn runs the SQL candidate scan and teaches the ring the
// partitions it found (they were missing from it).
func (b *Broker) scanAndLearn(ctx context.Context, args pg.PopArgs, ring *hotlist.Ring) (*PopResult, error) {
	res, out, err := b.sqlPop(ctx, args)
	if err != nil || out == nil {
		return res, err
	}
	var found []hotlist.ReseedRow
	for _, v := range out.Verdicts {
		if v.Kind == protocol.VerdictTook || v.Kind == protocol.VerdictLeased {
			found = append(found, hotlist.ReseedRow{Name: v.Name, PartitionID: v.PartitionID})
		}
	}
	if len(found) > 0 {
		b.hot.Reseed(ring, found, time.Now())
	}
	return res, nil
}

// verdictOf maps a claim-core verdict onto the hot-list's; busy and
// requeue both mean "not evaluated, try again".
func verdictOf(kind protocol.Verdict) hotlist.Verdict {
	switch kind {
	case protocol.VerdictTook:
		return hotlist.Took
	case protocol.VerdictEmpty:
		return hotlist.Empty
	case protocol.VerdictLeased:
		return hotlist.Leased
	}
	return hotlist.Requeue
}

func queueOpts(out *pg.PopOutcome) hotlist.QueueOpts {
	return hotlist.QueueOpts{Delay: time.Duration(out.Delay) * time.Second, Window: time.Duration(out.Window) * time.Second}
}

func queueName(key hotlist.Key) string { return key.Queue() }

// report logs the hot-list's periodic "reseed floor" line and one "ring"
// line per busiest non-empty ring.
func (b *Broker) report(now time.Time) {
	st := b.hot.Stats()
	secs := now.Sub(b.lastReport.at).Seconds()
	delta := st.ReseedAdded - b.lastReport.added
	rate := 0.0
	if secs > 0 {
		rate = float64(delta) / secs
	}
	b.lastReport.at, b.lastReport.added = now, st.ReseedAdded
	b.hotLog.Info("reseed floor", "reseed_added_delta", delta, "reseed_added_per_s", rate,
		"reseeds", st.Reseeds, "rings", st.Rings, "queues", st.Queues, "ready", st.Ready,
		"wheel", st.Wheel, "inflight", st.Inflight, "marks_local", st.MarksLocal, "marks_remote", st.MarksRemote)
	for _, r := range b.hot.TopRings(b.cfg.LogTopNQueues) {
		b.hotLog.Info("ring", "tenant", r.Tenant, "queue", r.Queue, "group", r.Group,
			"ready", r.Ready, "wheel", r.Wheel, "inflight", r.Inflight)
	}
}
