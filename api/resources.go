package api

import (
	"context"
	"errors"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"queen-node/broker"
	"queen-node/reads"
)

// ResourceReads is what the EXTENDED resource, message and consumer-group
// endpoints call (docs/api.md, "Resources, messages and consumer groups"),
// with the consumer group delete and seek; *reads.Service implements it.
// Every call is scoped to tenant.
type ResourceReads interface {
	Overview(ctx context.Context, tenant string) (reads.Overview, error)
	ListQueues(ctx context.Context, tenant string, f reads.QueueFilter) ([]reads.QueueRow, int, error)
	GetQueue(ctx context.Context, tenant, queue string, o reads.DetailOpts) (reads.QueueDetail, error)
	ListNamespaces(ctx context.Context, tenant string) ([]reads.CountRow, error)
	ListTasks(ctx context.Context, tenant string) ([]reads.CountRow, error)
	ListGroups(ctx context.Context, tenant string, f reads.GroupFilter) ([]reads.GroupRow, error)
	GroupCursors(ctx context.Context, tenant, group string) ([]reads.CursorRow, error)
	GroupQueueCursors(ctx context.Context, tenant, group, queue string, limit int) (reads.QueueCursors, error)
	Lagging(ctx context.Context, tenant string, minLag time.Duration, limit int) ([]reads.CursorRow, error)
	ListMessages(ctx context.Context, tenant string, f reads.MessageFilter) ([]reads.MessageRow, reads.MessageMode, error)
	GetMessage(ctx context.Context, tenant, partitionID, txid, group string) (reads.MessageRow, error)
	DeleteMessage(ctx context.Context, tenant, partitionID, txid string) (reads.DeleteResult, error)
	UpdateSubscription(ctx context.Context, tenant, group string, from time.Time) (int, error)
	SeekPartitionToEnd(ctx context.Context, tenant, group, queue, partition string) error
	DeleteConsumerGroup(ctx context.Context, tenant, group, queue string, deleteMetadata bool) (deletedPartitions int, err error) // queue "" = all queues
	Seek(ctx context.Context, tenant, group, queue string, toEnd bool, ts *time.Time) (partitionsUpdated int, err error)
}

// Page bounds of the list endpoints: a larger limit is clamped to the cap,
// a limit below 1, a negative offset or a non-integer is 400.
const (
	defaultPageLimit = 100
	maxPageLimit     = 1000
	maxPageOffset    = 100000 // messages: the list reads offset+limit rows
)

// registerReads adds the resource, message and consumer-group routes.
func (s *Server) registerReads() {
	s.route("GET", "/api/v1/resources/overview", AccessReadOnly, s.handleOverview)
	s.route("GET", "/api/v1/resources/queues", AccessReadOnly, s.handleListQueues)
	s.route("GET", "/api/v1/resources/queues/{queue}", AccessReadOnly, s.handleGetQueue)
	s.route("GET", "/api/v1/resources/namespaces", AccessReadOnly, s.handleNamespaces)
	s.route("GET", "/api/v1/resources/tasks", AccessReadOnly, s.handleTasks)

	s.route("GET", "/api/v1/messages", AccessReadOnly, s.handleListMessages)
	s.route("GET", "/api/v1/messages/{partitionId}/{transactionId}", AccessReadOnly, s.handleGetMessage)
	s.route("DELETE", "/api/v1/messages/{partitionId}/{transactionId}", AccessAdmin, s.handleDeleteMessage)

	s.route("GET", "/api/v1/consumer-groups", AccessReadOnly, s.handleListGroups)
	s.route("GET", "/api/v1/consumer-groups/lagging", AccessReadOnly, s.handleLagging)
	s.route("GET", "/api/v1/consumer-groups/{group}", AccessReadOnly, s.handleGetGroup)
	s.route("POST", "/api/v1/consumer-groups/{group}/subscription", AccessReadWrite, s.handleSubscription)
	s.route("POST", "/api/v1/consumer-groups/{group}/queues/{queue}/partitions/{partition}/seek", AccessReadWrite, s.handleSeekPartition)
	s.route("POST", "/api/v1/stats/refresh", AccessAdmin, s.handleStatsRefresh)
}

// queryIntIn reads an integer strictly: absent = def; not an integer or
// below lo is a 400; above hi is clamped.
func queryIntIn(q url.Values, key string, def, lo, hi int) (int, error) {
	v := strings.TrimSpace(q.Get(key))
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo {
		return 0, badRequest(key + " must be an integer of at least " + strconv.Itoa(lo))
	}
	return min(n, hi), nil
}

