//go:build !unix

package stats

// readCPU reports no CPU time where getrusage is missing.
func readCPU() cpuTimes { return cpuTimes{} }
