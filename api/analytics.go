package api

// Status and analytics reads (docs/api.md, "Status and analytics"). Queue
// figures come from partition watermarks and consumer cursors; time series
// from the stats sampler's rows (package stats). Every read is scoped to
// the caller's tenant except system-metrics, worker-metrics and
// postgres-stats, which describe the nodes and the database every tenant
// shares; they name no queue or tenant, so read-only suffices (docs/api.md,
// "Status and analytics").

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"queen-node/broker"
	"queen-node/reads"
)

// AnalyticsReads is the status and analytics reads; *reads.Service
// implements it.
type AnalyticsReads interface {
	TenantQueues(ctx context.Context, tenant string, f reads.StatusFilter, limit, offset int) ([]reads.QueueInfo, error)
	TenantPartitions(ctx context.Context, tenant string, f reads.StatusFilter, limit int) ([]reads.PartitionFigures, error)
	DeadLetterCounts(ctx context.Context, tenant string, f reads.StatusFilter) (map[string]int64, error)
	QueueMessages(ctx context.Context, tenant, queue, group string, limit, offset int) ([]reads.QueueMessage, bool, error)
	QueueOps(ctx context.Context, tenant string, f reads.StatusFilter, r reads.SampleRange, perQueue bool, limit int) ([]reads.QueueOpsRow, error)
	ParkedByQueue(ctx context.Context, tenant, queue string, r reads.SampleRange, limit int) ([]reads.ParkedRow, error)
	NodeSeries(ctx context.Context, metrics []reads.NodeMetric, stats bool, r reads.SampleRange) ([]reads.NodeSeriesRow, error)
	PostgresStats(ctx context.Context) ([]byte, error)
}

// Bounds of the status and analytics reads (docs/api.md, "Status and analytics").
const (
	defaultRange          = time.Hour
	maxRange              = 31 * 24 * time.Hour
	maxBuckets            = 1500  // buckets of one series; a finer interval over a longer range is a 400
	maxStatusPartitions   = 10000 // partitions a status read aggregates; past it the answer says "truncated"
	maxSeriesRows         = 10000 // (bucket, queue) rows of one analytics answer; past it "truncated"
	defaultStatusQueues   = 100
	maxStatusQueues       = 1000
	maxStatusQueuesOffset = 100000
	defaultQueueMessages  = 50
	maxQueueMessages      = 1000
	maxQueueMsgOffset     = 10000 // every partition reads limit+offset rows backwards from its watermark
)

func (s *Server) registerAnalytics() {
	s.route("GET", "/api/v1/status", AccessReadOnly, s.handleStatusOverview)
	s.route("GET", "/api/v1/status/queues", AccessReadOnly, s.handleStatusQueues)
	s.route("GET", "/api/v1/status/queues/{queue}", AccessReadOnly, s.handleStatusQueue)
	s.route("GET", "/api/v1/status/queues/{queue}/messages", AccessReadOnly, s.handleStatusQueueMessages)
	s.route("GET", "/api/v1/status/analytics", AccessReadOnly, s.handleStatusAnalytics)
	s.route("GET", "/api/v1/analytics/queue-ops", AccessReadOnly, s.handleQueueOps)
	s.route("GET", "/api/v1/analytics/queue-lag", AccessReadOnly, s.handleQueueLag)
	s.route("GET", "/api/v1/analytics/queue-parked-replicas", AccessReadOnly, s.handleQueueParked)
	s.route("GET", "/api/v1/analytics/retention", AccessReadOnly, s.handleRetentionAnalytics)
	s.route("GET", "/api/v1/analytics/system-metrics", AccessReadOnly, s.handleSystemMetrics)
	s.route("GET", "/api/v1/analytics/worker-metrics", AccessReadOnly, s.handleWorkerMetrics)
	s.route("GET", "/api/v1/analytics/postgres-stats", AccessReadOnly, s.handlePostgresStats)
}

type timeRange struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// window is a request's from/to and bucket length.
type window struct {
	from, to time.Time
	bucket   time.Duration
	interval string // minute, hour or day when asked; "" = chosen by span
}

