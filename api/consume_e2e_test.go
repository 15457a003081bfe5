package api_test

// Real nodes, real PostgreSQL, real mesh: the consumer side of queue
// ownership (docs/api.md, "Queue ownership"). Pops and acks received by
// any node are served by the queue's owner, and nothing is lost, doubled
// or reordered on the way, with consumers that vanish mid-request.

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"queen-node/owner"
)

// poppedMsg is one message of a pop answer, as a client reads it.
type poppedMsg struct {
	TransactionID string `json:"transactionId"`
	PartitionID   string `json:"partitionId"`
	Partition     string `json:"partition"`
	LeaseID       string `json:"leaseId"`
	Data          struct {
		P   int `json:"p"`
		Seq int `json:"seq"`
	} `json:"data"`
}

// popVia pops q through base with ctx; 204 gives nil.
func popVia(ctx context.Context, base, q, query string) ([]poppedMsg, int, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", base+"/api/v1/pop/queue/"+url.PathEscape(q)+"?"+query, nil)
	if err != nil {
		return nil, 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNoContent {
		return nil, 204, nil
	}
	// Pop answers, served here or forwarded from the owner, are whole: a
	// Content-Length, not chunked (api/pop.go writePop, api/forward.go).
	if resp.StatusCode == http.StatusOK && resp.ContentLength <= 0 {
		return nil, resp.StatusCode, fmt.Errorf("pop answer without a Content-Length (%v)", resp.TransferEncoding)
	}
	var body struct {
		Messages []poppedMsg `json:"messages"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, resp.StatusCode, err
	}
	return body.Messages, resp.StatusCode, nil
}

// TestConsumerOwnership: a queue owned by node 0 is pushed to through
// nodes 1 and 2 while six consumers, two per node, pop and batch-ack it
// through their own node, and a seventh client on node 2 starts long pops
// and vanishes (its leases, if it got an answer, last 2 s). Every message is delivered to the consumers exactly once,
// in order per partition; the non-owners deliver nothing themselves (their
// pops run at the owner), and their acks go to the owner too.
func TestConsumerOwnership(t *testing.T) {
	nodes, owned := ownedCluster(t, 3, 1)
	q := owned[0][0]
	// The owner tables as the run starts: memberlist suspecting a member
	// on a loaded machine moves queues for a moment, and then only the
	// delivery checks apply.
	tables := make([]*owner.Table, len(nodes))
	for i, nd := range nodes {
		tables[i] = nd.Mesh.Owners()
	}
	const partitions, perPartition, producers = 4, 120, 2
	total := partitions * perPartition
	// Producers push through the non-owners while the consumers run.
	var pwg sync.WaitGroup
	perr := make(chan error, producers)
	for p := 0; p < producers; p++ {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			via := nodes[1+p]
			// Producer p owns partitions p, p+2: its pushes keep their order.
			for seq := 0; seq < perPartition; seq += 10 {
				var items []map[string]any
				for part := p; part < partitions; part += producers {
					for k := seq; k < seq+10; k++ {
						items = append(items, map[string]any{"queue": q, "partition": fmt.Sprintf("p%d", part),
							"payload": map[string]int{"p": part, "seq": k}})
					}
				}
				code, body, err := postJSON(via.URL+"/api/v1/push", map[string]any{"items": items})
				if err != nil || code != 201 {
					perr <- fmt.Errorf("push: %d %s %v", code, body, err)
					return
				}
			}
		}()
	}
	// The vanishing client: long pops through node 2 it gives up on
	// quickly; what the owner claimed for it must come back at once.
	stopVanish := make(chan struct{})
	var vwg sync.WaitGroup
	vwg.Add(1)
	go func() {
		defer vwg.Done()
		for {
			select {
			case <-stopVanish:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(1+rand.Intn(30))*time.Millisecond)
			// Its leases are short: an answer that reached its socket
			// just before it gave up is one no node can know was lost.
			_, _, _ = popVia(ctx, nodes[2].URL, q, "batch=7&wait=true&timeout=2000&leaseSeconds=2")
			cancel()
		}
	}()

	var mu sync.Mutex
	seen := map[string]int{}           // transaction id -> deliveries
	order := make([][]int, partitions) // per partition: seqs in delivery order
	delivered := 0
	var cwg sync.WaitGroup
	cerr := make(chan error, 6)
	for c := 0; c < 6; c++ {
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			via := nodes[c%3]
			rng := rand.New(rand.NewSource(int64(c)))
			deadline := time.Now().Add(60 * time.Second)
			for {
				mu.Lock()
				got := delivered
				mu.Unlock()
				if got >= total {
					return
				}
				if time.Now().After(deadline) {
					cerr <- fmt.Errorf("consumer %d: %d of %d delivered after 60 s", c, got, total)
					return
				}
				popAt := time.Now()
				msgs, code, err := popVia(context.Background(), via.URL, q, fmt.Sprintf("batch=%d&wait=true&timeout=300", 1+rng.Intn(25)))
				if err != nil || code != 200 && code != 204 {
					cerr <- fmt.Errorf("consumer %d: pop: %d %v", c, code, err)
					return
				}
				if len(msgs) == 0 {
					continue
				}
				var acks []map[string]any
				mu.Lock()
				for _, m := range msgs {
					seen[m.TransactionID]++
					order[m.Data.P] = append(order[m.Data.P], m.Data.Seq)
					delivered++
					acks = append(acks, map[string]any{"transactionId": m.TransactionID, "partitionId": m.PartitionID,
						"leaseId": m.LeaseID, "status": "completed"})
				}
				mu.Unlock()
				code, body, err := postJSON(via.URL+"/api/v1/ack/batch", map[string]any{"acknowledgments": acks})
				if err != nil || code != 200 {
					cerr <- fmt.Errorf("consumer %d: ack: %d %s %v", c, code, body, err)
					return
				}
				var res []struct {
					Success bool    `json:"success"`
					Error   *string `json:"error"`
				}
				if err := json.Unmarshal(body, &res); err != nil || len(res) != len(acks) {
					cerr <- fmt.Errorf("consumer %d: ack answer %s: %v", c, body, err)
					return
				}
				for i, a := range res {
					if !a.Success {
						cerr <- fmt.Errorf("consumer %d: ack %d of %s (lease %s, pop began %v ago) refused: %v", c, i, acks[i]["transactionId"], acks[i]["leaseId"], time.Since(popAt), *a.Error)
						return
					}
				}
			}
		}()
	}
	cwg.Wait()
	close(stopVanish)
	vwg.Wait()
	pwg.Wait()
	close(perr)
	close(cerr)
	for err := range perr {
		t.Fatal(err)
	}
	for err := range cerr {
		t.Fatal(err)
	}
	if len(seen) != total {
		t.Fatalf("%d distinct messages delivered, %d pushed", len(seen), total)
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("message %s delivered %d times", id, n)
		}
	}
	for p, seqs := range order {
		for i, s := range seqs {
			if s != i {
				t.Fatalf("partition p%d delivered %v, want 0..%d in order", p, seqs, perPartition-1)
			}
		}
	}
	st := make([]nodeStatus, 3)
	steady := true
	for i := range nodes {
		st[i] = statusOf(t, nodes[i])
		steady = steady && nodes[i].Mesh.Owners() == tables[i]
	}
	if !steady {
		t.Logf("the membership changed during the run: where pops and acks ran is not checked (%+v)", st)
		return
	}
	// The owner also delivered what the vanishing client did not take.
	if st[0].Requests.Popped < int64(total) {
		t.Fatalf("the owner delivered %d messages, want all %d (non-owners: %d, %d)", st[0].Requests.Popped, total,
			st[1].Requests.Popped, st[2].Requests.Popped)
	}
	for i := 1; i < 3; i++ {
		if st[i].Requests.Popped != 0 || st[i].Forward.Pops == 0 || st[i].Forward.PopFailures != 0 {
			t.Fatalf("node %d: %+v, want every pop forwarded to the owner", i, st[i])
		}
	}
	// The non-owners learnt each partition's queue from the answers they
	// forwarded: every ack went to the owner, from the first.
	for i := 1; i < 3; i++ {
		if st[i].Forward.AckItems == 0 || st[i].Forward.Routes == 0 || st[i].Forward.AckLocal != 0 {
			t.Fatalf("node %d: %+v, want every ack forwarded to the owner", i, st[i].Forward)
		}
	}
	if st[0].Forward.Pops != 0 || st[0].Forward.Acks != 0 || st[0].Forward.ConsumeReceived == 0 {
		t.Fatalf("the owner: %+v, want it to serve what it was sent and forward nothing", st[0].Forward)
	}
}

// A pop whose client leaves while it waits at the owner leaves no lease
// behind: a message pushed just after is delivered at once to the next
// consumer (a lease kept would hold it for the lease's 300 s).
//
// The client leaves as the push goes out, so the answer sometimes wins:
// the client then got the message (a status 200; acked when its body was
// read whole). Such rounds are not counted, and each round pushes to its
// own partition, so a message held by a client that took it and left
// cannot hide the next round's. Rounds run until five saw the client
// leave without an answer. (An answer written whole to the client's
// socket just before the client cancels, and dropped by the client's
// transport unread, is a delivery as far as any server can tell: such a
// round would fail. The window is narrow.)
// The owner mostly sees the client leave before the push wakes its pop,
// so this test cannot tell a release that fails; a claim for a client
// that has left is made every time in
// TestForwardedPopWhoseClientLeavesMidClaim.
func TestForwardedPopOfALeavingClient(t *testing.T) {
	nodes, owned := ownedCluster(t, 2, 1)
	q := owned[0][0]
	left, answered := 0, 0
	for round := 0; left < 5; round++ {
		if round == 25 {
			t.Fatalf("only %d of %d rounds saw the client leave without an answer", left, round)
		}
		before := statusOf(t, nodes[0]).Forward.ConsumeReceived
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		var got []poppedMsg
		var gotCode int
		go func() {
			defer close(done)
			got, gotCode, _ = popVia(ctx, nodes[1].URL, q, "batch=10&wait=true&timeout=10000")
		}()
		deadline := time.Now().Add(10 * time.Second)
		for statusOf(t, nodes[0]).Forward.ConsumeReceived == before {
			if time.Now().After(deadline) {
				t.Fatal("the pop never reached the owner")
			}
			time.Sleep(5 * time.Millisecond)
		}
		// Push and leave at about the same time: the owner's pop may
		// claim the message for the client that is gone.
		go cancel()
		code, body, err := postJSON(nodes[1].URL+"/api/v1/push", map[string]any{"items": []map[string]any{
			{"queue": q, "partition": fmt.Sprintf("p%d", round), "payload": map[string]int{"round": round}}}})
		if err != nil || code != 201 {
			t.Fatalf("push: %d %s %v", code, body, err)
		}
		<-done
		if gotCode == 200 {
			// The answer reached the client before it left.
			answered++
			if len(got) == 1 {
				ackAll(t, nodes[1].URL, got)
			}
			continue
		}
		left++
		msgs, code, err := popVia(context.Background(), nodes[1].URL, q, "batch=10&wait=true&timeout=5000")
		if err != nil || len(msgs) != 1 {
			t.Fatalf("round %d: pop after the client left: %d %v %v, want the message at once", round, code, msgs, err)
		}
		ackAll(t, nodes[1].URL, msgs)
	}
	t.Logf("%d rounds the client left without an answer, %d it was answered first", left, answered)
}

// A forwarded pop whose client leaves while the owner's claim runs: the
// claim waits on a table lock until the test's client has gone, then
// commits a lease for a pop nobody will read, and the next pop must still
// get the message within its 5 s (a lease kept would hold it for the
// lease's 300 s). Whichever release does it (the owner's for its
// departed requester; this node's for a forward without an answer, at
// once and a second later, or for an answer that came after its client
// left), one must. A release that found a lease is counted
// (requests.leases_released_undelivered); a round where none did made no
// lease for nobody, and fails as not testing what it should.
func TestForwardedPopWhoseClientLeavesMidClaim(t *testing.T) {
	nodes, owned := ownedCluster(t, 2, 1)
	q := owned[0][0]
	ctx := context.Background()
	connect := func() *pgx.Conn {
		t.Helper()
		c, err := pgx.Connect(ctx, nodes[0].DBURL)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(ctx) })
		return c
	}
	// The lock is held on one connection and watched from another:
	// pg_stat_activity is one snapshot per transaction.
	locker, watch := connect(), connect()
	var lockerPID int
	if err := locker.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&lockerPID); err != nil {
		t.Fatal(err)
	}
	released := func() int64 {
		return statusOf(t, nodes[0]).Requests.Released + statusOf(t, nodes[1]).Requests.Released
	}
	push := func(n int) {
		t.Helper()
		code, body, err := postJSON(nodes[1].URL+"/api/v1/push", map[string]any{"items": []map[string]any{
			{"queue": q, "partition": "p", "payload": map[string]int{"n": n}}}})
		if err != nil || code != 201 {
			t.Fatalf("push: %d %s %v", code, body, err)
		}
	}
	popAck := func(what string) {
		t.Helper()
		msgs, code, err := popVia(ctx, nodes[1].URL, q, "batch=10&wait=true&timeout=5000")
		if err != nil || len(msgs) != 1 {
			t.Fatalf("%s: %d %v %v, want the message at once", what, code, msgs, err)
		}
		ackAll(t, nodes[1].URL, msgs)
	}
	// One partition throughout. The first pop of a queue and group is a
	// SQL scan that registers no hot-list ring; the second registers it.
	// From then on the owner's pops name the partition, whose consumer
	// row it knows, so their claims go in its claim flights, which a
	// client that leaves does not cancel (a claim that names nothing, or
	// may need provisioning, runs alone under its request). The wait
	// below looks for a fast claim's statement, and the released counter
	// then shows it was not cancelled.
	for n := 0; n < 2; n++ {
		push(n)
		popAck("a first pop")
	}
	for round := 2; round <= 4; round++ {
		push(round)
		before := released()
		tx, err := locker.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// Every claim and release updates queen.consumers: each waits here.
		if _, err := tx.Exec(ctx, "LOCK TABLE queen.consumers IN SHARE ROW EXCLUSIVE MODE"); err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _, _ = popVia(cctx, nodes[1].URL, q, "batch=10&wait=true&timeout=10000")
		}()
		deadline := time.Now().Add(10 * time.Second)
		for {
			var blocked bool
			// A fast claim (pg/claimfast.go) or a claim set
			// (pg/claimset.go), by how their text begins: a release of
			// an earlier round, or an ack, may wait here too.
			if err := watch.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
				WHERE $1::int = ANY(pg_blocking_pids(pid)) AND (query LIKE 'WITH c AS (%' OR query LIKE 'WITH j AS (%'))`,
				lockerPID).Scan(&blocked); err != nil {
				cancel()
				t.Fatal(err)
			}
			if blocked {
				break
			}
			if time.Now().After(deadline) {
				cancel()
				t.Fatal("no fast claim came to wait on the lock")
			}
			time.Sleep(5 * time.Millisecond)
		}
		cancel()
		<-done
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		popAck(fmt.Sprintf("round %d: pop after the client left mid-claim", round))
		// (a release is counted just after its statement: polled)
		for deadline := time.Now().Add(5 * time.Second); released() == before; {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: no release found a lease: the claim made none for the client that left", round)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if st := statusOf(t, nodes[1]); st.Requests.Popped != 0 || st.Forward.Pops < 8 || st.Forward.PopFailures != 0 {
		t.Fatalf("node 1: %+v, want every pop forwarded to the owner", st)
	}
}

