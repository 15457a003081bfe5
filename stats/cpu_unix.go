//go:build unix

package stats

import "syscall"

// readCPU returns the process's user and system CPU time (getrusage).
func readCPU() cpuTimes {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return cpuTimes{}
	}
	us := func(tv syscall.Timeval) int64 { return int64(tv.Sec)*1e6 + int64(tv.Usec) }
	return cpuTimes{userUS: us(ru.Utime), systemUS: us(ru.Stime)}
}