func (w window) sampleRange() reads.SampleRange {
	return reads.SampleRange{From: w.from, To: w.to, Bucket: w.bucket}
}

func (w window) timeRange() timeRange { return timeRange{From: fmtMilli(w.from), To: fmtMilli(w.to)} }

func (w window) bucketMinutes() int { return int(w.bucket / time.Minute) }

// autoBucket is the reference dashboard's bucket for a span: about fifty
// points at most for the common ranges.
func autoBucket(span time.Duration) time.Duration {
	switch {
	case span <= time.Hour:
		return time.Minute
	case span <= 6*time.Hour:
		return 5 * time.Minute
	case span <= 24*time.Hour:
		return 15 * time.Minute
	case span <= 7*24*time.Hour:
		return time.Hour
	default:
		return 6 * time.Hour
	}
}

// parseWindow reads from and to (default: the last hour) and interval
// (minute, hour or day; default defInterval, or chosen by the span when "").
func parseWindow(r *http.Request, defInterval string) (window, error) {
	q := r.URL.Query()
	var w window
	w.to = time.Now().UTC()
	if v := q.Get("to"); v != "" {
		t, ok := parseTime(v)
		if !ok {
			return w, badRequest("to must be an ISO-8601 timestamp")
		}
		w.to = t.UTC()
	}
	w.from = w.to.Add(-defaultRange)
	if v := q.Get("from"); v != "" {
		t, ok := parseTime(v)
		if !ok {
			return w, badRequest("from must be an ISO-8601 timestamp")
		}
		w.from = t.UTC()
	}
	span := w.to.Sub(w.from)
	if span <= 0 {
		return w, badRequest("from must be before to")
	}
	if span > maxRange {
		return w, badRequest(fmt.Sprintf("from..to spans at most %d days", int(maxRange/(24*time.Hour))))
	}
	if w.interval = q.Get("interval"); w.interval == "" {
		w.interval = defInterval
	}
	switch w.interval {
	case "":
		w.bucket = autoBucket(span)
	case "10s": // the node samples' own resolution (the dashboard's charts)
		w.bucket = 10 * time.Second
	case "minute":
		w.bucket = time.Minute
	case "hour":
		w.bucket = time.Hour
	case "day":
		w.bucket = 24 * time.Hour
	default:
		return w, badRequest("interval must be 10s, minute, hour or day")
	}
	if span/w.bucket > maxBuckets {
		return w, badRequest(fmt.Sprintf("interval %s over this range gives more than %d buckets", w.interval, maxBuckets))
	}
	return w, nil
}

// queueFilter reads queue, namespace and task filters.
func queueFilter(r *http.Request, withQueue bool) (reads.StatusFilter, error) {
	q := r.URL.Query()
	f := reads.StatusFilter{Namespace: q.Get("namespace"), Task: q.Get("task")}
	if withQueue {
		f.Queue = q.Get("queue")
	}
	for _, v := range []struct{ k, v string }{{"queue", f.Queue}, {"namespace", f.Namespace}, {"task", f.Task}} {
		if v.v != "" {
			if err := checkName(v.k, v.v); err != nil {
				return f, err
			}
		}
	}
	return f, nil
}

// messageCounts are a queue's or partition's message figures (docs/api.md,
// "Status and analytics", for what each counts).
type messageCounts struct {
	Total      int64 `json:"total"`
	Pending    int64 `json:"pending"`
	Processing int64 `json:"processing"`
	Completed  int64 `json:"completed"`
	Failed     int64 `json:"failed"`
	DeadLetter int64 `json:"deadLetter"`
}

func (m *messageCounts) add(p reads.PartitionFigures, dead int64) {
	m.Total += p.LastOffset
	m.Pending += p.Pending
	m.Processing += p.Processing
	m.Completed += p.MinCommitted
	m.DeadLetter += dead
}

// queueFigures aggregates a queue's partitions.
type queueFigures struct {
	id, name, namespace, task string
	partitions                int
	messages                  messageCounts
	consumed, leases          int64
	leasedPartitions          int64
	deadPartitions            int64
}