// page reads limit and offset; an offset past maxOffset is a 400.
func page(q url.Values, def, maxOffset int) (limit, offset int, err error) {
	if limit, err = queryIntIn(q, "limit", def, 1, maxPageLimit); err != nil {
		return 0, 0, err
	}
	if offset, err = queryIntIn(q, "offset", 0, 0, math.MaxInt); err != nil {
		return 0, 0, err
	}
	if offset > maxOffset {
		return 0, 0, badRequest("offset must be at most " + strconv.Itoa(maxOffset))
	}
	return limit, offset, nil
}

// optQueryName reads an optional name from the query string.
func optQueryName(q url.Values, key string) (string, error) {
	v := q.Get(key)
	if v == "" {
		return "", nil
	}
	return v, checkName(key, v)
}

// readsError answers a Reads (or dead-letter) error: not found is 404 with what.
func (s *Server) readsError(w http.ResponseWriter, r *http.Request, op, what string, err error) {
	if errors.Is(err, reads.ErrNotFound) {
		writeError(w, http.StatusNotFound, what+" not found")
		return
	}
	s.brokerError(w, r, op, err)
}

type countsJSON struct {
	Total      int64 `json:"total"`
	Pending    int64 `json:"pending"`
	Processing int64 `json:"processing"`
	Completed  int64 `json:"completed"`
	Failed     int64 `json:"failed"` // always 0: a failed message is pending again or dead-lettered
	DeadLetter int64 `json:"deadLetter"`
}

func countsOf(c reads.Counts) countsJSON {
	return countsJSON{Total: c.Total, Pending: c.Pending, Processing: c.Processing, Completed: c.Completed, DeadLetter: c.DeadLetter}
}

type overviewResponse struct {
	Queues     int64      `json:"queues"`
	Partitions int64      `json:"partitions"`
	Namespaces int64      `json:"namespaces"`
	Tasks      int64      `json:"tasks"`
	Messages   countsJSON `json:"messages"`
	Timestamp  string     `json:"timestamp"`
	StatsAge   int        `json:"statsAge"` // 0: computed live (POST /api/v1/stats/refresh is a no-op)
}

// GET /api/v1/resources/overview
func (s *Server) handleOverview(w http.ResponseWriter, r *http.Request, c caller) {
	o, err := s.r.Overview(r.Context(), c.tenant)
	if err != nil {
		s.brokerError(w, r, "overview", err)
		return
	}
	writeJSON(w, http.StatusOK, overviewResponse{Queues: o.Queues, Partitions: o.Partitions, Namespaces: o.Namespaces,
		Tasks: o.Tasks, Messages: countsOf(o.Counts), Timestamp: fmtMilli(time.Now()), StatsAge: 0})
}

type queueJSON struct {
	ID         string     `json:"id"`
	Name       string     `json:"name"`
	Namespace  *string    `json:"namespace"`
	Task       *string    `json:"task"`
	Priority   int        `json:"priority"`
	CreatedAt  string     `json:"createdAt"`
	Partitions int64      `json:"partitions"`
	Messages   countsJSON `json:"messages"`

	// The list's figures (docs/api.md, "Resources, messages and consumer groups").
	OldestPendingAt         *string         `json:"oldestPendingAt"`
	OldestPendingAgeSeconds float64         `json:"oldestPendingAgeSeconds"`
	ConsumerGroups          []groupLagJSON  `json:"consumerGroups"`
	ConsumerGroupCount      int64           `json:"consumerGroupCount"`
	Throughput              *throughputJSON `json:"throughput"`
}

type groupLagJSON struct {
	Name           string  `json:"name"`
	Lag            int64   `json:"lag"`
	TimeLagSeconds float64 `json:"timeLagSeconds"`
}

type throughputJSON struct {
	PushedPerSecond   float64 `json:"pushedPerSecond"`
	ConsumedPerSecond float64 `json:"consumedPerSecond"`
	WindowSeconds     float64 `json:"windowSeconds"`
	SampledAt         string  `json:"sampledAt"`
}

func queueOf(q reads.QueueRow) queueJSON {
	out := queueJSON{ID: q.ID, Name: q.Name, Namespace: nullable(q.Namespace), Task: nullable(q.Task),
		Priority: q.Priority, CreatedAt: fmtMilli(q.CreatedAt), Partitions: q.Partitions, Messages: countsOf(q.Counts),
		OldestPendingAgeSeconds: q.OldestPendingAgeSeconds, ConsumerGroups: make([]groupLagJSON, 0, len(q.Groups)),
		ConsumerGroupCount: q.GroupCount}
	if q.OldestPendingAt != nil {
		out.OldestPendingAt = fmtMilliOrNull(*q.OldestPendingAt)
	}
	for _, g := range q.Groups {
		out.ConsumerGroups = append(out.ConsumerGroups, groupLagJSON{Name: g.Group, Lag: g.Lag, TimeLagSeconds: g.TimeLagSeconds})
	}
	if t := q.Throughput; t != nil {
		out.Throughput = &throughputJSON{PushedPerSecond: t.PushedPerSecond, ConsumedPerSecond: t.ConsumedPerSecond,
			WindowSeconds: t.WindowSeconds, SampledAt: fmtMilli(t.SampledAt)}
	}
	return out
}

