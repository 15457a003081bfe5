package broker

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestFlushClocksCountEachRequestOnce: every push, claim and CAS ack that
// goes through its combiner is counted once in its kind's waits, and each
// kind's flushes add busy time; concurrent requests still count one each.
func TestFlushClocksCountEachRequestOnce(t *testing.T) {
	b, _ := startCombineBroker(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	const parts, rounds, popRounds = 4, 3, 4
	names := []string{"p0", "p1", "p2", "p3"}
	var wg sync.WaitGroup
	for r := 0; r < rounds; r++ {
		for _, p := range names {
			wg.Add(1)
			go func(p string, from int) {
				defer wg.Done()
				pushSeq(t, b, "q", p, from, 5)
			}(p, r*5)
		}
	}
	wg.Wait()
	s := b.stats.Snapshot()
	if got := s.PushFlushTime.Waited; got != parts*rounds {
		t.Fatalf("push waits counted %d, want %d (one per push)", got, parts*rounds)
	}
	if s.PushFlushTime.Runs != s.PushFlushes || s.PushFlushTime.BusySeconds <= 0 || s.PushFlushTime.WaitSeconds < 0 {
		t.Fatalf("push flush time %+v", s.PushFlushTime)
	}

	// One claim per partition, concurrently, then one ack request per
	// claim; four rounds: a group's first claims make its consumer rows
	// alone, outside the combiner (concurrent first contacts may take two
	// rounds to teach the node every partition), the last round's all go
	// through it.
	type got struct {
		res *PopResult
		err error
	}
	var before Counters
	for round := 0; round < popRounds; round++ {
		if round >= 1 {
			for i, p := range names {
				pushSeq(t, b, "q", p, 100*round+i, 1)
			}
			before = b.stats.Snapshot()
		}
		outs := make([]got, parts)
		for i, p := range names {
			wg.Add(1)
			go func(i int, p string) {
				defer wg.Done()
				res, err := b.Pop(ctx, "t", PopRequest{Queue: "q", Partition: p, Batch: 100})
				outs[i] = got{res, err}
			}(i, p)
		}
		wg.Wait()
		for i, o := range outs {
			if o.err != nil || o.res == nil || len(o.res.Messages) == 0 {
				t.Fatalf("pop of %s: %+v %v", names[i], o.res, o.err)
			}
			wg.Add(1)
			go func(res *PopResult) {
				defer wg.Done()
				if err := ackServed(ctx, b, res); err != nil {
					t.Error(err)
				}
			}(o.res)
		}
		wg.Wait()
	}
	s = b.stats.Snapshot()
	if n := s.PopFlushTime.Waited - before.PopFlushTime.Waited; n != parts {
		t.Fatalf("claim waits counted %d in the last round, want %d (one per claim)", n, parts)
	}
	if s.PopFlushTime.BusySeconds <= before.PopFlushTime.BusySeconds {
		t.Fatalf("claim flush time %+v, before %+v", s.PopFlushTime, before.PopFlushTime)
	}
	if want := int64(parts * (rounds*5 + popRounds - 1)); s.AcksCAS != want {
		t.Fatalf("%d items acked by CAS, want all %d", s.AcksCAS, want)
	}
	if s.AckFlushTime.Waited != popRounds*parts {
		t.Fatalf("CAS ack waits counted %d, want %d (one per request)", s.AckFlushTime.Waited, popRounds*parts)
	}
	// The acks of a round wait for no claim (the round's claims were
	// answered first), so each goes in an ack-only flush of the claims'
	// flight: kind ack, counted in ack_flushes.
	if s.AckFlushes < popRounds || s.AckFlushes > popRounds*parts || s.AckFlushTime.Runs != s.AckFlushes ||
		s.AckFlushTime.BusySeconds <= 0 {
		t.Fatalf("CAS ack flushes %d, time %+v", s.AckFlushes, s.AckFlushTime)
	}
}

// ackServed acks every message of a pop, completed, under its lease (the
// batch the CAS ack takes whole), and fails on an error or a refused item.
func ackServed(ctx context.Context, b *Broker, res *PopResult) error {
	items := make([]AckItem, len(res.Messages))
	for k, m := range res.Messages {
		items[k] = AckItem{TransactionID: m.TransactionID, PartitionID: m.PartitionID, LeaseID: res.LeaseID}
	}
	out, err := b.Ack(ctx, "t", items)
	if err != nil {
		return fmt.Errorf("ack: %w", err)
	}
	for _, a := range out {
		if !a.Success {
			return fmt.Errorf("ack refused: %+v", a)
		}
	}
	return nil
}
