package broker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"queen-node/broker"
	"queen-node/internal/nodetest"
)

// lanePartitions names partitions of queue, per partsPerLane of each lane
// of lanes, so that a test knows where its rows go.
func lanePartitions(queue string, lanes, partsPerLane int) [][]string {
	out := make([][]string, lanes)
	for i := 0; ; i++ {
		p := fmt.Sprint("p", i)
		l := broker.LaneOf(queue, p, lanes)
		if len(out[l]) < partsPerLane {
			out[l] = append(out[l], p)
		}
		full := true
		for _, ps := range out {
			full = full && len(ps) == partsPerLane
		}
		if full {
			return out
		}
	}
}

// One push whose rows span both lanes is written by both (two flushes),
// every answer at its own index, and each partition's rows stored in the
// push's order.
func TestPushLanesSplitAPush(t *testing.T) {
	n := nodetest.Start(t, func(c *broker.Config) { c.PushCombine, c.PushLanes = true, 2 })
	b := n.Broker
	if got := b.Snapshot().PushLanes; got != 2 {
		t.Fatalf("%d push lanes, want 2", got)
	}
	const q = "lanes"
	parts := lanePartitions(q, 2, 3)
	all := append(append([]string{}, parts[0]...), parts[1]...)
	items := make([]broker.PushItem, 60)
	for i := range items { // partitions interleaved: p(a) p(b) ... p(a) ...
		items[i] = broker.PushItem{Queue: q, Partition: all[i%len(all)], TransactionID: fmt.Sprint("tx", i),
			Payload: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))}
	}
	before := b.Snapshot().Requests.PushFlushes
	res, err := b.Push(context.Background(), broker.DefaultTenant, nil, items)
	if err != nil {
		t.Fatal(err)
	}
	if got := b.Snapshot().Requests.PushFlushes - before; got < 2 {
		t.Fatalf("a push over both lanes took %d flush, want one per lane", got)
	}
	ids := map[string]bool{}
	for i, r := range res {
		if r.Index != i || r.TransactionID != items[i].TransactionID || r.Status != "queued" || r.MessageID == "" || ids[r.MessageID] {
			t.Fatalf("answer %d: %+v", i, r)
		}
		ids[r.MessageID] = true
	}
	last := map[string]int{}
	got := drainQueue(t, n, q, func(m msg) {
		p, i := m["partition"].(string), int(m["data"].(map[string]any)["i"].(float64))
		if items[i].Partition != p {
			t.Fatalf("message %d stored in %s, pushed to %s", i, p, items[i].Partition)
		}
		if m["id"] != res[i].MessageID { // each answer is its own item's
			t.Fatalf("message %d stored as %v, answered %s", i, m["id"], res[i].MessageID)
		}
		if prev, ok := last[p]; ok && i <= prev {
			t.Fatalf("partition %s: message %d after %d", p, i, prev)
		}
		last[p] = i
	})
	if got != len(items) {
		t.Fatalf("popped %d of %d", got, len(items))
	}
}

// A partition always goes through the same lane: producers pushing to
// overlapping partitions never meet each other's row locks on one node, so
// no row is ever deferred (a lane chosen per row, or per push, would have
// two lanes' flushes lock the same partitions and defer rows), and every
// producer's order holds per partition.
func TestPushLanesNeverShareAPartition(t *testing.T) {
	n := nodetest.Start(t, func(c *broker.Config) { c.PushCombine, c.PushLanes = true, 2 })
	b := n.Broker
	const q, producers, pushes, per = "lanes-share", 6, 30, 40
	parts := lanePartitions(q, 2, 4)
	all := append(append([]string{}, parts[0]...), parts[1]...)
	var wg sync.WaitGroup
	errs := make(chan error, producers)
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			for i := 0; i < pushes; i++ {
				items := make([]broker.PushItem, per)
				for j := range items {
					items[j] = broker.PushItem{Queue: q, Partition: all[(p+i+j)%len(all)],
						Payload: json.RawMessage(fmt.Sprintf(`{"p":%d,"s":%d}`, p, i*per+j))}
				}
				res, err := b.Push(context.Background(), broker.DefaultTenant, nil, items)
				if err != nil {
					errs <- err
					return
				}
				for j, r := range res {
					if r.Index != j || r.Status != "queued" {
						errs <- fmt.Errorf("producer %d push %d answer %d: %+v", p, i, j, r)
						return
					}
				}
			}
		}(p)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	st := b.Snapshot().Requests
	if st.PushDeferred != 0 {
		t.Fatalf("%d rows deferred on one node: two lanes locked the same partition", st.PushDeferred)
	}
	if st.PushFlushes >= st.Pushes*2 {
		t.Fatalf("%d pushes in %d flushes: nothing was combined", st.Pushes, st.PushFlushes)
	}
	last := map[string]int{}
	got := drainQueue(t, n, q, func(m msg) {
		d := m["data"].(map[string]any)
		k := fmt.Sprint(d["p"], "/", m["partition"])
		s := int(d["s"].(float64))
		if prev, ok := last[k]; ok && s <= prev {
			t.Fatalf("producer/partition %s: %d after %d", k, s, prev)
		}
		last[k] = s
	})
	if got != producers*pushes*per {
		t.Fatalf("popped %d of %d", got, producers*pushes*per)
	}
}

