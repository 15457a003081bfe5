package suite

import (
	"fmt"
	"strings"

	"queen-node/internal/bench"
)

// commandLine is the queen-bench command that repeats a run against the
// same nodes ($PG stands for the suite's database URL).
func commandLine(c bench.Config) string {
	args := []string{"queen-bench", "--nodes", strings.Join(c.Nodes, ",")}
	if len(c.ConsumerNodes) > 0 {
		args = append(args, "--consumer-nodes", strings.Join(c.ConsumerNodes, ","))
	}
	args = append(args,
		"--producers", fmt.Sprint(c.Producers), "--consumers", fmt.Sprint(c.Consumers))
	if c.Groups > 0 {
		args = append(args, "--groups", fmt.Sprint(c.Groups))
	}
	args = append(args, "--partitions", fmt.Sprint(c.Partitions), "--payload", fmt.Sprint(c.PayloadBytes),
		"--push-batch", fmt.Sprint(c.PushBatch), "--pop-batch", fmt.Sprint(c.PopBatch),
		"--poll-timeout", c.PollTimeout.String())
	if c.Messages > 0 {
		args = append(args, "--messages", fmt.Sprint(c.Messages))
	} else {
		args = append(args, "--duration", c.Duration.String())
	}
	if c.Even {
		args = append(args, "--even")
	}
	if c.Backlog {
		args = append(args, "--backlog")
	}
	args = append(args, "--drain", c.Drain.String())
	if c.Rate > 0 {
		args = append(args, "--rate", fmt.Sprintf("%.0f", c.Rate))
	}
	if c.TxnPrefix != "" {
		args = append(args, "--txn-prefix", c.TxnPrefix)
	}
	args = append(args, "--queue", c.Queue, "--pg-url", "$PG")
	return strings.Join(args, " ")
}
