package clustertest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The scale table (docs/cluster-tests.md, "Scale out"): the cost per node
// of the hint mesh at 1, 3, 5 and 9 nodes under a small fixed push rate per
// node. Skipped unless QUEEN_SCALE=1: it takes minutes and wants a quiet
// machine. Knobs (defaults in scaleDefaults):
//
//	QUEEN_SCALE_NODES    cluster sizes, "1,3,5,9"
//	QUEEN_SCALE_REPS     repetitions of every size, 2
//	QUEEN_SCALE_RATE     pushes per second sent to EACH node, 25
//	QUEEN_SCALE_SECONDS  measured load window, 15
//	QUEEN_SCALE_IDLE     measured idle window (no pushes), 5
//	QUEEN_SCALE_WAKES    cross-node wake trials per cluster, 40
//	QUEEN_SCALE_SVG      chart path, default docs/scale.svg; "-" writes none
//	QUEEN_SCALE_PERF     1 = perf-profile node 0 during every load window and
//	                     report the hint path's and memberlist's shares
type scaleConfig struct {
	sizes   []int
	reps    int
	rate    int // pushes/s per node
	window  time.Duration
	idle    time.Duration
	wakes   int
	svgPath string
	perf    bool
}

const (
	scalePartitions = 200              // load queue partitions: pushes spread over them
	scaleClkTck     = 100              // USER_HZ of /proc/<pid>/stat on Linux
	scaleConvBound  = 15 * time.Second // join/kill convergence must be within this
	scaleWakeBound  = time.Second      // cross-node wake p99 bound (as TestCrossNodeWake)
)

func scaleDefaults(t *testing.T) scaleConfig {
	t.Helper()
	c := scaleConfig{sizes: []int{1, 3, 5, 9}, reps: 2, rate: 25, window: 15 * time.Second,
		idle: 5 * time.Second, wakes: 40, perf: os.Getenv("QUEEN_SCALE_PERF") == "1"}
	envInt := func(name string, dst *int, lo, hi int) {
		if v := os.Getenv(name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < lo || n > hi {
				t.Fatalf("%s=%q: want an integer from %d to %d", name, v, lo, hi)
			}
			*dst = n
		}
	}
	if v := os.Getenv("QUEEN_SCALE_NODES"); v != "" {
		c.sizes = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 || n > 20 {
				t.Fatalf("QUEEN_SCALE_NODES=%q: want sizes from 1 to 20", v)
			}
			c.sizes = append(c.sizes, n)
		}
	}
	envInt("QUEEN_SCALE_REPS", &c.reps, 1, 10)
	envInt("QUEEN_SCALE_RATE", &c.rate, 1, 1000)
	w, idle := 15, 5
	envInt("QUEEN_SCALE_SECONDS", &w, 2, 600)
	envInt("QUEEN_SCALE_IDLE", &idle, 1, 600)
	c.window, c.idle = time.Duration(w)*time.Second, time.Duration(idle)*time.Second
	envInt("QUEEN_SCALE_WAKES", &c.wakes, 5, 1000)
	c.svgPath = os.Getenv("QUEEN_SCALE_SVG")
	if c.svgPath == "" {
		root, err := moduleRoot()
		if err != nil {
			t.Fatal(err)
		}
		c.svgPath = filepath.Join(root, "docs", "scale.svg")
	}
	return c
}

// scaleRow is one cluster size measured once. Per-node figures are means
// over the nodes of the cluster (the load is symmetric).
type scaleRow struct {
	n, rep                 int
	load0, load1           float64 // 1-minute load average before and after
	pushRate               float64 // measured pushes/s per node
	framesOut, framesIn    float64 // hint frames/s per node
	hintsOut, hintsIn      float64 // hints/s per node
	bytesOut, bytesIn      float64 // hint stream payload bytes/s per node (TCP payload: length prefix + sealed frame)
	cpuIdle, cpuLoad       float64 // process CPU ms per second per node, idle and under load
	cpuLoadMax             float64 // the busiest node under load
	wakeP50, wakeP99       time.Duration
	joinConv, joinFromUp   time.Duration // join: process start / first /health 200 -> every member sees it alive
	killConv               time.Duration // kill -9 -> every other member reports it dead or gone
	meshShare              float64       // perf: share of node 0's samples in the hint path (-1 = not run)
	gossipShare            float64       // perf: share of node 0's samples in memberlist
	hintCPU                float64       // node 0's CPU ms/s in the hint path (perf share x its process CPU)
	usPerFrame             float64       // hintCPU per hint frame node 0 sent or received, µs
	perfSamples            int
	pushErrors             int64
	framesDropped, rejects uint64
}

