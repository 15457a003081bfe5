package bench

import (
	"fmt"
	"sync"
)

// Checker keeps the ground truth of a run: every message a push answered
// "queued" (201), and every delivery per consumer group. At the end it says
// whether each queued message was delivered exactly once per group and in
// order per partition.
//
// Identity: a message is (producer, seq); each producer has one push in
// flight, so within one partition a producer's messages are stored in seq
// order and must be delivered in that order. Order is checked per
// (group, partition, producer) on first deliveries: a message delivered for
// the first time must have a higher seq than every earlier first delivery
// of that stream. Deliveries are recorded before the batch is acked, and a
// partition's next batch can only be popped after that ack, so recording
// order is the server's order. With autoAck two pops of one partition can
// answer at once, so only the order inside each batch is checked then.
//
// A second delivery of a message is a redelivery (a lease expired, an ack
// failed): counted, not an error. A message acked successfully twice (or,
// with autoAck, delivered twice) is a duplicate: an error.
type Checker struct {
	partitions int
	autoAck    bool

	pmu    sync.Mutex
	pushed [][]int32 // [producer][seq] = partition index, -1 = not queued
	queued int64

	groups map[string]*groupState
}

type msgState struct {
	delivered uint16
	acked     uint16
	part      int32 // partition index + 1 of the first delivery
}

type groupState struct {
	mu    sync.Mutex
	msgs  [][]msgState // [producer][seq]
	last  map[streamKey]int64
	first int64 // first deliveries
	redel int64
	// Complete's scan position: every queued message before (scanP,
	// scanSeq) was delivered. Deliveries only add up, so a scan resumes
	// there and all of Complete's scans together read each message once.
	scanP, scanSeq int
	// errors seen online (order, unknown messages); capped examples.
	outOfOrder int64
	unknown    int64
	examples   []string
}

type streamKey struct {
	partition int32
	producer  int32
}

// Delivery is one message as a consumer received it.
type Delivery struct {
	Producer  int
	Seq       int64
	Partition int // index parsed from the partition name, -1 if unknown
}

// NewChecker returns a checker for producers and groups.
func NewChecker(producers, partitions int, groups []string, autoAck bool) *Checker {
	c := &Checker{partitions: partitions, autoAck: autoAck, pushed: make([][]int32, producers), groups: map[string]*groupState{}}
	for _, g := range groups {
		c.groups[g] = &groupState{msgs: make([][]msgState, producers), last: map[streamKey]int64{}}
	}
	return c
}

// Pushed records the outcome of one pushed message: queued (201 and status
// "queued") or not. Seqs of one producer arrive in order.
func (c *Checker) Pushed(producer int, seq int64, partition int, queued bool) {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	row := c.pushed[producer]
	for int64(len(row)) <= seq {
		row = append(row, -1)
	}
	if queued {
		row[seq] = int32(partition)
		c.queued++
	}
	c.pushed[producer] = row
}

// Queued returns the number of messages pushes answered "queued".
func (c *Checker) Queued() int64 {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	return c.queued
}

// Delivered records one popped batch for group (in the order of the
// response) and returns, per message, whether it was a first delivery.
func (c *Checker) Delivered(group string, batch []Delivery) []bool {
	g := c.groups[group]
	first := make([]bool, len(batch))
	g.mu.Lock()
	defer g.mu.Unlock()
	inBatch := map[streamKey]int64{}
	for i, d := range batch {
		if d.Producer < 0 || d.Producer >= len(g.msgs) || d.Seq < 0 {
			g.unknown++
			g.example("unknown message producer=%d seq=%d", d.Producer, d.Seq)
			continue
		}
		row := g.msgs[d.Producer]
		for int64(len(row)) <= d.Seq {
			row = append(row, msgState{})
		}
		g.msgs[d.Producer] = row
		st := &row[d.Seq]
		st.delivered++
		k := streamKey{partition: int32(d.Partition), producer: int32(d.Producer)}
		if prev, ok := inBatch[k]; ok && d.Seq <= prev {
			g.outOfOrder++
			g.example("group %s partition %d producer %d: seq %d after %d in one batch", group, d.Partition, d.Producer, d.Seq, prev)
		}
		inBatch[k] = d.Seq
		if st.delivered > 1 {
			g.redel++
			continue
		}
		first[i] = true
		g.first++
		st.part = int32(d.Partition) + 1
		if !c.autoAck {
			if prev, ok := g.last[k]; ok && d.Seq < prev {
				g.outOfOrder++
				g.example("group %s partition %d producer %d: seq %d delivered after %d", group, d.Partition, d.Producer, d.Seq, prev)
			}
		}
		if prev, ok := g.last[k]; !ok || d.Seq > prev {
			g.last[k] = d.Seq
		}
	}
	return first
}

// Acked records a successful ack (or, with autoAck, nothing: the delivery
// counts).
func (c *Checker) Acked(group string, producer int, seq int64) {
	g := c.groups[group]
	g.mu.Lock()
	defer g.mu.Unlock()
	if producer < 0 || producer >= len(g.msgs) || seq < 0 || seq >= int64(len(g.msgs[producer])) {
		return
	}
	g.msgs[producer][seq].acked++
}

