package broker

import (
	"container/list"
	"slices"
	"sync"
	"time"

	"queen-node/pg"
	"queen-node/protocol"
)

// leaseMemory remembers, per lease this node handed out with a pop, what
// was served under it per (partition, group), so that an ack naming exactly
// that batch can go through the compare-and-set path (ackcas.go) instead of
// queen.ack_v2. It is a cache: a lease it forgot (evicted, expired, served
// by another node) only means the general path.
//
// Bounds: at most maxLeases leases and maxBytes bytes (estimated: the
// transaction ids and names plus a fixed overhead per batch), oldest
// dropped first; an entry also goes at its lease's expiry plus a margin, or
// once an ack tried it. So abandoned leases cost memory only until then.
type leaseMemory struct {
	maxLeases int
	maxBytes  int64

	mu    sync.Mutex
	byID  map[string]*list.Element // of *leaseEntry
	order *list.List               // insertion order, oldest first
	bytes int64
}

type leaseEntry struct {
	id, tenant string
	expires    time.Time
	batches    []*servedBatch
	size       int64
}

// servedBatch is what one claim served to one (partition, group).
type servedBatch struct {
	partitionID, group string
	queue, partition   string
	first, end         int64    // offsets of the first and last served message
	txids              []string // sorted
	// next, when set, is the pop that served this batch: its ack takes
	// the same pop's claim ahead (prefetch.go); with nextPeer, only when
	// the peer that forwarded the pop names the lease (PeerClaim).
	next     *prefetchKey
	nextPeer bool
}

const (
	defaultLeaseMemLeases = 100_000
	defaultLeaseMemBytes  = 64 << 20
	// Kept this long past the lease's expiry: the node's clock and the
	// database's may differ, and a CAS after expiry just does not match.
	leaseMemMargin = 10 * time.Second
	// Per batch and per transaction id, for the estimate of maxBytes.
	leaseMemBatchOverhead = 256
	leaseMemTxIDOverhead  = 16
)

func newLeaseMemory(maxLeases int, maxBytes int64) *leaseMemory {
	return &leaseMemory{maxLeases: maxLeases, maxBytes: maxBytes,
		byID: map[string]*list.Element{}, order: list.New()}
}

// rememberPop records a pop answered with a lease; nil-safe.
func (lm *leaseMemory) rememberPop(args pg.PopArgs, out *pg.PopOutcome) {
	if lm == nil || args.AutoAck || args.LeaseID == "" || len(out.Messages) == 0 {
		return
	}
	e := &leaseEntry{id: args.LeaseID, tenant: args.Tenant}
	for _, v := range out.Verdicts {
		if v.Kind == protocol.VerdictTook && v.Until.After(e.expires) {
			e.expires = v.Until
		}
	}
	if e.expires.IsZero() {
		return // a lease without an expiry is not one this code knows
	}
	e.expires = e.expires.Add(leaseMemMargin)
	var b *servedBatch
	for _, m := range out.Messages { // grouped by partition, in offset order
		if b == nil || b.partitionID != m.PartitionID {
			b = &servedBatch{partitionID: m.PartitionID, group: args.Group, queue: args.Queue,
				partition: m.Partition, first: m.Off}
			e.batches = append(e.batches, b)
			e.size += leaseMemBatchOverhead + int64(len(m.PartitionID)+len(args.Group)+len(args.Queue)+len(m.Partition))
		}
		if m.Off <= b.end {
			return // not in offset order: not the shape this code relies on
		}
		b.end = m.Off
		b.txids = append(b.txids, m.TxID)
		e.size += leaseMemTxIDOverhead + int64(len(m.TxID))
	}
	for _, b := range e.batches {
		slices.Sort(b.txids)
	}
	if e.size > lm.maxBytes/8 {
		return // one huge lease must not flush everything else
	}
	now := time.Now()
	lm.mu.Lock()
	defer lm.mu.Unlock()
	if old, ok := lm.byID[e.id]; ok {
		lm.remove(old)
	}
	lm.byID[e.id] = lm.order.PushBack(e)
	lm.bytes += e.size
	for lm.order.Len() > 0 {
		front := lm.order.Front()
		fe := front.Value.(*leaseEntry)
		if lm.order.Len() <= lm.maxLeases && lm.bytes <= lm.maxBytes && fe.expires.After(now) {
			break
		}
		lm.remove(front)
	}
}

func (lm *leaseMemory) remove(el *list.Element) {
	e := el.Value.(*leaseEntry)
	lm.order.Remove(el)
	delete(lm.byID, e.id)
	lm.bytes -= e.size
}

// take returns the batch served under leaseID to (partitionID, group) if
// it is this tenant's, live in memory and its sorted transaction ids are
// exactly txids (sorted by the caller), and forgets it: one CAS attempt per
// batch. A batch that does not match stays.
func (lm *leaseMemory) take(tenant, leaseID, partitionID, group string, txids []string) *servedBatch {
	if lm == nil {
		return nil
	}
	lm.mu.Lock()
	defer lm.mu.Unlock()
	el, ok := lm.byID[leaseID]
	if !ok {
		return nil
	}
	e := el.Value.(*leaseEntry)
	if !e.expires.After(time.Now()) {
		lm.remove(el)
		return nil
	}
	if e.tenant != tenant {
		return nil
	}
	for i, b := range e.batches {
		if b.partitionID != partitionID || b.group != group {
			continue
		}
		if !slices.Equal(b.txids, txids) {
			return nil
		}
		e.batches = slices.Delete(e.batches, i, i+1)
		if len(e.batches) == 0 {
			lm.remove(el)
		}
		if b.next != nil {
			// One pop, one claim taken ahead: a multi-partition pop's
			// batches acked one request at a time ask for it once.
			for _, o := range e.batches {
				o.next = nil
			}
		}
		return b
	}
	return nil
}

// setNext records that the pop which served leaseID may be taken ahead
// again when its ack comes (prefetch.go), for a peer's pop only when the
// peer asks; nil-safe, and a lease it does not hold is ignored.
func (lm *leaseMemory) setNext(leaseID string, key prefetchKey, peer bool) {
	if lm == nil {
		return
	}
	lm.mu.Lock()
	defer lm.mu.Unlock()
	el, ok := lm.byID[leaseID]
	if !ok {
		return
	}
	k := &key
	for _, b := range el.Value.(*leaseEntry).batches {
		b.next, b.nextPeer = k, peer
	}
}

// len and size report the memory's use (tests).
func (lm *leaseMemory) len() (leases int, bytes int64) {
	lm.mu.Lock()
	defer lm.mu.Unlock()
	return lm.order.Len(), lm.bytes
}
