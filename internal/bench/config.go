// Package bench is the engine of cmd/queen-bench: producers and consumers
// that drive queen-node over HTTP like a user, the delivery checker, the
// latency histograms and the CPU probes. docs/benchmarks.md ("queen-bench")
// describes what it measures and how to read it.
package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"queen-node/protocol"
)

// QueueMode is the built-in consumer group of work-queue mode.
const QueueMode = protocol.QueueMode

// Defaults of Config, used by DefaultConfig and the command's flags.
const (
	ProducersDefault     = 4
	ConsumersDefault     = 8
	PartitionsDefault    = 100
	PayloadDefault       = 256
	PushBatchDefault     = 100
	PopBatchDefault      = 100
	PopPartitionsDefault = 1
	PollTimeoutDefault   = time.Second
	DurationDefault      = 20 * time.Second
	DrainDefault         = 30 * time.Second
)

// Config is one benchmark run.
type Config struct {
	// Nodes are the base URLs of the nodes; workers are spread over them
	// round-robin. At least one.
	Nodes []string `json:"nodes"`
	// ConsumerNodes, when set, are the base URLs consumers use instead of
	// Nodes (producers keep Nodes): the suite's cross-node wake scenario
	// pushes on one node and parks its consumer on another. Default empty.
	ConsumerNodes []string `json:"consumer_nodes,omitempty"`
	// TxnPrefix is prepended to every transactionId ("<prefix><producer>-<seq>"),
	// so several runs can share one queue without the server answering
	// "duplicate". Default empty.
	TxnPrefix string `json:"txn_prefix,omitempty"`
	// Queue is the queue name; "" = a fresh name per run (bench-<time>), so
	// the checker starts from an empty queue.
	Queue string `json:"queue"`
	// Producers is the number of producers, each with one request in
	// flight. Default 4.
	Producers int `json:"producers"`
	// Consumers is the number of consumers per group. Default 8.
	Consumers int `json:"consumers"`
	// Groups is the number of named consumer groups (bench-g0..); each
	// receives every message. 0 = queue mode (__QUEUE_MODE__). Default 0.
	Groups int `json:"groups"`
	// Partitions: each message goes to a random one of p0..p<N-1>. Default 100.
	Partitions int `json:"partitions"`
	// Even sends the run's k-th message (counted over all producers) to
	// partition k mod Partitions instead of a random one, so Messages =
	// n x Partitions queues exactly n per partition: a backlog of a known
	// depth everywhere (issue 20 asks for at least 50 per partition), where
	// random partitions leave some with half the mean. Default false.
	Even bool `json:"even,omitempty"`
	// PayloadBytes is the approximate JSON size of each message's data
	// (never less than the fields the checker needs). Default 256.
	PayloadBytes int `json:"payload_bytes"`
	// PushBatch is the number of messages per push request. Default 100.
	PushBatch int `json:"push_batch"`
	// PopBatch is the pop's batch parameter. Default 100.
	PopBatch int `json:"pop_batch"`
	// PopPartitions is the pop's partitions parameter. Default 1.
	PopPartitions int `json:"pop_partitions"`
	// Wait turns long-poll on (wait=true&timeout=PollTimeout). Default true.
	Wait bool `json:"wait"`
	// PollTimeout is the long-poll timeout. Default 1s: short, so consumers
	// notice the end of the run quickly.
	PollTimeout time.Duration `json:"poll_timeout_ns"`
	// AutoAck pops with autoAck=true and sends no ack. Default false: one
	// POST /api/v1/ack/batch per popped batch.
	AutoAck bool `json:"auto_ack"`
	// Duration is how long producers push when Messages is 0. Default 20s.
	Duration time.Duration `json:"duration_ns"`
	// Messages, when > 0, is the total to push instead of a duration.
	Messages int `json:"messages"`
	// Rate is the target push rate in messages per second over all
	// producers (open loop, paced per batch). 0 = as fast as possible.
	Rate float64 `json:"rate"`
	// Backlog starts the consumers only once every push was answered, so
	// they drain a queued backlog (issue 20: a real backlog per partition)
	// instead of keeping up with the producers. Default false.
	Backlog bool `json:"backlog"`
	// Drain is how long consumers may keep going after the producers stop
	// before undelivered messages count as lost. Default 30s.
	Drain time.Duration `json:"drain_ns"`
	// Setup configures the queue (POST /api/v1/configure) before the run,
	// with LeaseSeconds when > 0.
	Setup        bool `json:"setup"`
	LeaseSeconds int  `json:"lease_seconds"`
	// PGPID is the postmaster's process id when PostgreSQL runs on this
	// machine; 0 = PostgreSQL CPU is not measured.
	PGPID int `json:"pg_pid"`
	// WALPosition, when set, reads the server's WAL position in bytes; the
	// result then reports WAL bytes per delivered message.
	WALPosition func(ctx context.Context) (int64, error) `json:"-"`
}

