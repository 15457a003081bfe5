package api

import (
	"math"
	"net/http"

	"queen-node/broker"
)

// configureResponse is the answer of POST /api/v1/configure.
type configureResponse struct {
	Configured  bool                `json:"configured"` // JS checks it
	Queue       string              `json:"queue"`
	QueueID     string              `json:"queueId"`
	PartitionID string              `json:"partitionId"`
	Namespace   string              `json:"namespace"`
	Task        string              `json:"task"`
	Options     broker.QueueOptions `json:"options"`
}

// POST /api/v1/configure
func (s *Server) handleConfigure(w http.ResponseWriter, r *http.Request, c caller) {
	body, err := s.readObject(w, r)
	if err != nil {
		writeReqError(w, err)
		return
	}
	req, err := parseConfigure(body)
	if err != nil {
		writeReqError(w, err)
		return
	}
	res, err := s.b.Configure(r.Context(), c.tenant, req)
	if err != nil {
		s.brokerError(w, r, "configure", err)
		return
	}
	writeJSON(w, http.StatusOK, configureResponse{
		Configured:  true,
		Queue:       req.Queue,
		QueueID:     res.QueueID,
		PartitionID: res.PartitionID,
		Namespace:   res.Namespace,
		Task:        res.Task,
		Options:     res.Options,
	})
}

func parseConfigure(body object) (broker.ConfigureRequest, error) {
	var req broker.ConfigureRequest
	q, ok, err := body.str("queue")
	if err != nil || !ok || q == "" {
		return req, badRequest("queue is required")
	}
	if err := checkName("queue", q); err != nil {
		return req, err
	}
	req.Queue = q

	opts := object{}
	if raw := body.raw("options"); raw != nil {
		if opts, err = parseObject(raw, "options"); err != nil {
			return req, badRequest("options must be an object")
		}
	}
	// Omitted options go back to their defaults (reference upsert semantics).
	req.Options, err = parseQueueOptions(opts)
	if err != nil {
		return req, err
	}

	// Namespace/task: top level if non-null (Go, JS), else inside options (1.x).
	for _, f := range []struct {
		key string
		dst *string
	}{{"namespace", &req.Namespace}, {"task", &req.Task}} {
		v, ok, err := body.str(f.key)
		if err != nil {
			return req, err
		}
		if !ok {
			if v, _, err = opts.str(f.key); err != nil {
				return req, badRequest("options." + f.key + " must be a string")
			}
		}
		if len(v) > broker.MaxNameBytes {
			return req, checkName(f.key, v)
		}
		// Empty is allowed, but what is given must be storable as text
		// (a NUL reached PostgreSQL and answered 500).
		if !validText(v) {
			return req, badRequest(f.key + " must be valid UTF-8 without NUL characters")
		}
		*f.dst = v
	}
	return req, nil
}

// parseQueueOptions starts from the defaults and applies every non-null
// option; a value of the wrong JSON type is a 400.
func parseQueueOptions(o object) (broker.QueueOptions, error) {
	opts := broker.DefaultQueueOptions()
	// Bounded to int32 because they are stored as PostgreSQL integers.
	ints := []struct {
		key string
		dst *int
		min int64
	}{
		{"leaseTime", &opts.LeaseTime, 0},
		{"retryLimit", &opts.RetryLimit, 0},
		{"retryDelay", &opts.RetryDelay, 0},
		{"priority", &opts.Priority, math.MinInt32},
		{"maxSize", &opts.MaxSize, 0},
		{"ttl", &opts.TTL, 0},
		{"delayedProcessing", &opts.DelayedProcessing, 0},
		{"windowBuffer", &opts.WindowBuffer, 0},
		{"retentionSeconds", &opts.RetentionSeconds, 0},
		{"completedRetentionSeconds", &opts.CompletedRetentionSeconds, 0},
		{"maxWaitTimeSeconds", &opts.MaxWaitTimeSeconds, 0},
		{"dedupWindowSeconds", &opts.DedupWindowSeconds, 0},
	}
	for _, f := range ints {
		v, ok, err := o.integer(f.key, f.min, math.MaxInt32)
		if err != nil {
			return opts, badRequest("options." + err.Error())
		}
		if ok {
			*f.dst = v
		}
	}
	bools := []struct {
		key string
		dst *bool
	}{
		{"deadLetterQueue", &opts.DeadLetterQueue},
		{"dlqAfterMaxRetries", &opts.DLQAfterMaxRetries},
		{"retentionEnabled", &opts.RetentionEnabled},
		{"encryptionEnabled", &opts.EncryptionEnabled},
	}
	for _, f := range bools {
		v, ok, err := o.boolean(f.key)
		if err != nil {
			return opts, badRequest("options." + err.Error())
		}
		if ok {
			*f.dst = v
		}
	}
	return opts, nil
}

type deleteQueueResponse struct {
	Deleted bool   `json:"deleted"`
	Queue   string `json:"queue"`
	Existed bool   `json:"existed"`
}

// DELETE /api/v1/resources/queues/{queue}
func (s *Server) handleDeleteQueue(w http.ResponseWriter, r *http.Request, c caller) {
	queue := r.PathValue("queue")
	if err := checkName("queue", queue); err != nil {
		writeReqError(w, err)
		return
	}
	existed, err := s.b.DeleteQueue(r.Context(), c.tenant, queue)
	if err != nil {
		s.brokerError(w, r, "delete queue", err)
		return
	}
	writeJSON(w, http.StatusOK, deleteQueueResponse{Deleted: true, Queue: queue, Existed: existed})
}
