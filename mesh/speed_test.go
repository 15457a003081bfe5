package mesh

import (
	"fmt"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/hashicorp/go-hclog"

	"queen-node/coalesce"
)

// Speed figures of docs/mesh.md ("Speed"): codec throughput and bytes per
// hint, the CPU cost of the whole hint path at 50,000 distinct dirty
// partitions per second to two peers, and the removal of a member that left.

const (
	speedHints  = 50000 // one full flush (DefaultMaxFlushHints)
	speedQueues = 200
)

// speedFlush is a realistic full flush: 50,000 distinct hints of tenant
// "default" over 200 queues ("queue-000".."queue-199"), partitions named
// "customer-000123", grouped exactly as the flusher's Drain groups them.
func speedFlush(tb testing.TB) []coalesce.Batch {
	tb.Helper()
	s := coalesce.New(0)
	for i := 0; i < speedHints; i++ {
		s.Add(coalesce.Hint{Tenant: "default", Queue: fmt.Sprintf("queue-%03d", i%speedQueues),
			Partition: fmt.Sprintf("customer-%06d", i)})
	}
	batches := s.Drain(DefaultMaxFlushHints, MaxFrameBytes/2)
	n := 0
	for _, b := range batches {
		n += len(b.Partitions)
	}
	if n != speedHints {
		tb.Fatalf("drained %d hints, want %d", n, speedHints)
	}
	return batches
}

func frameBytes(frames [][]byte) int {
	n := 0
	for _, f := range frames {
		n += len(f)
	}
	return n
}

func BenchmarkEncodeFrames(b *testing.B) {
	batches := speedFlush(b)
	report := func(b *testing.B, frames [][]byte, body int) {
		b.ReportMetric(float64(speedHints)*float64(b.N)/b.Elapsed().Seconds(), "hints/s")
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/speedHints, "ns/hint")
		b.ReportMetric(float64(body)/speedHints, "frame-B/hint")
		b.ReportMetric(float64(body+lengthPrefix*len(frames))/speedHints, "wire-B/hint")
		b.ReportMetric(float64(len(frames)), "frames")
	}
	b.Run("plain", func(b *testing.B) {
		var frames [][]byte
		b.ReportAllocs()
		for b.Loop() {
			var err error
			if frames, err = EncodeFrames("node-a", batches); err != nil {
				b.Fatal(err)
			}
		}
		report(b, frames, frameBytes(frames))
	})
	b.Run("sealed", func(b *testing.B) {
		s, err := NewSealer([]byte("0123456789abcdef0123456789abcdef"))
		if err != nil {
			b.Fatal(err)
		}
		var sealed [][]byte
		b.ReportAllocs()
		for b.Loop() {
			frames, err := EncodeFrames("node-a", batches)
			if err != nil {
				b.Fatal(err)
			}
			sealed = sealed[:0]
			for _, f := range frames {
				sealed = append(sealed, s.Seal(f))
			}
		}
		report(b, sealed, frameBytes(sealed))
	})
	// What one flush costs the sender in CPU, syscalls aside: refill the
	// coalescing set with 50,000 distinct hints (Enqueue's Add), Drain,
	// encodeFramesCounted, and
	// one Seal per frame per peer for two peers.
	b.Run("sender-pipeline-2-peers-sealed", func(b *testing.B) {
		s, err := NewSealer([]byte("0123456789abcdef0123456789abcdef"))
		if err != nil {
			b.Fatal(err)
		}
		hints := make([]coalesce.Hint, 0, speedHints)
		for _, bt := range batches {
			for _, p := range bt.Partitions {
				hints = append(hints, coalesce.Hint{Tenant: bt.Tenant, Queue: bt.Queue, Partition: p})
			}
		}
		set := coalesce.New(0)
		var frames [][]byte
		b.ReportAllocs()
		for b.Loop() {
			for _, h := range hints {
				set.Add(h)
			}
			drained := set.Drain(DefaultMaxFlushHints, MaxFrameBytes/2)
			if frames, _, err = encodeFramesCounted("node-a", drained); err != nil {
				b.Fatal(err)
			}
			for range 2 {
				for _, f := range frames {
					_ = s.Seal(f)
				}
			}
		}
		report(b, frames, frameBytes(frames)+SealOverhead*len(frames))
	})
}

