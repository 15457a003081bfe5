package retention_test

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"queen-node/internal/nodetest"
	"queen-node/internal/pgtest"
	"queen-node/node"
	"queen-node/retention"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type msg = map[string]any

// startNode starts a real node whose retention loop is off: tests run
// passes themselves (Job.RunOnce), so each pass happens exactly when the
// test says.
func startNode(t *testing.T) *nodetest.Node {
	t.Helper()
	return nodetest.StartConfig(t, func(c *node.Config) { c.Retention.Interval = 0 })
}

func job(n *nodetest.Node) *retention.Job { return n.Node.Retention() }

// pass runs one retention pass and fails the test if it did not run.
func pass(t *testing.T, n *nodetest.Node) retention.Pass {
	t.Helper()
	p, err := job(n).RunOnce(context.Background())
	if err != nil {
		t.Fatalf("retention pass: %v", err)
	}
	if !p.Ran {
		t.Fatalf("retention pass did not run (lock held elsewhere)")
	}
	return p
}

func configure(t *testing.T, n *nodetest.Node, queue string, options msg) {
	t.Helper()
	r := n.Do(t, "POST", "/api/v1/configure", msg{"queue": queue, "options": options})
	if r.Status != 200 {
		t.Fatalf("configure %s: %d %s", queue, r.Status, r.Body)
	}
}

// push pushes count messages to queue/partition; payload i is {"i": i}
// and its transaction id is prefix-i.
func push(t *testing.T, n *nodetest.Node, queue, partition, prefix string, from, count int) {
	t.Helper()
	items := make([]msg, count)
	for k := range items {
		i := from + k
		items[k] = msg{"queue": queue, "partition": partition, "payload": msg{"i": i},
			"transactionId": fmt.Sprintf("%s-%d", prefix, i)}
	}
	r := n.Do(t, "POST", "/api/v1/push", msg{"items": items})
	if r.Status != 201 {
		t.Fatalf("push: %d %s", r.Status, r.Body)
	}
	for _, x := range r.Arr(t) {
		if x["status"] != "queued" {
			t.Fatalf("push item not queued: %v", x)
		}
	}
}

// pop pops up to batch messages for group (nil on 204).
func pop(t *testing.T, n *nodetest.Node, queue, group string, batch int) []msg {
	t.Helper()
	r := n.Do(t, "GET", fmt.Sprintf("/api/v1/pop/queue/%s?consumerGroup=%s&batch=%d&leaseSeconds=300",
		url.PathEscape(queue), url.QueryEscape(group), batch), nil)
	if r.Status == 204 {
		return nil
	}
	if r.Status != 200 {
		t.Fatalf("pop %s/%s: %d %s", queue, group, r.Status, r.Body)
	}
	raw, _ := r.Obj(t)["messages"].([]any)
	out := make([]msg, len(raw))
	for i, m := range raw {
		out[i] = m.(map[string]any)
	}
	return out
}

// ack acks ms completed for group and returns the per-item answers.
func ack(t *testing.T, n *nodetest.Node, group string, ms []msg) []msg {
	t.Helper()
	acks := make([]msg, len(ms))
	for i, m := range ms {
		acks[i] = msg{"transactionId": m["transactionId"], "partitionId": m["partitionId"],
			"leaseId": m["leaseId"], "status": "completed"}
	}
	r := n.Do(t, "POST", "/api/v1/ack/batch", msg{"consumerGroup": group, "acknowledgments": acks})
	if r.Status != 200 {
		t.Fatalf("ack: %d %s", r.Status, r.Body)
	}
	return r.Arr(t)
}

// ackOK acks and fails the test on any refused item.
func ackOK(t *testing.T, n *nodetest.Node, group string, ms []msg) {
	t.Helper()
	for i, a := range ack(t, n, group, ms) {
		if a["success"] != true {
			t.Fatalf("ack item %d refused: %v", i, a)
		}
	}
}

// indexes returns the "i" of each message's payload.
func indexes(ms []msg) []int {
	out := make([]int, len(ms))
	for k, m := range ms {
		out[k] = int(m["data"].(map[string]any)["i"].(float64))
	}
	return out
}

func dbConn(t *testing.T, n *nodetest.Node) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, n.DBURL)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

func exec(t *testing.T, c *pgx.Conn, sql string, args ...any) {
	t.Helper()
	if _, err := c.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// offsets lists the stored offsets of queue/partition (any tenant).
func offsets(t *testing.T, c *pgx.Conn, queue, partition string) []int64 {
	t.Helper()
	rows, err := c.Query(context.Background(), `SELECT m.off FROM queen.messages m
		JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id
		WHERE q.name = $1 AND p.name = $2 ORDER BY m.off`, queue, partition)
	if err != nil {
		t.Fatalf("offsets: %v", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatalf("offsets: %v", err)
	}
	return out
}

// age sets the created_at of queue/partition's message at offset off to
// now minus age (the tests' stand-in for waiting).
func age(t *testing.T, c *pgx.Conn, queue, partition string, off int64, age time.Duration) {
	t.Helper()
	exec(t, c, `UPDATE queen.messages m SET created_at = now() - make_interval(secs => $4)
		FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
		WHERE p.id = m.partition_id AND q.name = $1 AND p.name = $2 AND m.off = $3`,
		queue, partition, off, age.Seconds())
}

// ageAll ages every message of queue.
func ageAll(t *testing.T, c *pgx.Conn, queue string, d time.Duration) {
	t.Helper()
	exec(t, c, `UPDATE queen.messages m SET created_at = now() - make_interval(secs => $2)
		FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
		WHERE p.id = m.partition_id AND q.name = $1`, queue, d.Seconds())
}

// consumer reads a group's cursor and remembered acks on queue/partition.
func consumer(t *testing.T, c *pgx.Conn, queue, partition, group string) (committed int64, acked []int64) {
	t.Helper()
	err := c.QueryRow(context.Background(), `SELECT c.committed_offset, c.acked FROM queen.consumers c
		JOIN queen.partitions p ON p.id = c.partition_id JOIN queen.queues q ON q.id = p.queue_id
		WHERE q.name = $1 AND p.name = $2 AND c.consumer_group = $3`, queue, partition, group).Scan(&committed, &acked)
	if err != nil {
		t.Fatalf("consumer %s/%s/%s: %v", queue, partition, group, err)
	}
	return committed, acked
}

func wantOffsets(t *testing.T, c *pgx.Conn, queue, partition string, want ...int64) {
	t.Helper()
	got := offsets(t, c, queue, partition)
	if want == nil {
		want = []int64{}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("%s/%s stored offsets %v, want %v", queue, partition, got, want)
	}
}
