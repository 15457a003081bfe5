package broker

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"queen-node/mesh"
)

// peersMesh is a MeshView that only says whether peers are alive.
type peersMesh struct{ peers bool }

func (peersMesh) Enqueue(tenant, queue, partition string) {}
func (m peersMesh) HasPeers() bool                        { return m.peers }
func (peersMesh) Stats() mesh.Stats                       { return mesh.Stats{} }
func (peersMesh) Members() []mesh.Member                  { return nil }

// TestOneFlushInFlight: a node runs one claim flush at a time
// (flushesInFlight), which carries the CAS acks too, alone and with live
// peers (the bound once depended on them): 12 concurrent consumers never
// pass it, the ack combiner never runs a flight of its own, every message
// is still delivered, and some flushes carry claims and acks together.
func TestOneFlushInFlight(t *testing.T) {
	for _, peers := range []bool{false, true} {
		t.Run(fmt.Sprintf("peers=%v", peers), func(t *testing.T) {
			b, _ := startCombineBroker(t, true)
			b.SetMesh(peersMesh{peers: peers})
			oneFlushInFlight(t, b)
		})
	}
}

func oneFlushInFlight(t *testing.T, b *Broker) {
	parts := []string{"p0", "p1", "p2", "p3", "p4", "p5"}
	const perPart = 150
	for _, p := range parts {
		pushSeq(t, b, "q", p, 1, perPart)
	}
	var maxPop, maxAck atomic.Int64
	stop := make(chan struct{})
	var watch sync.WaitGroup
	watch.Add(1)
	go func() { // samples the combiners' in-flight counts
		defer watch.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			b.popc.mu.Lock()
			p := int64(b.popc.inflight)
			b.popc.mu.Unlock()
			b.acks.mu.Lock()
			a := int64(b.acks.inflight)
			b.acks.mu.Unlock()
			if p > maxPop.Load() {
				maxPop.Store(p)
			}
			if a > maxAck.Load() {
				maxAck.Store(a)
			}
			time.Sleep(100 * time.Microsecond)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var delivered atomic.Int64
	want := int64(len(parts) * perPart)
	var wg sync.WaitGroup
	errs := make(chan error, 12)
	for w := 0; w < 12; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for delivered.Load() < want && ctx.Err() == nil {
				res, err := b.Pop(ctx, "t", PopRequest{Queue: "q", Batch: 7, Partitions: 1, SubscriptionMode: "all"})
				if err != nil {
					errs <- fmt.Errorf("pop: %w", err)
					return
				}
				if res == nil || len(res.Messages) == 0 {
					continue
				}
				acks := make([]AckItem, len(res.Messages))
				for i, m := range res.Messages {
					acks[i] = AckItem{TransactionID: m.TransactionID, PartitionID: m.PartitionID, LeaseID: res.LeaseID}
				}
				out, err := b.Ack(ctx, "t", acks)
				if err != nil {
					errs <- fmt.Errorf("ack: %w", err)
					return
				}
				for _, o := range out {
					if !o.Success {
						errs <- fmt.Errorf("ack refused: %s", o.Error)
						return
					}
				}
				delivered.Add(int64(len(res.Messages)))
			}
		}()
	}
	wg.Wait()
	close(stop)
	watch.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if delivered.Load() != want {
		t.Fatalf("delivered %d of %d (%v)", delivered.Load(), want, ctx.Err())
	}
	if maxPop.Load() != 1 || maxAck.Load() != 0 {
		t.Fatalf("flights at most: claims %d, acks of their own %d; want 1 and 0", maxPop.Load(), maxAck.Load())
	}
	s := b.stats.Snapshot()
	if s.AckFlushes == 0 || s.PopFlushes == 0 {
		t.Fatalf("no CAS ack or claim flush ran: %d, %d", s.AckFlushes, s.PopFlushes)
	}
	if joint := s.AckFlushes - s.AckFlushTime.Runs; joint == 0 {
		t.Fatalf("no flush carried claims and acks together (%d ack statements, all alone)", s.AckFlushes)
	}
}