// An autoAck pop is served where it arrives: its answer lost between
// nodes would be messages lost.
func TestAutoAckPopIsServedHere(t *testing.T) {
	nodes, owned := ownedCluster(t, 2, 1)
	q := owned[0][0]
	if code, body, err := postJSON(nodes[1].URL+"/api/v1/push", map[string]any{"items": []map[string]any{
		{"queue": q, "payload": map[string]int{"n": 1}}}}); err != nil || code != 201 {
		t.Fatalf("push: %d %s %v", code, body, err)
	}
	msgs, code, err := popVia(context.Background(), nodes[1].URL, q, "batch=10&autoAck=true")
	if err != nil || len(msgs) != 1 {
		t.Fatalf("autoAck pop: %d %v %v", code, msgs, err)
	}
	st := statusOf(t, nodes[1])
	if st.Forward.Pops != 0 || st.Requests.Popped != 1 {
		t.Fatalf("node 1 after an autoAck pop: %+v, want it served there", st)
	}
	// The same pop without autoAck goes to the owner.
	if _, _, err := popVia(context.Background(), nodes[1].URL, q, "batch=10"); err != nil {
		t.Fatal(err)
	}
	if st := statusOf(t, nodes[1]); st.Forward.Pops != 1 {
		t.Fatalf("node 1 after a plain pop: %+v, want it forwarded", st)
	}
}
