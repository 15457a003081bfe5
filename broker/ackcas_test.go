package broker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"reflect"
	"testing"

	"github.com/jackc/pgx/v5"

	"queen-node/broker"
	"queen-node/internal/nodetest"
	"queen-node/internal/pgtest"
	"queen-node/protocol"
)

// The CAS ack must answer and write exactly what queen.ack_v2 alone does.
// Two twin databases get the same seeded random run: side A with the CAS
// ack on, side B with it off, each with two broker instances sharing its
// database (a pop on one instance, an ack on the other: the second knows
// nothing of the lease). The run pushes (duplicates included), pops
// partitions, acks whole batches in any order, partial batches, duplicated
// items, wrong and missing lease ids, failed items, unknown transaction ids,
// two batches in one request, repeats earlier requests, expires leases,
// deletes messages (through the API, and under a live lease as a racing
// retention pass can), and seeks. Every pop and ack answer and, after every
// step, every consumer row and dead-letter entry must be the same on both
// sides.
func TestAckCASDifferential(t *testing.T) {
	seeds, steps := 6, 160
	if testing.Short() {
		seeds, steps = 3, 100
	}
	dbA, dbB := pgtest.NewDatabase(t), pgtest.NewDatabase(t)
	// The bulk provisioning makes consumer rows in the background, when it
	// runs: the two databases would differ by its timing, not by the acks.
	// Claims taken ahead on side A would leave leases side B has not
	// (broker/prefetch.go has its own differential test).
	noBulk := func(c *broker.Config) { c.BulkProvision, c.PopPrefetch = false, false }
	off := func(c *broker.Config) { c.AckCAS, c.BulkProvision = false, false }
	a := []*nodetest.Node{nodetest.StartOn(t, dbA, noBulk), nodetest.StartOn(t, dbA, noBulk)}
	b := []*nodetest.Node{nodetest.StartOn(t, dbB, off), nodetest.StartOn(t, dbB, off)}
	ctx := context.Background()
	connA, err := pgx.Connect(ctx, dbA)
	if err != nil {
		t.Fatal(err)
	}
	defer connA.Close(ctx)
	connB, err := pgx.Connect(ctx, dbB)
	if err != nil {
		t.Fatal(err)
	}
	defer connB.Close(ctx)
	tw := &twin{t: t, a: a, b: b, conn: [2]*pgx.Conn{connA, connB}}
	for seed := int64(1); seed <= int64(seeds); seed++ {
		tw.run(seed, steps)
	}
	cas := a[0].Broker.Stats().AcksCAS.Load() + a[1].Broker.Stats().AcksCAS.Load()
	gen := a[0].Broker.Stats().AcksGeneral.Load() + a[1].Broker.Stats().AcksGeneral.Load()
	t.Logf("side A: %d ack items by CAS, %d by ack_v2; side B: %d by CAS", cas, gen,
		b[0].Broker.Stats().AcksCAS.Load()+b[1].Broker.Stats().AcksCAS.Load())
	if cas < 100 || gen < 100 {
		t.Fatalf("the run must exercise both paths: %d CAS, %d general", cas, gen)
	}
}

type twin struct {
	t    *testing.T
	a, b []*nodetest.Node
	conn [2]*pgx.Conn
}

// twinPop is one pop done on both sides.
type twinPop struct {
	res   [2]*broker.PopResult
	group string
	node  int // the broker instance that popped it
	index int // in the run's pops
}

// ackSpec is one ack item, resolved on each side against a twinPop.
type ackSpec struct {
	pop    int // index in pops
	msg    int // index in its messages; -1 = an unknown transaction id
	status protocol.AckStatus
	lease  string // "own", "none", "wrong"
}

