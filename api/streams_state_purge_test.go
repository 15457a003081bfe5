package api_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"queen-node/internal/nodetest"
)

// TestQueueDeletePurgesStreamState: deleting a stream's source queue
// deletes everything below it (docs/api.md, "queue delete"), the stream
// state of its partitions included. stream_state has no foreign key to
// partitions, so without an explicit delete those rows stayed forever,
// unreachable (a re-created queue has new partition ids).
func TestQueueDeletePurgesStreamState(t *testing.T) {
	n := nodetest.Start(t)
	streamPush(t, n, "rvp.src", "p", 1, 1)
	_, out := register(t, n, "", msg{"name": "rvp", "source_queue": "rvp.src", "config_hash": "h"})
	qid := out["query_id"].(string)
	batch := streamPop(t, n, "rvp.src", "streams.rvp", 10)
	if len(batch) != 1 {
		t.Fatalf("pop: %d", len(batch))
	}
	pid := batch[0].PartitionID
	if st, out := cycle(t, n, "", msg{"query_id": qid, "partition_id": pid, "consumer_group": "streams.rvp", "ack": nil,
		"state_ops": []msg{{"type": "upsert", "key": "k", "value": msg{"n": 1}}}}); st != 200 || out["success"] != true {
		t.Fatalf("cycle: %d %v", st, out)
	}
	c, err := pgx.Connect(context.Background(), n.DBURL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	rows := func() int {
		var k int
		if err := c.QueryRow(context.Background(), `SELECT count(*) FROM queen.stream_state WHERE partition_id = $1`, pid).Scan(&k); err != nil {
			t.Fatal(err)
		}
		return k
	}
	if k := rows(); k != 1 {
		t.Fatalf("state rows before the delete: %d", k)
	}
	if r := n.Do(t, "DELETE", "/api/v1/resources/queues/rvp.src", nil); r.Status != 200 {
		t.Fatalf("delete queue: %d %s", r.Status, r.Body)
	}
	if k := rows(); k != 0 {
		t.Fatalf("state rows of the deleted queue's partition: %d, want 0", k)
	}
}
