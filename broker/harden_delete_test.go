package broker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"queen-node/broker"
	"queen-node/internal/nodetest"
)

// Item 5: deleting a queue under traffic answered 500 on pop, ack/batch,
// configure, push and the delete itself (foreign-key violations and
// deadlocks). Every request racing deletes must answer cleanly, and once the
// deletes stop the queue works as a fresh one.
func TestDeleteQueueUnderTraffic(t *testing.T) {
	n := nodetest.Start(t, func(c *broker.Config) { c.PG.MaxConns = 24 })
	const queue = "doomed"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var bad errCounter
	var requests atomic.Int64
	stop := make(chan struct{})
	stopped := func() bool {
		select {
		case <-stop:
			return true
		default:
			return false
		}
	}
	expect := func(what string, st int, body []byte, err error, ok ...int) {
		requests.Add(1)
		if err != nil {
			bad.add("%s: %v", what, err)
			return
		}
		for _, s := range ok {
			if st == s {
				return
			}
		}
		bad.add("%s: %d %.300s", what, st, body)
	}
	var wg sync.WaitGroup
	run := func(fn func(i int)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stopped(); i++ {
				fn(i)
			}
		}()
	}
	for p := 0; p < 4; p++ {
		run(func(i int) {
			items := make([]msg, 20)
			for k := range items {
				items[k] = msg{"queue": queue, "partition": fmt.Sprintf("p%d", rand.IntN(8)), "payload": k}
			}
			st, body, err := call(ctx, n, "POST", "/api/v1/push", msg{"items": items})
			expect("push", st, body, err, 201)
			if st == 201 {
				var res []msg
				if json.Unmarshal(body, &res) == nil {
					for _, x := range res {
						if x["status"] != "queued" {
							bad.add("push item: %v", x)
						}
					}
				}
			}
		})
	}
	for c := 0; c < 4; c++ {
		group := []string{"", "g1"}[c%2]
		run(func(i int) {
			q := "batch=10&partitions=3"
			if group != "" {
				q += "&consumerGroup=" + group
			}
			if i%3 == 0 {
				q += "&wait=true&timeout=50"
			}
			st, body, err := call(ctx, n, "GET", "/api/v1/pop/queue/"+url.PathEscape(queue)+"?"+q, nil)
			expect("pop", st, body, err, 200, 204)
			if st != 200 {
				return
			}
			var res struct{ Messages []msg }
			if json.Unmarshal(body, &res) != nil {
				return
			}
			acks := make([]msg, len(res.Messages))
			for k, m := range res.Messages {
				status := "completed"
				if k%4 == 3 {
					status = "failed"
				}
				acks[k] = msg{"transactionId": m["transactionId"], "partitionId": m["partitionId"],
					"leaseId": m["leaseId"], "status": status}
			}
			ab := msg{"acknowledgments": acks}
			if group != "" {
				ab["consumerGroup"] = group
			}
			st, body, err = call(ctx, n, "POST", "/api/v1/ack/batch", ab)
			expect("ack/batch", st, body, err, 200)
		})
	}
	run(func(i int) {
		st, body, err := call(ctx, n, "POST", "/api/v1/configure", msg{"queue": queue, "options": msg{"retryLimit": 1}})
		expect("configure", st, body, err, 200)
	})
	run(func(i int) {
		ops := []msg{
			{"type": "push", "items": []msg{{"queue": queue, "partition": "p1", "payload": 1}}},
			{"type": "push", "items": []msg{{"queue": queue, "partition": "p2", "payload": 2}}},
		}
		st, body, err := call(ctx, n, "POST", "/api/v1/transaction", msg{"operations": ops})
		expect("transaction", st, body, err, 200)
	})
	deletes := 0
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stopped() {
			st, body, err := call(ctx, n, "DELETE", "/api/v1/resources/queues/"+queue, nil)
			expect("delete", st, body, err, 200)
			deletes++
		}
	}()
	time.Sleep(4 * time.Second) // the load's duration, not a synchronisation
	close(stop)
	wg.Wait()
	t.Logf("%d requests, %d deletes", requests.Load(), deletes)
	bad.check(t, "under deletes", requests.Load())

	// Afterwards the queue behaves as a fresh one: nothing pushed now is lost.
	r := n.Do(t, "DELETE", "/api/v1/resources/queues/"+queue, nil)
	if r.Status != 200 {
		t.Fatalf("final delete: %d %s", r.Status, r.Body)
	}
	want := map[string]bool{}
	items := make([]msg, 50)
	for k := range items {
		tx := fmt.Sprintf("after-%d", k)
		items[k] = msg{"queue": queue, "partition": fmt.Sprintf("p%d", k%8), "transactionId": tx, "payload": k}
		want[tx] = true
	}
	pushItems(t, n, items)
	checkDelivered(t, queue, want, drain(t, n, queue))
}
