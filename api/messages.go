package api

import (
	"net/http"

	"queen-node/broker"
	"queen-node/protocol"
	"queen-node/reads"
)

// defaultMessagesLimit is the reference's page size for the message list.
const defaultMessagesLimit = 200

// messageStatuses are the accepted values of `status`.
var messageStatuses = func() map[string]bool {
	m := map[string]bool{}
	for _, st := range protocol.MessageStatuses {
		m[string(st)] = true
	}
	return m
}()

type modeJSON struct {
	HasQueueMode   bool   `json:"hasQueueMode"`
	BusGroupsCount int64  `json:"busGroupsCount"`
	Type           string `json:"type"`
}

func modeOf(hasQueue bool, bus int64) modeJSON {
	t := "none"
	switch {
	case hasQueue && bus > 0:
		t = "hybrid"
	case hasQueue:
		t = "queue"
	case bus > 0:
		t = "bus"
	}
	return modeJSON{HasQueueMode: hasQueue, BusGroupsCount: bus, Type: t}
}

type messageJSON struct {
	ID             string  `json:"id"`
	TransactionID  string  `json:"transactionId"`
	PartitionID    string  `json:"partitionId"`
	QueuePath      string  `json:"queuePath"`
	Queue          string  `json:"queue"`
	Partition      string  `json:"partition"`
	Namespace      *string `json:"namespace"`
	Task           *string `json:"task"`
	Status         string  `json:"status"`
	ConsumerGroup  string  `json:"consumerGroup"`
	TraceID        *string `json:"traceId"`
	ProducerSub    *string `json:"producerSub"`
	QueuePriority  int     `json:"queuePriority"`
	CreatedAt      string  `json:"createdAt"`
	LeaseExpiresAt *string `json:"leaseExpiresAt"`
}

func messageOf(m reads.MessageRow, group string) messageJSON {
	out := messageJSON{ID: m.ID, TransactionID: m.TransactionID, PartitionID: m.PartitionID,
		QueuePath: m.Queue + "/" + m.Partition, Queue: m.Queue, Partition: m.Partition,
		Namespace: nullable(m.Namespace), Task: nullable(m.Task), Status: m.Status, ConsumerGroup: group,
		TraceID: m.TraceID, ProducerSub: m.ProducerSub, QueuePriority: m.Priority, CreatedAt: fmtMicro(m.CreatedAt)}
	if m.LeaseExpiresAt != nil {
		out.LeaseExpiresAt = fmtMilliOrNull(*m.LeaseExpiresAt)
	}
	return out
}

type messagesResponse struct {
	Messages      []messageJSON `json:"messages"`
	ConsumerGroup string        `json:"consumerGroup"`
	Mode          modeJSON      `json:"mode"`
	Pagination    pagination    `json:"pagination"`
}

// queryGroup reads consumerGroup from the query; absent or "" is QueueMode.
func queryGroup(r *http.Request) (string, error) {
	g, err := optQueryName(r.URL.Query(), "consumerGroup")
	if err != nil || g != "" {
		return g, err
	}
	return broker.QueueMode, nil
}

// GET /api/v1/messages?queue&partition&status&consumerGroup&limit&offset
// `queue` is required: the list walks one queue's partitions (docs/api.md).
func (s *Server) handleListMessages(w http.ResponseWriter, r *http.Request, c caller) {
	q := r.URL.Query()
	limit, offset, err := page(q, defaultMessagesLimit, maxPageOffset)
	if err != nil {
		writeReqError(w, err)
		return
	}
	f := reads.MessageFilter{Queue: q.Get("queue"), Status: q.Get("status"), Limit: limit, Offset: offset}
	if f.Queue == "" {
		writeError(w, http.StatusBadRequest, "queue is required")
		return
	}
	if err := checkName("queue", f.Queue); err != nil {
		writeReqError(w, err)
		return
	}
	if f.Partition, err = optQueryName(q, "partition"); err != nil {
		writeReqError(w, err)
		return
	}
	if f.Group, err = queryGroup(r); err != nil {
		writeReqError(w, err)
		return
	}
	if f.Status != "" && !messageStatuses[f.Status] {
		writeError(w, http.StatusBadRequest, "status must be one of pending, processing, completed, dead_letter")
		return
	}
	rows, mode, err := s.r.ListMessages(r.Context(), c.tenant, f)
	if err != nil {
		s.readsError(w, r, "list messages", "Queue", err)
		return
	}
	out := messagesResponse{Messages: make([]messageJSON, 0, len(rows)), ConsumerGroup: f.Group,
		Mode: modeOf(mode.HasQueueMode, mode.BusGroups), Pagination: pagination{Limit: limit, Offset: offset}}
	for _, m := range rows {
		out.Messages = append(out.Messages, messageOf(m, f.Group))
	}
	writeJSON(w, http.StatusOK, out)
}