// figures reads the partitions of the tenant's queues matching f and
// aggregates them per queue id; truncated is true when more partitions
// matched than a status read aggregates.
func (s *Server) figures(ctx context.Context, tenant string, f reads.StatusFilter) (parts []reads.PartitionFigures, byQueue map[string]*queueFigures, dead map[string]int64, truncated bool, err error) {
	parts, err = s.r.TenantPartitions(ctx, tenant, f, maxStatusPartitions+1)
	if err != nil {
		return nil, nil, nil, false, err
	}
	if len(parts) > maxStatusPartitions {
		parts, truncated = parts[:maxStatusPartitions], true
	}
	dead, err = s.r.DeadLetterCounts(ctx, tenant, f)
	if err != nil {
		return nil, nil, nil, false, err
	}
	byQueue = map[string]*queueFigures{}
	for _, p := range parts {
		qf := byQueue[p.QueueID]
		if qf == nil {
			qf = &queueFigures{id: p.QueueID, name: p.Queue, namespace: p.Namespace, task: p.Task}
			byQueue[p.QueueID] = qf
		}
		qf.partitions++
		qf.messages.add(p, dead[p.PartitionID])
		qf.consumed += p.SumCommitted
		qf.leases += p.Leases
		if p.Leases > 0 {
			qf.leasedPartitions++
		}
		if dead[p.PartitionID] > 0 {
			qf.deadPartitions++
		}
	}
	return parts, byQueue, dead, truncated, nil
}

type throughputPoint struct {
	Timestamp          string  `json:"timestamp"`
	Ingested           int64   `json:"ingested"`
	Processed          int64   `json:"processed"`
	IngestedPerSecond  float64 `json:"ingestedPerSecond"`
	ProcessedPerSecond float64 `json:"processedPerSecond"`
}

type overviewQueue struct {
	ID            string `json:"id"`
	Name          string `json:"name"`
	Namespace     string `json:"namespace"`
	Task          string `json:"task"`
	Partitions    int    `json:"partitions"`
	TotalConsumed int64  `json:"totalConsumed"`
}

func perSecond(n int64, d time.Duration) float64 {
	return float64(int64(float64(n)/d.Seconds()*100+0.5)) / 100 // two decimals, as the reference rounds
}

// GET /api/v1/status
func (s *Server) handleStatusOverview(w http.ResponseWriter, r *http.Request, c caller) {
	win, err := parseWindow(r, "")
	if err != nil {
		writeReqError(w, err)
		return
	}
	f, err := queueFilter(r, true)
	if err != nil {
		writeReqError(w, err)
		return
	}
	ctx := r.Context()
	_, byQueue, _, truncated, err := s.figures(ctx, c.tenant, f)
	if err != nil {
		s.brokerError(w, r, "status", err)
		return
	}
	ops, err := s.r.QueueOps(ctx, c.tenant, f, win.sampleRange(), false, maxBuckets)
	if err != nil {
		s.brokerError(w, r, "status throughput", err)
		return
	}
	throughput := make([]throughputPoint, len(ops))
	for i, o := range ops {
		throughput[i] = throughputPoint{Timestamp: fmtMilli(o.Bucket), Ingested: o.Pushed, Processed: o.Consumed,
			IngestedPerSecond: perSecond(o.Pushed, win.bucket), ProcessedPerSecond: perSecond(o.Consumed, win.bucket)}
	}
	queues := []overviewQueue{}
	var totals messageCounts
	var leases, leasedParts, deadParts int64
	for _, q := range byQueue {
		queues = append(queues, overviewQueue{ID: q.id, Name: q.name, Namespace: q.namespace, Task: q.task,
			Partitions: q.partitions, TotalConsumed: q.consumed})
		m := q.messages
		totals.Total += m.Total
		totals.Pending += m.Pending
		totals.Processing += m.Processing
		totals.Completed += m.Completed
		totals.DeadLetter += m.DeadLetter
		leases += q.leases
		leasedParts += q.leasedPartitions
		deadParts += q.deadPartitions
	}
	sort.Slice(queues, func(i, j int) bool { return queues[i].Name < queues[j].Name })
	writeJSON(w, http.StatusOK, map[string]any{
		"timeRange":     win.timeRange(),
		"bucketMinutes": win.bucketMinutes(),
		"pointCount":    len(throughput),
		"throughput":    throughput,
		"queues":        queues,
		"messages":      totals,
		"leases":        map[string]int64{"active": leases, "partitionsWithLeases": leasedParts},
		"deadLetterQueue": map[string]any{"totalMessages": totals.DeadLetter, "affectedPartitions": deadParts,
			"topErrors": []any{}},
		"truncated": truncated,
	})
}

