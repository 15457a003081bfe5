package bench

import (
	"context"
	"time"
)

// Exported CPU probes, for the benchmark suite (internal/suite) which
// measures idle costs without a producer/consumer run.

// PGCPUSeconds is the CPU seconds used so far by a local postmaster and its
// children (see cpu.go for how backends that ended are counted).
func PGCPUSeconds(postmaster int) (float64, error) { return pgCPUSeconds(postmaster) }

// NodeCPUSeconds reads process_cpu_seconds_total from a node's /metrics.
func NodeCPUSeconds(ctx context.Context, base string) (float64, error) {
	return nodeCPUSeconds(ctx, newClient(10*time.Second), base)
}
