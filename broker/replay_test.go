package broker_test

// The push buffer's replay bounded in bytes (docs/api.md, "Maintenance
// modes"; docs/operations.md, "Draining for a database upgrade").

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"queen-node/api"
	"queen-node/broker"
	"queen-node/internal/nodetest"
	"queen-node/internal/pgtest"
	"queen-node/pushbuf"
)

// The side file's name, spelled out so that these tests also build
// against a version without it (broker.SetAsideFileName).
const asideFile = "push.aside.jsonl"

func bufferAt(dir string) nodetest.Option {
	return func(c *broker.Config) {
		c.Maintenance.BufferDir = dir
		c.Maintenance.RefreshInterval = 100 * time.Millisecond
	}
}

func setPushMaintenance(t *testing.T, n *nodetest.Node, on bool) {
	t.Helper()
	if r := n.Do(t, "POST", "/api/v1/system/maintenance", msg{"enabled": on}); r.Status != 200 {
		t.Fatalf("push maintenance %v: %d %s", on, r.Status, r.Body)
	}
}

// waitReplayed waits until the node's buffer is replayed and emptied.
func waitReplayed(t *testing.T, n *nodetest.Node, within time.Duration) broker.BufferStats {
	t.Helper()
	waitFor(t, within, "the replay to empty the buffer", func() bool {
		st := n.Broker.BufferStats()
		return st.Bytes == 0 && st.Pending == 0
	})
	return n.Broker.BufferStats()
}

// popSeq pops queue with autoAck until it is empty and returns the "n" of
// each payload in pop order.
func popSeq(t *testing.T, n *nodetest.Node, queue string) []int {
	t.Helper()
	var got []int
	for {
		ms, _ := pop(t, n, queue, "batch=1000&autoAck=true")
		if ms == nil {
			return got
		}
		for _, m := range ms {
			d, _ := m["data"].(map[string]any)
			f, _ := d["n"].(float64)
			got = append(got, int(f))
		}
	}
}

// payloadBytesPerTx returns the payload bytes the messages of queue took per
// PostgreSQL transaction that stored them: one replayed push each.
func payloadBytesPerTx(t *testing.T, n *nodetest.Node, queue string) []int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sizes, err := pgtest.Int64s(ctx, n.DBURL, `SELECT sum(octet_length(m.payload::text))
		FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id
		JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1 GROUP BY m.xmin::text`, queue)
	if err != nil {
		t.Fatal(err)
	}
	return sizes
}

// TestReplayBatchBoundedInBytes: 24 buffered messages of 1 MiB are replayed
// in pushes of at most the push request's byte bound (10 MiB), not as one
// push of every record up to a record count, in order and once each.
func TestReplayBatchBoundedInBytes(t *testing.T) {
	const queue, count, size = "replay-bytes", 24, 1 << 20
	n := nodetest.Start(t, bufferAt(t.TempDir()))
	setPushMaintenance(t, n, true)
	filler := strings.Repeat("x", size)
	for i := 0; i < count; i += 8 {
		items := make([]msg, 8)
		for j := range items {
			items[j] = msg{"queue": queue, "partition": "p", "transactionId": fmt.Sprintf("rb-%d", i+j),
				"payload": json.RawMessage(fmt.Sprintf(`{"n":%d,"s":%q}`, i+j, filler))}
		}
		for k, r := range pushItems(t, n, items) {
			if r["status"] != "buffered" {
				t.Fatalf("item %d: %v", k, r["status"])
			}
		}
	}
	setPushMaintenance(t, n, false)
	if st := waitReplayed(t, n, time.Minute); st.Replayed != count {
		t.Fatalf("replayed %d of %d", st.Replayed, count)
	}
	sizes := payloadBytesPerTx(t, n, queue)
	var total int64
	for _, s := range sizes {
		total += s
		if s > api.DefaultMaxBodyBytes {
			t.Errorf("a replayed push carried %d bytes of payloads, over the %d of a push request", s, api.DefaultMaxBodyBytes)
		}
	}
	if total < count*size {
		t.Fatalf("stored %d payload bytes, want at least %d", total, count*size)
	}
	t.Logf("replayed in %d pushes", len(sizes))
	got := popSeq(t, n, queue)
	if len(got) != count {
		t.Fatalf("popped %d messages, want %d: %v", len(got), count, got)
	}
	for i, v := range got {
		if v != i {
			t.Fatalf("popped out of order: %v", got)
		}
	}
}

