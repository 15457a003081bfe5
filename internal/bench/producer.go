package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"queen-node/protocol"
)

// pushItem is the part of a push answer the checker needs.
type pushItem struct {
	Status protocol.PushStatus
	Error  string
}

// producer pushes batches of cfg.PushBatch messages, one request in flight,
// each message to a random partition (or, with cfg.Even, in turn), until its quota (quota > 0) or the
// end of the push phase. In open loop (cfg.Rate > 0) batch k is scheduled
// at start + offset + k*interval and its messages carry that scheduled
// time, so a late send counts against latency (no coordinated omission).
func (r *runner) producer(ctx context.Context, idx int, quota int64, end time.Time) {
	cfg := &r.cfg
	base := cfg.Nodes[idx%len(cfg.Nodes)]
	c := newClient(30 * time.Second)
	url := base + "/api/v1/push"
	qname, _ := json.Marshal(cfg.Queue)
	rng := rand.New(rand.NewPCG(uint64(idx)+1, uint64(time.Now().UnixNano())))

	var interval time.Duration
	start := time.Now()
	if cfg.Rate > 0 {
		perProducer := cfg.Rate / float64(cfg.Producers)
		interval = time.Duration(float64(cfg.PushBatch) / perProducer * float64(time.Second))
		start = start.Add(interval * time.Duration(idx) / time.Duration(cfg.Producers)) // stagger
	}
	var (
		seq int64
		dec decoder
		buf bytes.Buffer
	)
	parts := make([]int, cfg.PushBatch)
	body := make([]byte, 0, cfg.PushBatch*(cfg.PayloadBytes+80))
	for k := int64(0); ; k++ {
		if ctx.Err() != nil || (quota > 0 && seq >= quota) || (quota == 0 && !time.Now().Before(end)) {
			return
		}
		n := int64(cfg.PushBatch)
		if quota > 0 && quota-seq < n {
			n = quota - seq
		}
		stamp := time.Now()
		if interval > 0 {
			stamp = start.Add(interval * time.Duration(k))
			if wait := time.Until(stamp); wait > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(wait):
				}
			}
			if quota == 0 && !time.Now().Before(end) {
				return
			}
		}
		body = body[:0]
		body = append(body, `{"items":[`...)
		for i := range n {
			if i > 0 {
				body = append(body, ',')
			}
			if cfg.Even { // producer idx sends the run's messages idx, idx+P, idx+2P, ...
				parts[i] = int(((seq+i)*int64(cfg.Producers) + int64(idx)) % int64(cfg.Partitions))
			} else {
				parts[i] = rng.IntN(cfg.Partitions)
			}
			body = append(body, `{"queue":`...)
			body = append(body, qname...)
			body = append(body, `,"partition":"p`...)
			body = strconv.AppendInt(body, int64(parts[i]), 10)
			body = append(body, `","transactionId":"`...)
			body = append(body, cfg.TxnPrefix...)
			body = strconv.AppendInt(body, int64(idx), 10)
			body = append(body, '-')
			body = strconv.AppendInt(body, seq+i, 10)
			body = append(body, `","payload":`...)
			body = appendPayload(body, idx, seq+i, stamp.UnixNano(), cfg.PayloadBytes)
			body = append(body, '}')
		}
		body = append(body, "]}"...)

		sent := time.Now()
		r.cnt.pushReqs.Add(1)
		code, resp, err := doInto(ctx, c, http.MethodPost, url, body, &buf)
		r.pushLat.record(time.Since(sent))
		if code != 0 {
			r.errs.statusCode(code)
		}
		var items []pushItem
		if err == nil {
			var jerr error
			if items, jerr = dec.push(resp); jerr != nil || int64(len(items)) != n {
				r.errs.add("push: bad answer", string(resp))
				items = nil
			}
		} else {
			if ctx.Err() != nil {
				// Interrupted: the outcome is unknown, so none of these
				// messages is expected.
				for i := range n {
					r.check.Pushed(idx, seq+i, parts[i], false)
				}
				return
			}
			if code >= 500 {
				r.cnt.serverError.Add(1)
			}
			r.errs.add("push: "+classify(err), err.Error())
		}
		for i := range n {
			queued := items != nil && items[i].Status == protocol.PushQueued
			switch {
			case queued:
				r.cnt.pushed.Add(1)
			case items != nil && items[i].Status == protocol.PushDuplicate:
				r.cnt.pushDup.Add(1)
				r.errs.add("push: item duplicate", "")
			default:
				r.cnt.pushFailed.Add(1)
				if items != nil {
					r.errs.add("push: item "+string(items[i].Status), items[i].Error)
				}
			}
			r.check.Pushed(idx, seq+i, parts[i], queued)
		}
		seq += n
	}
}