func TestScaleTable(t *testing.T) {
	if os.Getenv("QUEEN_SCALE") != "1" {
		t.Skip("QUEEN_SCALE=1 runs the scale table (minutes; see docs/cluster-tests.md)")
	}
	cfg := scaleDefaults(t)
	var rows []scaleRow
	for rep := 1; rep <= cfg.reps; rep++ {
		for _, n := range cfg.sizes {
			t.Run(fmt.Sprintf("n%d-rep%d", n, rep), func(t *testing.T) {
				r := measureScale(t, cfg, n, rep)
				rows = append(rows, r)
				t.Logf("%s", fmtScaleRows([]scaleRow{r}))
			})
		}
	}
	if t.Failed() || len(rows) == 0 {
		return
	}
	t.Logf("scale table (per node; rate %d pushes/s per node, window %v, %d partitions):\n%s",
		cfg.rate, cfg.window, scalePartitions, fmtScaleRows(rows))
	means := meanScaleRows(rows)
	t.Logf("means over %d repetitions:\n%s", cfg.reps, fmtScaleRows(means))
	if cfg.svgPath != "-" {
		svg := scaleSVG(means, cfg)
		if err := os.WriteFile(cfg.svgPath, []byte(svg), 0o644); err != nil {
			t.Fatalf("write chart: %v", err)
		}
		t.Logf("chart written to %s", cfg.svgPath)
	}
}