type statusQueue struct {
	ID         string           `json:"id"`
	Name       string           `json:"name"`
	Namespace  string           `json:"namespace"`
	Task       string           `json:"task"`
	CreatedAt  string           `json:"createdAt"`
	Partitions int              `json:"partitions"`
	Messages   map[string]int64 `json:"messages"`
}

// GET /api/v1/status/queues
func (s *Server) handleStatusQueues(w http.ResponseWriter, r *http.Request, c caller) {
	f, err := queueFilter(r, false)
	if err != nil {
		writeReqError(w, err)
		return
	}
	limit, offset, err := pageParams(r, defaultStatusQueues, maxStatusQueues, maxStatusQueuesOffset)
	if err != nil {
		writeReqError(w, err)
		return
	}
	ctx := r.Context()
	page, err := s.r.TenantQueues(ctx, c.tenant, f, limit, offset)
	if err != nil {
		s.brokerError(w, r, "status queues", err)
		return
	}
	_, byQueue, _, truncated, err := s.figures(ctx, c.tenant, f)
	if err != nil {
		s.brokerError(w, r, "status queues", err)
		return
	}
	out := make([]statusQueue, len(page))
	for i, q := range page {
		sq := statusQueue{ID: q.ID, Name: q.Name, Namespace: q.Config.Namespace, Task: q.Config.Task,
			CreatedAt: fmtMilli(q.CreatedAt), Messages: map[string]int64{"total": 0, "pending": 0, "processing": 0}}
		if qf := byQueue[q.ID]; qf != nil {
			sq.Partitions = qf.partitions
			sq.Messages = map[string]int64{"total": qf.messages.Total, "pending": qf.messages.Pending,
				"processing": qf.messages.Processing}
		}
		out[i] = sq
	}
	writeJSON(w, http.StatusOK, map[string]any{"queues": out, "pagination": pagination{Limit: limit, Offset: offset},
		"truncated": truncated})
}

type partitionDetail struct {
	ID            string         `json:"id"`
	Name          string         `json:"name"`
	CreatedAt     string         `json:"createdAt"`
	Messages      messageCounts  `json:"messages"`
	Cursor        map[string]any `json:"cursor"`
	LastActivity  *string        `json:"lastActivity"`
	NewestMessage *string        `json:"newestMessage"`
}

func timeOrNull(t *time.Time) *string {
	if t == nil {
		return nil
	}
	return fmtMilliOrNull(*t)
}