func (tw *twin) run(seed int64, steps int) {
	t := tw.t
	ctx := context.Background()
	rng := rand.New(rand.NewSource(seed))
	queue := fmt.Sprintf("cas-diff-%d", seed)
	limit := rng.Intn(3)
	configure(t, tw.a[0], queue, msg{"retryLimit": limit, "leaseTime": 600})
	configure(t, tw.b[0], queue, msg{"retryLimit": limit, "leaseTime": 600})
	parts := []string{"p0", "p1", "p2"}
	groups := []string{"", "g2"}
	var pops []twinPop
	var sent [][]ackSpec // every ack request, to repeat some
	var txids []string
	leaseIdx := [2]map[string]int{{}, {}} // lease id -> pop index, per side

	doPop := func(where string, node int, req broker.PopRequest) {
		tp := twinPop{group: req.Group, node: node, index: len(pops)}
		for side, ns := range [][]*nodetest.Node{tw.a, tw.b} {
			res, err := ns[node].Broker.Pop(ctx, broker.DefaultTenant, req)
			if err != nil {
				t.Fatalf("%s: pop: %v", where, err)
			}
			tp.res[side] = res
		}
		if sa, sb := popShape(tp.res[0]), popShape(tp.res[1]); sa != sb {
			t.Fatalf("%s: pops differ:\nA %s\nB %s", where, sa, sb)
		}
		if tp.res[0] != nil {
			for side := range 2 {
				leaseIdx[side][tp.res[side].LeaseID] = len(pops)
			}
			pops = append(pops, tp)
		}
	}
	doAck := func(where string, node int, specs []ackSpec) {
		if len(specs) == 0 {
			return
		}
		sent = append(sent, specs)
		var got [2][]broker.AckResult
		for side, ns := range [][]*nodetest.Node{tw.a, tw.b} {
			items := make([]broker.AckItem, len(specs))
			for j, s := range specs {
				tp := pops[s.pop]
				res := tp.res[side]
				it := broker.AckItem{Group: tp.group, Status: s.status}
				if s.msg < 0 {
					it.TransactionID, it.PartitionID = "unknown-"+fmt.Sprint(j), res.Messages[0].PartitionID
				} else {
					m := res.Messages[s.msg]
					it.TransactionID, it.PartitionID = m.TransactionID, m.PartitionID
				}
				switch s.lease {
				case "own":
					it.LeaseID = res.LeaseID
				case "wrong":
					it.LeaseID = fmt.Sprintf("00000000-0000-4000-8000-%012d", j)
				}
				items[j] = it
			}
			res, err := ns[node].Broker.Ack(ctx, broker.DefaultTenant, items)
			if err != nil {
				t.Fatalf("%s: ack: %v", where, err)
			}
			got[side] = res
		}
		if !reflect.DeepEqual(got[0], got[1]) {
			t.Fatalf("%s: ack %+v answers differ:\nCAS     %+v\nack_v2 %+v", where, specs, got[0], got[1])
		}
	}

	for step := 0; step < steps; step++ {
		where := fmt.Sprintf("seed %d step %d", seed, step)
		node := rng.Intn(2)
		switch r := rng.Intn(100); {
		case r < 20 || len(txids) == 0: // push
			part := parts[rng.Intn(len(parts))]
			items := make([]broker.PushItem, 1+rng.Intn(8))
			for j := range items {
				tx := fmt.Sprintf("s%d-%d-%d", seed, step, j)
				if len(txids) > 0 && rng.Intn(10) == 0 {
					tx = txids[rng.Intn(len(txids))] // a duplicate: its offset is skipped
				}
				txids = append(txids, tx)
				items[j] = broker.PushItem{Queue: queue, Partition: part, TransactionID: tx,
					Payload: json.RawMessage(fmt.Sprintf(`{"s":%d}`, step))}
			}
			var st [2][]protocol.PushStatus
			for side, ns := range [][]*nodetest.Node{tw.a, tw.b} {
				res, err := ns[node].Broker.Push(ctx, broker.DefaultTenant, nil, items)
				if err != nil {
					t.Fatalf("%s: push: %v", where, err)
				}
				for _, x := range res {
					st[side] = append(st[side], x.Status)
				}
			}
			if !reflect.DeepEqual(st[0], st[1]) {
				t.Fatalf("%s: push answers differ: %v vs %v", where, st[0], st[1])
			}
		case r < 48: // pop a partition
			doPop(where, node, broker.PopRequest{Queue: queue, Partition: parts[rng.Intn(len(parts))],
				Group: groups[rng.Intn(len(groups))], Batch: 1 + rng.Intn(12)})
		case len(pops) == 0:
			continue
		case r < 88: // ack
			var specs []ackSpec
			if len(sent) > 0 && rng.Intn(6) == 0 {
				specs = sent[rng.Intn(len(sent))] // a retried request
			} else {
				specs = tw.randomAck(rng, pops)
			}
			doAck(where, node, specs)
		case r < 93: // a lease expires
			p := pops[rng.Intn(len(pops))]
			for side := range 2 {
				if _, err := tw.conn[side].Exec(ctx, `UPDATE queen.consumers
					SET lease_expires_at = clock_timestamp() - interval '1 second'
					WHERE lease_id = $1`, p.res[side].LeaseID); err != nil {
					t.Fatal(err)
				}
			}
			if rng.Intn(2) == 0 {
				// another consumer takes the batch again, then the first
				// one's ack comes (as the test of the lease condition)
				doPop(where, rng.Intn(2), broker.PopRequest{Queue: queue, Partition: p.res[0].Partition,
					Group: p.group, Batch: len(p.res[0].Messages)})
				doAck(where, p.node, fullAck(rng, pops, p.index))
			}
		case r < 96: // a message deleted under its lease, as a retention pass racing a claim can
			p := pops[len(pops)-1-rng.Intn(min(3, len(pops)))]
			k := rng.Intn(len(p.res[0].Messages))
			for side := range 2 {
				m := p.res[side].Messages[k]
				if _, err := tw.conn[side].Exec(ctx, `DELETE FROM queen.messages
					WHERE partition_id = $1 AND transaction_id = $2`, m.PartitionID, m.TransactionID); err != nil {
					t.Fatal(err)
				}
			}
			if rng.Intn(2) == 0 {
				doAck(where, p.node, fullAck(rng, pops, p.index))
			}
		case r < 98: // a message deleted through the API
			p := pops[len(pops)-1-rng.Intn(min(3, len(pops)))]
			k := rng.Intn(len(p.res[0].Messages))
			for side, ns := range [][]*nodetest.Node{tw.a, tw.b} {
				m := p.res[side].Messages[k]
				if _, err := ns[node].Reads.DeleteMessage(ctx, broker.DefaultTenant, m.PartitionID, m.TransactionID); err != nil {
					t.Logf("%s: delete: %v", where, err) // gone already: the same on both sides
				}
			}
		default: // a seek to the end
			g := groups[rng.Intn(len(groups))]
			if g == "" {
				continue // a queue-mode group cannot seek
			}
			for side, ns := range [][]*nodetest.Node{tw.a, tw.b} {
				if _, err := ns[node].Reads.Seek(ctx, broker.DefaultTenant, g, queue, true, nil); err != nil {
					t.Fatalf("%s: seek (side %d): %v", where, side, err)
				}
			}
		}
		if step == steps-1 {
			t.Logf("seed %d: %d pops, %d acks", seed, len(pops), len(sent))
		}
		sa, sb := tw.state(0, queue, leaseIdx[0]), tw.state(1, queue, leaseIdx[1])
		if sa != sb {
			t.Fatalf("%s: databases differ:\nCAS     %s\nack_v2 %s", where, sa, sb)
		}
	}
}