func measureScale(t *testing.T, cfg scaleConfig, n, rep int) scaleRow {
	row := scaleRow{n: n, rep: rep, load0: loadAvg(), meshShare: -1}
	// Reseed floor and pop back-off far away: only a hint can wake a parked
	// pop in time (as TestCrossNodeWake), and the floor's SQL is not part of
	// the hint path's cost.
	c := startClusterOpts(t, ClusterOptions{N: n, Env: map[string]string{
		"QUEEN_HOTLIST_RESEED_MS":  "600000",
		"QUEEN_POP_BACKOFF_MAX_MS": "60000",
	}})
	const loadQ = "scale-load"
	c.Configure(0, loadQ, map[string]any{"leaseTime": 30})
	// Create every partition first, so the window measures pushes, not
	// partition provisioning.
	items := make([]map[string]any, scalePartitions)
	for p := range items {
		items[p] = map[string]any{"queue": loadQ, "partition": fmt.Sprintf("p-%03d", p), "payload": map[string]int{"warm": p}}
	}
	if code, body, err := c.do(context.Background(), 0, "POST", "/api/v1/push", map[string]any{"items": items}); err != nil || code != 201 {
		t.Fatalf("warm-up push: %d %s %v", code, body, err)
	}

	// Idle window: memberlist alone (no hints flow).
	s0 := sampleScale(t, c)
	time.Sleep(cfg.idle) // a measurement window, not synchronisation
	s1 := sampleScale(t, c)
	row.cpuIdle = mean(cpuRates(s0, s1))

	// Load window: every node gets cfg.rate single-message pushes per second.
	ctx, stop := context.WithCancel(context.Background())
	defer stop() // a Fatal below must not leave the pacers running
	var pushes, errs atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			paceScalePushes(ctx, c, i, loadQ, cfg.rate, &pushes, &errs)
		}()
	}
	time.Sleep(time.Second)     // let the pacers and hint streams settle before the window opens
	var perfOut chan perfResult // node 0's profile, read after the window
	if cfg.perf {
		perfOut = make(chan perfResult, 1)
		go func() { perfOut <- perfMeshShare(c.nodePID(0), cfg.window) }()
	}
	p0 := pushes.Load()
	l0 := sampleScale(t, c)
	time.Sleep(cfg.window) // the measurement window
	l1 := sampleScale(t, c)
	p1 := pushes.Load()
	stop()
	wg.Wait()
	cpu := cpuRates(l0, l1)
	if perfOut != nil {
		pr := <-perfOut
		if pr.err != nil {
			t.Logf("perf: %v", pr.err)
		} else {
			row.meshShare, row.gossipShare, row.perfSamples = pr.hint, pr.gossip, pr.samples
			t.Logf("perf on %s: %d samples; hint path (mesh/coalesce frame) %.1f %%, memberlist %.1f %%; innermost hint-path frames: %s",
				c.Node(0).Name, pr.samples, 100*pr.hint, 100*pr.gossip, pr.top)
		}
	}
	row.pushErrors = errs.Load()
	if row.pushErrors > 0 {
		t.Errorf("%d pushes were not answered 201", row.pushErrors)
	}
	secs := l1.at.Sub(l0.at).Seconds()
	row.pushRate = float64(p1-p0) / secs / float64(n)
	row.cpuLoad = mean(cpu)
	for _, v := range cpu {
		row.cpuLoadMax = max(row.cpuLoadMax, v)
	}
	var fo, fi, ho, hi, bo, bi []float64
	for i := 0; i < n; i++ {
		a, b := l0.status[i], l1.status[i]
		fo = append(fo, float64(b.Mesh.FramesSent-a.Mesh.FramesSent)/secs)
		fi = append(fi, float64(b.Mesh.FramesReceived-a.Mesh.FramesReceived)/secs)
		ho = append(ho, float64(b.Mesh.HintsSent-a.Mesh.HintsSent)/secs)
		hi = append(hi, float64(b.Mesh.HintsReceived-a.Mesh.HintsReceived)/secs)
		bo = append(bo, float64(l1.bytesOut[i]-l0.bytesOut[i])/secs)
		bi = append(bi, float64(l1.bytesIn[i]-l0.bytesIn[i])/secs)
		row.framesDropped += b.Mesh.FramesDropped - a.Mesh.FramesDropped
		row.rejects += b.Mesh.FramesRejected - a.Mesh.FramesRejected
	}
	row.framesOut, row.framesIn, row.hintsOut, row.hintsIn = mean(fo), mean(fi), mean(ho), mean(hi)
	row.bytesOut, row.bytesIn = mean(bo), mean(bi)
	if row.meshShare >= 0 {
		row.hintCPU = row.meshShare * cpu[0]
		if f := fo[0] + fi[0]; f > 0 {
			row.usPerFrame = row.hintCPU * 1000 / f
		}
	}
	if n > 1 {
		// Every push is hinted to every peer (no dropping configured), so
		// each node must receive hints and a frame must reach the wire.
		for i := 0; i < n; i++ {
			if fi[i] == 0 || hi[i] == 0 || bi[i] == 0 || bo[i] == 0 {
				t.Errorf("%s: frames in %.1f/s, hints in %.1f/s, bytes in %.0f/s out %.0f/s under load",
					c.Node(i).Name, fi[i], hi[i], bi[i], bo[i])
			}
		}
		if row.framesDropped > 0 || row.rejects > 0 {
			t.Errorf("frames dropped %d, rejected %d with no chaos configured", row.framesDropped, row.rejects)
		}
	} else if fo[0] != 0 || bo[0] != 0 {
		t.Errorf("a single node sent %.1f frames/s, %.0f bytes/s", fo[0], bo[0])
	}

	row.wakeP50, row.wakeP99 = scaleWakes(t, c, cfg.wakes)
	row.joinConv, row.joinFromUp, row.killConv = scaleChurn(t, c)
	row.load1 = loadAvg()
	return row
}

// paceScalePushes sends one single-message push per 1/rate to node i until
// ctx ends; a slow push delays the next tick instead of bunching them.
func paceScalePushes(ctx context.Context, c *Cluster, i int, queue string, rate int, ok, errs *atomic.Int64) {
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	for seq := 0; ; seq++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		item := map[string]any{"queue": queue, "partition": fmt.Sprintf("p-%03d", mrand.IntN(scalePartitions)),
			"payload": map[string]int{"node": i, "seq": seq}}
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		code, _, err := c.do(rctx, i, "POST", "/api/v1/push", map[string]any{"items": []any{item}})
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil || code != 201:
			errs.Add(1)
		default:
			ok.Add(1)
		}
	}
}