// GET /api/v1/status/queues/{queue}
func (s *Server) handleStatusQueue(w http.ResponseWriter, r *http.Request, c caller) {
	name := r.PathValue("queue")
	if err := checkName("queue", name); err != nil {
		writeReqError(w, err)
		return
	}
	ctx := r.Context()
	f := reads.StatusFilter{Queue: name}
	qs, err := s.r.TenantQueues(ctx, c.tenant, f, 1, 0)
	if err != nil {
		s.brokerError(w, r, "queue detail", err)
		return
	}
	if len(qs) == 0 {
		writeError(w, http.StatusNotFound, "Queue not found")
		return
	}
	q := qs[0]
	parts, byQueue, dead, truncated, err := s.figures(ctx, c.tenant, f)
	if err != nil {
		s.brokerError(w, r, "queue detail", err)
		return
	}
	var totals messageCounts
	if qf := byQueue[q.ID]; qf != nil {
		totals = qf.messages
	}
	doc := map[string]any{
		"queue": map[string]any{
			"id": q.ID, "name": q.Name, "namespace": q.Config.Namespace, "task": q.Config.Task,
			"priority": q.Config.Priority, "createdAt": fmtMilli(q.CreatedAt),
			"config": map[string]any{"leaseTime": q.Config.LeaseTime, "retryLimit": q.Config.RetryLimit,
				"retryDelay": q.Config.RetryDelay, "ttl": q.Config.TTL, "maxQueueSize": q.Config.MaxSize,
				"deadLetterQueue": q.Config.DeadLetterQueue, "dlqAfterMaxRetries": q.Config.DLQAfterMaxRetries,
				"delayedProcessing": q.Config.DelayedProcessing, "windowBuffer": q.Config.WindowBuffer,
				"retentionEnabled": q.Config.RetentionEnabled, "retentionSeconds": q.Config.RetentionSeconds,
				"completedRetentionSeconds": q.Config.CompletedRetentionSeconds},
		},
		// Both spellings, as the reference sends them.
		"totals": map[string]any{"messages": totals, "total": totals.Total, "pending": totals.Pending,
			"processing": totals.Processing, "completed": totals.Completed, "failed": totals.Failed,
			"deadLetter": totals.DeadLetter},
		"partitionCount": len(parts),
		"truncated":      truncated,
	}
	if queryBool(r.URL.Query(), "includePartitions", false) {
		out := make([]partitionDetail, len(parts))
		for i, p := range parts {
			var m messageCounts
			m.add(p, dead[p.PartitionID])
			out[i] = partitionDetail{ID: p.PartitionID, Name: p.Partition, CreatedAt: fmtMilli(p.CreatedAt), Messages: m,
				Cursor:       map[string]any{"totalConsumed": p.SumCommitted, "activeLeases": p.Leases},
				LastActivity: timeOrNull(p.LastActivity), NewestMessage: timeOrNull(p.LastWriteAt)}
		}
		doc["partitions"] = out
	}
	writeJSON(w, http.StatusOK, doc)
}

type queueMessageJSON struct {
	ID            string `json:"id"`
	TransactionID string `json:"transactionId"`
	PartitionID   string `json:"partitionId"`
	QueuePath     string `json:"queuePath"`
	Queue         string `json:"queue"`
	Partition     string `json:"partition"`
	Status        string `json:"status"`
	CreatedAt     string `json:"createdAt"`
}

// GET /api/v1/status/queues/{queue}/messages
func (s *Server) handleStatusQueueMessages(w http.ResponseWriter, r *http.Request, c caller) {
	name := r.PathValue("queue")
	if err := checkName("queue", name); err != nil {
		writeReqError(w, err)
		return
	}
	group := r.URL.Query().Get("consumerGroup")
	if group == "" {
		group = broker.QueueMode
	} else if err := checkName("consumerGroup", group); err != nil {
		writeReqError(w, err)
		return
	}
	limit, offset, err := pageParams(r, defaultQueueMessages, maxQueueMessages, maxQueueMsgOffset)
	if err != nil {
		writeReqError(w, err)
		return
	}
	msgs, found, err := s.r.QueueMessages(r.Context(), c.tenant, name, group, limit, offset)
	if err != nil {
		s.brokerError(w, r, "queue messages", err)
		return
	}
	if !found {
		writeError(w, http.StatusNotFound, "Queue not found")
		return
	}
	out := make([]queueMessageJSON, len(msgs))
	for i, m := range msgs {
		out[i] = queueMessageJSON{ID: m.ID, TransactionID: m.TransactionID, PartitionID: m.PartitionID,
			QueuePath: name + "/" + m.Partition, Queue: name, Partition: m.Partition, Status: m.Status,
			CreatedAt: fmtMilli(m.CreatedAt)}
	}
	writeJSON(w, http.StatusOK, out)
}

// buckets lists the bucket starts of win, oldest first (at most maxBuckets+1).
func (win window) buckets() []time.Time {
	sec := int64(win.bucket / time.Second)
	start := time.Unix(win.from.Unix()/sec*sec, 0).UTC()
	var out []time.Time
	for t := start; !t.After(win.to) && len(out) <= maxBuckets; t = t.Add(win.bucket) {
		out = append(out, t)
	}
	return out
}