// randomAck draws an ack request over the recent pops.
func (tw *twin) randomAck(rng *rand.Rand, pops []twinPop) []ackSpec {
	pi := len(pops) - 1
	if rng.Intn(2) == 0 {
		pi -= rng.Intn(min(4, len(pops)))
	}
	n := len(pops[pi].res[0].Messages)
	s := fullAck(rng, pops, pi)
	switch r := rng.Intn(100); {
	case r < 45: // the whole batch, any order
	case r < 55: // a part of it
		s = s[:rng.Intn(n+1)]
	case r < 60: // an item twice
		s = append(s, s[rng.Intn(n)])
	case r < 65:
		s[rng.Intn(n)].lease = "wrong"
	case r < 70:
		for i := range s {
			s[i].lease = "wrong"
		}
	case r < 75:
		s[rng.Intn(n)].lease = "none"
	case r < 82:
		s[rng.Intn(n)].status = protocol.AckFailed
	case r < 85:
		s[rng.Intn(n)].status = []protocol.AckStatus{protocol.AckDLQ, protocol.AckRetry, "bogus"}[rng.Intn(3)]
	case r < 90: // spellings ack_v2 reads as completed
		for i := range s {
			s[i].status = []protocol.AckStatus{"", "SUCCESS", "Completed", protocol.AckSuccess}[rng.Intn(4)]
		}
	case r < 93:
		s = append(s, ackSpec{pop: pi, msg: -1, lease: "own"})
	default: // two batches in one request
		pj := len(pops) - 1 - rng.Intn(min(4, len(pops)))
		s = append(s, fullAck(rng, pops, pj)...)
		rng.Shuffle(len(s), func(i, j int) { s[i], s[j] = s[j], s[i] })
	}
	return s
}

