package broker_test

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"queen-node/internal/pgtest"
)

// TestReplayKilledMidway: a queen-node process killed with SIGKILL while it
// replays a buffer of several replayed pushes loses nothing and stores
// nothing twice. The restart replays the whole file; what was stored before
// the kill comes back duplicate, and every message is stored once, in push
// order per partition (docs/api.md, "Maintenance modes").
func TestReplayKilledMidway(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a queen-node process")
	}
	const queue, parts = "killed", 2
	r := newReplayProc(t, nodeBinary(t), 1<<30)
	p := r.start("fill.log")
	r.setPushMaintenance(true)
	total := r.fill(queue, parts, 80<<20, 64<<10) // 1,280 messages: 8 replayed pushes or more
	r.setPushMaintenance(false)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		m := r.maint()
		if m["buffer_pending"] == float64(0) {
			t.Fatalf("the replay ended before it could be killed: %v", m)
		}
		if m["replayed"].(float64) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no replayed push stored within 2 minutes: %v\n%s", m, p.LogTail(20))
		}
		time.Sleep(5 * time.Millisecond) // polling a process, with a deadline
	}
	if _, err := p.Stop(syscall.SIGKILL, 10*time.Second); err != nil {
		t.Fatal(err)
	}

	p = r.start("restart.log") // push maintenance is off: it replays at once
	deadline = time.Now().Add(2 * time.Minute)
	var m map[string]any
	for {
		m = r.maint()
		if m["buffer_bytes"] == float64(0) && m["buffer_pending"] == float64(0) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the restart's replay did not finish within 2 minutes: %v\n%s", m, p.LogTail(20))
		}
		time.Sleep(50 * time.Millisecond) // polling a process, with a deadline
	}
	stored, dup := m["replayed"].(float64), m["replay_duplicates"].(float64)
	if int(stored+dup) != total || dup == 0 {
		t.Fatalf("the restart's replay stored %v and found %v stored already, of %d", stored, dup, total)
	}
	t.Logf("killed mid-replay: the restart stored %v and found %v already stored", stored, dup)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	counts, err := pgtest.Int64s(ctx, r.dbURL, `SELECT n FROM (SELECT count(*) AS n, 0 AS o FROM queen.messages
		UNION ALL SELECT count(DISTINCT transaction_id), 1 FROM queen.messages) x ORDER BY o`)
	if err != nil {
		t.Fatal(err)
	}
	if counts[0] != int64(total) || counts[1] != int64(total) {
		t.Fatalf("%d messages stored, %d distinct transaction ids; want %d of each", counts[0], counts[1], total)
	}
	for part := 0; part < parts; part++ {
		seqs, err := pgtest.Int64s(ctx, r.dbURL, `SELECT (m.payload->>'n')::bigint FROM queen.messages m
			JOIN queen.partitions p ON p.id = m.partition_id WHERE p.name = $1 ORDER BY m.off`, fmt.Sprintf("p%d", part))
		if err != nil {
			t.Fatal(err)
		}
		for i, n := range seqs {
			if n != int64(i*parts+part) {
				t.Fatalf("partition p%d: message %d is n=%d, want %d", part, i, n, i*parts+part)
			}
		}
	}
}