// A push whose part in one lane fails fails: what its other lane wrote
// stays written, and the client's retry finds those rows duplicates and
// stores the rest once.
func TestPushLanesOneLaneFails(t *testing.T) {
	n := nodetest.Start(t, func(c *broker.Config) { c.PushCombine, c.PushLanes = true, 2 })
	b := n.Broker
	const q = "lanes-fail"
	parts := lanePartitions(q, 2, 1)
	good, bad := parts[0][0], parts[1][0]
	items := []broker.PushItem{
		{Queue: q, Partition: good, TransactionID: "g1", Payload: json.RawMessage(`{"n":1}`)},
		{Queue: q, Partition: bad, TransactionID: "b1", Payload: json.RawMessage(`{"unterminated`)},
		{Queue: q, Partition: good, TransactionID: "g2", Payload: json.RawMessage(`{"n":2}`)},
	}
	if _, err := b.Push(context.Background(), broker.DefaultTenant, nil, items); err == nil {
		t.Fatal("a push with invalid JSON in one lane succeeded")
	}
	items[1].Payload = json.RawMessage(`{"n":3}`)
	res, err := b.Push(context.Background(), broker.DefaultTenant, nil, items)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"duplicate", "queued", "duplicate"}
	for i, r := range res {
		if r.Index != i || string(r.Status) != want[i] {
			t.Fatalf("retry answer %d: %+v, want %s", i, r, want[i])
		}
	}
	got := map[string]int{}
	drainQueue(t, n, q, func(m msg) { got[m["transactionId"].(string)]++ })
	if len(got) != 3 || got["g1"] != 1 || got["b1"] != 1 || got["g2"] != 1 {
		t.Fatalf("stored %v, want g1, b1 and g2 once each", got)
	}
}

// Partition names spread over the lanes about evenly, whatever their
// shape: each lane of 2, 3 and 16 holds its share of 1,000 names within
// half of it, and names of the same letters in another order are not kept
// together (FNV-1a reduced modulo 2 would put every such pair in one lane).
func TestLaneOfSpreadsNames(t *testing.T) {
	for _, shape := range []string{"p%d", "part-%d", "shard-%03d"} {
		for _, lanes := range []int{2, 3, 16} {
			count := make([]int, lanes)
			for i := 0; i < 1000; i++ {
				count[broker.LaneOf("q", fmt.Sprintf(shape, i), lanes)]++
			}
			mean := 1000 / lanes
			for l, c := range count {
				if c < mean/2 || c > mean*3/2 {
					t.Fatalf("%s over %d lanes: lane %d holds %d of 1,000 (%v)", shape, lanes, l, c, count)
				}
			}
		}
	}
	pairs, apart := 0, 0
	for x := 0; x < 10; x++ {
		for y := x + 1; y < 10; y++ {
			pairs++
			if broker.LaneOf("q", fmt.Sprintf("p%d%d", x, y), 2) != broker.LaneOf("q", fmt.Sprintf("p%d%d", y, x), 2) {
				apart++
			}
		}
	}
	if apart < pairs/4 || apart > pairs*3/4 {
		t.Fatalf("%d of %d names whose letters are the same in another order are in different lanes", apart, pairs)
	}
}

