package api

import (
	"math"
	"net/http"
	"time"

	"queen-node/reads"
)

// A group whose oldest unresolved message is older than this is "Lagging"
// in the group list (the reference's threshold).
const laggingStateSeconds = 300

// maxLagSeconds bounds minLagSeconds (ten years).
const maxLagSeconds = 10 * 365 * 24 * 3600

type groupJSON struct {
	Name                  string   `json:"name"`
	Topics                []string `json:"topics"`
	QueueName             string   `json:"queueName"`
	Members               int64    `json:"members"` // partitions where the group has a cursor
	TotalLag              int64    `json:"totalLag"`
	MaxTimeLag            int64    `json:"maxTimeLag"`
	State                 string   `json:"state"`
	SubscriptionMode      string   `json:"subscriptionMode"`
	SubscriptionTimestamp *string  `json:"subscriptionTimestamp"`
	SubscriptionCreatedAt string   `json:"subscriptionCreatedAt"`
	LeasedPartitions      int64    `json:"leasedPartitions"`
	LastActivity          *string  `json:"lastActivity"`
}

func groupOf(g reads.GroupRow) groupJSON {
	out := groupJSON{Name: g.Group, Topics: []string{g.Queue}, QueueName: g.Queue, Members: g.Partitions,
		TotalLag: g.Lag, MaxTimeLag: int64(math.Floor(g.MaxLagSeconds)), SubscriptionMode: "all",
		SubscriptionCreatedAt: fmtMilli(g.SubscribedAt), LeasedPartitions: g.LeasedPartitions}
	if g.SubscriptionFrom != nil {
		out.SubscriptionMode = "timestamp"
		out.SubscriptionTimestamp = fmtMilliOrNull(*g.SubscriptionFrom)
	}
	if g.LastActivity != nil {
		out.LastActivity = fmtMilliOrNull(*g.LastActivity)
	}
	switch {
	case out.MaxTimeLag > laggingStateSeconds:
		out.State = "Lagging"
	case g.Partitions > 0:
		out.State = "Stable"
	default:
		out.State = "Dead" // subscribed, but no cursor left (e.g. deleted without its metadata)
	}
	return out
}

// GET /api/v1/consumer-groups?limit&offset
func (s *Server) handleListGroups(w http.ResponseWriter, r *http.Request, c caller) {
	limit, offset, err := page(r.URL.Query(), maxPageLimit, math.MaxInt)
	if err != nil {
		writeReqError(w, err)
		return
	}
	rows, err := s.r.ListGroups(r.Context(), c.tenant, reads.GroupFilter{Limit: limit, Offset: offset})
	if err != nil {
		s.brokerError(w, r, "list consumer groups", err)
		return
	}
	out := make([]groupJSON, 0, len(rows))
	for _, g := range rows {
		out = append(out, groupOf(g))
	}
	writeJSON(w, http.StatusOK, out)
}

type cursorJSON struct {
	Partition       string  `json:"partition"`
	PartitionID     string  `json:"partitionId"`
	WorkerID        *string `json:"workerId"`
	LastConsumedAt  string  `json:"lastConsumedAt"`
	TotalConsumed   int64   `json:"totalConsumed"` // the cursor's offset
	CommittedOffset int64   `json:"committedOffset"`
	LastOffset      int64   `json:"lastOffset"`
	OffsetLag       int64   `json:"offsetLag"`
	TimeLagSeconds  int64   `json:"timeLagSeconds"`
	LeaseActive     bool    `json:"leaseActive"`
	LeaseExpiresAt  *string `json:"leaseExpiresAt"`
}

type groupQueueJSON struct {
	Partitions []cursorJSON `json:"partitions"`
	// With ?queue= only (docs/api.md, "Resources, messages and consumer
	// groups"): counts over all the group's cursors on the queue.
	PartitionCount      *int  `json:"partitionCount,omitempty"`
	PendingPartitions   *int  `json:"pendingPartitions,omitempty"`
	LeasedPartitions    *int  `json:"leasedPartitions,omitempty"`
	PartitionsTruncated *bool `json:"partitionsTruncated,omitempty"`
}