func BenchmarkDecodeFrame(b *testing.B) {
	frames, err := EncodeFrames("node-a", speedFlush(b))
	if err != nil {
		b.Fatal(err)
	}
	b.Run("plain", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, f := range frames {
				if _, err := DecodeFrame(f); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(speedHints)*float64(b.N)/b.Elapsed().Seconds(), "hints/s")
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/speedHints, "ns/hint")
	})
	b.Run("sealed", func(b *testing.B) {
		s, err := NewSealer([]byte("0123456789abcdef0123456789abcdef"))
		if err != nil {
			b.Fatal(err)
		}
		sealed := make([][]byte, len(frames))
		for i, f := range frames {
			sealed[i] = s.Seal(f)
		}
		b.ReportAllocs()
		for b.Loop() {
			for _, f := range sealed {
				plain, err := s.Open(f)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := DecodeFrame(plain); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(speedHints)*float64(b.N)/b.Elapsed().Seconds(), "hints/s")
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/speedHints, "ns/hint")
	})
}

// speedPorts are the memberlist ports of BenchmarkHintPath, on 127.0.3.x
// (mesh_test.go uses 127.0.0.x from 17000 up, transport_bench_test.go
// 127.0.2.x on 179xx).
var speedPorts = struct {
	sync.Mutex
	n int
}{n: 17600}

func startSpeed(tb testing.TB, name, ip string, secret []byte, join []string, recv Receiver, mut func(*Config)) *Mesh {
	tb.Helper()
	speedPorts.Lock()
	speedPorts.n += 3
	port := speedPorts.n
	speedPorts.Unlock()
	cfg := DefaultConfig()
	cfg.Name = name
	cfg.Bind = fmt.Sprintf("%s:%d", ip, port)
	cfg.Join = join
	cfg.Secret = secret
	cfg.Timings = testTimings()
	cfg.HTTPAddr = ip + ":6632"
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.Warn})
	if mut != nil {
		mut(&cfg)
	}
	m, err := New(cfg, recv)
	if err != nil {
		tb.Fatalf("start %s: %v", name, err)
	}
	tb.Cleanup(m.Close)
	return m
}

func cpuTime() time.Duration { return rusage(syscall.RUSAGE_SELF) }

// threadCPU is the CPU time of the calling OS thread (Linux
// CLOCK_THREAD_CPUTIME_ID, exact even for the running thread, unlike
// RUSAGE_THREAD which lags by up to a scheduler tick); the caller locks its
// goroutine to the thread.
func threadCPU() time.Duration {
	var ts syscall.Timespec
	const clockThreadCPUTimeID = 3
	if _, _, e := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTimeID, uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
		return 0
	}
	return time.Duration(ts.Nano())
}