// A node runs at most a quarter of its pool as push lanes, one at least,
// and says how many in its status and /metrics (0 with QUEEN_PUSH_COMBINE=0).
func TestPushLanesBoundedByPool(t *testing.T) {
	for _, c := range []struct {
		lanes int
		pool  int32
		want  int
	}{{2, 4, 1}, {2, 2, 1}, {16, 32, 8}, {2, 32, 2}, {1, 32, 1}, {0, 32, 1}} {
		if got := broker.PushLaneCount(c.lanes, c.pool); got != c.want {
			t.Fatalf("%d lanes with a pool of %d: %d, want %d", c.lanes, c.pool, got, c.want)
		}
	}
	n := nodetest.Start(t, func(cfg *broker.Config) { cfg.PushCombine, cfg.PushLanes, cfg.PG.MaxConns = true, 16, 12 })
	if got := n.Broker.Snapshot().PushLanes; got != 3 {
		t.Fatalf("QUEEN_PUSH_LANES=16 with a pool of 12: the node runs %d lanes, want 3", got)
	}
	if r := n.Do(t, "GET", "/metrics", nil); !strings.Contains(string(r.Body), "\nqueen_push_lanes 3\n") {
		t.Fatalf("/metrics does not say queen_push_lanes 3")
	}
	off := nodetest.Start(t, func(cfg *broker.Config) { cfg.PushCombine = false })
	if got := off.Broker.Snapshot().PushLanes; got != 0 {
		t.Fatalf("QUEEN_PUSH_COMBINE=0: %d push lanes, want 0", got)
	}
}

// A client that leaves while its push waits in two lanes, one of them held
// up by a partition another transaction locks, is answered at once with
// its context's error; the free lane's rows commit, the held lane goes on
// once the lock is gone, nothing is stored twice, and the next push through
// both lanes is answered.
func TestPushLanesClientLeaves(t *testing.T) {
	n := nodetest.Start(t, func(c *broker.Config) { c.PushCombine, c.PushLanes = true, 2 })
	b := n.Broker
	ctx := context.Background()
	const q = "lanes-leave"
	parts := lanePartitions(q, 2, 1)
	free, held := parts[0][0], parts[1][0]
	item := func(p, tx string) broker.PushItem {
		return broker.PushItem{Queue: q, Partition: p, TransactionID: tx, Payload: json.RawMessage(`{}`)}
	}
	if _, err := b.Push(ctx, broker.DefaultTenant, nil, []broker.PushItem{item(free, "f0"), item(held, "h0")}); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, n.DBURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	holder, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(ctx)
	if _, err := holder.Exec(ctx, `SELECT 1 FROM queen.partitions p JOIN queen.queues qu ON qu.id = p.queue_id
		WHERE qu.name = $1 AND p.name = $2 FOR NO KEY UPDATE OF p`, q, held); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	answered := make(chan error, 1)
	go func() {
		_, err := b.Push(cctx, broker.DefaultTenant, nil, []broker.PushItem{item(free, "f1"), item(held, "h1")})
		answered <- err
	}()
	reader, err := pgx.Connect(ctx, n.DBURL)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close(ctx)
	count := func(tx string) int {
		var c int
		if err := reader.QueryRow(ctx, `SELECT count(*) FROM queen.messages WHERE transaction_id = $1`, tx).Scan(&c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	waitFor(t, 10*time.Second, "the free lane's row to commit", func() bool { return count("f1") == 1 })
	select {
	case err := <-answered:
		t.Fatalf("push answered %v while its held lane waits", err)
	default:
	}
	cancel()
	select {
	case err := <-answered:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the left client's push answered %v, want its context's error", err)
		}
	case <-time.After(time.Second): // less than combineFlushTimeout (2 s), whose expiry would answer it too
		t.Fatal("a client that left is not answered while a lane is held")
	}
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := b.Push(ctx, broker.DefaultTenant, nil, []broker.PushItem{item(free, "f2"), item(held, "h2")})
	if err != nil || len(res) != 2 || res[0].Status != "queued" || res[1].Status != "queued" {
		t.Fatalf("the next push through both lanes: %+v, %v", res, err)
	}
	for _, tx := range []string{"f0", "h0", "f1", "f2", "h2"} {
		if c := count(tx); c != 1 {
			t.Fatalf("%s stored %d times, want once", tx, c)
		}
	}
	if c := count("h1"); c > 1 { // sent before the client left: it may commit, once
		t.Fatalf("h1 stored %d times", c)
	}
}