func lagSeconds(oldest *time.Time, now time.Time) int64 {
	if oldest == nil {
		return 0
	}
	return max(0, int64(now.Sub(*oldest)/time.Second))
}

// GET /api/v1/consumer-groups/{group}: an object keyed by queue name, as
// the reference answers; {} for a group the tenant does not have.
func (s *Server) handleGetGroup(w http.ResponseWriter, r *http.Request, c caller) {
	group := r.PathValue("group")
	if err := checkName("consumerGroup", group); err != nil {
		writeReqError(w, err)
		return
	}
	// ?queue=Q: one queue's cursors, the most lagging first, at most
	// ?limit (default 100, at most 1000), with counts over all of them; the
	// dashboard's queue page asks this every round, so a group with cursors
	// on many partitions does not send them all.
	var rows []reads.CursorRow
	var counts *reads.QueueCursors
	if q := r.URL.Query(); q.Has("queue") {
		queue := q.Get("queue")
		if err := checkName("queue", queue); err != nil {
			writeReqError(w, err)
			return
		}
		limit, err := queryIntIn(q, "limit", defaultPageLimit, 1, maxPageLimit)
		if err != nil {
			writeReqError(w, err)
			return
		}
		qc, err := s.r.GroupQueueCursors(r.Context(), c.tenant, group, queue, limit)
		if err != nil {
			s.brokerError(w, r, "describe consumer group", err)
			return
		}
		rows, counts = qc.Cursors, &qc
	} else {
		var err error
		if rows, err = s.r.GroupCursors(r.Context(), c.tenant, group); err != nil {
			s.brokerError(w, r, "describe consumer group", err)
			return
		}
	}
	now := time.Now()
	out := map[string]*groupQueueJSON{}
	for _, cur := range rows {
		q := out[cur.Queue]
		if q == nil {
			q = &groupQueueJSON{}
			out[cur.Queue] = q
		}
		if counts != nil {
			truncated := counts.Total > len(counts.Cursors)
			q.PartitionCount, q.PendingPartitions, q.LeasedPartitions = &counts.Total, &counts.PendingPartitions, &counts.LeasedPartitions
			q.PartitionsTruncated = &truncated
		}
		live := cur.LeaseExpiresAt != nil && cur.LeaseExpiresAt.After(now)
		cj := cursorJSON{Partition: cur.Partition, PartitionID: cur.PartitionID, WorkerID: cur.LeaseOwner,
			LastConsumedAt: fmtMilli(cur.UpdatedAt), TotalConsumed: cur.Committed, CommittedOffset: cur.Committed,
			LastOffset: cur.LastOffset, OffsetLag: cur.Lag, TimeLagSeconds: lagSeconds(cur.OldestUnresolvedAt, now),
			LeaseActive: live}
		if live {
			cj.LeaseExpiresAt = fmtMilliOrNull(*cur.LeaseExpiresAt)
		} else {
			cj.WorkerID = nil
		}
		q.Partitions = append(q.Partitions, cj)
	}
	writeJSON(w, http.StatusOK, out)
}

type laggingJSON struct {
	ConsumerGroup      string  `json:"consumer_group"`
	QueueName          string  `json:"queue_name"`
	PartitionName      string  `json:"partition_name"`
	PartitionID        string  `json:"partition_id"`
	WorkerID           *string `json:"worker_id"`
	OffsetLag          int64   `json:"offset_lag"`
	TimeLagSeconds     int64   `json:"time_lag_seconds"`
	LagHours           float64 `json:"lag_hours"`
	OldestUnconsumedAt *string `json:"oldest_unconsumed_at"`
	LastConsumedAt     string  `json:"last_consumed_at"`
}

