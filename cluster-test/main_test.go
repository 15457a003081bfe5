package clustertest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"queen-node/internal/nodeproc"
	"queen-node/internal/pgtest"
)

// nodeBin is the queen-node binary built once by TestMain.
var nodeBin string

// TestMain builds the binary, then runs the tests against the PostgreSQL
// server pgtest provides (QUEEN_TEST_PG_URL from `make test`, or its own
// disposable server).
func TestMain(m *testing.M) {
	bin, err := buildNode()
	if err != nil {
		fmt.Fprintf(os.Stderr, "cluster-test: %v\n", err)
		os.Exit(1)
	}
	nodeBin = bin
	pgtest.Main(m)
}

// moduleRoot is the directory holding go.mod, found from this file's path.
func moduleRoot() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", fmt.Errorf("cannot locate the source file")
	}
	root := filepath.Dir(filepath.Dir(file))
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		return "", fmt.Errorf("no go.mod in %s: %w", root, err)
	}
	return root, nil
}

// buildNode builds cmd/queen-node. The binary goes beside the test binary
// when that is go test's scratch directory (go test deletes it at the end),
// otherwise into a fresh temporary directory.
func buildNode() (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	dir := ""
	if exe, err := os.Executable(); err == nil && strings.Contains(exe, "go-build") {
		dir = filepath.Dir(exe)
	}
	if dir == "" {
		if dir, err = os.MkdirTemp("", "queen-cluster-test-"); err != nil {
			return "", err
		}
	}
	start := time.Now()
	var lastErr error
	// A colleague's file may be mid-edit: retry a few times before giving up.
	for attempt := 0; attempt < 4; attempt++ {
		bin, err := nodeproc.Build(context.Background(), root, dir, nil)
		if err == nil {
			fmt.Fprintf(os.Stderr, "cluster-test: built %s in %v\n", bin, time.Since(start).Round(time.Millisecond))
			return bin, nil
		}
		lastErr = err
		time.Sleep(15 * time.Second)
	}
	return "", lastErr
}
