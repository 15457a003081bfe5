package broker_test

// TestReplayRSS measures a real queen-node process replaying its push buffer
// (docs/operations.md, "Draining for a database upgrade": the replay's
// memory). It is a measurement, not a check, and runs only when asked:
//
//	QUEEN_REPLAY_RSS_MB=64,256,1024 go run ./cmd/pgtemp -- \
//	    go test -count=1 -timeout 60m -run TestReplayRSS -v ./broker/
//
// For each size it fills a fresh node's buffer with that many MB of 1 MiB
// messages (QUEEN_REPLAY_RSS_MSG_KB to change), stops the node, starts it
// again with the buffer (push maintenance still on), resets the kernel's
// peak-RSS mark (/proc/PID/clear_refs), turns maintenance off and waits for
// the replay to empty the buffer. It logs the peak RSS (VmHWM) of the start
// (the buffer's scan) and of the replay. QUEEN_REPLAY_RSS_BIN runs a given
// binary instead of building ./cmd/queen-node (to measure another version).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"queen-node/internal/localnet"
	"queen-node/internal/nodeproc"
	"queen-node/internal/pgtest"
)

func TestReplayRSS(t *testing.T) {
	sizes := os.Getenv("QUEEN_REPLAY_RSS_MB")
	if sizes == "" {
		t.Skip("a measurement: set QUEEN_REPLAY_RSS_MB (e.g. 64,256,1024) to run it")
	}
	msgKB := 1024
	if v := os.Getenv("QUEEN_REPLAY_RSS_MSG_KB"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("QUEEN_REPLAY_RSS_MSG_KB=%q: want a positive integer", v)
		}
		msgKB = n
	}
	bin := os.Getenv("QUEEN_REPLAY_RSS_BIN")
	if bin == "" {
		bin = nodeBinary(t)
	}
	for _, s := range strings.Split(sizes, ",") {
		mb, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || mb < 1 {
			t.Fatalf("QUEEN_REPLAY_RSS_MB: %q is not a size in MB", s)
		}
		t.Run(fmt.Sprintf("%dMB", mb), func(t *testing.T) { measureReplay(t, bin, int64(mb)<<20, msgKB<<10) })
	}
}

// replayProc is one queen-node process with its own database and push
// buffer directory, restarted on both.
type replayProc struct {
	t      *testing.T
	bin    string
	base   string
	dbURL  string
	dir    string
	env    []string
	client *http.Client
}

func newReplayProc(t *testing.T, bin string, bufferMax int64) *replayProc {
	port, err := localnet.FreePort("127.0.0.1", false)
	if err != nil {
		t.Fatal(err)
	}
	r := &replayProc{t: t, bin: bin, base: fmt.Sprintf("http://127.0.0.1:%d", port), dbURL: pgtest.NewDatabase(t),
		dir: t.TempDir(), client: &http.Client{Timeout: 2 * time.Minute}}
	r.env = nodeproc.Env(map[string]string{
		"QUEEN_PG_URL":                 r.dbURL,
		"QUEEN_HTTP_ADDR":              fmt.Sprintf("127.0.0.1:%d", port),
		"QUEEN_NODE_NAME":              "replay",
		"QUEEN_BUFFER_DIR":             r.dir,
		"QUEEN_BUFFER_MAX_BYTES":       strconv.FormatInt(bufferMax, 10),
		"QUEEN_MAINTENANCE_REFRESH_MS": "100",
		"QUEEN_LOG_LEVEL":              "info",
	}, "QUEEN_", "JWT_", "PG")
	return r
}

