package broker

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"

	"queen-node/internal/pgtest"
	"queen-node/mesh"
	"queen-node/pg"
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
				if err := ackServed(ctx, b, res); err != nil {
					errs <- err
					return
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
	// (maxPop cannot pass 1 by construction; maxAck and the joint flushes
	// below are what this checks.)
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

// TestAcksOwnFlightWithoutPopCombine: with QUEEN_POP_COMBINE=0 the CAS acks
// keep a flight of their own, which serves concurrent consumers and ends
// with nothing left waiting.
func TestAcksOwnFlightWithoutPopCombine(t *testing.T) {
	cfg := DefaultConfig()
	cfg.PG.URL = pgtest.NewDatabase(t)
	cfg.NodeName = "nocombine"
	cfg.Maintenance.BufferDir = t.TempDir()
	cfg.PopCombine = false
	cfg.BulkProvision = false
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b, err := New(ctx, cfg, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	if b.popc != nil || b.acks == nil || b.acks.joint != nil {
		t.Fatalf("combiners: claims %v, acks %v", b.popc, b.acks)
	}
	for _, p := range []string{"p0", "p1", "p2", "p3"} {
		pushSeq(t, b, "q", p, 1, 60)
	}
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 30; i++ {
				res, err := b.Pop(ctx, "t", PopRequest{Queue: "q", Batch: 5, Partitions: 1, SubscriptionMode: "all"})
				if err != nil {
					t.Error(err)
					return
				}
				if res == nil || len(res.Messages) == 0 {
					continue
				}
				if err := ackServed(ctx, b, res); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	s := b.stats.Snapshot()
	if s.AcksCAS == 0 || s.AckFlushes == 0 || s.AckFlushTime.Runs != s.AckFlushes {
		t.Fatalf("CAS acks %d in %d flushes (%d timed)", s.AcksCAS, s.AckFlushes, s.AckFlushTime.Runs)
	}
	b.acks.mu.Lock()
	defer b.acks.mu.Unlock()
	if b.acks.inflight != 0 || len(b.acks.pending) != 0 {
		t.Fatalf("after the consumers: %d flights, %d acks waiting", b.acks.inflight, len(b.acks.pending))
	}
}

// TestAckQueuedAsTheFlightEndsIsSent: an ack queued after the claim flight
// last looked for acks, but before it decided to end, is sent (the flight
// goes round again: dirty), not left waiting for the next claim.
func TestAckQueuedAsTheFlightEndsIsSent(t *testing.T) {
	b, _ := startCombineBroker(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	answered := make(chan error, 1)
	var once sync.Once
	b.popc.idleHook = func() {
		once.Do(func() {
			go func() { // an ack of a partition that does not exist: answered not OK
				res, err := b.acks.submit(ctx, []pg.CASPair{{Tenant: "t", PartitionID: uuid.NewString(),
					Group: QueueMode, LeaseID: uuid.NewString(), First: 1, End: 1, N: 1}})
				if err == nil && (len(res) != 1 || res[0].OK) {
					err = fmt.Errorf("answer %+v, want one pair not OK", res)
				}
				answered <- err
			}()
			// Hold the flight until the ack's kick marked it.
			for ctx.Err() == nil {
				b.popc.mu.Lock()
				d := b.popc.dirty
				b.popc.mu.Unlock()
				if d {
					return
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
	b.popc.kick() // a flight with nothing to send
	select {
	case err := <-answered:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the ack was left waiting after the flight ended")
	}
}
