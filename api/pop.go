package api

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"queen-node/broker"
	"queen-node/forward"
	"queen-node/protocol"
)

// maxLeaseSeconds bounds client-chosen lease lengths (pop leaseSeconds,
// lease extend seconds) so interval arithmetic stays sane.
const maxLeaseSeconds = 31 * 24 * 3600

// popMessage is one message of a pop response; partitionId and leaseId are on
// every message because the Go client reads nothing else.
type popMessage struct {
	ID            string          `json:"id"`
	TransactionID string          `json:"transactionId"`
	TraceID       *string         `json:"traceId"`
	Data          json.RawMessage `json:"data"`
	CreatedAt     string          `json:"createdAt"`
	Queue         string          `json:"queue"`
	Partition     string          `json:"partition"`
	PartitionID   string          `json:"partitionId"`
	LeaseID       string          `json:"leaseId"`
	ConsumerGroup string          `json:"consumerGroup"`
	ProducerSub   *string         `json:"producerSub"`
	RetryCount    int             `json:"retryCount"`
}

// popHead is the pop response without its messages, the last field,
// "messages": the shape appendPopHead writes (and its test encodes).
type popHead struct {
	Success           bool   `json:"success"`
	Queue             string `json:"queue"`
	Partition         string `json:"partition"`
	PartitionID       string `json:"partitionId"`
	LeaseID           string `json:"leaseId"`
	ConsumerGroup     string `json:"consumerGroup"`
	PartitionsClaimed int    `json:"partitionsClaimed"`
}

// popWhole is the largest pop answer written whole, with a Content-Length
// and one Write: a chunked answer took two more write system calls on the
// node (and more reads at the client) per pop. Larger answers, up to the
// claim's byte cap (broker.Config.MaxPopBytes), are streamed in chunks so
// they are never held twice (messages plus their encoding) in memory.
const popWhole = 256 << 10

// popBufs recycles writePop's buffers (at most popWhole plus a message).
var popBufs = sync.Pool{New: func() any { b := make([]byte, 0, 16<<10); return &b }}

// writePop writes a 200 pop response. An error means the client may not
// have the whole body.
func writePop(w http.ResponseWriter, res *broker.PopResult, deadline time.Duration) error {
	bp := popBufs.Get().(*[]byte)
	b := appendPopHead((*bp)[:0], res)
	defer func() {
		if cap(b) <= 2*popWhole {
			*bp = b[:0]
			popBufs.Put(bp) // every Write has returned: nothing holds its bytes
		}
	}()
	w.Header().Set("Content-Type", "application/json")
	streaming := false
	begin := func() {
		w.WriteHeader(http.StatusOK)
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(deadline))
	}
	for i := range res.Messages {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendPopMessage(b, &res.Messages[i])
		if len(b) < popWhole {
			continue
		}
		if !streaming {
			streaming = true
			begin() // chunked: the length is not known yet
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
		b = b[:0]
	}
	b = append(b, "]}\n"...)
	if !streaming {
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		begin()
	}
	_, err := w.Write(b)
	return err
}

// appendPopHead appends a pop answer's fields before its messages, as
// encoding/json writes popHead (HTML escaping off), then `,"messages":[`.
// TestAppendPopHeadMatchesEncodingJSON holds the two equal.
func appendPopHead(b []byte, res *broker.PopResult) []byte {
	b = append(b, `{"success":true,"queue":`...)
	b = appendJSONString(b, res.Queue)
	b = append(b, `,"partition":`...)
	b = appendJSONString(b, res.Partition)
	b = append(b, `,"partitionId":`...)
	b = appendJSONString(b, res.PartitionID)
	b = append(b, `,"leaseId":`...)
	b = appendJSONString(b, res.LeaseID)
	b = append(b, `,"consumerGroup":`...)
	b = appendJSONString(b, res.ConsumerGroup)
	b = append(b, `,"partitionsClaimed":`...)
	b = strconv.AppendInt(b, int64(res.PartitionsClaimed), 10)
	return append(b, `,"messages":[`...)
}

// GET /api/v1/pop/queue/{queue}[/partition/{partition}]
func (s *Server) handlePop(w http.ResponseWriter, r *http.Request, c caller) {
	req, err := s.parsePop(r, false)
	if err != nil {
		writeReqError(w, err)
		return
	}
	if s.forwardPop(w, r, c, &req) {
		return
	}
	s.servePop(w, r, c.tenant, func(ctx context.Context) (*broker.PopResult, error) {
		return s.b.Pop(ctx, c.tenant, req)
	})
}

// GET /api/v1/pop?namespace=&task=: a pop from the first of the tenant's
// queues matching namespace and/or task that has messages, by priority
// (broker.Broker.PopAny).
func (s *Server) handlePopAny(w http.ResponseWriter, r *http.Request, c caller) {
	q := r.URL.Query()
	namespace, task := q.Get("namespace"), q.Get("task")
	if namespace == "" && task == "" {
		writeReqError(w, badRequest("namespace or task is required"))
		return
	}
	for _, f := range [...]struct{ kind, v string }{{"namespace", namespace}, {"task", task}} {
		if f.v != "" {
			if err := checkName(f.kind, f.v); err != nil {
				writeReqError(w, err)
				return
			}
		}
	}
	req, err := s.parsePop(r, true)
	if err != nil {
		writeReqError(w, err)
		return
	}
	s.servePop(w, r, c.tenant, func(ctx context.Context) (*broker.PopResult, error) {
		return s.b.PopAny(ctx, c.tenant, namespace, task, req)
	})
}