// GET /api/v1/status/analytics
func (s *Server) handleStatusAnalytics(w http.ResponseWriter, r *http.Request, c caller) {
	win, err := parseWindow(r, "hour") // the reference's default here
	if err != nil {
		writeReqError(w, err)
		return
	}
	f, err := queueFilter(r, true)
	if err != nil {
		writeReqError(w, err)
		return
	}
	ops, err := s.r.QueueOps(r.Context(), c.tenant, f, win.sampleRange(), false, maxBuckets+1)
	if err != nil {
		s.brokerError(w, r, "analytics", err)
		return
	}
	byBucket := map[int64]reads.QueueOpsRow{}
	for _, o := range ops {
		byBucket[o.Bucket.Unix()] = o
	}
	points := []map[string]any{}
	for _, b := range win.buckets() {
		o := byBucket[b.Unix()]
		points = append(points, map[string]any{"timestamp": fmtMilli(b), "messages": o.Pushed, "processed": o.Consumed})
	}
	writeJSON(w, http.StatusOK, map[string]any{"dataPoints": points, "interval": win.interval,
		"from": fmtMilli(win.from), "to": fmtMilli(win.to)})
}

// seriesRequest parses a per-queue analytics request: window and queue filters.
func seriesRequest(w http.ResponseWriter, r *http.Request) (window, reads.StatusFilter, bool) {
	win, err := parseWindow(r, "")
	if err == nil {
		var f reads.StatusFilter
		if f, err = queueFilter(r, true); err == nil {
			return win, f, true
		}
	}
	writeReqError(w, err)
	return win, reads.StatusFilter{}, false
}

// queueSeries groups rows per queue name, oldest bucket first, queues by name.
func queueSeries[T any](rows []reads.QueueOpsRow, point func(reads.QueueOpsRow) T) []map[string]any {
	byQueue := map[string][]reads.QueueOpsRow{}
	var names []string
	for _, o := range rows {
		if byQueue[o.Queue] == nil {
			names = append(names, o.Queue)
		}
		byQueue[o.Queue] = append(byQueue[o.Queue], o)
	}
	sort.Strings(names)
	out := []map[string]any{}
	for _, n := range names {
		rs := byQueue[n]
		sort.Slice(rs, func(i, j int) bool { return rs[i].Bucket.Before(rs[j].Bucket) })
		pts := make([]T, len(rs))
		for i, o := range rs {
			pts[i] = point(o)
		}
		out = append(out, map[string]any{"queue": n, "timeSeries": pts})
	}
	return out
}

// queueOpsPage reads the per-queue sample buckets of a series request, at
// most maxSeriesRows of them (truncated says when there were more); false
// means the error has been answered.
func (s *Server) queueOpsPage(w http.ResponseWriter, r *http.Request, c caller, what string) (win window, rows []reads.QueueOpsRow, truncated, ok bool) {
	win, f, ok := seriesRequest(w, r)
	if !ok {
		return win, nil, false, false
	}
	rows, err := s.r.QueueOps(r.Context(), c.tenant, f, win.sampleRange(), true, maxSeriesRows+1)
	if err != nil {
		s.brokerError(w, r, what, err)
		return win, nil, false, false
	}
	if truncated = len(rows) > maxSeriesRows; truncated {
		rows = rows[:maxSeriesRows]
	}
	return win, rows, truncated, true
}

// GET /api/v1/analytics/queue-ops
func (s *Server) handleQueueOps(w http.ResponseWriter, r *http.Request, c caller) {
	win, rows, truncated, ok := s.queueOpsPage(w, r, c, "queue ops")
	if !ok {
		return
	}
	series := queueSeries(rows, func(o reads.QueueOpsRow) map[string]any {
		return map[string]any{"timestamp": fmtMilli(o.Bucket), "pushed": o.Pushed, "consumed": o.Consumed,
			"pushedPerSecond": perSecond(o.Pushed, win.bucket), "consumedPerSecond": perSecond(o.Consumed, win.bucket)}
	})
	writeJSON(w, http.StatusOK, map[string]any{"timeRange": win.timeRange(), "bucketMinutes": win.bucketMinutes(),
		"queues": series, "truncated": truncated})
}

