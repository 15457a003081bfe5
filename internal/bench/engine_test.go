package bench

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"queen-node/internal/nodetest"
	"queen-node/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestSmokeRun is the CI smoke of queen-bench (docs/benchmarks.md): a real
// in-process node, ~3 s of 2 producers at 1,500 msgs/s (open loop), 2 consumers in each of 2 groups, 20
// partitions, long-poll pops with batch acks, and the delivery check.
func TestSmokeRun(t *testing.T) {
	node := nodetest.Start(t)
	cfg := DefaultConfig(node.URL)
	cfg.Producers = 2
	cfg.Consumers = 2
	cfg.Groups = 2
	cfg.Partitions = 20
	cfg.PushBatch = 20
	cfg.PopBatch = 50
	cfg.Duration = 3 * time.Second
	cfg.Drain = 20 * time.Second
	cfg.PollTimeout = 500 * time.Millisecond
	cfg.Setup = true
	cfg.Rate = 1500 // open loop: keeps the smoke light on CI's 2 cores
	var ticks int
	res, err := Run(context.Background(), cfg, func(Progress) { ticks++ })
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	t.Logf("pushed %d (%.0f/s), delivered %d (%.0f/s), acked %d, p50 %.1f ms, p99 %.1f ms, errors %v",
		res.Pushed, res.PushedPerSec, res.Delivered, res.DeliveredPerSec, res.Acked, res.Latency.P50, res.Latency.P99, res.Errors)
	if !res.OK {
		t.Fatalf("run not OK: check %+v, 5xx %d, errors %v %v", res.Check, res.ServerErrors, res.Errors, res.ErrorSamples)
	}
	if res.Pushed == 0 || res.Check.Queued != res.Pushed {
		t.Fatalf("pushed %d, checker queued %d", res.Pushed, res.Check.Queued)
	}
	if len(res.Check.Groups) != 2 {
		t.Fatalf("checked %d groups, want 2", len(res.Check.Groups))
	}
	for g, gr := range res.Check.Groups {
		if gr.Delivered != res.Pushed || gr.Lost != 0 || gr.Duplicates != 0 || gr.OutOfOrder != 0 {
			t.Fatalf("group %s: %+v, pushed %d", g, gr, res.Pushed)
		}
	}
	if res.Check.Unacked != 0 {
		t.Fatalf("%d delivered messages never acked", res.Check.Unacked)
	}
	if res.Delivered != 2*res.Pushed || res.Acked < res.Delivered {
		t.Fatalf("delivered %d, acked %d, want both >= %d", res.Delivered, res.Acked, 2*res.Pushed)
	}
	if res.Latency.Count != res.Delivered || res.Latency.P50 <= 0 {
		t.Fatalf("latency %+v for %d deliveries", res.Latency, res.Delivered)
	}
	if ticks == 0 {
		t.Fatal("progress was never called")
	}
	if node := res.CPU[1]; node.Error != "" || node.Seconds <= 0 {
		t.Fatalf("node CPU: %+v", node)
	}
}

// TestSmokeQueueModeAutoAck runs queue mode with autoAck and a message
// count instead of a duration.
func TestSmokeQueueModeAutoAck(t *testing.T) {
	node := nodetest.Start(t)
	cfg := DefaultConfig(node.URL)
	cfg.Producers = 2
	cfg.Consumers = 2
	cfg.Partitions = 5
	cfg.PushBatch = 10
	cfg.PopBatch = 10
	cfg.Messages = 503
	cfg.AutoAck = true
	cfg.Wait = false
	cfg.Drain = 20 * time.Second
	res, err := Run(context.Background(), cfg, nil)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if !res.OK || res.Pushed != 503 || res.Delivered != 503 || res.AckRequests != 0 {
		t.Fatalf("want 503 pushed and delivered without acks, got OK=%v pushed %d delivered %d acks %d check %+v errors %v",
			res.OK, res.Pushed, res.Delivered, res.AckRequests, res.Check, res.ErrorSamples)
	}
}

// TestSmokeBacklog: with Backlog the consumers start only after the last
// push was answered, so every message is still queued then (no pop ran
// during the push phase) and the drain rate covers the consumers' phase.
// With Even, each partition holds exactly Messages/Partitions (3
// producers, so their shares of 1,000 differ by one).
func TestSmokeBacklog(t *testing.T) {
	node := nodetest.Start(t)
	cfg := DefaultConfig(node.URL)
	cfg.Producers, cfg.Consumers, cfg.Partitions = 3, 2, 20
	cfg.PushBatch, cfg.PopBatch = 25, 25
	cfg.Messages = 1000
	cfg.Rate = 400 // a push phase of about 2.5 s: progress ticks see it
	cfg.Backlog = true
	cfg.Even = true
	cfg.Queue = "smoke-even"
	cfg.Drain = 30 * time.Second
	var popsDuringPush int64
	res, err := Run(context.Background(), cfg, func(p Progress) {
		if !p.Draining && p.DelivRate > 0 {
			popsDuringPush++
		}
	})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if !res.OK || res.Delivered != 1000 || popsDuringPush != 0 || res.DrainSeconds <= 0 || res.DrainedPerSec <= res.DeliveredPerSec {
		t.Fatalf("backlog run: OK=%v delivered %d, deliveries during the pushes %d, drain %.2f s at %.0f/s (overall %.0f/s); check %+v",
			res.OK, res.Delivered, popsDuringPush, res.DrainSeconds, res.DrainedPerSec, res.DeliveredPerSec, res.Check)
	}
	conn, err := pgx.Connect(context.Background(), node.DBURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(context.Background(), `SELECT p.name, count(*) FROM queen.messages m
		JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id
		WHERE q.name = $1 GROUP BY p.name`, cfg.Queue)
	if err != nil {
		t.Fatal(err)
	}
	perPartition, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (int64, error) {
		var name string
		var n int64
		return n, r.Scan(&name, &n)
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(perPartition) != 20 {
		t.Fatalf("even: %d partitions hold messages, want 20", len(perPartition))
	}
	for _, n := range perPartition {
		if n != 50 {
			t.Fatalf("even: per-partition counts %v, want 50 each", perPartition)
		}
	}
}

// TestRunAgainstNoNodeFails: a run whose pushes all fail (nothing listens
// on the address) queued nothing and must not report a pass.
func TestRunAgainstNoNodeFails(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // a free port: every request is refused
	cfg := DefaultConfig("http://" + addr)
	cfg.Producers, cfg.Consumers, cfg.Partitions = 1, 1, 2
	cfg.Duration, cfg.Drain = 500*time.Millisecond, time.Second
	cfg.PollTimeout = 100 * time.Millisecond
	res, err := Run(context.Background(), cfg, nil)
	if err != nil {
		return // refusing to run is a failure too
	}
	if res.OK || res.Pushed != 0 {
		t.Fatalf("run against no node: OK=%v pushed=%d, want not OK and nothing pushed", res.OK, res.Pushed)
	}
}