// TestReplaySetsAsideARecordTooLargeToSend: a record in the buffer over
// twice the byte bound of a replayed push (left by an older version, or
// written under larger bounds) is moved, whole, to the side file next to
// the buffer and counted; the records after it replay. After a crash
// before the buffer was emptied (the file put back), the replay stores
// nothing twice and sets the record aside again, under the same
// transaction id.
func TestReplaySetsAsideARecordTooLargeToSend(t *testing.T) {
	const queue = "replay-aside"
	dir := t.TempDir()
	buf, err := pushbuf.Open(dir, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := func(i int, payload string) []byte {
		return []byte(fmt.Sprintf(`{"t":%q,"q":%q,"p":"p","x":"aside-%d","d":%s}`, broker.DefaultTenant, queue, i, payload))
	}
	big := fmt.Sprintf(`{"n":3,"s":%q}`, strings.Repeat("y", 2*api.DefaultMaxBodyBytes+1<<20))
	for _, group := range [][][]byte{{rec(1, `{"n":1}`), rec(2, `{"n":2}`)}, {rec(3, big)}, {rec(4, `{"n":4}`), rec(5, `{"n":5}`)}} {
		if err := buf.Append(group); err != nil {
			t.Fatal(err)
		}
	}
	buf.Close()
	saved, err := os.ReadFile(filepath.Join(dir, pushbuf.FileName))
	if err != nil {
		t.Fatal(err)
	}

	n := nodetest.Start(t, bufferAt(dir)) // maintenance is off: the replay starts at once
	st := waitReplayed(t, n, time.Minute)
	checkAside := func(lines int) {
		t.Helper()
		data, err := os.ReadFile(filepath.Join(dir, asideFile))
		if err != nil {
			t.Fatalf("no side file (%v); replay stats %+v", err, st)
		}
		got := bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n"))
		if len(got) != lines {
			t.Fatalf("side file has %d lines, want %d", len(got), lines)
		}
		for _, line := range got {
			var r struct {
				Queue string `json:"q"`
				TxID  string `json:"x"`
				Data  struct {
					N int    `json:"n"`
					S string `json:"s"`
				} `json:"d"`
			}
			if err := json.Unmarshal(line, &r); err != nil {
				t.Fatalf("side file line of %d bytes: %v", len(line), err)
			}
			if r.Queue != queue || r.TxID != "aside-3" || r.Data.N != 3 || len(r.Data.S) != 2*api.DefaultMaxBodyBytes+1<<20 {
				t.Fatalf("side file holds %s/%s n=%d with %d bytes", r.Queue, r.TxID, r.Data.N, len(r.Data.S))
			}
		}
	}
	checkAside(1)
	if got := popSeq(t, n, queue); fmt.Sprint(got) != "[1 2 4 5]" {
		t.Fatalf("popped %v, want [1 2 4 5]", got)
	}
	doc := n.Do(t, "GET", "/status", nil).Obj(t)
	m, _ := doc["maintenance"].(map[string]any)
	if m["set_aside"] != float64(1) || m["set_aside_bytes"].(float64) < 2*api.DefaultMaxBodyBytes || m["replayed"] != float64(4) {
		t.Fatalf("/status maintenance: %v", m)
	}
	if r := n.Do(t, "GET", "/metrics", nil); !bytes.Contains(r.Body, []byte("queen_push_buffer_set_aside_total 1\n")) {
		t.Fatalf("/metrics has no set-aside count of 1")
	}

	// The crash: the buffer file as it was before the replay emptied it.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.Node.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, pushbuf.FileName), saved, 0o600); err != nil {
		t.Fatal(err)
	}
	n = nodetest.StartOn(t, n.DBURL, bufferAt(dir))
	st = waitReplayed(t, n, time.Minute)
	if st.Replayed != 0 || st.ReplayDuplicates != 4 || st.SetAside != 1 {
		t.Fatalf("second replay: %+v", st)
	}
	checkAside(2)
	if got := popSeq(t, n, queue); len(got) != 0 {
		t.Fatalf("popped %v after the second replay", got)
	}
}

