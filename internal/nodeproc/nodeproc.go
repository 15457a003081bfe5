// Package nodeproc starts and stops queen-node processes for the harnesses
// that run real binaries (cmd/queen-demo, the bench suite in
// internal/suite, cluster-test): build the binary once, start a process
// with a given environment and log file, wait for /health, stop it by PID.
// Ports and log tails are package localnet's.
package nodeproc

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"queen-node/internal/localnet"
)

// Build compiles ./cmd/queen-node of the module in moduleDir ("" = the
// current directory) into dir and returns the binary's path. The compiler's
// output goes to out (nil = returned in the error only).
func Build(ctx context.Context, moduleDir, dir string, out io.Writer) (string, error) {
	bin := filepath.Join(dir, "queen-node")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/queen-node")
	cmd.Dir = moduleDir
	var buf strings.Builder
	if out != nil {
		cmd.Stdout, cmd.Stderr = out, out
	} else {
		cmd.Stdout, cmd.Stderr = &buf, &buf
	}
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build ./cmd/queen-node: %w\n%s", err, buf.String())
	}
	return bin, nil
}

// Env is the caller's environment without the variables whose names start
// with one of drop (so a QUEEN_* left in a shell cannot change a node the
// harness configures), followed by vars in key order.
func Env(vars map[string]string, drop ...string) []string {
	var env []string
next:
	for _, kv := range os.Environ() {
		for _, p := range drop {
			if strings.HasPrefix(kv, p) {
				continue next
			}
		}
		env = append(env, kv)
	}
	keys := make([]string, 0, len(vars))
	for k := range vars {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+vars[k])
	}
	return env
}

// Options describe one process to start.
type Options struct {
	Bin     string   // the queen-node binary (Build)
	Env     []string // its whole environment (Env)
	LogPath string   // stdout and stderr go here
	Append  bool     // append to LogPath (a restarted node keeps its history) instead of truncating
	Header  string   // written to the log before the process starts, e.g. what it was started with
	// DeathSignal is what the kernel sends the node when the thread that
	// started it dies, so a harness killed without cleanup leaves no node
	// behind; default SIGKILL.
	DeathSignal syscall.Signal
	// Start starts the command; default cmd.Start. cluster-test starts from
	// one locked OS thread, so the death signal fires with the process,
	// not with whichever thread happened to fork.
	Start func(*exec.Cmd) error
}

// Proc is one started node process.
type Proc struct {
	cmd     *exec.Cmd
	logPath string
	exited  chan struct{}
}

// Start starts a process as o says and returns once it is running (not yet
// healthy: see WaitHealthy).
func Start(o Options) (*Proc, error) {
	flags := os.O_CREATE | os.O_WRONLY | os.O_TRUNC
	if o.Append {
		flags = os.O_CREATE | os.O_WRONLY | os.O_APPEND
	}
	lf, err := os.OpenFile(o.LogPath, flags, 0o644)
	if err != nil {
		return nil, fmt.Errorf("node log: %w", err)
	}
	if o.Header != "" {
		fmt.Fprintln(lf, o.Header)
	}
	cmd := exec.Command(o.Bin)
	cmd.Env = o.Env
	cmd.Stdout, cmd.Stderr = lf, lf
	sig := o.DeathSignal
	if sig == 0 {
		sig = syscall.SIGKILL
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: sig}
	start := o.Start
	if start == nil {
		start = (*exec.Cmd).Start
	}
	if err := start(cmd); err != nil {
		lf.Close()
		return nil, fmt.Errorf("start %s: %w", o.Bin, err)
	}
	p := &Proc{cmd: cmd, logPath: o.LogPath, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); lf.Close(); close(p.exited) }()
	return p, nil
}

// PID is the process id.
func (p *Proc) PID() int { return p.cmd.Process.Pid }

// Exited is closed once the process has exited and its log is closed.
func (p *Proc) Exited() <-chan struct{} { return p.exited }

// LogPath is the process's log file.
func (p *Proc) LogPath() string { return p.logPath }

// LogTail is the last n lines of the process's log.
func (p *Proc) LogTail(n int) string { return localnet.LogTail(p.logPath, n) }

// Signal sends sig to the process by PID without waiting.
func (p *Proc) Signal(sig syscall.Signal) error { return p.cmd.Process.Signal(sig) }

// Stop sends sig to the process by PID and waits for it to exit; after
// grace it sends SIGKILL and waits up to another grace. It reports whether
// SIGKILL was needed (always false when sig is SIGKILL), and an error if
// the process outlived even that.
func (p *Proc) Stop(sig syscall.Signal, grace time.Duration) (killed bool, err error) {
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.exited:
		return false, nil
	case <-time.After(grace):
	}
	_ = p.cmd.Process.Kill()
	select {
	case <-p.exited:
		return sig != syscall.SIGKILL, nil
	case <-time.After(grace):
		return sig != syscall.SIGKILL, fmt.Errorf("pid %d still running after SIGKILL", p.PID())
	}
}

// healthClient bounds one /health probe; a node slower than this is not up.
var healthClient = &http.Client{Timeout: 5 * time.Second}

// WaitHealthy polls baseURL/health every poll until it answers 200, and
// fails early, with the log's last lines, if the process exits or within
// passes.
func WaitHealthy(ctx context.Context, p *Proc, baseURL string, within, poll time.Duration) error {
	const tail = 20
	deadline := time.Now().Add(within)
	for {
		if healthy(ctx, baseURL) {
			return nil
		}
		select {
		case <-p.exited:
			return fmt.Errorf("the node at %s exited at start:\n%s", baseURL, p.LogTail(tail))
		default:
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("the node at %s is not healthy after %v:\n%s", baseURL, within, p.LogTail(tail))
		}
		time.Sleep(poll)
	}
}

func healthy(ctx context.Context, baseURL string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+"/health", nil)
	if err != nil {
		return false
	}
	resp, err := healthClient.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