// messageKey reads and checks the {partitionId}/{transactionId} path.
func messageKey(r *http.Request) (pid, txid string, err error) {
	pid, ok := canonicalUUID(r.PathValue("partitionId"))
	if !ok {
		return "", "", badRequest("partitionId must be a UUID")
	}
	txid = r.PathValue("transactionId")
	return pid, txid, checkName("transactionId", txid)
}

type queueConfigShort struct {
	LeaseTime  int `json:"leaseTime"`
	RetryLimit int `json:"retryLimit"`
	RetryDelay int `json:"retryDelay"`
	TTL        int `json:"ttl"`
	Priority   int `json:"priority"`
}

type busStatusJSON struct {
	ConsumedBy  int64 `json:"consumedBy"`
	TotalGroups int64 `json:"totalGroups"`
}

// messageDetailJSON is a message with its status; its payload is written
// after these fields, verbatim (answer.object).
type messageDetailJSON struct {
	messageJSON
	ErrorMessage *string          `json:"errorMessage"`
	RetryCount   *int             `json:"retryCount"`
	QueueConfig  queueConfigShort `json:"queueConfig"`
	BusStatus    busStatusJSON    `json:"busStatus"`
	Mode         modeJSON         `json:"mode"`
}

// GET /api/v1/messages/{partitionId}/{transactionId}?consumerGroup
func (s *Server) handleGetMessage(w http.ResponseWriter, r *http.Request, c caller) {
	pid, txid, err := messageKey(r)
	if err != nil {
		writeReqError(w, err)
		return
	}
	group, err := queryGroup(r)
	if err != nil {
		writeReqError(w, err)
		return
	}
	m, err := s.r.GetMessage(r.Context(), c.tenant, pid, txid, group)
	if err != nil {
		s.readsError(w, r, "get message", "Message", err)
		return
	}
	// One message: its payload was accepted under the request body limit,
	// so no byte bound applies; it is written, not copied.
	a := s.startAnswer(w, int64(len(m.Payload))+answerRowOverhead)
	a.object(messageDetailJSON{
		messageJSON:  messageOf(m, group),
		ErrorMessage: m.ErrorMessage,
		RetryCount:   m.RetryCount,
		QueueConfig:  queueConfigShort{LeaseTime: m.LeaseTime, RetryLimit: m.RetryLimit, RetryDelay: m.RetryDelay, TTL: m.TTL, Priority: m.Priority},
		BusStatus:    busStatusJSON{ConsumedBy: m.BusConsumed, TotalGroups: m.BusGroups},
		Mode:         modeOf(m.HasQueueMode, m.BusGroups),
	}, rawField{key: "payload", val: m.Payload})
	a.str("\n")
	if err := a.finish(); err != nil {
		s.log.Debug("message answer not delivered", "error", err)
	}
}

type deleteMessageResponse struct {
	Success       bool   `json:"success"`
	PartitionID   string `json:"partitionId"`
	TransactionID string `json:"transactionId"`
	Message       string `json:"message"`
	CursorsMoved  int    `json:"cursorsMoved"` // groups that had not passed the message
}

// DELETE /api/v1/messages/{partitionId}/{transactionId} (admin)
func (s *Server) handleDeleteMessage(w http.ResponseWriter, r *http.Request, c caller) {
	pid, txid, err := messageKey(r)
	if err != nil {
		writeReqError(w, err)
		return
	}
	res, err := s.r.DeleteMessage(r.Context(), c.tenant, pid, txid)
	if err != nil {
		s.readsError(w, r, "delete message", "Message", err)
		return
	}
	s.log.Named("reads").Info("message deleted", "tenant", c.tenant, "queue", res.Queue, "partition", res.Partition,
		"transactionId", txid, "cursors", len(res.Cursors))
	writeJSON(w, http.StatusOK, deleteMessageResponse{Success: true, PartitionID: pid, TransactionID: txid,
		Message: "Message deleted successfully", CursorsMoved: len(res.Cursors)})
}