// scaleWakes measures push on A -> pop parked on B returns, A and B taking
// every ordered pair in turn (on 1 node A = B: the local wake, for scale).
func scaleWakes(t *testing.T, c *Cluster, trials int) (p50, p99 time.Duration) {
	t.Helper()
	n := len(c.Nodes())
	rec := newRecorder("scale-wake", 1)
	c.Configure(0, rec.queue, map[string]any{"leaseTime": 30})
	q := func(wait bool) url.Values {
		v := url.Values{"batch": {"1"}}
		if wait {
			v.Set("wait", "true")
			v.Set("timeout", "10000")
		}
		return v
	}
	// First contact provisions the group; the second pop on each node
	// registers its ring there.
	for i := 0; i < n; i++ {
		for k := 0; k < 2; k++ {
			if ms := popKeys(t, c, rec, i, "g", q(false)); ms != nil {
				t.Fatalf("warm-up pop returned %d messages", len(ms))
			}
		}
	}
	lat := make([]time.Duration, 0, trials)
	for k := 1; k <= trials; k++ {
		A := k % n
		B := (A + 1 + (k/n)%max(1, n-1)) % n
		if n == 1 {
			B = 0
		}
		type result struct {
			msgs []popMsg
			at   time.Time
			err  error
		}
		done := make(chan result, 1)
		go func() {
			ms, at, err := popRecorded(c, rec, B, "g", q(true))
			done <- result{ms, at, err}
		}()
		waitUntil(t, 5*time.Second, "the pop to park", func() bool {
			st, err := c.Status(B)
			return err == nil && st.Requests.Parked >= 1
		})
		time.Sleep(time.Duration(10+mrand.IntN(40)) * time.Millisecond) // well parked, past its first look
		kk := key{0, k}
		pushKeys(t, c, rec, A, kk)
		var r result
		select {
		case r = <-done:
		case <-time.After(15 * time.Second):
			t.Fatalf("wake trial %d: the push on %s did not wake the pop parked on %s", k, c.Node(A).Name, c.Node(B).Name)
		}
		if r.err != nil || len(r.msgs) != 1 {
			t.Fatalf("wake trial %d: pop on %s: %d messages, %v", k, c.Node(B).Name, len(r.msgs), r.err)
		}
		rec.mu.Lock()
		pushedAt := rec.pushes[kk].start
		rec.mu.Unlock()
		lat = append(lat, r.at.Sub(pushedAt))
		ackKeys(t, c, rec, B, "g", r.msgs)
	}
	p50, _, p99, mx := percentiles(lat)
	t.Logf("%d nodes: wake (push sent -> parked pop returns) %s", n, fmtDurations(lat))
	if p99 > scaleWakeBound {
		t.Errorf("wake p99 %v > %v (max %v)", p99, scaleWakeBound, mx)
	}
	return p50, p99
}

// scaleChurn adds a node and measures how long until every member sees it
// alive, then kills it (-9) and measures how long until every other member
// reports it dead or gone. Joining then killing the same node works for a
// 1-node cluster too.
func scaleChurn(t *testing.T, c *Cluster) (join, joinFromUp, kill time.Duration) {
	t.Helper()
	t0 := time.Now()
	nd := c.AddNode(nil)
	up := time.Now()
	allSee := func(state func(string) bool) func() bool {
		return func() bool {
			for _, i := range c.Running() {
				if i == nd.Idx {
					continue
				}
				st, err := c.Status(i)
				if err != nil || !state(st.memberState(nd.Name)) {
					return false
				}
			}
			return true
		}
	}
	waitUntil(t, scaleConvBound, "every member to see the joiner alive", allSee(func(s string) bool { return s == "alive" }))
	join, joinFromUp = time.Since(t0), time.Since(up)
	// The joiner must see everyone too before the join counts as converged.
	waitUntil(t, scaleConvBound, "the joiner to see every member alive", func() bool {
		st, err := c.Status(nd.Idx)
		if err != nil {
			return false
		}
		for _, i := range c.Running() {
			if st.memberState(c.Node(i).Name) != "alive" {
				return false
			}
		}
		return true
	})
	join, joinFromUp = max(join, time.Since(t0)), max(joinFromUp, time.Since(up))
	t1 := time.Now()
	c.Kill(nd.Idx)
	waitUntil(t, scaleConvBound, "every member to report the killed node dead", allSee(func(s string) bool { return s == "dead" || s == "left" || s == "" }))
	kill = time.Since(t1)
	return join, joinFromUp, kill
}