func rusage(who int) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(who, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkHintPath runs a sender and two receivers in this process with
// fast gossip timings, and has the sender Enqueue 50,000 distinct hints a
// second (tenant "t", 200 queues, partitions never repeated) for 3 s. It
// reports the process CPU (sender + both receivers + memberlist gossip) as
// cores and per hint, the idle CPU of the three converged members, and the
// sender's flush path (Drain, encodeFramesCounted, Seal, queue to
// both peers) timed directly: the flush loop is not started and this
// benchmark calls flush every 20 ms itself. Run it with -benchtime 1x.
func BenchmarkHintPath(b *testing.B) {
	if testing.Short() {
		b.Skip("3 s wall-clock run with three members")
	}
	for _, v := range []struct {
		name   string
		secret []byte
	}{{"open", nil}, {"sealed", []byte("0123456789abcdef0123456789abcdef")}} {
		b.Run(v.name, func(b *testing.B) { benchHintPath(b, v.secret) })
	}
}

func benchHintPath(b *testing.B, secret []byte) {
	const (
		rate     = 50000
		duration = 3 * time.Second
		flushDur = DefaultFlushInterval
	)
	total := int(rate * duration / time.Second)
	noTicker := func(c *Config) { c.noFlusher = true } // this benchmark flushes
	rb, rc := &recordingReceiver{}, &recordingReceiver{}
	a := startSpeed(b, "a", "127.0.3.2", secret, nil, nil, noTicker)
	seed := []string{a.cfg.Bind}
	mb := startSpeed(b, "b", "127.0.3.3", secret, seed, rb, nil)
	mc := startSpeed(b, "c", "127.0.3.4", secret, seed, rc, nil)
	deadline := time.Now().Add(10 * time.Second)
	for _, m := range []*Mesh{a, mb, mc} {
		for strings.Join(alive(m), ",") != "a,b,c" {
			if time.Now().After(deadline) {
				b.Fatalf("%s did not converge: %v", m.cfg.Name, alive(m))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// Open both streams before measuring.
	a.Enqueue("t", "warm", "up")
	a.flush()
	for rb.n.Load() < 1 || rc.n.Load() < 1 {
		if time.Now().After(deadline) {
			b.Fatal("warm-up hint not delivered")
		}
		time.Sleep(5 * time.Millisecond)
	}

	queues := make([]string, speedQueues)
	for i := range queues {
		queues[i] = fmt.Sprintf("queue-%03d", i)
	}
	parts := make([]string, total)
	for i := range parts {
		parts[i] = fmt.Sprintf("customer-%07d", i)
	}
	s0 := a.Stats()
	b0, c0 := rb.n.Load(), rc.n.Load()

	// Idle: three converged members gossiping, no hints.
	idleCPU0, idleWall0 := cpuTime(), time.Now()
	time.Sleep(time.Second)
	idleCores := float64(cpuTime()-idleCPU0) / float64(time.Since(idleWall0))

	var (
		flushTime  atomic.Int64
		flushes    atomic.Int64
		flushCPU   atomic.Int64 // thread CPU of the flusher goroutine
		enqueueDur time.Duration
		stopFlush  = make(chan struct{})
		flushDone  = make(chan struct{})
	)
	b.ResetTimer()
	cpu0, wall0 := cpuTime(), time.Now()
	go func() {
		defer close(flushDone)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		t := time.NewTicker(flushDur)
		defer t.Stop()
		for {
			select {
			case <-stopFlush:
				return
			case <-t.C:
				s, th := time.Now(), threadCPU()
				a.flush()
				flushCPU.Add(int64(threadCPU() - th))
				flushTime.Add(int64(time.Since(s)))
				flushes.Add(1)
			}
		}
	}()
	runtime.LockOSThread()
	var enqueueCPU time.Duration
	sent := 0
	for sent < total {
		target := min(total, int(float64(time.Since(wall0))*rate/float64(time.Second)))
		s, th := time.Now(), threadCPU()
		for ; sent < target; sent++ {
			a.Enqueue("t", queues[sent%speedQueues], parts[sent])
		}
		enqueueCPU += threadCPU() - th
		enqueueDur += time.Since(s)
		time.Sleep(time.Millisecond)
	}
	runtime.UnlockOSThread()
	close(stopFlush)
	<-flushDone
	s := time.Now()
	a.flush() // whatever the last tick left
	flushTime.Add(int64(time.Since(s)))
	flushes.Add(1)
	for st := a.Stats(); ; st = a.Stats() {
		got := (rb.n.Load() - b0) + (rc.n.Load() - c0)
		if uint64(got) >= st.HintsSent-s0.HintsSent || time.Now().After(deadline.Add(duration+10*time.Second)) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	wall, cpu := time.Since(wall0), cpuTime()-cpu0
	b.StopTimer()

	st := a.Stats()
	gotB, gotC := int(rb.n.Load()-b0), int(rc.n.Load()-c0)
	lostFrames := (st.QueueDropped - s0.QueueDropped) + (st.FramesDropped - s0.FramesDropped)
	coalLost := st.CoalescerDropped - s0.CoalescerDropped
	b.Logf("%d hints enqueued in %v; b got %d, c got %d; hints sent %d, frames sent %d, frames lost (counted) %d, coalescer drops %d, flushes %d",
		total, wall.Round(time.Millisecond), gotB, gotC, st.HintsSent-s0.HintsSent, st.FramesSent-s0.FramesSent,
		lostFrames, coalLost, flushes.Load())
	if lostFrames == 0 && coalLost == 0 {
		if gotB != total || gotC != total {
			b.Fatalf("uncounted loss: b got %d, c got %d of %d", gotB, gotC, total)
		}
	} else if gotB > total || gotC > total {
		b.Fatalf("duplicates: b got %d, c got %d of %d", gotB, gotC, total)
	}
	if uint64(gotB+gotC) != st.HintsSent-s0.HintsSent {
		b.Fatalf("hints sent %d but received %d", st.HintsSent-s0.HintsSent, gotB+gotC)
	}
	hints := float64(total)
	b.ReportMetric(hints/wall.Seconds(), "hints/s")
	b.ReportMetric(float64(cpu)/float64(wall), "cpu-cores")
	b.ReportMetric(idleCores, "idle-cpu-cores")
	b.ReportMetric(float64(cpu)/hints, "cpu-ns/hint")
	b.ReportMetric(float64(flushTime.Load())/hints, "flush-wall-ns/hint")
	b.ReportMetric(float64(enqueueDur)/hints, "enqueue-wall-ns/hint")
	b.ReportMetric(float64(enqueueCPU)/hints, "enqueue-cpu-ns/hint")
	b.ReportMetric(float64(flushCPU.Load())/hints, "flush-cpu-ns/hint")
	b.ReportMetric(float64(enqueueCPU+time.Duration(flushCPU.Load()))/float64(wall), "sender-cpu-cores")
	b.ReportMetric(float64(lostFrames), "lost-frames")
}

// A member that leaves is removed from the flusher's peers: a's hints then
// go to b alone.
func TestLeftMemberStopsReceivingHints(t *testing.T) {
	nw := newMemNet()
	a := start(t, "a", "127.0.3.11", nil, nil, nw.use)
	seed := []string{a.m.cfg.Bind}
	b := start(t, "b", "127.0.3.12", nil, seed, nw.use)
	c := start(t, "c", "127.0.3.13", nil, seed, nw.use)
	for _, n := range []*node{a, b, c} {
		eventually(t, 10*time.Second, n.m.cfg.Name+" sees 3 alive members", func() bool {
			return strings.Join(alive(n.m), ",") == "a,b,c"
		})
	}
	peerNames := func() []string {
		a.m.peerMu.Lock()
		defer a.m.peerMu.Unlock()
		var out []string
		for name := range a.m.peers {
			out = append(out, name)
		}
		return out
	}
	// c is a peer of a's flusher to begin with.
	a.m.Enqueue("t", "q", "before")
	for _, n := range []*node{b, c} {
		eventually(t, 5*time.Second, "first hint at "+n.m.cfg.Name, func() bool { return n.rec.total() == 1 })
	}
	if got := strings.Join(sortedCopy(peerNames()), ","); got != "b,c" {
		t.Fatalf("a's peers before c leaves: %q", got)
	}
	if st := a.m.Stats(); st.HintsSent != 2 {
		t.Fatalf("hints sent before c leaves: %+v", st)
	}

	c.m.Close()
	eventually(t, 10*time.Second, "a sees c gone", func() bool {
		for _, mb := range a.m.Members() {
			if mb.Name == "c" {
				return mb.State == "left" || mb.State == "dead"
			}
		}
		return false
	})
	if lp := a.m.Stats().LivePeers; lp != 1 {
		t.Fatalf("a's live peers after c left: %d", lp)
	}

	const n = 100
	s0 := a.m.Stats()
	b0 := b.rec.total()
	for i := 0; i < n; i++ {
		a.m.Enqueue("t", "q", fmt.Sprintf("after-%d", i))
	}
	eventually(t, 5*time.Second, "b receives the hints", func() bool { return b.rec.total() == b0+n })
	// No wait for stragglers: b's sender counts a frame before it flushes
	// it, so b holding all n means a counted them; a frame for c would need
	// c in a's peer set, checked last.
	s1 := a.m.Stats()
	if d := s1.HintsSent - s0.HintsSent; d != n {
		t.Fatalf("a sent %d hints for %d enqueued with one live peer (c still targeted?)", d, n)
	}
	if d := s1.QueueDropped - s0.QueueDropped; d != 0 {
		t.Fatalf("a dropped %d frames: it still tries to reach c", d)
	}
	if got := b.rec.total(); got != b0+n {
		t.Fatalf("b received %d hints, want %d", got-b0, n)
	}
	if c.rec.total() != 1 {
		t.Fatalf("c received hints after leaving: %d", c.rec.total())
	}
	if got := strings.Join(sortedCopy(peerNames()), ","); got != "b" {
		t.Fatalf("a's peers after c left: %q", got)
	}
}

func sortedCopy(s []string) []string {
	out := append([]string(nil), s...)
	sort.Strings(out)
	return out
}

// BenchmarkEnqueue is Mesh.Enqueue with a live peer (no network: the
// flusher is not running): a repeated key (the common case, a hot partition
// pushed many times in one flush window) and distinct keys, drained every
// 1,000 hints as a 20 ms flush at 50,000 hints/s would.
func BenchmarkEnqueue(b *testing.B) {
	b.Run("repeated", func(b *testing.B) {
		m := &Mesh{set: coalesce.New(0)}
		m.live.Store(1)
		m.Enqueue("default", "orders", "customer-000042")
		b.ReportAllocs()
		for b.Loop() {
			m.Enqueue("default", "orders", "customer-000042")
		}
	})
	b.Run("distinct", func(b *testing.B) {
		m := &Mesh{set: coalesce.New(0)}
		m.live.Store(1)
		queues := make([]string, speedQueues)
		for i := range queues {
			queues[i] = fmt.Sprintf("queue-%03d", i)
		}
		parts := make([]string, 1<<16)
		for i := range parts {
			parts[i] = fmt.Sprintf("customer-%07d", i)
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			m.Enqueue("t", queues[i%speedQueues], parts[i&(len(parts)-1)])
			if i++; i%1000 == 0 {
				m.setMu.Lock()
				m.set.Drain(DefaultMaxFlushHints, MaxFrameBytes/2)
				m.setMu.Unlock()
			}
		}
	})
}
