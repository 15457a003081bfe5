package stats

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"queen-node/broker"
	"queen-node/mesh"
)

// fakeSource records what the sampler writes.
type fakeSource struct {
	mu        sync.Mutex
	counters  broker.Counters
	mesh      mesh.Stats
	reseeds   int64
	parked    []broker.ParkedSample
	failWrite bool
	took      bool
	samples   []broker.NodeSample
	parkedIn  [][]broker.ParkedSample
	gaps      []time.Duration
	trims     []time.Time
}

func (f *fakeSource) NodeName() string { return "n1" }
func (f *fakeSource) Snapshot() broker.Snapshot {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := broker.Snapshot{Requests: f.counters, Parked: 3, Mesh: broker.MeshSnapshot{Enabled: true, Stats: f.mesh}}
	st.Hotlist.Enabled, st.Hotlist.Reseeds = true, f.reseeds
	return st
}
func (f *fakeSource) ParkedQueues(limit int) []broker.ParkedSample {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.parked[:min(limit, len(f.parked))]
}
func (f *fakeSource) WriteNodeSample(_ context.Context, s broker.NodeSample, p []broker.ParkedSample) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failWrite {
		return errors.New("database down")
	}
	f.samples = append(f.samples, s)
	f.parkedIn = append(f.parkedIn, p)
	return nil
}
func (f *fakeSource) SampleQueues(_ context.Context, gap time.Duration) (bool, int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gaps = append(f.gaps, gap)
	return f.took, 1, nil
}
func (f *fakeSource) TrimSamples(_ context.Context, before time.Time, _, _ int) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.trims = append(f.trims, before)
	return 0, nil
}

func (f *fakeSource) set(fn func(*fakeSource)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// TestSampleDeltas: a sample carries the counters' change since the last
// written sample; a failed write leaves its change to the next one.
func TestSampleDeltas(t *testing.T) {
	f := &fakeSource{counters: broker.Counters{Pushes: 10, PushedItems: 100, Acks: 7}}
	f.parked = []broker.ParkedSample{{Tenant: "t", Queue: "a", Parked: 2}, {Tenant: "t", Queue: "b", Parked: 1}}
	s := New(Config{Interval: time.Hour, MaxParkedQueues: 1}, f, nil)
	ctx := context.Background()

	f.set(func(f *fakeSource) { f.counters.Pushes, f.counters.PushedItems = 15, 130 })
	if err := s.SampleNow(ctx); err != nil {
		t.Fatal(err)
	}
	if got := f.samples[0]; got.Pushes != 5 || got.PushedItems != 30 || got.Acks != 0 || got.Parked != 3 || got.Node != "n1" || got.IntervalMS < 1 {
		t.Fatalf("first sample %+v", got)
	}
	if len(f.parkedIn[0]) != 1 || f.parkedIn[0][0].Queue != "a" {
		t.Errorf("parked queues written %v, want the busiest one", f.parkedIn[0])
	}

	f.set(func(f *fakeSource) { f.counters.Pushes, f.failWrite = 20, true })
	if err := s.SampleNow(ctx); err == nil {
		t.Fatal("a failed write returned no error")
	}
	f.set(func(f *fakeSource) { f.counters.Pushes, f.failWrite = 22, false })
	if err := s.SampleNow(ctx); err != nil {
		t.Fatal(err)
	}
	if got := f.samples[1].Pushes; got != 7 {
		t.Errorf("sample after a failed one has %d pushes, want 7 (15 → 22)", got)
	}
}

// TestSampleMeshDeltas: the mesh and hot-list counters /status shows are
// written as deltas too, the three kinds of drop summed into one.
func TestSampleMeshDeltas(t *testing.T) {
	f := &fakeSource{mesh: mesh.Stats{FramesSent: 4, HintsSent: 40, GapsSeen: 1, FramesDropped: 1}, reseeds: 9}
	s := New(Config{Interval: time.Hour}, f, nil)
	f.set(func(f *fakeSource) {
		f.mesh = mesh.Stats{FramesSent: 10, FramesReceived: 3, HintsSent: 100, HintsReceived: 30, GapsSeen: 3,
			FramesDropped: 2, QueueDropped: 5, CoalescerDropped: 7}
		f.reseeds = 13
	})
	if err := s.SampleNow(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := f.samples[0]
	want := broker.NodeSample{FramesSent: 6, FramesReceived: 3, HintsSent: 60, HintsReceived: 30, Dropped: 13, Gaps: 2, Reseeds: 4}
	if got.FramesSent != want.FramesSent || got.FramesReceived != want.FramesReceived || got.HintsSent != want.HintsSent ||
		got.HintsReceived != want.HintsReceived || got.Dropped != want.Dropped || got.Gaps != want.Gaps || got.Reseeds != want.Reseeds {
		t.Fatalf("sample %+v, want the mesh deltas of %+v", got, want)
	}
}

// TestQueueRounds: the loop's samples ask for a queue round once per
// QueueInterval with 9/10 of it as the gap; SampleNow always, with no gap;
// samples are trimmed only after a round this node took.
func TestQueueRounds(t *testing.T) {
	f := &fakeSource{}
	s := New(Config{Interval: time.Minute, QueueInterval: 10 * time.Minute, Keep: time.Hour}, f, nil)
	ctx := context.Background()
	for range 3 {
		if err := s.sample(ctx, false); err != nil {
			t.Fatal(err)
		}
	}
	if len(f.gaps) != 1 || f.gaps[0] != 9*time.Minute {
		t.Fatalf("rounds asked %v, want one with a 9 min gap", f.gaps)
	}
	if len(f.trims) != 0 {
		t.Fatalf("trimmed after a round another node took")
	}
	f.set(func(f *fakeSource) { f.took = true })
	if err := s.SampleNow(ctx); err != nil {
		t.Fatal(err)
	}
	if len(f.gaps) != 2 || f.gaps[1] != 0 {
		t.Fatalf("SampleNow's round: %v", f.gaps)
	}
	if len(f.trims) != 1 || time.Since(f.trims[0]) < time.Hour-time.Second || time.Since(f.trims[0]) > time.Hour+time.Minute {
		t.Fatalf("trim before %v, want an hour ago", f.trims)
	}
}

// TestLoop: the loop samples every Interval until Close; Interval 0 is off.
func TestLoop(t *testing.T) {
	f := &fakeSource{}
	s := New(Config{Interval: 5 * time.Millisecond}, f, nil)
	s.Start()
	deadline := time.Now().Add(5 * time.Second)
	for {
		f.mu.Lock()
		n := len(f.samples)
		f.mu.Unlock()
		if n >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d samples in 5 s", n)
		}
		time.Sleep(time.Millisecond)
	}
	s.Close()
	select {
	case <-s.done: // the loop has returned: no sample can follow
	default:
		t.Error("Close returned with the loop still running")
	}

	off := New(Config{}, &fakeSource{}, nil)
	off.Start()
	off.Close() // returns at once
}