// scaleSample is one reading of every node of a cluster.
type scaleSample struct {
	at                time.Time
	status            []*Status
	cpuTicks          []int64 // utime+stime
	bytesOut, bytesIn []int64 // hint stream payload bytes, cumulative
}

func sampleScale(t *testing.T, c *Cluster) scaleSample {
	t.Helper()
	s := scaleSample{at: time.Now()}
	nodes := c.Nodes()
	for _, nd := range nodes {
		if !nd.Running() {
			t.Fatalf("%s is not running", nd.Name)
		}
		ticks, err := procCPUTicks(c.nodePID(nd.Idx))
		if err != nil {
			t.Fatal(err)
		}
		s.cpuTicks = append(s.cpuTicks, ticks)
	}
	out, in, err := hintStreamBytes(nodes)
	if err != nil {
		t.Fatal(err)
	}
	s.bytesOut, s.bytesIn = out, in
	for _, nd := range nodes {
		s.status = append(s.status, c.MustStatus(nd.Idx))
	}
	return s
}

func (c *Cluster) nodePID(i int) int {
	nd := c.Node(i)
	nd.mu.Lock()
	defer nd.mu.Unlock()
	return nd.proc.PID()
}

// procCPUTicks is a process's user+system CPU in clock ticks.
func procCPUTicks(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("cpu of pid %d: %w", pid, err)
	}
	// Fields after the parenthesised command name: state is the first, so
	// utime (field 14) and stime (15) are at 11 and 12.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("cpu of pid %d: short /proc stat", pid)
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("cpu of pid %d: bad /proc stat", pid)
	}
	return u + s, nil
}

func cpuRates(a, b scaleSample) []float64 {
	secs := b.at.Sub(a.at).Seconds()
	out := make([]float64, len(a.cpuTicks))
	for i := range out {
		out[i] = float64(b.cpuTicks[i]-a.cpuTicks[i]) * 1000 / scaleClkTck / secs // ms of CPU per second
	}
	return out
}

// hintStreamBytes reads the kernel's per-socket counters (ss -tin) for the
// hint streams: a node's hint listener is its listening TCP port that is
// neither its HTTP nor its mesh port. Sent = bytes_acked on streams from
// the node's address to a peer's hint port; received = bytes_received on
// streams accepted on its own hint port. This is TCP payload (length
// prefix + sealed frame), whatever the frame format is.
func hintStreamBytes(nodes []*Node) (out, in []int64, err error) {
	listen, err := exec.Command("ss", "-Htln").Output()
	if err != nil {
		return nil, nil, fmt.Errorf("ss -Htln: %w", err)
	}
	hint := map[string]string{} // ip -> hint port
	byIP := map[string]int{}
	for k, nd := range nodes {
		byIP[nd.IP] = k
	}
	for _, line := range strings.Split(string(listen), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 {
			continue
		}
		ip, port := ssHostPort(f[3])
		k, ok := byIP[ip]
		if !ok || port == strconv.Itoa(nodes[k].HTTPPort) || port == strconv.Itoa(nodes[k].MeshPort) {
			continue
		}
		hint[ip] = port
	}
	out, in = make([]int64, len(nodes)), make([]int64, len(nodes))
	if len(nodes) < 2 {
		return out, in, nil
	}
	for _, nd := range nodes {
		if nd.Running() && hint[nd.IP] == "" {
			return nil, nil, fmt.Errorf("no hint listener found for %s on %s", nd.Name, nd.IP)
		}
	}
	est, err := exec.Command("ss", "-Htin").Output()
	if err != nil {
		return nil, nil, fmt.Errorf("ss -Htin: %w", err)
	}
	var local, peer string
	sc := bufio.NewScanner(bytes.NewReader(est))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		if line[0] != ' ' && line[0] != '\t' {
			// "State Recv-Q Send-Q Local Peer"; the next line holds the counters.
			f := strings.Fields(line)
			local, peer = "", ""
			if len(f) >= 5 {
				local, peer = f[3], f[4]
			}
			continue
		}
		if local == "" {
			continue
		}
		lip, lport := ssHostPort(local)
		pip, pport := ssHostPort(peer)
		li, lok := byIP[lip]
		_, pok := byIP[pip]
		if !lok || !pok {
			continue
		}
		switch {
		case hint[pip] != "" && pport == hint[pip] && lip != pip:
			out[li] += ssCounter(line, "bytes_acked:")
		case hint[lip] != "" && lport == hint[lip] && lip != pip:
			in[li] += ssCounter(line, "bytes_received:")
		}
	}
	return out, in, sc.Err()
}

