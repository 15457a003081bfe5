package api

import (
	"net/http"
	"time"
)

type deleteGroupResponse struct {
	Success           bool   `json:"success"`
	ConsumerGroup     string `json:"consumerGroup"`
	QueueName         string `json:"queueName,omitempty"` // only on the per-queue route
	DeletedPartitions int    `json:"deletedPartitions"`
	MetadataDeleted   bool   `json:"metadataDeleted"`
}

// DELETE /api/v1/consumer-groups/{group}[/queues/{queue}]
func (s *Server) handleDeleteGroup(w http.ResponseWriter, r *http.Request, c caller) {
	group, queue := r.PathValue("group"), r.PathValue("queue")
	if err := checkName("consumerGroup", group); err != nil {
		writeReqError(w, err)
		return
	}
	perQueue := r.PathValue("queue") != ""
	if perQueue {
		if err := checkName("queue", queue); err != nil {
			writeReqError(w, err)
			return
		}
	}
	deleteMetadata := queryBool(r.URL.Query(), "deleteMetadata", true) // default true, as in the reference
	n, err := s.r.DeleteConsumerGroup(r.Context(), c.tenant, group, queue, deleteMetadata)
	if err != nil {
		s.brokerError(w, r, "delete consumer group", err)
		return
	}
	writeJSON(w, http.StatusOK, deleteGroupResponse{
		Success:           true,
		ConsumerGroup:     group,
		QueueName:         queue,
		DeletedPartitions: n,
		MetadataDeleted:   deleteMetadata,
	})
}

type seekResponse struct {
	Success           bool    `json:"success"`
	ConsumerGroup     string  `json:"consumerGroup"`
	QueueName         string  `json:"queueName"`
	SeekToEnd         bool    `json:"seekToEnd"`
	TargetTimestamp   *string `json:"targetTimestamp"`
	PartitionsUpdated int     `json:"partitionsUpdated"`
}

// POST /api/v1/consumer-groups/{group}/queues/{queue}/seek
func (s *Server) handleSeek(w http.ResponseWriter, r *http.Request, c caller) {
	group, queue := r.PathValue("group"), r.PathValue("queue")
	if err := checkName("consumerGroup", group); err != nil {
		writeReqError(w, err)
		return
	}
	if err := checkName("queue", queue); err != nil {
		writeReqError(w, err)
		return
	}
	body, err := s.readObject(w, r)
	if err != nil {
		writeReqError(w, err)
		return
	}
	toEnd, _, err := body.boolean("toEnd")
	if err != nil {
		writeReqError(w, err)
		return
	}
	tsText, hasTS, err := body.str("timestamp")
	if err != nil {
		writeReqError(w, err)
		return
	}
	const neither = "Must specify either 'toEnd': true or 'timestamp'"
	var ts *time.Time
	switch {
	case toEnd && hasTS:
		writeError(w, http.StatusBadRequest, "Specify only one of 'toEnd': true or 'timestamp'")
		return
	case toEnd:
	case hasTS:
		t, ok := parseTime(tsText)
		if !ok {
			writeError(w, http.StatusBadRequest, "timestamp must be an ISO-8601 timestamp")
			return
		}
		ts = &t
	default:
		writeError(w, http.StatusBadRequest, neither)
		return
	}
	n, err := s.r.Seek(r.Context(), c.tenant, group, queue, toEnd, ts)
	if err != nil {
		s.brokerError(w, r, "seek", err)
		return
	}
	resp := seekResponse{Success: true, ConsumerGroup: group, QueueName: queue, SeekToEnd: toEnd, PartitionsUpdated: n}
	if ts != nil {
		v := fmtMilli(*ts)
		resp.TargetTimestamp = &v
	}
	writeJSON(w, http.StatusOK, resp)
}
