package broker

import (
	"strings"
	"testing"

	"queen-node/pg"
)

// A flush carries queued pushes in order while they fit both the row and the
// byte bound; the first always goes (issue 21: merged large pushes could pass
// what one PostgreSQL call takes and fail together).
func TestTakeFlushBoundsRowsAndBytes(t *testing.T) {
	req := func(rows int, payload int) *pushReq {
		rs := make([]pg.PushRow, rows)
		for i := range rs {
			rs[i] = pg.PushRow{Payload: strings.Repeat("x", payload)}
		}
		return &pushReq{rows: rs, bytes: rowsBytes(rs)}
	}
	for _, c := range []struct {
		name  string
		queue []*pushReq
		rows  int
		bytes int64
		want  int
	}{
		{"all fit", []*pushReq{req(2, 10), req(3, 10), req(1, 10)}, 10, 1000, 3},
		{"rows stop it", []*pushReq{req(6, 1), req(5, 1), req(1, 1)}, 10, 1000, 1},
		{"bytes stop it", []*pushReq{req(1, 600), req(1, 600), req(1, 10)}, 10, 1000, 1},
		{"bytes fit exactly", []*pushReq{req(1, 500), req(1, 500)}, 10, 1000, 2},
		{"first alone past both", []*pushReq{req(20, 100), req(1, 1)}, 10, 1000, 1},
	} {
		if got := takeFlush(c.queue, c.rows, c.bytes); got != c.want {
			t.Errorf("%s: takes %d, want %d", c.name, got, c.want)
		}
	}
	sub := "alice"
	if got := rowsBytes([]pg.PushRow{{Queue: "q", Partition: "p", TxID: "t", ID: "i", Payload: "12", Sub: &sub}}); got != 11 {
		t.Errorf("rowsBytes = %d, want 11", got)
	}
}