func ssHostPort(s string) (string, string) {
	h, p, err := net.SplitHostPort(s)
	if err != nil {
		return "", ""
	}
	return strings.TrimPrefix(h, "::ffff:"), p
}

func ssCounter(info, name string) int64 {
	i := strings.Index(info, name)
	if i < 0 {
		return 0 // ss omits a zero counter
	}
	f := info[i+len(name):]
	if j := strings.IndexAny(f, " \t"); j >= 0 {
		f = f[:j]
	}
	v, _ := strconv.ParseInt(f, 10, 64)
	return v
}

type perfResult struct {
	hint, gossip float64 // shares of samples: hint path, memberlist
	samples      int
	top          string
	err          error
}

// perfMeshShare samples pid with perf for d (frame-pointer call graphs: Go
// keeps frame pointers) and returns the shares of samples whose stack holds
// a memberlist function (gossip, probes) and, of the others, a function of
// queen-node/mesh or queen-node/coalesce (the hint path: enqueue on push,
// flush, seal, send, receive, open, decode and the marks it applies). Time
// spent in crypto, syscalls or the hot-list below those frames counts too.
func perfMeshShare(pid int, d time.Duration) perfResult {
	dir, err := os.MkdirTemp("", "queen-scale-perf-")
	if err != nil {
		return perfResult{err: err}
	}
	defer os.RemoveAll(dir)
	data := filepath.Join(dir, "perf.data")
	rec := exec.Command("perf", "record", "-q", "-F", "2999", "-g", "-p", strconv.Itoa(pid), "-o", data,
		"--", "sleep", strconv.Itoa(int(d.Seconds())))
	if b, err := rec.CombinedOutput(); err != nil {
		return perfResult{err: fmt.Errorf("perf record: %w: %s", err, b)}
	}
	script, err := exec.Command("perf", "script", "-i", data, "-F", "ip,sym").Output()
	if err != nil {
		return perfResult{err: fmt.Errorf("perf script: %w", err)}
	}
	// Output: one stack per sample, leaf first, "ip symbol" per line, a
	// blank line between samples.
	var total, hint, gossip int
	var stack []string
	top := map[string]int{}
	flush := func() {
		if len(stack) == 0 {
			return
		}
		total++
		var ml, mesh string
		for _, fn := range stack {
			if ml == "" && strings.Contains(fn, "hashicorp/memberlist.") {
				ml = fn
			}
			if mesh == "" && (strings.Contains(fn, "queen-node/mesh.") || strings.Contains(fn, "queen-node/coalesce.")) {
				mesh = fn
			}
		}
		switch {
		case ml != "":
			gossip++
		case mesh != "":
			hint++
			top[mesh]++ // the innermost hint-path frame
		}
		stack = stack[:0]
	}
	for _, line := range strings.Split(string(script), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			flush()
			continue
		}
		stack = append(stack, f[len(f)-1])
	}
	flush()
	if total == 0 {
		return perfResult{err: fmt.Errorf("perf recorded no samples")}
	}
	type kv struct {
		k string
		v int
	}
	var kvs []kv
	for k, v := range top {
		kvs = append(kvs, kv{k, v})
	}
	sort.Slice(kvs, func(i, j int) bool { return kvs[i].v > kvs[j].v })
	var tops []string
	for i := 0; i < len(kvs) && i < 6; i++ {
		tops = append(tops, fmt.Sprintf("%s %d", kvs[i].k, kvs[i].v))
	}
	return perfResult{hint: float64(hint) / float64(total), gossip: float64(gossip) / float64(total),
		samples: total, top: strings.Join(tops, "; ")}
}

func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return -1
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