// FirstDeliveries returns the number of first deliveries over all groups.
func (c *Checker) FirstDeliveries() int64 {
	var n int64
	for _, g := range c.groups {
		g.mu.Lock()
		n += g.first
		g.mu.Unlock()
	}
	return n
}

// Complete tells whether group has received every queued message; call it
// once the pushes ended (a message queued after the scan passed its place
// would be missed). First
// deliveries can include messages whose push was not answered queued (a
// failed push that was stored anyway), so a count that reached the queued
// total is confirmed message by message: ending a run on the count alone left
// queued messages behind, which a later run on the same queue then received.
func (c *Checker) Complete(group string) bool {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	g := c.groups[group]
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.first < c.queued {
		return false
	}
	for ; g.scanP < len(c.pushed); g.scanP, g.scanSeq = g.scanP+1, 0 {
		row := c.pushed[g.scanP]
		for ; g.scanSeq < len(row); g.scanSeq++ {
			if row[g.scanSeq] >= 0 && (g.scanSeq >= len(g.msgs[g.scanP]) || g.msgs[g.scanP][g.scanSeq].delivered == 0) {
				return false
			}
		}
	}
	return true
}

func (g *groupState) example(format string, args ...any) {
	if len(g.examples) < 5 {
		g.examples = append(g.examples, fmt.Sprintf(format, args...))
	}
}

// CheckResult is the verdict of a run, per group and in total.
type CheckResult struct {
	OK           bool                   `json:"ok"`
	Queued       int64                  `json:"queued"`
	Groups       map[string]GroupResult `json:"groups"`
	Lost         int64                  `json:"lost"`
	Duplicates   int64                  `json:"duplicates"`
	OutOfOrder   int64                  `json:"out_of_order"`
	Redeliveries int64                  `json:"redeliveries"`
	Unacked      int64                  `json:"unacked"`
	Problems     []string               `json:"problems,omitempty"`
}

// GroupResult is one group's verdict.
type GroupResult struct {
	Delivered    int64    `json:"delivered_once"`
	Lost         int64    `json:"lost"`
	Duplicates   int64    `json:"duplicates"`
	OutOfOrder   int64    `json:"out_of_order"`
	Redeliveries int64    `json:"redeliveries"`
	Unknown      int64    `json:"unknown"`
	Misrouted    int64    `json:"misrouted"`
	Unacked      int64    `json:"unacked"`
	Examples     []string `json:"examples,omitempty"`
}

// Check compares deliveries with the pushed messages. Unacked messages
// (delivered, no successful ack) are reported, not failed: their acks'
// errors are counted where they happened.
func (c *Checker) Check() CheckResult {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	res := CheckResult{OK: true, Queued: c.queued, Groups: map[string]GroupResult{}}
	for name, g := range c.groups {
		g.mu.Lock()
		gr := GroupResult{Redeliveries: g.redel, OutOfOrder: g.outOfOrder, Unknown: g.unknown}
		examples := append([]string(nil), g.examples...)
		for p, row := range c.pushed {
			for seq, part := range row {
				var st msgState
				if seq < len(g.msgs[p]) {
					st = g.msgs[p][seq]
				}
				if part < 0 {
					continue // not queued: a delivery of it is not counted against us
				}
				switch {
				case st.delivered == 0:
					gr.Lost++
					if len(examples) < 5 {
						examples = append(examples, fmt.Sprintf("group %s: producer %d seq %d (partition p%d) never delivered", name, p, seq, part))
					}
				case c.autoAck && st.delivered > 1, !c.autoAck && st.acked > 1:
					gr.Duplicates++
					gr.Delivered++
					if len(examples) < 5 {
						examples = append(examples, fmt.Sprintf("group %s: producer %d seq %d delivered %d times, acked %d times", name, p, seq, st.delivered, st.acked))
					}
				default:
					gr.Delivered++
				}
				if st.delivered > 0 && st.part != part+1 {
					gr.Misrouted++
					if len(examples) < 5 {
						examples = append(examples, fmt.Sprintf("group %s: producer %d seq %d pushed to p%d, delivered from p%d", name, p, seq, part, st.part-1))
					}
				}
				if !c.autoAck && st.delivered > 0 && st.acked == 0 {
					gr.Unacked++
				}
			}
		}
		// A delivered seq the producer never got "queued" for (its push
		// failed or timed out, yet may have been stored) is not counted.
		g.mu.Unlock()
		gr.Examples = examples
		res.Groups[name] = gr
		res.Lost += gr.Lost
		res.Duplicates += gr.Duplicates
		res.OutOfOrder += gr.OutOfOrder
		res.Redeliveries += gr.Redeliveries
		res.Unacked += gr.Unacked
		if gr.Lost > 0 || gr.Duplicates > 0 || gr.OutOfOrder > 0 || gr.Unknown > 0 || gr.Misrouted > 0 {
			res.OK = false
			res.Problems = append(res.Problems, examples...)
		}
	}
	return res
}
