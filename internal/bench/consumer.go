package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"queen-node/protocol"
)

// emptyPause is how long a consumer without long-poll waits after an empty
// pop before the next, so wait=false does not spin on an idle queue.
const emptyPause = 10 * time.Millisecond

// popMsg is what a consumer keeps of a delivered message to ack it.
type popMsg struct {
	TransactionID string
	PartitionID   string
	Partition     string
	LeaseID       string
}

type ackItem struct {
	TransactionID string             `json:"transactionId"`
	PartitionID   string             `json:"partitionId"`
	Status        protocol.AckStatus `json:"status"`
	LeaseID       string             `json:"leaseId,omitempty"`
}

type ackBody struct {
	ConsumerGroup   string    `json:"consumerGroup,omitempty"`
	Acknowledgments []ackItem `json:"acknowledgments"`
}

type ackResult struct {
	Success bool
	Error   string
}

// popURL builds the wildcard pop request of the run for group.
func popURL(cfg *Config, base, group string) string {
	q := url.Values{}
	q.Set("batch", strconv.Itoa(cfg.PopBatch))
	if cfg.Wait {
		q.Set("wait", "true")
		q.Set("timeout", strconv.FormatInt(cfg.PollTimeout.Milliseconds(), 10))
	} else {
		q.Set("wait", "false")
	}
	if group != QueueMode {
		q.Set("consumerGroup", group)
	}
	if cfg.AutoAck {
		q.Set("autoAck", "true")
	}
	if cfg.PopPartitions > 1 {
		q.Set("partitions", strconv.Itoa(cfg.PopPartitions))
	}
	return base + "/api/v1/pop/queue/" + url.PathEscape(cfg.Queue) + "?" + q.Encode()
}

// partitionIndex parses "p<N>"; -1 for anything else.
func partitionIndex(name string) int {
	n, err := strconv.Atoi(strings.TrimPrefix(name, "p"))
	if err != nil || !strings.HasPrefix(name, "p") {
		return -1
	}
	return n
}

// consumer pops for group until ctx ends (the run's end, or the group has
// received everything after the producers stopped). Acks run under ackCtx,
// which outlives ctx, so a batch already popped is still acked when
// another consumer of the group ends the group.
func (r *runner) consumer(ctx, ackCtx context.Context, idx int, group string, done func()) {
	cfg := &r.cfg
	nodes := cfg.consumerNodes()
	base := nodes[idx%len(nodes)]
	c := newClient(cfg.PollTimeout + 30*time.Second)
	purl := popURL(cfg, base, group)
	aurl := base + "/api/v1/ack/batch"
	var (
		dec decoder
		buf bytes.Buffer
	)
	for ctx.Err() == nil {
		r.cnt.pops.Add(1)
		code, body, err := doInto(ctx, c, http.MethodGet, purl, nil, &buf)
		if ctx.Err() != nil {
			return
		}
		if code != 0 {
			r.errs.statusCode(code)
		}
		if err != nil {
			if code >= 500 {
				r.cnt.serverError.Add(1)
			}
			r.errs.add("pop: "+classify(err), err.Error())
			time.Sleep(100 * time.Millisecond) // do not hammer a failing node
			continue
		}
		if code == http.StatusNoContent {
			r.cnt.emptyPops.Add(1)
			if !cfg.Wait {
				time.Sleep(emptyPause)
			}
			continue
		}
		ans, err := dec.pop(body)
		if err != nil {
			r.errs.add("pop: bad answer", fmt.Sprintf("%v: %.200s", err, body))
			continue
		}
		now := time.Now()
		batch := make([]Delivery, len(ans))
		stamps := make([]int64, len(ans))
		msgs := make([]popMsg, len(ans))
		for i, m := range ans {
			msgs[i] = m.msg
			if !m.ok {
				r.errs.add("pop: foreign payload", fmt.Sprintf("message %s of partition %s: %s", m.msg.TransactionID, m.msg.Partition, m.foreign))
				batch[i] = Delivery{Producer: -1, Seq: -1, Partition: -1}
				continue
			}
			batch[i] = Delivery{Producer: m.payload.P, Seq: m.payload.S, Partition: partitionIndex(m.msg.Partition)}
			stamps[i] = m.payload.T
		}
		// Record before acking: the next batch of a partition can only be
		// popped after this ack (see Checker).
		first := r.check.Delivered(group, batch)
		r.cnt.delivered.Add(int64(len(batch)))
		r.lastDelivery.Store(now.UnixNano())
		for i, f := range first {
			if f {
				r.lat.record(now.Sub(time.Unix(0, stamps[i])))
			}
		}
		if !cfg.AutoAck && len(msgs) > 0 {
			r.ack(ackCtx, c, aurl, group, msgs, batch, &dec, &buf)
		}
		if r.producersDone.Load() && r.check.Complete(group) {
			done()
			return
		}
	}
}

// ack sends one ack/batch for a popped batch and records each item's
// outcome.
func (r *runner) ack(ctx context.Context, c *http.Client, aurl, group string, msgs []popMsg, batch []Delivery,
	dec *decoder, buf *bytes.Buffer) {
	b := ackBody{Acknowledgments: make([]ackItem, len(msgs))}
	if group != QueueMode {
		b.ConsumerGroup = group
	}
	for i, m := range msgs {
		b.Acknowledgments[i] = ackItem{TransactionID: m.TransactionID, PartitionID: m.PartitionID, Status: protocol.AckCompleted, LeaseID: m.LeaseID}
	}
	body, err := json.Marshal(b)
	if err != nil {
		r.errs.add("ack: encode", err.Error())
		return
	}
	r.cnt.ackReqs.Add(1)
	code, resp, err := doInto(ctx, c, http.MethodPost, aurl, body, buf)
	if code != 0 {
		r.errs.statusCode(code)
	}
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		if code >= 500 {
			r.cnt.serverError.Add(1)
		}
		r.cnt.ackFailed.Add(int64(len(msgs)))
		r.errs.add("ack: "+classify(err), err.Error())
		return
	}
	res, err := dec.acks(resp)
	if err != nil || len(res) != len(msgs) {
		r.cnt.ackFailed.Add(int64(len(msgs)))
		r.errs.add("ack: bad answer", fmt.Sprintf("%.200s", resp))
		return
	}
	for i, a := range res {
		if a.Success {
			r.cnt.acked.Add(1)
			r.check.Acked(group, batch[i].Producer, batch[i].Seq)
		} else {
			r.cnt.ackFailed.Add(1)
			r.errs.add("ack: item "+a.Error, "")
		}
	}
}
