package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// CPU accounting (docs/benchmarks.md, "queen-bench"):
//
//   - PostgreSQL, when it runs on this machine: the postmaster is the parent
//     of the backend serving a connection of ours (PostmasterPID). Its CPU at
//     an instant is its own utime+stime, plus cutime+cstime (children it has
//     reaped: backends that ended), plus utime+stime of every live child
//     found by a /proc scan. The difference between two such snapshots is
//     the server's CPU over the interval, including backends that started or
//     ended in between.
//   - Each node: process_cpu_seconds_total of its /metrics.
//   - queen-bench itself: getrusage(RUSAGE_SELF).

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat times; 100 on every
// Linux build we run on.
const clockTicks = 100

// procStat returns ppid and utime, stime, cutime, cstime (in ticks) of pid.
func procStat(pid int) (ppid int, t [4]int64, err error) {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, t, err
	}
	// The command name (field 2) is in parentheses and may contain spaces:
	// parse from the last ')'.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, t, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	f := strings.Fields(string(data[i+1:]))
	// f[0] is field 3 (state); ppid is field 4, utime..cstime fields 14..17.
	if len(f) < 15 {
		return 0, t, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	if ppid, err = strconv.Atoi(f[1]); err != nil {
		return 0, t, fmt.Errorf("/proc/%d/stat ppid: %w", pid, err)
	}
	for k := range 4 {
		if t[k], err = strconv.ParseInt(f[11+k], 10, 64); err != nil {
			return 0, t, fmt.Errorf("/proc/%d/stat field %d: %w", pid, 14+k, err)
		}
	}
	return ppid, t, nil
}

// PostmasterPID returns the parent of a server backend, checking that it
// looks like a PostgreSQL server process on this machine.
func PostmasterPID(backendPID int) (int, error) {
	ppid, _, err := procStat(backendPID)
	if err != nil {
		return 0, fmt.Errorf("backend %d not visible in /proc (PostgreSQL not local?): %w", backendPID, err)
	}
	comm, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(ppid), "comm"))
	if err != nil {
		return 0, fmt.Errorf("postmaster %d: %w", ppid, err)
	}
	if c := strings.TrimSpace(string(comm)); c != "postgres" && c != "postmaster" {
		return 0, fmt.Errorf("parent %d of backend %d is %q, not postgres", ppid, backendPID, c)
	}
	return ppid, nil
}

// pgCPUSeconds is the CPU snapshot of a postmaster and its children.
func pgCPUSeconds(postmaster int) (float64, error) {
	_, t, err := procStat(postmaster)
	if err != nil {
		return 0, fmt.Errorf("postmaster %d: %w", postmaster, err)
	}
	ticks := t[0] + t[1] + t[2] + t[3]
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, fmt.Errorf("scan /proc: %w", err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == postmaster {
			continue
		}
		ppid, ct, err := procStat(pid)
		if err != nil || ppid != postmaster {
			continue // gone meanwhile, or not ours
		}
		ticks += ct[0] + ct[1]
	}
	return float64(ticks) / clockTicks, nil
}

// selfCPUSeconds is this process's user+system CPU.
func selfCPUSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}

// nodeCPUSeconds reads process_cpu_seconds_total from a node's /metrics.
func nodeCPUSeconds(ctx context.Context, c *http.Client, base string) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, body, err := do(ctx, c, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return 0, fmt.Errorf("%s/metrics: %w", base, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "process_cpu_seconds_total "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				return 0, fmt.Errorf("%s/metrics: process_cpu_seconds_total %q: %w", base, v, err)
			}
			return f, nil
		}
	}
	return 0, fmt.Errorf("%s/metrics: no process_cpu_seconds_total", base)
}

// CPUUse is one process (or process tree) over the run.
type CPUUse struct {
	Name     string  `json:"name"`
	Seconds  float64 `json:"cpu_s"`
	Cores    float64 `json:"cores"`      // Seconds / wall seconds
	UsPerMsg float64 `json:"us_per_msg"` // per delivered message
	Error    string  `json:"error,omitempty"`
}

// cpuSnapshot is the CPU counters at one instant; NaN-free: a probe that
// failed records its error instead.
type cpuSnapshot struct {
	at    time.Time
	pg    float64
	pgErr error
	nodes []float64
	nErr  []error
	self  float64
	wal   int64 // WAL position, bytes (Config.WALPosition)
	walOK bool
}

func (r *runner) snapshotCPU(ctx context.Context) cpuSnapshot {
	s := cpuSnapshot{at: time.Now(), self: selfCPUSeconds()}
	if r.cfg.PGPID > 0 {
		s.pg, s.pgErr = pgCPUSeconds(r.cfg.PGPID)
	} else {
		s.pgErr = fmt.Errorf("not measured (no --pg-url, or PostgreSQL not local)")
	}
	if r.cfg.WALPosition != nil {
		if v, err := r.cfg.WALPosition(ctx); err == nil {
			s.wal, s.walOK = v, true
		}
	}
	c := newClient(10 * time.Second)
	for _, n := range r.cfg.Nodes {
		v, err := nodeCPUSeconds(ctx, c, n)
		s.nodes = append(s.nodes, v)
		s.nErr = append(s.nErr, err)
	}
	return s
}

// cpuUse turns two snapshots into per-process figures for msgs delivered.
func cpuUse(a, b cpuSnapshot, nodes []string, msgs int64) []CPUUse {
	wall := b.at.Sub(a.at).Seconds()
	mk := func(name string, v float64, err error) CPUUse {
		u := CPUUse{Name: name}
		if err != nil {
			u.Error = err.Error()
			return u
		}
		u.Seconds = v
		if wall > 0 {
			u.Cores = v / wall
		}
		if msgs > 0 {
			u.UsPerMsg = v * 1e6 / float64(msgs)
		}
		return u
	}
	var out []CPUUse
	pgErr := a.pgErr
	if pgErr == nil {
		pgErr = b.pgErr
	}
	out = append(out, mk("postgresql", b.pg-a.pg, pgErr))
	for i, n := range nodes {
		err := a.nErr[i]
		if err == nil {
			err = b.nErr[i]
		}
		out = append(out, mk("node "+n, b.nodes[i]-a.nodes[i], err))
	}
	out = append(out, mk("queen-bench", b.self-a.self, nil))
	return out
}