// maxSearchBytes bounds the search parameter: no queue name or namespace
// is longer (broker.MaxNameBytes), so a longer one cannot match.
const maxSearchBytes = broker.MaxNameBytes

// querySearch reads the optional search parameter: valid UTF-8 without NUL
// (PostgreSQL refuses both), at most maxSearchBytes.
func querySearch(q url.Values) (string, error) {
	v := q.Get("search")
	switch {
	case len(v) > maxSearchBytes:
		return "", badRequest("search is too long (" + strconv.Itoa(len(v)) + " bytes, max " + strconv.Itoa(maxSearchBytes) + ")")
	case !utf8.ValidString(v) || strings.ContainsRune(v, 0):
		return "", badRequest("search must be valid UTF-8 without NUL")
	}
	return v, nil
}

type pageJSON struct {
	Limit  int `json:"limit"`
	Offset int `json:"offset"`
	Total  int `json:"total"`
}

type queuesResponse struct {
	Queues     []queueJSON `json:"queues"`
	Total      int         `json:"total"`
	Pagination pageJSON    `json:"pagination"`
}

// GET /api/v1/resources/queues?namespace&task&search&limit&offset
func (s *Server) handleListQueues(w http.ResponseWriter, r *http.Request, c caller) {
	q := r.URL.Query()
	limit, offset, err := page(q, defaultPageLimit, math.MaxInt)
	if err != nil {
		writeReqError(w, err)
		return
	}
	f := reads.QueueFilter{Limit: limit, Offset: offset}
	if f.Namespace, err = optQueryName(q, "namespace"); err == nil {
		f.Task, err = optQueryName(q, "task")
	}
	if err == nil {
		f.Search, err = querySearch(q)
	}
	if err != nil {
		writeReqError(w, err)
		return
	}
	rows, total, err := s.r.ListQueues(r.Context(), c.tenant, f)
	if err != nil {
		s.brokerError(w, r, "list queues", err)
		return
	}
	out := queuesResponse{Queues: make([]queueJSON, 0, len(rows)), Total: total,
		Pagination: pageJSON{Limit: limit, Offset: offset, Total: total}}
	for _, row := range rows {
		out.Queues = append(out.Queues, queueOf(row))
	}
	writeJSON(w, http.StatusOK, out)
}

type queueConfigJSON struct {
	LeaseTime         int  `json:"leaseTime"`
	RetryLimit        int  `json:"retryLimit"`
	RetryDelay        int  `json:"retryDelay"`
	TTL               int  `json:"ttl"`
	MaxSize           int  `json:"maxSize"`
	DelayedProcessing int  `json:"delayedProcessing"`
	WindowBuffer      int  `json:"windowBuffer"`
	DeadLetterQueue   bool `json:"deadLetterQueue"`
}

type partitionJSON struct {
	ID          string     `json:"id"`
	Name        string     `json:"name"`
	CreatedAt   string     `json:"createdAt"`
	LastOffset  int64      `json:"lastOffset"`
	LastWriteAt *string    `json:"lastWriteAt"`
	Messages    countsJSON `json:"messages"`
	Stats       countsJSON `json:"stats"` // the same counts under the reference's older key
}

type queueDetailResponse struct {
	ID                  string          `json:"id"`
	Name                string          `json:"name"`
	Namespace           *string         `json:"namespace"`
	Task                *string         `json:"task"`
	Priority            int             `json:"priority"`
	CreatedAt           string          `json:"createdAt"`
	Config              queueConfigJSON `json:"config"`
	Partitions          []partitionJSON `json:"partitions"`
	PartitionCount      int64           `json:"partitionCount"`
	PartitionsTruncated bool            `json:"partitionsTruncated"` // the queue has more partitions than listed (partitionLimit)
	ConsumerGroups      []groupJSON     `json:"consumerGroups"`
	Messages            countsJSON      `json:"messages"`
	Totals              countsJSON      `json:"totals"` // the same counts under the reference's key
}

