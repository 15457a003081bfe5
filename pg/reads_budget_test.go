package pg

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/hashicorp/go-hclog"

	"queen-node/internal/pgtest"
)

// TestReadsStopAtByteBound: the bounded reads of pg/sql/functions/90_reads.sql
// at the edges of their bounds (docs/api.md, "Read answers"). A state read
// is all or nothing: all rows at exactly its byte bound, a refusal one byte
// below, and a refusal past its row bound. A DLQ or trace page takes rows
// while they fit, always its first, and says when more remain; the offset
// after its rows starts the rest.
func TestReadsStopAtByteBound(t *testing.T) {
	ctx := context.Background()
	db, err := Open(ctx, pgtest.NewDatabase(t), 2, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	const qid = "00000000-0000-0000-0000-00000000000a"
	for _, q := range []string{
		`INSERT INTO queen.queues (id, tenant, name) VALUES (gen_random_uuid(), 't', 'q')`,
		`INSERT INTO queen.partitions (id, queue_id, name, last_offset) SELECT gen_random_uuid(), id, 'p', 5 FROM queen.queues`,
		`INSERT INTO queen.messages (partition_id, off, id, transaction_id, payload, created_at)
		 SELECT p.id, g, gen_random_uuid(), 'm' || g, ('"' || repeat('x', 998) || '"')::json, now() FROM queen.partitions p, generate_series(1, 5) g`,
		`INSERT INTO queen.stream_queries (id, tenant, name, source_queue, config_hash) VALUES ('` + qid + `', 't', 's', 'q', 'h')`,
		// Three values of 1000 bytes under keys of 2: each row counts
		// 20 + 4 ("k1" quoted) + 1000 = 1024 bytes.
		`INSERT INTO queen.stream_state (query_id, partition_id, key, value)
		 SELECT '` + qid + `', p.id, 'k' || g, ('"' || repeat('v', 998) || '"')::json FROM queen.partitions p, generate_series(1, 3) g`,
		`INSERT INTO queen.dead_letters (partition_id, consumer_group, off, message_id, transaction_id, payload, error_message, retry_count, created_at, failed_at)
		 SELECT p.id, 'g', g, gen_random_uuid(), 'm' || g, ('"' || repeat('d', 998) || '"')::json, 'e', 0, now(), now() - g * interval '1 s'
		 FROM queen.partitions p, generate_series(1, 5) g`,
		`INSERT INTO queen.traces (id, tenant, partition_id, transaction_id, message_id, consumer_group, event_type, data, worker_id, created_at)
		 SELECT gen_random_uuid(), 't', p.id, 'm1', gen_random_uuid(), 'g', 'info', jsonb_build_object('s', repeat('t', 990)), 'n', now() + g * interval '1 ms'
		 FROM queen.partitions p, generate_series(1, 5) g`,
		`INSERT INTO queen.trace_names (trace_id, tenant, name, created_at) SELECT id, 't', 'nm', created_at FROM queen.traces`,
	} {
		if _, err := db.pool.Exec(ctx, q); err != nil {
			t.Fatalf("seed: %v\n%s", err, q)
		}
	}
	var pid string
	if err := db.pool.QueryRow(ctx, `SELECT id::text FROM queen.partitions`).Scan(&pid); err != nil {
		t.Fatal(err)
	}

	state := func(limit int, maxBytes int64) (int, error) {
		rows, err := db.StreamState(ctx, "t", qid, pid, StreamStateFilter{}, limit, maxBytes)
		for _, r := range rows {
			if len(r.Value) != 1000 {
				t.Fatalf("state row %q: value of %d bytes", r.Key, len(r.Value))
			}
		}
		return len(rows), err
	}
	if n, err := state(3, 3*1024); n != 3 || err != nil {
		t.Fatalf("state at exactly its byte bound: %d rows, %v", n, err)
	}
	if n, err := state(3, 3*1024-1); n != 0 || !errors.Is(err, ErrStreamStateBytes) {
		t.Fatalf("state one byte past its bound: %d rows, %v; want ErrStreamStateBytes", n, err)
	}
	if n, err := state(2, 0); n != 0 || !errors.Is(err, ErrStreamStateRows) {
		t.Fatalf("state past its row bound: %d rows, %v; want ErrStreamStateRows", n, err)
	}

	// Each DLQ row counts 400 + its strings + its 1000-byte payload (about
	// 1430 bytes): 3000 bytes take two rows.
	dlq := func(offset int, maxBytes int64) ([]string, bool) {
		page, err := db.ListDLQ(ctx, "t", DLQFilter{Queue: "q", Limit: 10, Offset: offset, MaxBytes: maxBytes})
		if err != nil {
			t.Fatal(err)
		}
		if page.Total != 5 {
			t.Fatalf("dlq total %d, want 5", page.Total)
		}
		var txs []string
		for _, r := range page.Rows {
			if len(r.Payload) != 1000 {
				t.Fatalf("dlq row %s: payload of %d bytes", r.TxID, len(r.Payload))
			}
			txs = append(txs, r.TxID)
		}
		return txs, page.More
	}
	for _, c := range []struct {
		offset   int
		maxBytes int64
		want     string
		more     bool
	}{
		{0, 0, "[m1 m2 m3 m4 m5]", false}, // no byte bound
		{0, 1, "[m1]", true},              // the first row always comes
		{0, 3000, "[m1 m2]", true},
		{2, 3000, "[m3 m4]", true},
		{4, 3000, "[m5]", false},
		{0, 1 << 20, "[m1 m2 m3 m4 m5]", false},
	} {
		got, more := dlq(c.offset, c.maxBytes)
		if fmt.Sprint(got) != c.want || more != c.more {
			t.Errorf("dlq offset %d, %d bytes: %v more %v; want %s more %v", c.offset, c.maxBytes, got, more, c.want, c.more)
		}
	}

	// Traces: about 2430 bytes each by name (data and the message's
	// payload) and 1420 a message's: a bound of two rows each.
	for _, byName := range []bool{false, true} {
		var ids []string
		for offset, page := 0, 0; ; page++ {
			var p TracePage
			var err error
			if byName {
				p, err = db.TracesByName(ctx, "t", "nm", Page{Limit: 10, Offset: offset, MaxBytes: 5000})
			} else {
				p, err = db.MessageTraces(ctx, "t", pid, "m1", Page{Limit: 10, Offset: offset, MaxBytes: 3000})
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Rows) != 2 && p.More || page > 3 {
				t.Fatalf("by name %v: page %d has %d rows, more %v", byName, page, len(p.Rows), p.More)
			}
			for _, r := range p.Rows {
				if byName && (len(r.Payload) != 1000 || r.Queue != "q" || r.Partition != "p") || len(r.Names) != 1 {
					t.Fatalf("by name %v: trace %+v", byName, r)
				}
				ids = append(ids, r.ID)
			}
			if !p.More {
				break
			}
			offset += len(p.Rows)
		}
		if len(ids) != 5 {
			t.Errorf("by name %v: the pages brought %d traces, want 5", byName, len(ids))
		}
	}
}
