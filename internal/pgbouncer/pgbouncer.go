// Package pgbouncer runs a disposable PgBouncer in transaction pooling mode
// in front of a PostgreSQL server, on loopback, for tests that check the
// node works through it (docs/operations.md, "Behind PgBouncer").
package pgbouncer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"queen-node/internal/localnet"
	"queen-node/internal/pgtemp"
)

// Options describe the bouncer. Zero fields take the defaults noted.
type Options struct {
	Target   string // host:port of the PostgreSQL server, required
	PoolMode string // default "transaction"
	PoolSize int    // server connections per (database, user), default 20
	Binary   string // default: pgbouncer on PATH, else /usr/sbin/pgbouncer
	User     string // OS user to run as when root (PgBouncer refuses root), default "postgres"
}

// Bouncer is one running PgBouncer.
type Bouncer struct {
	port   int
	dir    string
	cmd    *exec.Cmd
	exited chan struct{}
}

// Find returns the pgbouncer binary's path, or an error saying how to
// install it (scripts/ensure-ha.sh).
func Find(bin string) (string, error) {
	if bin != "" {
		return bin, nil
	}
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/sbin/pgbouncer"); err == nil {
		return "/usr/sbin/pgbouncer", nil
	}
	return "", errors.New("pgbouncer not found: run scripts/ensure-ha.sh (apt-get install pgbouncer)")
}

// Start writes a configuration that sends every database name to the same
// database of Target with trust authentication, starts PgBouncer and waits
// until it accepts connections.
func Start(ctx context.Context, o Options) (*Bouncer, error) {
	if o.Target == "" {
		return nil, errors.New("pgbouncer: Target is required")
	}
	if o.PoolMode == "" {
		o.PoolMode = "transaction"
	}
	if o.PoolSize <= 0 {
		o.PoolSize = 20
	}
	if o.User == "" {
		o.User = "postgres"
	}
	bin, err := Find(o.Binary)
	if err != nil {
		return nil, err
	}
	host, port, err := net.SplitHostPort(o.Target)
	if err != nil {
		return nil, fmt.Errorf("pgbouncer: target %q: %w", o.Target, err)
	}
	b := &Bouncer{exited: make(chan struct{})}
	if b.port, err = localnet.FreePort("127.0.0.1", false); err != nil {
		return nil, err
	}
	if b.dir, err = os.MkdirTemp("", "pgbouncer-"); err != nil {
		return nil, err
	}
	started := false
	defer func() {
		if !started {
			b.Stop() // stops what was started and removes the directory
		}
	}()
	// Readable by the user PgBouncer runs as.
	if err := os.Chmod(b.dir, 0o755); err != nil {
		return nil, err
	}
	ini := fmt.Sprintf(`[databases]
* = host=%s port=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = %s
default_pool_size = %d
max_client_conn = 2000
ignore_startup_parameters = extra_float_digits
server_reset_query =
logfile = %s
`, host, port, b.port, filepath.Join(b.dir, "users.txt"), o.PoolMode, o.PoolSize, filepath.Join(b.dir, "pgbouncer.log"))
	files := map[string]string{"pgbouncer.ini": ini, "users.txt": `"postgres" ""` + "\n"}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(b.dir, name), []byte(body), 0o644); err != nil {
			return nil, err
		}
	}
	logf, err := os.Create(filepath.Join(b.dir, "stderr.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	// PgBouncer writes its log file as the user it runs as.
	if os.Geteuid() == 0 {
		if err := chownTo(b.dir, o.User); err != nil {
			return nil, err
		}
	}
	b.cmd = exec.Command(bin, filepath.Join(b.dir, "pgbouncer.ini"))
	b.cmd.Stdout, b.cmd.Stderr = logf, logf
	if err := pgtemp.StartChild(b.cmd, o.User); err != nil {
		b.cmd = nil
		return nil, fmt.Errorf("pgbouncer: start: %w", err)
	}
	go func() { _ = b.cmd.Wait(); close(b.exited) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", b.Addr(), time.Second)
		if err == nil {
			c.Close()
			started = true
			return b, nil
		}
		select {
		case <-b.exited:
			return nil, fmt.Errorf("pgbouncer exited at start:\n%s", b.LogTail())
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("pgbouncer: not accepting on %s after 10 s:\n%s", b.Addr(), b.LogTail())
		}
	}
}

// Addr is the bouncer's host:port.
func (b *Bouncer) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(b.port)) }

// URL rewrites a PostgreSQL URL to go through the bouncer, keeping its
// database, user and parameters.
func (b *Bouncer) URL(direct string) (string, error) {
	u, err := url.Parse(direct)
	if err != nil {
		return "", fmt.Errorf("pgbouncer: url: %w", err)
	}
	u.Host = b.Addr()
	return u.String(), nil
}

// LogTail is the end of PgBouncer's log, for failure messages.
func (b *Bouncer) LogTail() string {
	var out []string
	for _, name := range []string{"stderr.log", "pgbouncer.log"} {
		data, _ := os.ReadFile(filepath.Join(b.dir, name))
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		if len(lines) > 20 {
			lines = lines[len(lines)-20:]
		}
		out = append(out, lines...)
	}
	return strings.Join(out, "\n")
}

// Stop ends PgBouncer (SIGINT: immediate shutdown) and removes its files.
func (b *Bouncer) Stop() {
	if b.cmd != nil && b.cmd.Process != nil {
		_ = syscall.Kill(-b.cmd.Process.Pid, syscall.SIGINT)
		select {
		case <-b.exited:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL)
			<-b.exited
		}
	}
	_ = os.RemoveAll(b.dir)
}

func chownTo(dir, name string) error {
	cmd := exec.Command("chown", "-R", name, dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pgbouncer: chown %s: %w: %s", dir, err, out)
	}
	return nil
}