// GET /api/v1/resources/queues/{queue}
func (s *Server) handleGetQueue(w http.ResponseWriter, r *http.Request, c caller) {
	name := r.PathValue("queue")
	if err := checkName("queue", name); err != nil {
		writeReqError(w, err)
		return
	}
	// ?partitionOrder=busiest&partitionLimit=N (docs/api.md): the
	// dashboard's queue page asks for the busiest 100, not the first 1000
	// by name.
	q := r.URL.Query()
	var o reads.DetailOpts
	switch q.Get("partitionOrder") {
	case "", "name":
	case "busiest":
		o.Busiest = true
	default:
		writeError(w, http.StatusBadRequest, "partitionOrder must be name or busiest")
		return
	}
	limit, err := queryIntIn(q, "partitionLimit", reads.MaxDetailPartitions, 1, reads.MaxDetailPartitions)
	if err != nil {
		writeReqError(w, err)
		return
	}
	o.Limit = limit
	d, err := s.r.GetQueue(r.Context(), c.tenant, name, o)
	if err != nil {
		s.readsError(w, r, "get queue", "Queue", err)
		return
	}
	out := queueDetailResponse{
		ID: d.ID, Name: d.Name, Namespace: nullable(d.Namespace), Task: nullable(d.Task), Priority: d.Priority,
		CreatedAt: fmtMilli(d.CreatedAt),
		Config: queueConfigJSON{LeaseTime: d.LeaseTime, RetryLimit: d.RetryLimit, RetryDelay: d.RetryDelay, TTL: d.TTL,
			MaxSize: d.MaxSize, DelayedProcessing: d.DelayedProcessing, WindowBuffer: d.WindowBuffer,
			DeadLetterQueue: d.DeadLetterQueue},
		Partitions:          make([]partitionJSON, 0, len(d.PartitionList)),
		PartitionCount:      d.Partitions,
		PartitionsTruncated: int64(len(d.PartitionList)) < d.Partitions,
		ConsumerGroups:      make([]groupJSON, 0, len(d.Groups)),
		Messages:            countsOf(d.Counts),
		Totals:              countsOf(d.Counts),
	}
	for _, p := range d.PartitionList {
		var lw *string
		if p.LastWriteAt != nil {
			lw = fmtMilliOrNull(*p.LastWriteAt)
		}
		cj := countsOf(p.Counts)
		out.Partitions = append(out.Partitions, partitionJSON{ID: p.ID, Name: p.Name, CreatedAt: fmtMilli(p.CreatedAt),
			LastOffset: p.LastOffset, LastWriteAt: lw, Messages: cj, Stats: cj})
	}
	for _, g := range d.Groups {
		out.ConsumerGroups = append(out.ConsumerGroups, groupOf(g))
	}
	writeJSON(w, http.StatusOK, out)
}

type groupingJSON struct {
	Namespace  *string    `json:"namespace,omitempty"`
	Task       *string    `json:"task,omitempty"`
	Queues     int64      `json:"queues"`
	Partitions int64      `json:"partitions"`
	Messages   countsJSON `json:"messages"`
}

// GET /api/v1/resources/namespaces
func (s *Server) handleNamespaces(w http.ResponseWriter, r *http.Request, c caller) {
	rows, err := s.r.ListNamespaces(r.Context(), c.tenant)
	if err != nil {
		s.brokerError(w, r, "list namespaces", err)
		return
	}
	out := make([]groupingJSON, 0, len(rows))
	for _, n := range rows {
		out = append(out, groupingJSON{Namespace: &n.Name, Queues: n.Queues, Partitions: n.Partitions, Messages: countsOf(n.Counts)})
	}
	writeJSON(w, http.StatusOK, map[string]any{"namespaces": out})
}

// GET /api/v1/resources/tasks
func (s *Server) handleTasks(w http.ResponseWriter, r *http.Request, c caller) {
	rows, err := s.r.ListTasks(r.Context(), c.tenant)
	if err != nil {
		s.brokerError(w, r, "list tasks", err)
		return
	}
	out := make([]groupingJSON, 0, len(rows))
	for _, n := range rows {
		out = append(out, groupingJSON{Task: &n.Name, Queues: n.Queues, Partitions: n.Partitions, Messages: countsOf(n.Counts)})
	}
	writeJSON(w, http.StatusOK, map[string]any{"tasks": out})
}

// POST /api/v1/stats/refresh: queen-node keeps no stats cache (every read
// above is computed live), so there is nothing to refresh.
func (s *Server) handleStatsRefresh(w http.ResponseWriter, _ *http.Request, _ caller) {
	writeJSON(w, http.StatusOK, map[string]any{"success": true, "computedLive": true,
		"message": "statistics are computed live; nothing to refresh"})
}