type lagPoint struct {
	Queue      string  `json:"queue"`
	Timestamp  string  `json:"timestamp"`
	Pending    int64   `json:"pending"`
	Processing int64   `json:"processing"`
	LagSeconds float64 `json:"lagSeconds"`
}

// GET /api/v1/analytics/queue-lag: a bare array, as the reference answers.
func (s *Server) handleQueueLag(w http.ResponseWriter, r *http.Request, c caller) {
	win, f, ok := seriesRequest(w, r)
	if !ok {
		return
	}
	rows, err := s.r.QueueOps(r.Context(), c.tenant, f, win.sampleRange(), true, maxSeriesRows)
	if err != nil {
		s.brokerError(w, r, "queue lag", err)
		return
	}
	out := make([]lagPoint, len(rows))
	for i, o := range rows {
		out[i] = lagPoint{Queue: o.Queue, Timestamp: fmtMilli(o.Bucket), Pending: o.MaxPending,
			Processing: o.MaxProcessing, LagSeconds: float64(int64(o.MaxLagSeconds*1000)) / 1000}
	}
	writeJSON(w, http.StatusOK, out)
}

// GET /api/v1/analytics/queue-parked-replicas
func (s *Server) handleQueueParked(w http.ResponseWriter, r *http.Request, c caller) {
	win, f, ok := seriesRequest(w, r)
	if !ok {
		return
	}
	rows, err := s.r.ParkedByQueue(r.Context(), c.tenant, f.Queue, win.sampleRange(), maxSeriesRows+1)
	if err != nil {
		s.brokerError(w, r, "parked replicas", err)
		return
	}
	truncated := len(rows) > maxSeriesRows
	if truncated {
		rows = rows[:maxSeriesRows]
	}
	as := make([]reads.QueueOpsRow, len(rows)) // reuse the per-queue grouping
	for i, p := range rows {
		as[i] = reads.QueueOpsRow{Bucket: p.Bucket, Queue: p.Queue, MaxPending: p.Parked, MaxProcessing: p.Nodes}
	}
	series := queueSeries(as, func(o reads.QueueOpsRow) map[string]any {
		return map[string]any{"timestamp": fmtMilli(o.Bucket), "parked": o.MaxPending, "replicas": o.MaxProcessing}
	})
	writeJSON(w, http.StatusOK, map[string]any{"timeRange": win.timeRange(), "bucketMinutes": win.bucketMinutes(),
		"queues": series, "truncated": truncated})
}

// GET /api/v1/analytics/retention
func (s *Server) handleRetentionAnalytics(w http.ResponseWriter, r *http.Request, c caller) {
	win, rows, truncated, ok := s.queueOpsPage(w, r, c, "retention analytics")
	if !ok {
		return
	}
	var total int64
	perBucket := map[int64]int64{}
	perQueue := map[string]int64{}
	for _, o := range rows {
		total += o.Trimmed
		perBucket[o.Bucket.Unix()] += o.Trimmed
		perQueue[o.Queue] += o.Trimmed
	}
	series := []map[string]any{}
	for _, b := range win.buckets() {
		series = append(series, map[string]any{"timestamp": fmtMilli(b), "deleted": perBucket[b.Unix()]})
	}
	queues := []map[string]any{}
	for q, n := range perQueue {
		if n > 0 {
			queues = append(queues, map[string]any{"queue": q, "deleted": n})
		}
	}
	sort.Slice(queues, func(i, j int) bool { return queues[i]["queue"].(string) < queues[j]["queue"].(string) })
	writeJSON(w, http.StatusOK, map[string]any{"timeRange": win.timeRange(), "bucketMinutes": win.bucketMinutes(),
		"totalDeleted": total, "timeSeries": series, "queues": queues, "truncated": truncated})
}

// setPath sets a dotted path in nested maps.
func setPath(m map[string]any, path string, v any) {
	head, rest, nested := strings.Cut(path, ".")
	if !nested {
		m[head] = v
		return
	}
	inner, _ := m[head].(map[string]any)
	if inner == nil {
		inner = map[string]any{}
		m[head] = inner
	}
	setPath(inner, rest, v)
}