func mean(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

// meanScaleRows averages the repetitions of each size (rep 0 = mean).
func meanScaleRows(rows []scaleRow) []scaleRow {
	by := map[int][]scaleRow{}
	var sizes []int
	for _, r := range rows {
		if by[r.n] == nil {
			sizes = append(sizes, r.n)
		}
		by[r.n] = append(by[r.n], r)
	}
	sort.Ints(sizes)
	var out []scaleRow
	for _, n := range sizes {
		rs := by[n]
		k := float64(len(rs))
		m := scaleRow{n: n, meshShare: -1}
		var shares, gossip, hcpu, upf []float64
		for _, r := range rs {
			m.load0 += r.load0 / k
			m.load1 += r.load1 / k
			m.pushRate += r.pushRate / k
			m.framesOut += r.framesOut / k
			m.framesIn += r.framesIn / k
			m.hintsOut += r.hintsOut / k
			m.hintsIn += r.hintsIn / k
			m.bytesOut += r.bytesOut / k
			m.bytesIn += r.bytesIn / k
			m.cpuIdle += r.cpuIdle / k
			m.cpuLoad += r.cpuLoad / k
			m.cpuLoadMax += r.cpuLoadMax / k
			m.wakeP50 += r.wakeP50 / time.Duration(len(rs))
			m.wakeP99 += r.wakeP99 / time.Duration(len(rs))
			m.joinConv += r.joinConv / time.Duration(len(rs))
			m.joinFromUp += r.joinFromUp / time.Duration(len(rs))
			m.killConv += r.killConv / time.Duration(len(rs))
			m.pushErrors += r.pushErrors
			if r.meshShare >= 0 {
				shares = append(shares, r.meshShare)
				gossip = append(gossip, r.gossipShare)
				hcpu = append(hcpu, r.hintCPU)
				upf = append(upf, r.usPerFrame)
				m.perfSamples += r.perfSamples
			}
		}
		if len(shares) > 0 {
			m.meshShare, m.gossipShare = mean(shares), mean(gossip)
			m.hintCPU, m.usPerFrame = mean(hcpu), mean(upf)
		}
		out = append(out, m)
	}
	return out
}

func fmtScaleRows(rows []scaleRow) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| nodes | rep | load avg | pushes/s/node | frames/s out / in | hints/s out / in | bytes/s out / in | B/frame | CPU ms/s idle / load (max) | wake p50 / p99 | join (from up) | kill -> dead | node 0 perf: hint path / memberlist share of samples; hint path CPU |\n")
	fmt.Fprintf(&b, "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, r := range rows {
		rep := strconv.Itoa(r.rep)
		if r.rep == 0 {
			rep = "mean"
		}
		bpf := "-"
		if r.framesOut > 0 {
			bpf = fmt.Sprintf("%.0f", r.bytesOut/r.framesOut)
		}
		share := "-"
		if r.meshShare >= 0 {
			share = fmt.Sprintf("%.1f %% / %.1f %% of %d", 100*r.meshShare, 100*r.gossipShare, r.perfSamples)
			if r.usPerFrame > 0 {
				share += fmt.Sprintf("; %.1f ms/s, %.0f µs/frame", r.hintCPU, r.usPerFrame)
			} else {
				share += fmt.Sprintf("; %.1f ms/s", r.hintCPU)
			}
		}
		ms := func(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond)) }
		fmt.Fprintf(&b, "| %d | %s | %.2f→%.2f | %.1f | %.1f / %.1f | %.1f / %.1f | %.0f / %.0f | %s | %.1f / %.1f (%.1f) | %s / %s ms | %s (%s) ms | %s ms | %s |\n",
			r.n, rep, r.load0, r.load1, r.pushRate, r.framesOut, r.framesIn, r.hintsOut, r.hintsIn, r.bytesOut, r.bytesIn, bpf,
			r.cpuIdle, r.cpuLoad, r.cpuLoadMax, ms(r.wakeP50), ms(r.wakeP99), ms(r.joinConv), ms(r.joinFromUp), ms(r.killConv), share)
	}
	return b.String()
}

