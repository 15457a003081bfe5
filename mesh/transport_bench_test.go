package mesh

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/memberlist"

	"queen-node/coalesce"
)

// The transport comparison of docs/mesh.md: one hint frame (about 2 KiB:
// 100 partitions of one queue) sent from one node to another on loopback,
// through memberlist's SendReliable (a TCP connection per message),
// SendBestEffort (one UDP packet; frames over ~1,400 bytes do not fit), and
// this package's persistent stream. Reports TIME_WAIT sockets left behind.

type countingDelegate struct{ got atomic.Int64 }

func (d *countingDelegate) NodeMeta(int) []byte                 { return nil }
func (d *countingDelegate) NotifyMsg([]byte)                    { d.got.Add(1) }
func (d *countingDelegate) GetBroadcasts(int, int) [][]byte     { return nil }
func (d *countingDelegate) LocalState(bool) []byte              { return nil }
func (d *countingDelegate) MergeRemoteState(buf []byte, _ bool) {}

func benchFrame(b *testing.B, parts int) []byte {
	batch := coalesce.Batch{Tenant: "default", Queue: "orders"}
	for i := 0; i < parts; i++ {
		batch.Partitions = append(batch.Partitions, fmt.Sprintf("customer-%06d", i))
	}
	frames, err := EncodeFrames("node-a", []coalesce.Batch{batch})
	if err != nil {
		b.Fatal(err)
	}
	return frames[0]
}

func rawMember(b *testing.B, name, ip string, port int, d memberlist.Delegate) *memberlist.Memberlist {
	c := memberlist.DefaultLANConfig()
	c.Name, c.BindAddr, c.BindPort, c.AdvertiseAddr, c.AdvertisePort = name, ip, port, ip, port
	c.Delegate = d
	c.Logger = hclog.NewNullLogger().StandardLogger(nil)
	ml, err := memberlist.Create(c)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = ml.Shutdown() })
	return ml
}

func timeWait() int {
	n := 0
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) > 3 && fields[3] == "06" {
				n++
			}
		}
		fh.Close()
	}
	return n
}

func BenchmarkTransport(b *testing.B) {
	frame := benchFrame(b, 100)
	b.Run("memberlist-SendReliable", func(b *testing.B) {
		recv := &countingDelegate{}
		a := rawMember(b, "a", "127.0.2.1", 17901, &countingDelegate{})
		z := rawMember(b, "z", "127.0.2.2", 17902, recv)
		if _, err := a.Join([]string{"127.0.2.2:17902"}); err != nil {
			b.Fatal(err)
		}
		node := z.LocalNode()
		tw := timeWait()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if err := a.SendReliable(node, frame); err != nil {
				b.Fatal(err)
			}
		}
		deadline := time.Now().Add(10 * time.Second)
		for recv.got.Load() < int64(b.N) && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		b.StopTimer()
		b.ReportMetric(float64(timeWait()-tw)/float64(b.N), "time_wait/msg")
		b.ReportMetric(float64(len(frame)), "frame-bytes")
	})
	b.Run("memberlist-SendBestEffort", func(b *testing.B) {
		recv := &countingDelegate{}
		a := rawMember(b, "a", "127.0.2.3", 17903, &countingDelegate{})
		z := rawMember(b, "z", "127.0.2.4", 17904, recv)
		if _, err := a.Join([]string{"127.0.2.4:17904"}); err != nil {
			b.Fatal(err)
		}
		node := z.LocalNode()
		small := benchFrame(b, 60) // the largest frame that fits one UDP packet
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if err := a.SendBestEffort(node, small); err != nil {
				b.Fatal(err)
			}
		}
		time.Sleep(100 * time.Millisecond)
		b.StopTimer()
		b.ReportMetric(float64(recv.got.Load())/float64(b.N), "delivered-ratio")
		b.ReportMetric(float64(len(small)), "frame-bytes")
		if err := a.SendBestEffort(node, frame); err == nil {
			b.Log("a 100-partition frame was accepted over UDP")
		} else {
			b.Logf("a %d-byte frame over UDP: %v", len(frame), err)
		}
	})
	b.Run("persistent-stream", func(b *testing.B) {
		rec := &recordingReceiver{}
		cfg := DefaultConfig()
		cfg.Name, cfg.Bind, cfg.Logger = "z", "127.0.2.6:17906", hclog.NewNullLogger()
		z, err := New(cfg, rec)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(z.Close)
		sender := &Mesh{log: hclog.NewNullLogger(), stop: make(chan struct{}), incarnation: 1,
			cfg: Config{Name: "s", HeartbeatInterval: DefaultHeartbeatInterval, HintIdleTimeout: DefaultHintIdleTimeout}}
		p := newPeer(sender, "z", z.self.Hint, nil)
		b.Cleanup(func() { close(sender.stop); sender.wg.Wait() })
		tw := timeWait()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			for !p.send(outFrame{body: frame, hints: 100}) {
				time.Sleep(10 * time.Microsecond) // the benchmark waits; the product drops
			}
		}
		deadline := time.Now().Add(10 * time.Second)
		for z.framesRecv.Load() < uint64(b.N) && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		b.StopTimer()
		b.ReportMetric(float64(timeWait()-tw)/float64(b.N), "time_wait/msg")
		b.ReportMetric(float64(len(frame)), "frame-bytes")
	})
}

type recordingReceiver struct{ n atomic.Int64 }

func (r *recordingReceiver) HintsReceived(_, _ string, parts []string) { r.n.Add(int64(len(parts))) }
