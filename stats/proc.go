package stats

import (
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
)

// cpuTimes is the process's CPU time so far, in microseconds.
type cpuTimes struct{ userUS, systemUS int64 }

// heapMetric is the live heap; runtime/metrics reads it without stopping
// the world (runtime.ReadMemStats would).
const heapMetric = "/memory/classes/heap/objects:bytes"

// readMemory returns the resident set size (0 where /proc is missing), the
// live heap and the goroutine count.
func readMemory() (rss, heap int64, goroutines int) {
	if b, err := os.ReadFile("/proc/self/statm"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 1 {
			if pages, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				rss = pages * int64(os.Getpagesize())
			}
		}
	}
	sample := []metrics.Sample{{Name: heapMetric}}
	metrics.Read(sample)
	if sample[0].Value.Kind() == metrics.KindUint64 {
		heap = int64(sample[0].Value.Uint64())
	}
	return rss, heap, runtime.NumGoroutine()
}
