// Command queen-bench is the load generator for queen-node: it drives one
// or more running nodes over HTTP like a user (producers, consumers,
// consumer groups), checks that every message was delivered exactly once
// per group and in order per partition, and reports rates, latency, errors
// and CPU per message, optionally next to the raw PostgreSQL ceilings of the
// same server. docs/benchmarks.md ("queen-bench") documents every flag and
// figure.
//
//	queen-bench [flags]                 run a benchmark
//	queen-bench compare A.json B.json   print two runs side by side
//	queen-bench suite [--quick]         the standard suite: writes docs/BENCHMARKS.md
//
// Exit status: 0 when the run passed the delivery check with no 5xx, 1 when
// it did not, 2 for bad usage or a run that could not start.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"queen-node/internal/bench"
	"queen-node/pg"
)

// Output is the --json file.
type Output struct {
	Version int           `json:"version"`
	Command string        `json:"command"`
	Config  bench.Config  `json:"config"`
	Raw     *RawCeilings  `json:"raw,omitempty"`
	Result  *bench.Result `json:"result"`
}

// RawCeilings are the --raw figures of the same run.
type RawCeilings struct {
	Insert bench.CeilingResult `json:"insert"`
	Claim  bench.CeilingResult `json:"claim"`
	// Fractions of the ceilings reached by the node run.
	PushOfInsert   float64 `json:"push_of_insert"`
	DeliverOfClaim float64 `json:"deliver_of_claim"`
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "compare" {
		os.Exit(compareMain(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "suite" {
		os.Exit(suiteMain(os.Args[2:]))
	}
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("queen-bench", flag.ContinueOnError)
	cfg := bench.DefaultConfig("")
	nodes := fs.String("nodes", "http://127.0.0.1:6632", "comma-separated node base URLs; workers are spread over them round-robin")
	fs.StringVar(&cfg.Queue, "queue", "", "queue name (default: a fresh bench-<time> per run)")
	consumerNodes := fs.String("consumer-nodes", "", "comma-separated node URLs for the consumers (default: --nodes)")
	fs.StringVar(&cfg.TxnPrefix, "txn-prefix", "", "prefix of every transactionId, so runs can share a queue")
	fs.IntVar(&cfg.Producers, "producers", bench.ProducersDefault, "producers, each with one push in flight")
	fs.IntVar(&cfg.Consumers, "consumers", bench.ConsumersDefault, "consumers per group")
	fs.IntVar(&cfg.Groups, "groups", 0, "named consumer groups each receiving every message (0 = queue mode)")
	fs.IntVar(&cfg.Partitions, "partitions", bench.PartitionsDefault, "partitions; each message goes to a random one")
	fs.IntVar(&cfg.PayloadBytes, "payload", bench.PayloadDefault, "payload bytes per message (JSON)")
	fs.IntVar(&cfg.PushBatch, "push-batch", bench.PushBatchDefault, "messages per push request")
	fs.IntVar(&cfg.PopBatch, "pop-batch", bench.PopBatchDefault, "pop batch parameter")
	fs.IntVar(&cfg.PopPartitions, "pop-partitions", bench.PopPartitionsDefault, "pop partitions parameter (partitions claimed per pop)")
	fs.BoolVar(&cfg.Wait, "wait", true, "long-poll pops (wait=true); false = wait=false with a 10ms pause after an empty pop")
	fs.DurationVar(&cfg.PollTimeout, "poll-timeout", bench.PollTimeoutDefault, "long-poll timeout")
	fs.BoolVar(&cfg.AutoAck, "auto-ack", false, "pop with autoAck=true and send no acks")
	fs.DurationVar(&cfg.Duration, "duration", bench.DurationDefault, "push phase length (ignored with --messages)")
	fs.IntVar(&cfg.Messages, "messages", 0, "total messages to push instead of a duration")
	fs.Float64Var(&cfg.Rate, "rate", 0, "target push rate in msgs/s over all producers (open loop); 0 = as fast as possible")
	fs.BoolVar(&cfg.Even, "even", false, "send the run's k-th message to partition k mod --partitions instead of a random one (with --messages n x partitions: exactly n per partition)")
	fs.BoolVar(&cfg.Backlog, "backlog", false, "start the consumers only after every push was answered (drain a queued backlog); the report adds the drain rate")
	fs.DurationVar(&cfg.Drain, "drain", bench.DrainDefault, "how long consumers may finish after the producers stop")
	fs.BoolVar(&cfg.Setup, "setup", false, "configure the queue (POST /api/v1/configure) before the run")
	fs.IntVar(&cfg.LeaseSeconds, "lease", 0, "with --setup: the queue's leaseTime in seconds (0 = server default)")
	pgURL := fs.String("pg-url", "", "PostgreSQL URL of the nodes' database: PostgreSQL CPU (when local) and --raw")
	raw := fs.Bool("raw", false, "also measure the raw PostgreSQL ceilings (needs --pg-url)")
	rawDur := fs.Duration("raw-duration", 10*time.Second, "length of each raw loop")
	rawConns := fs.Int("raw-conns", 0, "raw INSERT connections (0 = --producers)")
	rawWorkers := fs.Int("raw-workers", 0, "raw claim workers (0 = --consumers)")
	rawClaimRows := fs.Int("raw-claim-rows", 300_000, "backlog the raw claim loop drains (prefilled, not timed)")
	jsonPath := fs.String("json", "", "write every figure and the configuration to this file")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: queen-bench [flags]\n       queen-bench compare A.json B.json\n\nflags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "queen-bench: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	cfg.Nodes = strings.Split(*nodes, ",")
	if *consumerNodes != "" {
		cfg.ConsumerNodes = strings.Split(*consumerNodes, ",")
	}
	if *raw && *pgURL == "" {
		fmt.Fprintln(os.Stderr, "queen-bench: --raw needs --pg-url")
		return 2
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(os.Stderr, "queen-bench: %v\n", err)
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	out := Output{Version: 1, Command: strings.Join(os.Args, " "), Config: cfg}
	if *pgURL != "" {
		cfg.PGPID = findPostmaster(ctx, *pgURL)
		out.Config.PGPID = cfg.PGPID
		url := *pgURL
		cfg.WALPosition = func(ctx context.Context) (int64, error) { return pg.WALPosition(ctx, url) }
	}
	if *raw {
		rc, err := measureRaw(ctx, *pgURL, cfg, *rawConns, *rawWorkers, *rawClaimRows, *rawDur)
		if err != nil {
			fmt.Fprintf(os.Stderr, "queen-bench: %v\n", err)
			return 2
		}
		out.Raw = rc
	}

	fmt.Fprintf(os.Stderr, "queen-bench: queue %s on %s: %d producers, %d consumers x %d group(s), %d partitions\n",
		cfg.Queue, strings.Join(cfg.Nodes, ","), cfg.Producers, cfg.Consumers, len(cfg.GroupNames()), cfg.Partitions)
	var progress func(bench.Progress)
	if isTerminal(os.Stdout) {
		progress = printProgress
	}
	res, err := bench.Run(ctx, cfg, progress)
	if progress != nil {
		fmt.Print("\r\033[K")
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "queen-bench: %v\n", err)
		return 2
	}
	out.Result = res
	if out.Raw != nil {
		if out.Raw.Insert.PerSec > 0 {
			out.Raw.PushOfInsert = res.PushedPerSec / out.Raw.Insert.PerSec
		}
		if out.Raw.Claim.PerSec > 0 {
			out.Raw.DeliverOfClaim = res.DeliveredPerSec / out.Raw.Claim.PerSec
		}
	}
	printReport(os.Stdout, &out)
	if *jsonPath != "" {
		data, err := json.MarshalIndent(out, "", "  ")
		if err == nil {
			err = os.WriteFile(*jsonPath, append(data, '\n'), 0o644)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "queen-bench: write %s: %v\n", *jsonPath, err)
			return 2
		}
	}
	if !res.OK {
		return 1
	}
	return 0
}

// findPostmaster returns the local postmaster's PID, or 0 (with a note)
// when PostgreSQL is not on this machine.
func findPostmaster(ctx context.Context, url string) int {
	var pm int
	err := pg.WithBackendPID(ctx, url, func(pid int) error {
		var err error
		pm, err = bench.PostmasterPID(pid)
		return err
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "queen-bench: PostgreSQL CPU not measured: %v\n", err)
		return 0
	}
	return pm
}

func measureRaw(ctx context.Context, url string, cfg bench.Config, conns, workers, claimRows int, d time.Duration) (*RawCeilings, error) {
	if conns <= 0 {
		conns = cfg.Producers
	}
	if workers <= 0 {
		workers = cfg.Consumers
	}
	fmt.Fprintf(os.Stderr, "queen-bench: raw INSERT ceiling, %d connections, %s\n", conns, d)
	ins, err := bench.RawInsertCeiling(ctx, bench.CeilingOptions{URL: url, Conns: conns, PayloadBytes: cfg.PayloadBytes, Duration: d})
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "queen-bench: raw claim ceiling, %d workers, %d rows, up to %s\n", workers, claimRows, d)
	cl, err := bench.RawClaimCeiling(ctx, bench.CeilingOptions{URL: url, Conns: workers, PayloadBytes: cfg.PayloadBytes, Duration: d, ClaimRows: claimRows})
	if err != nil {
		return nil, err
	}
	return &RawCeilings{Insert: ins, Claim: cl}, nil
}

// isTerminal tells whether f is a character device (a terminal), so the
// live line is not written into files and pipes.
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