// TestReplayBatchSmallBounds: with a replayed push bounded to 64 KiB,
// records of 20 KiB go three to a push, and records larger than the bound
// but within twice it go alone; during push maintenance an item whose
// record would pass twice the bound is refused whole with 413, and the
// buffer stays healthy.
func TestReplayBatchSmallBounds(t *testing.T) {
	const queue, bound = "replay-small", 64 << 10
	dir := t.TempDir()
	n := nodetest.Start(t, bufferAt(dir), func(c *broker.Config) { c.Maintenance.ReplayBatchBytes = bound })
	setPushMaintenance(t, n, true)
	item := func(i, size int) msg {
		return msg{"queue": queue, "partition": "p", "transactionId": fmt.Sprintf("sb-%d", i),
			"payload": json.RawMessage(fmt.Sprintf(`{"n":%d,"s":%q}`, i, strings.Repeat("z", size)))}
	}
	var items []msg
	for i := 0; i < 7; i++ {
		items = append(items, item(i, 20<<10))
	}
	for i := 7; i < 10; i++ {
		items = append(items, item(i, 100<<10))
	}
	pushItems(t, n, items)

	r := n.Do(t, "POST", "/api/v1/push", msg{"items": []msg{item(10, 1), item(11, 2*bound)}})
	if r.Status != 413 || !bytes.Contains(r.Body, []byte("too large for the push buffer")) {
		t.Fatalf("an item over twice the replay bound: %d %s", r.Status, r.Body)
	}
	_, err := n.Broker.Push(context.Background(), broker.DefaultTenant, nil, []broker.PushItem{
		{Queue: queue, Payload: json.RawMessage(fmt.Sprintf("%q", strings.Repeat("z", 2*bound)))}})
	if !errors.Is(err, broker.ErrBufferItemTooLarge) {
		t.Fatalf("Broker.Push of an item over twice the replay bound: %v", err)
	}
	if st := n.Broker.BufferStats(); st.Pending != 10 || !st.Healthy {
		t.Fatalf("after the refused pushes: %+v", st)
	}

	setPushMaintenance(t, n, false)
	if st := waitReplayed(t, n, time.Minute); st.Replayed != 10 {
		t.Fatalf("replayed %d of 10", st.Replayed)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Per replayed push (a PostgreSQL transaction): its messages and its
	// largest payload.
	rows, err := pgtest.Int64s(ctx, n.DBURL, `SELECT count(*) * 1000000000 + max(octet_length(m.payload::text))
		FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id
		JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1 GROUP BY m.xmin::text`, queue)
	if err != nil {
		t.Fatal(err)
	}
	var small, large int
	for _, v := range rows {
		count, largest := v/1000000000, v%1000000000
		switch {
		case largest > bound && count != 1:
			t.Errorf("a record over the bound went with %d others", count-1)
		case largest > bound:
			large++
		case count > 3:
			t.Errorf("a replayed push of %d records of 20 KiB, over 64 KiB", count)
		default:
			small++
		}
	}
	if large != 3 || small != 3 {
		t.Fatalf("%d pushes of small records (want 3), %d of large ones (want 3)", small, large)
	}
	if got := popSeq(t, n, queue); fmt.Sprint(got) != "[0 1 2 3 4 5 6 7 8 9]" {
		t.Fatalf("popped %v", got)
	}
}

// TestBufferKeepsHTMLCharactersAsIs: a payload full of '<' takes its own
// size in the buffer, not six times it (encoding/json's HTML escaping),
// and comes back unchanged.
func TestBufferKeepsHTMLCharactersAsIs(t *testing.T) {
	const queue = "replay-html"
	n := nodetest.Start(t, bufferAt(t.TempDir()))
	setPushMaintenance(t, n, true)
	s := strings.Repeat("<&>", 1<<20)
	// The body written out: json.Marshal would escape it already.
	body := fmt.Sprintf(`{"items":[{"queue":%q,"payload":{"n":1,"s":"%s"}}]}`, queue, s)
	if r := n.Do(t, "POST", "/api/v1/push", body); r.Status != 201 {
		t.Fatalf("push: %d %s", r.Status, r.Body)
	}
	if st := n.Broker.BufferStats(); st.Bytes > int64(len(s))+1<<10 {
		t.Fatalf("a payload of %d bytes took %d in the buffer", len(s), st.Bytes)
	}
	setPushMaintenance(t, n, false)
	waitReplayed(t, n, time.Minute)
	ms := popUntil(t, n, queue, "autoAck=true", 10*time.Second)
	if d, _ := ms[0]["data"].(map[string]any); d["s"] != s {
		t.Fatalf("payload changed by the replay")
	}
}