// start starts the process and waits until it is healthy; log names its
// log file in the buffer directory.
func (r *replayProc) start(log string) *nodeproc.Proc {
	t := r.t
	t.Helper()
	p, err := nodeproc.Start(nodeproc.Options{Bin: r.bin, Env: r.env, LogPath: filepath.Join(r.dir, log)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = p.Stop(syscall.SIGKILL, 10*time.Second) })
	if err := nodeproc.WaitHealthy(context.Background(), p, r.base, 2*time.Minute, 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	return p
}

func (r *replayProc) call(method, path string, body []byte, want int) []byte {
	t := r.t
	t.Helper()
	req, err := http.NewRequest(method, r.base+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out bytes.Buffer
	_, _ = out.ReadFrom(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, out.Bytes())
	}
	return out.Bytes()
}

// maint is the "maintenance" section of /status.
func (r *replayProc) maint() map[string]any {
	var doc struct {
		Maintenance map[string]any `json:"maintenance"`
	}
	if err := json.Unmarshal(r.call("GET", "/status", nil, 200), &doc); err != nil {
		r.t.Fatal(err)
	}
	return doc.Maintenance
}

func (r *replayProc) setPushMaintenance(on bool) {
	r.call("POST", "/api/v1/system/maintenance", []byte(fmt.Sprintf(`{"enabled":%v}`, on)), 200)
}

// fill pushes messages of msgBytes (random letters, so PostgreSQL cannot
// compress them away) to queue, partitions p0..p<parts-1> in turn, with
// payload {"n": seq, "s": letters} and transaction id "<queue>-<seq>",
// until size bytes of payloads were pushed; it returns the count.
func (r *replayProc) fill(queue string, parts int, size int64, msgBytes int) int {
	letters := make([]byte, msgBytes)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range letters {
		letters[i] = 'a' + byte(rng.IntN(26))
	}
	perReq := max(1, (8<<20)/msgBytes) // requests under the 10 MiB body bound
	var pushed int
	for int64(pushed)*int64(msgBytes) < size {
		var body bytes.Buffer
		body.WriteString(`{"items":[`)
		for i := 0; i < perReq; i++ {
			if i > 0 {
				body.WriteByte(',')
			}
			fmt.Fprintf(&body, `{"queue":%q,"partition":"p%d","transactionId":"%s-%d","payload":{"n":%d,"s":"`,
				queue, pushed%parts, queue, pushed, pushed)
			body.Write(letters)
			body.WriteString(`"}}`)
			pushed++
		}
		body.WriteString(`]}`)
		r.call("POST", "/api/v1/push", body.Bytes(), 201)
	}
	return pushed
}

// nodeBinary builds ./cmd/queen-node into the test's temporary directory.
func nodeBinary(t *testing.T) string {
	t.Helper()
	bin, err := nodeproc.Build(context.Background(), "..", t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

func measureReplay(t *testing.T, bin string, size int64, msgBytes int) {
	r := newReplayProc(t, bin, size+64<<20)
	p := r.start("fill.log")
	r.setPushMaintenance(true)
	pushed := r.fill("rss", 4, size, msgBytes)
	bufBytes := r.maint()["buffer_bytes"]
	if _, err := p.Stop(syscall.SIGTERM, 30*time.Second); err != nil {
		t.Fatal(err)
	}

	began := time.Now()
	p = r.start("replay.log")
	startHWM := procKB(t, p.PID(), "VmHWM")
	startTook := time.Since(began)
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", p.PID()), []byte("5"), 0); err != nil {
		t.Fatalf("reset the peak RSS mark: %v", err)
	}
	before := procKB(t, p.PID(), "VmRSS")
	began = time.Now()
	r.setPushMaintenance(false)
	deadline := time.Now().Add(20 * time.Minute)
	for {
		m := r.maint()
		if m["buffer_bytes"] == float64(0) && m["buffer_pending"] == float64(0) {
			if m["replayed"] != float64(pushed) {
				t.Fatalf("replayed %v of %d messages: %v", m["replayed"], pushed, m)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replay did not finish in 20 minutes: %v\n%s", m, p.LogTail(20))
		}
		time.Sleep(200 * time.Millisecond) // polling a process, with a deadline
	}
	took := time.Since(began)
	hwm := procKB(t, p.PID(), "VmHWM")
	t.Logf("buffer %.0f MB (%d messages of %d KiB): start %v, peak RSS at start %d MB; replay %v, RSS %d MB before, peak %d MB",
		bufBytes.(float64)/(1<<20), pushed, msgBytes>>10, startTook.Round(100*time.Millisecond), startHWM>>10,
		took.Round(100*time.Millisecond), before>>10, hwm>>10)
}

// procKB reads one "Name:   N kB" line of /proc/PID/status.
func procKB(t *testing.T, pid int, name string) int64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, name+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("%s: %q: %v", name, line, err)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", name, pid)
	return 0
}