// servePop runs a parsed pop and writes its answer.
func (s *Server) servePop(w http.ResponseWriter, r *http.Request, tenant string, pop func(ctx context.Context) (*broker.PopResult, error)) {
	// The request context ends the long-poll when the client disconnects;
	// Drain ends it when the node shuts down.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(s.drainCtx, cancel)
	defer stop()

	res, err := pop(ctx)
	if err != nil {
		if s.drainCtx.Err() != nil && r.Context().Err() == nil {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		s.brokerError(w, r, "pop", err)
		return
	}
	if res == nil || len(res.Messages) == 0 {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	// A client that left while the claim ran must not keep the lease until
	// it expires (docs/api.md, "Semantics", long-poll).
	if r.Context().Err() != nil {
		s.releaseUndelivered(tenant, res)
		return
	}
	// The client has WriteTimeout plus a second per 64 KiB to take the
	// answer (up to QUEEN_POP_MAX_BYTES), or the lease is released: a slow
	// but steady link still gets large answers, a client that stops
	// reading does not hold them.
	var size int
	for i := range res.Messages {
		size += len(res.Messages[i].Data) + protocol.RowEnvelopeBytes
	}
	if err := writePop(w, res, s.popWriteTime(size)); err != nil {
		s.releaseUndelivered(tenant, res)
		return
	}
	if err := http.NewResponseController(w).Flush(); err != nil {
		s.releaseUndelivered(tenant, res)
	}
}

// popWriteTime is how long a client has to take a pop answer of size
// bytes: WriteTimeout plus a second per PopMinReadRate bytes.
func (s *Server) popWriteTime(size int) time.Duration {
	return s.cfg.WriteTimeout + time.Duration(float64(size)/float64(s.cfg.PopMinReadRate)*float64(time.Second))
}

// releaseUndelivered hands back the lease of a pop whose answer never
// reached its client, so its messages are redelivered without waiting for
// the lease to expire.
func (s *Server) releaseUndelivered(tenant string, res *broker.PopResult) {
	if res.LeaseID == "" {
		return
	}
	s.log.Debug("releasing lease of undelivered pop", "lease", res.LeaseID)
	s.b.ReleaseUndelivered(tenant, res)
}

// parsePop reads the path and query of a pop; anyQueue is a namespace/task
// pop (GET /api/v1/pop), whose path names no queue.
func (s *Server) parsePop(r *http.Request, anyQueue bool) (broker.PopRequest, error) {
	q := r.URL.Query()
	req := broker.PopRequest{
		Queue:            r.PathValue("queue"),
		Partition:        r.PathValue("partition"),
		Batch:            clamp(queryInt(q, "batch", 1), 1, s.cfg.MaxPopBatch),
		Wait:             queryBool(q, "wait", false),
		AutoAck:          queryBool(q, "autoAck", false),
		SubscriptionMode: q.Get("subscriptionMode"),
		Partitions:       clamp(queryInt(q, "partitions", 1), 1, s.cfg.MaxPopBatch),
		LeaseSeconds:     clamp(queryInt(q, "leaseSeconds", 0), 0, maxLeaseSeconds),
	}
	if !anyQueue { // a namespace/task pop has no queue in its path
		if err := checkName("queue", req.Queue); err != nil {
			return req, err
		}
	}
	if strings.Contains(r.Pattern, "{partition}") {
		if err := checkName("partition", req.Partition); err != nil {
			return req, err
		}
	}
	req.Group = q.Get("consumerGroup")
	if req.Group == "" {
		req.Group = broker.QueueMode
	} else if err := checkName("consumerGroup", req.Group); err != nil {
		return req, err
	}
	if len(req.SubscriptionMode) > broker.MaxNameBytes {
		return req, badRequest("subscriptionMode is too long")
	}
	// subscriptionFrom wins over subscriptionMode: "now" is the mode new,
	// a timestamp travels as a time (docs/api.md, "Semantics").
	if from := q.Get("subscriptionFrom"); from != "" {
		if strings.EqualFold(from, protocol.SubFromNow) {
			req.SubscriptionMode = string(protocol.SubNew)
		} else {
			t, ok := parseTime(from)
			if !ok {
				return req, badRequest(`subscriptionFrom must be "now" or an ISO-8601 timestamp`)
			}
			t = t.UTC()
			req.SubscriptionFrom = &t
		}
	}
	// timeout only matters for a long-poll.
	if req.Wait {
		def := int(s.cfg.DefaultPopTimeout / time.Millisecond)
		ms := queryInt(q, "timeout", def)
		if ms < 0 {
			ms = def
		}
		// Clamp in milliseconds first: a huge value would overflow Duration.
		ms = min(ms, int(s.cfg.MaxPopTimeout/time.Millisecond))
		req.Timeout = time.Duration(ms) * time.Millisecond
	}
	// A forwarded pop is a GET whose empty body may come chunked
	// (forward/consume.go): the server watches a connection for its
	// client leaving only once the body is read to its end, and a
	// forwarding node that gives up must end the long-poll here. Read for
	// every pop, so a forward from a node of an older version (whose mark
	// is "1", a client's header here) ends its long-poll too.
	body, _ := io.Copy(io.Discard, io.LimitReader(r.Body, 1))
	fwd := s.forwarded(r)
	if fwd && body > 0 {
		return req, badRequest("a forwarded pop has no body")
	}
	// A forwarded pop claims under the lease id its forwarding node chose
	// (api/forward.go); elsewhere the header means nothing.
	if l := r.Header.Get(forward.LeaseHeader); l != "" && fwd {
		// The nil UUID is refused: a constant any client might send would
		// let their leases release each other.
		id, ok := canonicalUUID(l)
		if !ok || id == uuid.Nil.String() {
			return req, badRequest(forward.LeaseHeader + " must be a UUID, not the nil one")
		}
		req.LeaseID = id
	}
	return req, nil
}
