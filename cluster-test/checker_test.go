package clustertest

import (
	"strings"
	"testing"
	"time"
)

// TestChecker feeds the workload checker synthetic observations, one
// broken rule at a time, and requires it to notice (and to accept the
// clean history). No cluster needed.
func TestChecker(t *testing.T) {
	t.Parallel()
	c := &Cluster{t: t, nodes: []*Node{{Name: "a"}, {Name: "b"}}}
	base := time.Now()
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	const lease = 3 * time.Second

	type step func(r *Recorder)
	push := func(p, n int) step {
		return func(r *Recorder) {
			for s := 1; s <= n; s++ {
				r.pushes[key{p, s}] = pushRec{start: at(0), done: at(1)}
			}
		}
	}
	deliver := func(t0, t1 int, p int, seqs ...int) step {
		return func(r *Recorder) {
			r.deliveries = append(r.deliveries, delivery{group: "g", node: 0, lease: "l", t0: at(t0), t1: at(t1), part: p, seqs: seqs})
		}
	}
	ack := func(start, end int, p int, seqs ...int) step {
		return func(r *Recorder) {
			for _, s := range seqs {
				r.ackResult(ackRec{group: "g", part: p, seq: s, start: at(start), end: at(end), outcome: ackOK})
			}
		}
	}
	cases := []struct {
		name  string
		steps []step
		o     CheckOptions
		want  string // "" = no violation
	}{
		{"clean", []step{push(0, 4), deliver(0, 10, 0, 1, 2), ack(20, 30, 0, 1, 2), deliver(40, 50, 0, 3, 4), ack(60, 70, 0, 3, 4)}, CheckOptions{}, ""},
		{"clean redelivery after expiry", []step{push(0, 2), deliver(0, 10, 0, 1, 2), deliver(3100, 3110, 0, 1, 2), ack(3200, 3210, 0, 1, 2)}, CheckOptions{}, ""},
		{"lost message", []step{push(0, 3), deliver(0, 10, 0, 1, 2), ack(20, 30, 0, 1, 2)}, CheckOptions{}, "never delivered"},
		{"never acked", []step{push(0, 2), deliver(0, 10, 0, 1, 2)}, CheckOptions{}, "never acked"},
		{"gap in a batch", []step{push(0, 3), deliver(0, 10, 0, 1, 3), deliver(20, 30, 0, 2), ack(40, 50, 0, 1, 2, 3)}, CheckOptions{}, "not contiguous"},
		{"out of order", []step{push(0, 4), deliver(0, 10, 0, 1, 2), ack(11, 12, 0, 1, 2), deliver(20, 30, 0, 4), deliver(40, 50, 0, 3), ack(60, 70, 0, 3, 4)}, CheckOptions{}, "out of order"},
		{"skips an unacked message", []step{push(0, 3), deliver(0, 10, 0, 1), deliver(20, 30, 0, 2, 3), ack(40, 50, 0, 1, 2, 3)}, CheckOptions{}, "never acked before the pop returned"},
		{"acked then redelivered", []step{push(0, 2), deliver(0, 10, 0, 1, 2), ack(20, 30, 0, 1, 2), deliver(4000, 4010, 0, 2), ack(4020, 4030, 0, 2)}, CheckOptions{}, "acked message 2 redelivered"},
		{"redelivered before the lease expired", []step{push(0, 2), deliver(0, 10, 0, 1, 2), deliver(1000, 1010, 0, 1, 2), ack(1020, 1030, 0, 1, 2)}, CheckOptions{}, "but its lease lasts"},
		{"never pushed", []step{push(0, 1), deliver(0, 10, 0, 1, 2), ack(20, 30, 0, 1, 2)}, CheckOptions{}, "never pushed"},
		{"too slow", []step{push(0, 1), deliver(0, 5000, 0, 1), ack(5010, 5020, 0, 1)}, CheckOptions{MaxLatency: time.Second}, "bound 1s"},
	}
	for _, tc := range cases {
		r := newRecorder("q", 1)
		for _, s := range tc.steps {
			s(r)
		}
		rep := r.check(c, []string{"g"}, lease, tc.o)
		all := strings.Join(rep.Violations, "\n")
		switch {
		case tc.want == "" && len(rep.Violations) > 0:
			t.Errorf("%s: unexpected violations:\n%s", tc.name, all)
		case tc.want != "" && !strings.Contains(all, tc.want):
			t.Errorf("%s: want a violation containing %q, got:\n%s", tc.name, tc.want, all)
		}
	}
}