// DefaultConfig returns the standard workload against one node:
// 4 producers, batches of 100 over 100 random partitions, 8 long-poll
// consumers popping 100 with a batch ack, queue mode, 20 s.
func DefaultConfig(node string) Config {
	return Config{
		Nodes:         []string{node},
		Producers:     ProducersDefault,
		Consumers:     ConsumersDefault,
		Partitions:    PartitionsDefault,
		PayloadBytes:  PayloadDefault,
		PushBatch:     PushBatchDefault,
		PopBatch:      PopBatchDefault,
		PopPartitions: PopPartitionsDefault,
		Wait:          true,
		PollTimeout:   PollTimeoutDefault,
		Duration:      DurationDefault,
		Drain:         DrainDefault,
	}
}

// Validate checks the configuration and fills a fresh queue name.
func (c *Config) Validate() error {
	if len(c.Nodes) == 0 {
		return fmt.Errorf("nodes: at least one node URL is required")
	}
	normalizeURLs(c.Nodes)
	normalizeURLs(c.ConsumerNodes)
	switch {
	case c.Producers < 1:
		return fmt.Errorf("producers: %d, want >= 1", c.Producers)
	case c.Consumers < 1:
		return fmt.Errorf("consumers: %d, want >= 1", c.Consumers)
	case c.Groups < 0:
		return fmt.Errorf("groups: %d, want >= 0", c.Groups)
	case c.Partitions < 1:
		return fmt.Errorf("partitions: %d, want >= 1", c.Partitions)
	case c.PushBatch < 1 || c.PopBatch < 1 || c.PopPartitions < 1:
		return fmt.Errorf("push-batch, pop-batch and pop-partitions must be >= 1")
	case c.Messages < 0 || c.Rate < 0:
		return fmt.Errorf("messages and rate must be >= 0")
	case c.Messages == 0 && c.Duration <= 0:
		return fmt.Errorf("duration: %s, want > 0 (or set messages)", c.Duration)
	case c.Wait && c.PollTimeout < time.Millisecond:
		return fmt.Errorf("poll-timeout: %s, want >= 1ms", c.PollTimeout)
	}
	if c.Drain <= 0 {
		c.Drain = DrainDefault
	}
	if c.Queue == "" {
		c.Queue = "bench-" + time.Now().UTC().Format("20060102-150405.000")
	}
	return nil
}

// normalizeURLs trims slashes and adds a missing http:// scheme in place.
func normalizeURLs(urls []string) {
	for i, n := range urls {
		n = strings.TrimRight(strings.TrimSpace(n), "/")
		if !strings.HasPrefix(n, "http://") && !strings.HasPrefix(n, "https://") {
			n = "http://" + n
		}
		urls[i] = n
	}
}

// consumerNodes are the nodes consumers are spread over.
func (c *Config) consumerNodes() []string {
	if len(c.ConsumerNodes) > 0 {
		return c.ConsumerNodes
	}
	return c.Nodes
}

// GroupNames returns the consumer groups of the run.
func (c *Config) GroupNames() []string {
	if c.Groups == 0 {
		return []string{QueueMode}
	}
	names := make([]string, c.Groups)
	for i := range names {
		names[i] = fmt.Sprintf("bench-g%d", i)
	}
	return names
}