func round2(f float64) float64 { return float64(int64(f*100+0.5)) / 100 }

// GET /api/v1/analytics/system-metrics (read-only: node figures, no tenant's names)
func (s *Server) handleSystemMetrics(w http.ResponseWriter, r *http.Request, _ caller) {
	win, err := parseWindow(r, "")
	if err != nil {
		writeReqError(w, err)
		return
	}
	rows, err := s.r.NodeSeries(r.Context(), reads.SystemMetrics, true, win.sampleRange())
	if err != nil {
		s.brokerError(w, r, "system metrics", err)
		return
	}
	replicas := []map[string]any{}
	var cur map[string]any
	for _, row := range rows { // ordered by node, then bucket
		if cur == nil || cur["hostname"] != row.Node {
			cur = map[string]any{"hostname": row.Node, "workerId": row.Node, "timeSeries": []map[string]any{}}
			replicas = append(replicas, cur)
		}
		metrics := map[string]any{}
		for i, m := range reads.SystemMetrics {
			v := row.Values[i]
			setPath(metrics, m.Path, map[string]float64{"avg": round2(v[0]), "min": v[1], "max": v[2], "last": v[3]})
		}
		cur["timeSeries"] = append(cur["timeSeries"].([]map[string]any),
			map[string]any{"timestamp": fmtMilli(row.Bucket), "sampleCount": row.Samples, "metrics": metrics})
	}
	writeJSON(w, http.StatusOK, map[string]any{"timeRange": win.timeRange(), "bucketMinutes": win.bucketMinutes(),
		"bucketSeconds": int(win.bucket / time.Second), // bucketMinutes reads 0 with interval=10s
		"replicas":      replicas, "replicaCount": len(replicas), "pointCount": len(rows)})
}

// GET /api/v1/analytics/worker-metrics (read-only: node figures, no tenant's names)
func (s *Server) handleWorkerMetrics(w http.ResponseWriter, r *http.Request, _ caller) {
	win, err := parseWindow(r, "")
	if err != nil {
		writeReqError(w, err)
		return
	}
	rows, err := s.r.NodeSeries(r.Context(), reads.WorkerMetrics, false, win.sampleRange())
	if err != nil {
		s.brokerError(w, r, "worker metrics", err)
		return
	}
	workers := []map[string]any{}
	totals := map[int64]map[string]any{}
	var cur map[string]any
	for _, row := range rows {
		if cur == nil || cur["node"] != row.Node {
			cur = map[string]any{"node": row.Node, "timeSeries": []map[string]any{}}
			workers = append(workers, cur)
		}
		pt := map[string]any{"timestamp": fmtMilli(row.Bucket), "sampleCount": row.Samples}
		tot := totals[row.Bucket.Unix()]
		if tot == nil {
			tot = map[string]any{"timestamp": fmtMilli(row.Bucket)}
			totals[row.Bucket.Unix()] = tot
		}
		for i, m := range reads.WorkerMetrics {
			n := int64(row.Values[i][0])
			pt[m.Path] = n
			prev, _ := tot[m.Path].(int64)
			tot[m.Path] = prev + n
		}
		cur["timeSeries"] = append(cur["timeSeries"].([]map[string]any), pt)
	}
	keys := make([]int64, 0, len(totals))
	for k := range totals {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	tot := make([]map[string]any, len(keys))
	for i, k := range keys {
		tot[i] = totals[k]
	}
	writeJSON(w, http.StatusOK, map[string]any{"timeRange": win.timeRange(), "bucketMinutes": win.bucketMinutes(),
		"workers": workers, "totals": tot})
}

// GET /api/v1/analytics/postgres-stats (read-only: figures of the shared database, no tenant's names)
func (s *Server) handlePostgresStats(w http.ResponseWriter, r *http.Request, _ caller) {
	doc, err := s.r.PostgresStats(r.Context())
	if err != nil {
		s.brokerError(w, r, "postgres stats", err)
		return
	}
	writeJSON(w, http.StatusOK, json.RawMessage(doc))
}
