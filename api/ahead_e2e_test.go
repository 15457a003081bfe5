package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"queen-node/internal/nodetest"
	"queen-node/node"
)

// Claims taken ahead for a consumer whose pops and acks are forwarded to
// its queue's owner (docs/api.md, "Claims taken ahead"): the forwarding
// node asks, with each ack, for the next pop's claim under a lease it
// picks, and forwards that pop under it. Three consumers on node 1 of a
// queue node 0 owns (two with the same parameters, so one may pop under
// the lease the other's ack asked for) consume what two producers push: every message arrives once and in order, the owner
// answered most pops with claims taken ahead, and none is left leased.
// With QUEEN_POP_PREFETCH off on both nodes, nothing is taken ahead.
func TestClaimsTakenAheadForForwardedPops(t *testing.T) {
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("prefetch %v", on), func(t *testing.T) {
			nodes, owned := ownedCluster(t, 2, 1, func(c *node.Config) { c.Broker.PopPrefetch = on })
			q := owned[0][0]
			testAheadForwarded(t, nodes, q, on)
		})
	}
}

func testAheadForwarded(t *testing.T, nodes []*nodetest.Node, q string, on bool) {
	const partitions, perPartition = 12, 40
	total := partitions * perPartition
	// Warm-up: one message per partition, consumed through the owner, so
	// its ring and consumer rows exist (a claim is taken ahead only on
	// partitions whose consumer row the owner knows).
	var warm []map[string]any
	for p := 0; p < partitions; p++ {
		warm = append(warm, map[string]any{"queue": q, "partition": fmt.Sprintf("p%d", p), "payload": map[string]int{"p": p, "seq": -1}})
	}
	if code, body, err := postJSON(nodes[0].URL+"/api/v1/push", map[string]any{"items": warm}); err != nil || code != 201 {
		t.Fatalf("push: %d %s %v", code, body, err)
	}
	for got := 0; got < partitions; {
		msgs, code, err := popVia(context.Background(), nodes[0].URL, q, fmt.Sprintf("batch=1&partitions=%d&wait=true&timeout=1000", partitions))
		if err != nil || code != 200 {
			t.Fatalf("warm-up pop: %d %v", code, err)
		}
		got += len(msgs)
		ackAll(t, nodes[0].URL, msgs)
	}
	owner := nodes[0].Broker
	before := owner.Stats().PrefetchServed.Load()

	var pwg sync.WaitGroup
	perr := make(chan error, 2)
	for p := 0; p < 2; p++ {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			for seq := 0; seq < perPartition; seq += 5 {
				var items []map[string]any
				for part := p; part < partitions; part += 2 {
					for k := seq; k < seq+5; k++ {
						items = append(items, map[string]any{"queue": q, "partition": fmt.Sprintf("p%d", part),
							"payload": map[string]int{"p": part, "seq": k}})
					}
				}
				if code, body, err := postJSON(nodes[1].URL+"/api/v1/push", map[string]any{"items": items}); err != nil || code != 201 {
					perr <- fmt.Errorf("push: %d %s %v", code, body, err)
					return
				}
			}
		}()
	}
	var mu sync.Mutex
	next := make([]int, partitions)
	delivered, pops := 0, 0
	var cwg sync.WaitGroup
	cerr := make(chan error, 3)
	for c := 0; c < 3; c++ {
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			deadline := time.Now().Add(60 * time.Second)
			for {
				mu.Lock()
				done := delivered >= total
				mu.Unlock()
				if done {
					return
				}
				if time.Now().After(deadline) {
					cerr <- fmt.Errorf("consumer %d: %d of %d after 60 s", c, delivered, total)
					return
				}
				// Consumers 0 and 1 share a line (the same parameters, as
				// replicas of one worker do); 2 has its own.
				msgs, code, err := popVia(context.Background(), nodes[1].URL, q, fmt.Sprintf("batch=%d&wait=true&timeout=300", 5+6*(c/2)))
				if err != nil || code != 200 && code != 204 {
					cerr <- fmt.Errorf("consumer %d: pop: %d %v", c, code, err)
					return
				}
				if len(msgs) == 0 {
					continue
				}
				mu.Lock()
				pops++
				for _, m := range msgs {
					if m.Data.Seq != next[m.Data.P] {
						mu.Unlock()
						cerr <- fmt.Errorf("partition %d: seq %d, want %d", m.Data.P, m.Data.Seq, next[m.Data.P])
						return
					}
					next[m.Data.P]++
					delivered++
				}
				mu.Unlock()
				if err := ackBatch(nodes[1].URL, msgs); err != nil {
					cerr <- fmt.Errorf("consumer %d: %w", c, err)
					return
				}
			}
		}()
	}
	pwg.Wait()
	cwg.Wait()
	close(perr)
	close(cerr)
	for err := range perr {
		t.Fatal(err)
	}
	for err := range cerr {
		t.Fatal(err)
	}
	if delivered != total {
		t.Fatalf("delivered %d of %d", delivered, total)
	}
	st := owner.Stats()
	served := st.PrefetchServed.Load() - before
	t.Logf("%d pops with messages; the owner served %d from claims taken ahead (taken %d, released %d)",
		pops, served, st.PrefetchTaken.Load(), st.PrefetchReleased.Load())
	if !on {
		if st.PrefetchTaken.Load() != 0 {
			t.Fatalf("prefetch off: %d claims taken ahead", st.PrefetchTaken.Load())
		}
		return
	}
	if served < int64(pops)/4 {
		t.Fatalf("the owner served %d of %d forwarded pops from claims taken ahead", served, pops)
	}
	// Every claim taken ahead was served or released: no lease is left.
	deadline := time.Now().Add(5 * time.Second)
	for st.PrefetchTaken.Load() != st.PrefetchServed.Load()+st.PrefetchReleased.Load() {
		if time.Now().After(deadline) {
			t.Fatalf("taken %d, served %d, released %d", st.PrefetchTaken.Load(), st.PrefetchServed.Load(), st.PrefetchReleased.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if msgs, code, err := popVia(context.Background(), nodes[1].URL, q, "batch=10&wait=false"); err != nil || code != 204 {
		t.Fatalf("after the run: %d %v %d messages", code, err, len(msgs))
	}
}

// ackBatch acks msgs completed under their leases through base.
func ackBatch(base string, msgs []poppedMsg) error {
	var acks []map[string]any
	for _, m := range msgs {
		acks = append(acks, map[string]any{"transactionId": m.TransactionID, "partitionId": m.PartitionID,
			"leaseId": m.LeaseID, "status": "completed"})
	}
	code, body, err := postJSON(base+"/api/v1/ack/batch", map[string]any{"acknowledgments": acks})
	if err != nil || code != 200 {
		return fmt.Errorf("ack: %d %s %v", code, body, err)
	}
	var res []struct {
		Success bool    `json:"success"`
		Error   *string `json:"error"`
	}
	if err := json.Unmarshal(body, &res); err != nil || len(res) != len(acks) {
		return fmt.Errorf("ack answer %s: %v", body, err)
	}
	for i, a := range res {
		if !a.Success {
			return fmt.Errorf("ack %d (lease %s) refused: %v", i, acks[i]["leaseId"], *a.Error)
		}
	}
	return nil
}

func ackAll(t *testing.T, base string, msgs []poppedMsg) {
	t.Helper()
	if err := ackBatch(base, msgs); err != nil {
		t.Fatal(err)
	}
}