// GET /api/v1/consumer-groups/lagging?minLagSeconds=3600&limit
func (s *Server) handleLagging(w http.ResponseWriter, r *http.Request, c caller) {
	q := r.URL.Query()
	minLag, err := queryIntIn(q, "minLagSeconds", 3600, 0, maxLagSeconds)
	if err != nil {
		writeReqError(w, err)
		return
	}
	limit, err := queryIntIn(q, "limit", maxPageLimit, 1, maxPageLimit)
	if err != nil {
		writeReqError(w, err)
		return
	}
	rows, err := s.r.Lagging(r.Context(), c.tenant, time.Duration(minLag)*time.Second, limit)
	if err != nil {
		s.brokerError(w, r, "lagging consumer groups", err)
		return
	}
	now := time.Now()
	out := make([]laggingJSON, 0, len(rows))
	for _, cur := range rows {
		lag := lagSeconds(cur.OldestUnresolvedAt, now)
		l := laggingJSON{ConsumerGroup: cur.Group, QueueName: cur.Queue, PartitionName: cur.Partition,
			PartitionID: cur.PartitionID, OffsetLag: cur.Lag, TimeLagSeconds: lag,
			LagHours: math.Round(float64(lag)/36) / 100, LastConsumedAt: fmtMilli(cur.UpdatedAt)}
		if cur.LeaseExpiresAt != nil && cur.LeaseExpiresAt.After(now) {
			l.WorkerID = cur.LeaseOwner
		}
		if cur.OldestUnresolvedAt != nil {
			l.OldestUnconsumedAt = fmtMilliOrNull(*cur.OldestUnresolvedAt)
		}
		out = append(out, l)
	}
	writeJSON(w, http.StatusOK, out)
}

type subscriptionResponse struct {
	Success       bool   `json:"success"`
	ConsumerGroup string `json:"consumerGroup"`
	NewTimestamp  string `json:"newTimestamp"`
	RowsUpdated   int    `json:"rowsUpdated"`
}

// POST /api/v1/consumer-groups/{group}/subscription {subscriptionTimestamp}
func (s *Server) handleSubscription(w http.ResponseWriter, r *http.Request, c caller) {
	group := r.PathValue("group")
	if err := checkName("consumerGroup", group); err != nil {
		writeReqError(w, err)
		return
	}
	body, err := s.readObject(w, r)
	if err != nil {
		writeReqError(w, err)
		return
	}
	text, ok, err := body.str("subscriptionTimestamp")
	if err != nil {
		writeReqError(w, err)
		return
	}
	if !ok || text == "" {
		writeError(w, http.StatusBadRequest, "Missing subscriptionTimestamp in request body")
		return
	}
	ts, ok := parseTime(text)
	if !ok {
		writeError(w, http.StatusBadRequest, "subscriptionTimestamp must be an ISO-8601 timestamp")
		return
	}
	n, err := s.r.UpdateSubscription(r.Context(), c.tenant, group, ts)
	if err != nil {
		s.brokerError(w, r, "update subscription", err)
		return
	}
	writeJSON(w, http.StatusOK, subscriptionResponse{Success: true, ConsumerGroup: group, NewTimestamp: fmtMilli(ts), RowsUpdated: n})
}

type seekPartitionResponse struct {
	Success           bool   `json:"success"`
	ConsumerGroup     string `json:"consumerGroup"`
	QueueName         string `json:"queueName"`
	Partition         string `json:"partition"`
	SeekToEnd         bool   `json:"seekToEnd"`
	PartitionsUpdated int    `json:"partitionsUpdated"`
}

// POST /api/v1/consumer-groups/{group}/queues/{queue}/partitions/{partition}/seek:
// always to the end; any body is ignored (unread, so no size limit applies
// beyond the server's).
func (s *Server) handleSeekPartition(w http.ResponseWriter, r *http.Request, c caller) {
	group, queue, partition := r.PathValue("group"), r.PathValue("queue"), r.PathValue("partition")
	for _, f := range []struct{ kind, v string }{{"consumerGroup", group}, {"queue", queue}, {"partition", partition}} {
		if err := checkName(f.kind, f.v); err != nil {
			writeReqError(w, err)
			return
		}
	}
	if err := s.r.SeekPartitionToEnd(r.Context(), c.tenant, group, queue, partition); err != nil {
		s.readsError(w, r, "seek partition", "Partition", err)
		return
	}
	writeJSON(w, http.StatusOK, seekPartitionResponse{Success: true, ConsumerGroup: group, QueueName: queue,
		Partition: partition, SeekToEnd: true, PartitionsUpdated: 1})
}
