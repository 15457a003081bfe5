package dashboard_test

import (
	"fmt"
	"net/url"
	"testing"

	"github.com/chromedp/chromedp"

	"queen-node/internal/nodetest"
)

// TestDashboardHotlist: the queue page, opened on node 2 of a three-node
// cluster, shows node 1's ring of a group beside PostgreSQL's view: a
// partition pushed on node 0 and popped with a lease through node 1 is
// tracked by node 1's ring (lease-parked on the wheel, or ready once the
// park ends; "in flight" lasts only while a pop's SQL runs) while
// PostgreSQL shows the lease; after the ack and one more pop the ring
// tracks nothing and PostgreSQL shows no lease. Nodes 0 and 2 never popped
// the queue: they hold no rings for it.
func TestDashboardHotlist(t *testing.T) {
	b := newBrowser(t)
	nodes := nodetest.StartCluster(t, 3)
	const queue, group = "hq", "g"
	names := make([]string, len(nodes))
	for i := range nodes {
		names[i] = fmt.Sprintf("%s-%d", t.Name(), i)
	}

	// First contact provisions the group through SQL; the group's next pop
	// on node 1 registers its ring there (broker/hot.go, hotPop).
	push(t, nodes[0], "", queue, 1)
	if st, p := pop(t, nodes[1], "", queue, "batch=1&autoAck=true&consumerGroup="+group); st != 200 || len(p.Messages) != 1 {
		t.Fatalf("warm-up pop: %d, %d messages", st, len(p.Messages))
	}
	if st, _ := pop(t, nodes[1], "", queue, "batch=1&consumerGroup="+group); st != 204 {
		t.Fatalf("empty pop: %d", st)
	}

	push(t, nodes[0], "", queue, 1)
	st, p := pop(t, nodes[1], "", queue, "batch=1&consumerGroup="+group)
	if st != 200 || len(p.Messages) != 1 {
		t.Fatalf("leased pop: %d, %d messages", st, len(p.Messages))
	}
	m := p.Messages[0]

	b.run(t, "open the queue page on node 2", chromedp.Navigate(nodes[2].URL+"/#/queue/"+url.PathEscape(queue)))
	ring := fmt.Sprintf(`#hotlist tr[data-node=%s][data-group=%s]`, js(names[1]), js(group))
	tracked := fmt.Sprintf(`(r => r ? +r.dataset.ready + +r.dataset.wheel + +r.dataset.inflight : -1)(document.querySelector(%s))`, js(ring))
	pgRow := fmt.Sprintf(`#hotlist-pg tr[data-group=%s]`, js(group))
	leased := func(n int) string {
		return fmt.Sprintf(`(r => !!r && r.dataset.leased === %s)(document.querySelector(%s))`, js(fmt.Sprint(n)), js(pgRow))
	}
	diag := outer("#hotlist") + ` + '\n' + ` + outer("#hotlist-pg")
	b.waitFor(t, "node 1's ring tracking p1 beside PostgreSQL's lease",
		fmt.Sprintf(`%s >= 1 && document.querySelector(%s).textContent.includes('p1') && %s`, tracked, js(ring), leased(1)), diag)
	for _, i := range []int{0, 2} {
		b.waitFor(t, fmt.Sprintf("node %d without rings", i),
			fmt.Sprintf(`!!document.querySelector(%s)`, js(fmt.Sprintf(`#hotlist tr[data-node=%s][data-registered=false]`, js(names[i])))), diag)
	}
	b.noErrors(t, "with a lease held")

	ack := map[string]any{"transactionId": m.TransactionID, "partitionId": m.PartitionID, "leaseId": m.LeaseID, "status": "completed", "consumerGroup": group}
	if r := nodes[1].Do(t, "POST", "/api/v1/ack", ack); r.Status != 200 {
		t.Fatalf("ack: %d %s", r.Status, r.Body)
	}
	// A partition the wheel tick made ready again stays tracked until a
	// pop probes it empty.
	if st, _ := pop(t, nodes[1], "", queue, "batch=1&consumerGroup="+group); st != 204 {
		t.Fatalf("pop after ack: %d", st)
	}
	b.waitFor(t, "node 1's ring empty and no lease in PostgreSQL", fmt.Sprintf(`%s === 0 && %s`, tracked, leased(0)), diag)
	b.noErrors(t, "after the ack")
}