// fullAck acks every message of pops[pi], completed, with its lease, in a
// random order.
func fullAck(rng *rand.Rand, pops []twinPop, pi int) []ackSpec {
	n := len(pops[pi].res[0].Messages)
	s := make([]ackSpec, n)
	for i, k := range rng.Perm(n) {
		s[i] = ackSpec{pop: pi, msg: k, lease: "own"}
	}
	return s
}

func popShape(r *broker.PopResult) string {
	if r == nil {
		return "none"
	}
	s := fmt.Sprint(r.PartitionsClaimed, r.Partition, r.ConsumerGroup)
	for _, m := range r.Messages {
		s += fmt.Sprintf(" %s/%s/%d", m.Partition, m.TransactionID, m.RetryCount)
	}
	return s
}

// state renders the queue's consumer rows and dead letters, lease ids as
// the index of the pop that took them.
func (tw *twin) state(side int, queue string, leases map[string]int) string {
	ctx := context.Background()
	rs, err := tw.conn[side].Query(ctx, `SELECT p.name, c.consumer_group, c.committed_offset, c.batch_end,
			c.acked, c.lease_id, c.lease_owner IS NULL, c.lease_expires_at IS NULL,
			COALESCE(c.lease_expires_at > clock_timestamp(), false), c.retry_count,
			(SELECT COALESCE(string_agg(d.off || ':' || d.superseded || ':' || d.error_message, ',' ORDER BY d.off, d.superseded), '')
			 FROM queen.dead_letters d WHERE d.partition_id = c.partition_id AND d.consumer_group = c.consumer_group)
		FROM queen.consumers c JOIN queen.partitions p ON p.id = c.partition_id
		JOIN queen.queues q ON q.id = p.queue_id
		WHERE q.name = $1 ORDER BY p.name, c.consumer_group`, queue)
	if err != nil {
		tw.t.Fatal(err)
	}
	defer rs.Close()
	var out string
	for rs.Next() {
		var (
			part, group, dl         string
			committed, end          int64
			acked                   []int64
			lease                   *string
			noOwner, noExpiry, live bool
			retry                   int
		)
		if err := rs.Scan(&part, &group, &committed, &end, &acked, &lease, &noOwner, &noExpiry, &live, &retry, &dl); err != nil {
			tw.t.Fatal(err)
		}
		l := "-"
		if lease != nil {
			i, ok := leases[*lease]
			if !ok {
				tw.t.Fatalf("a lease no pop returned: %s", *lease)
			}
			l = fmt.Sprint(i)
		}
		out += fmt.Sprintf("\n  %s/%s cur=%d end=%d acked=%v lease=%s owner-null=%v exp-null=%v live=%v retry=%d dlq=[%s]",
			part, group, committed, end, acked, l, noOwner, noExpiry, live, retry, dl)
	}
	if err := rs.Err(); err != nil {
		tw.t.Fatal(err)
	}
	return out
}
