// Package localnet holds the small helpers that start real queen-node
// processes on loopback need in common (cmd/queen-demo, the bench suite in
// internal/suite, cluster-test): a free port, and the tail of a log file to
// explain a node that would not start.
package localnet

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
)

// FreePort finds a port free on ip for TCP, and for UDP too when udpToo
// (memberlist gossips on both at one port number).
func FreePort(ip string, udpToo bool) (int, error) {
	for attempt := 0; attempt < 50; attempt++ {
		l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err != nil {
			return 0, fmt.Errorf("listen on %s: %w (is 127.0.0.0/8 routed to lo?)", ip, err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		if udpToo {
			u, err := net.ListenPacket("udp", net.JoinHostPort(ip, strconv.Itoa(port)))
			if err != nil {
				l.Close()
				continue
			}
			u.Close()
		}
		l.Close()
		return port, nil
	}
	return 0, errors.New("no free port on " + ip)
}

// LogTail returns the last n lines of the file at path (or the error that
// kept it from being read), reading it once with bounded memory.
func LogTail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > 4*n {
			lines = lines[len(lines)-n:]
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