// scaleSVG draws four small bar panels over the cluster sizes: hint frames
// per second, hint bytes per second, CPU per node, and latencies. Plain SVG,
// no dependency, like docs/bench-growth.svg.
func scaleSVG(rows []scaleRow, cfg scaleConfig) string {
	type series struct {
		name  string
		color string
		vals  []float64
	}
	var labels []string
	col := func(f func(r scaleRow) float64) []float64 {
		var v []float64
		for _, r := range rows {
			v = append(v, f(r))
		}
		return v
	}
	for _, r := range rows {
		labels = append(labels, strconv.Itoa(r.n))
	}
	msOf := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	panels := []struct {
		title, unit string
		s           []series
	}{
		{"hint frames/s per node", "", []series{
			{"sent", "#4a7ebb", col(func(r scaleRow) float64 { return r.framesOut })},
			{"received", "#8fb3e0", col(func(r scaleRow) float64 { return r.framesIn })}}},
		{"hint bytes/s per node", "", []series{
			{"sent", "#4a7ebb", col(func(r scaleRow) float64 { return r.bytesOut })},
			{"received", "#8fb3e0", col(func(r scaleRow) float64 { return r.bytesIn })}}},
		{"CPU ms/s per node (hint path: node 0, perf)", "", []series{
			{"idle", "#999999", col(func(r scaleRow) float64 { return r.cpuIdle })},
			{"load", "#c0392b", col(func(r scaleRow) float64 { return r.cpuLoad })},
			{"hint path", "#f39c12", col(func(r scaleRow) float64 { return max(0, r.hintCPU) })}}},
		{"hint path share of node 0's CPU samples (%)", "", []series{
			{"hint path", "#f39c12", col(func(r scaleRow) float64 { return 100 * max(0, r.meshShare) })},
			{"memberlist", "#7f8c8d", col(func(r scaleRow) float64 { return 100 * max(0, r.gossipShare) })}}},
		{"cross-node wake (ms; 1 node: local wake)", "", []series{
			{"p50", "#27ae60", col(func(r scaleRow) float64 { return msOf(r.wakeP50) })},
			{"p99", "#1e8449", col(func(r scaleRow) float64 { return msOf(r.wakeP99) })}}},
		{"membership convergence (ms)", "", []series{
			{"join (from start)", "#8e44ad", col(func(r scaleRow) float64 { return msOf(r.joinConv) })},
			{"kill -9 → dead", "#d35400", col(func(r scaleRow) float64 { return msOf(r.killConv) })}}},
	}
	const W, H, pw, ph = 760, 850, 340, 200
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n", W, H, W, H)
	b.WriteString(`<rect width="100%" height="100%" fill="white"/>` + "\n")
	fmt.Fprintf(&b, `<text x="20" y="18" font-size="13" font-weight="bold">Scale out: %d pushes/s to each node, %d partitions (means of %d repetitions)</text>`+"\n",
		cfg.rate, scalePartitions, cfg.reps)
	for pi, p := range panels {
		x0 := 40 + float64(pi%2)*(pw+40)
		y0 := 50 + float64(pi/2)*(ph+75)
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" font-size="12" font-weight="bold">%s</text>`+"\n", x0, y0, p.title)
		top, base := y0+25, y0+ph
		fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="#888"/>`+"\n", x0, base, x0+pw, base)
		vmax := 0.0
		for _, s := range p.s {
			for _, v := range s.vals {
				vmax = max(vmax, v)
			}
		}
		if vmax <= 0 {
			vmax = 1
		}
		groupW := pw / float64(len(labels))
		barW := groupW * 0.8 / float64(len(p.s))
		for gi, lab := range labels {
			gx := x0 + float64(gi)*groupW + groupW*0.1
			fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" text-anchor="middle">%s node%s</text>`+"\n", gx+groupW*0.4, base+14, lab, plural(lab))
			for si, s := range p.s {
				v := s.vals[gi]
				h := (base - top) * v / vmax
				bx := gx + float64(si)*barW
				fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n", bx, base-h, barW-1, h, s.color)
				fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" font-size="8" fill="#333">%s</text>`+"\n", bx+barW/2, base-h-2, svgNum(v))
			}
		}
		for si, s := range p.s {
			lx := x0 + float64(si)*130
			fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="10" height="10" fill="%s"/><text x="%.0f" y="%.0f">%s</text>`+"\n", lx, base+22, s.color, lx+14, base+31, s.name)
		}
	}
	b.WriteString("</svg>\n")
	return b.String()
}

func plural(n string) string {
	if n == "1" {
		return ""
	}
	return "s"
}

func svgNum(v float64) string {
	switch {
	case v >= 10000:
		return fmt.Sprintf("%.0fk", v/1000)
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	default:
		return fmt.Sprintf("%.1f", v)
	}
}
