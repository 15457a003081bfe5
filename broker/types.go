package broker

import (
	"encoding/json"
	"errors"
	"time"

	"queen-node/pg"
	"queen-node/protocol"
)

// QueueMode is the built-in consumer group used when a request names none:
// competing consumers share one cursor per partition.
const QueueMode = protocol.QueueMode

// DefaultPartition receives pushes that name no partition.
const DefaultPartition = "Default"

// MaxNameBytes bounds queue, partition, group and transaction id lengths.
const MaxNameBytes = 255

// QueueOptions are a queue's settings, with the JSON names of the Queen API.
type QueueOptions struct {
	LeaseTime                 int  `json:"leaseTime"`                 // seconds, default 300; 0 means 60
	RetryLimit                int  `json:"retryLimit"`                // default 3
	RetryDelay                int  `json:"retryDelay"`                // ms, default 1000, stored only
	Priority                  int  `json:"priority"`                  // default 0
	MaxSize                   int  `json:"maxSize"`                   // 0 = unlimited, stored only
	TTL                       int  `json:"ttl"`                       // seconds, default 3600, stored only
	DeadLetterQueue           bool `json:"deadLetterQueue"`           // stored only
	DLQAfterMaxRetries        bool `json:"dlqAfterMaxRetries"`        // stored only
	DelayedProcessing         int  `json:"delayedProcessing"`         // seconds, default 0
	WindowBuffer              int  `json:"windowBuffer"`              // seconds, default 0
	RetentionSeconds          int  `json:"retentionSeconds"`          // stored only
	CompletedRetentionSeconds int  `json:"completedRetentionSeconds"` // stored only
	RetentionEnabled          bool `json:"retentionEnabled"`          // stored only
	EncryptionEnabled         bool `json:"encryptionEnabled"`         // stored only
	MaxWaitTimeSeconds        int  `json:"maxWaitTimeSeconds"`        // stored only
	DedupWindowSeconds        int  `json:"dedupWindowSeconds"`        // default 3600; duplicates are detected for as long as the original is stored
}

// DefaultQueueOptions returns the options of a queue created implicitly.
func DefaultQueueOptions() QueueOptions {
	return QueueOptions{LeaseTime: 300, RetryLimit: 3, RetryDelay: 1000, TTL: 3600, DedupWindowSeconds: 3600}
}

// ConfigureRequest creates or replaces a queue's configuration.
type ConfigureRequest struct {
	Queue     string
	Namespace string
	Task      string
	Options   QueueOptions
}

// ConfigureResult is what POST /api/v1/configure reports.
type ConfigureResult struct {
	QueueID     string
	PartitionID string // the Default partition
	Namespace   string
	Task        string
	Options     QueueOptions
}

// PushItem is one message to append. Names are already validated.
type PushItem struct {
	Queue         string
	Partition     string          // "" means Default
	TransactionID string          // "" means generate one
	TraceID       *string         // a valid UUID or nil
	Payload       json.RawMessage // compact JSON; nil means {}
}

// PushResult reports one pushed item, in input order.
type PushResult struct {
	Index         int
	Status        protocol.PushStatus // queued, duplicate or failed; buffered during push maintenance (maintenance.go)
	TransactionID string
	MessageID     string
	PartitionID   string
	TraceID       *string
	Queue         string
	Error         string // only with failed

	partition string // resolved name (Default filled in), for the hot-list mark
}

// PopRequest describes GET /api/v1/pop/queue/:queue[/partition/:partition].
type PopRequest struct {
	Queue            string
	Partition        string // "" = wildcard
	Group            string // "" = QueueMode
	Batch            int    // >= 1
	Wait             bool
	Timeout          time.Duration
	AutoAck          bool
	SubscriptionMode string     // "", "all", "new", "new-only", anything else = all (protocol.ParseSubMode)
	SubscriptionFrom *time.Time // start from this time; wins over SubscriptionMode (subscriptionFrom=now arrives as mode "new")
	Partitions       int        // >= 1, wildcard only
	LeaseSeconds     int        // 0 = the queue's leaseTime
	// LeaseID is the lease to claim under: "" for a fresh one. Set for a
	// forwarded pop, whose forwarding node chose it so it can release the
	// claim if its client leaves (api/forward.go). Ignored with AutoAck.
	LeaseID string
}

// Message is one delivered message.
type Message struct {
	ID            string
	TransactionID string
	TraceID       *string
	Data          json.RawMessage
	CreatedAt     time.Time
	Queue         string
	Partition     string
	PartitionID   string
	LeaseID       string // "" with autoAck
	ConsumerGroup string
	ProducerSub   *string
	RetryCount    int
}

// PopResult is a non-empty pop. Partition fields name the first claimed partition.
type PopResult struct {
	Queue             string
	Partition         string
	PartitionID       string
	LeaseID           string
	ConsumerGroup     string
	PartitionsClaimed int
	Messages          []Message
}

// AckItem resolves one message for one group.
type AckItem struct {
	TransactionID string
	PartitionID   string
	Status        protocol.AckStatus // as sent; "" = completed
	Group         string             // "" = QueueMode
	LeaseID       string             // "" = no lease check
	Error         string             // stored in the DLQ entry
}

// AckResult reports one ack item, in input order.
type AckResult struct {
	Index         int
	TransactionID string
	Success       bool
	Error         string // "" = none (null in JSON)
	QueueName     string
	PartitionName string
	LeaseReleased bool
	DLQ           bool
}

// LeaseResult reports POST /api/v1/lease/:id/extend.
type LeaseResult struct {
	Success   bool
	ExpiresAt time.Time
	Error     string // "Lease not found" or "Lease already expired"
}

// TxOp is one operation of POST /api/v1/transaction.
type TxOp struct {
	Type  string     // "ack" or "push"
	Ack   AckItem    // with Type "ack"
	Items []PushItem // with Type "push"
}

// TxOpResult is one result of a transaction: one per ack op and per pushed item.
type TxOpResult struct {
	Index         int
	Type          string
	Success       bool
	TransactionID string
	Error         string
	DLQ           bool
	MessageID     string
	PartitionID   string
	QueueName     string
	Status        protocol.PushStatus // push operations only
}

// TxResult reports a transaction. A failed transaction applied nothing.
type TxResult struct {
	TransactionID string
	Success       bool
	Error         string
	Results       []TxOpResult
}

// ErrQueueDeleted refuses a push whose queue kept being deleted while it
// was written: the deleted queue's rows were not stored, and the client
// may retry (the API answers 409; docs/api.md, "queue delete"). The push's
// other partitions (another queue's, or another push lane's) may have
// committed; a retry finds them duplicates.
var ErrQueueDeleted = errors.New("queue deleted during the push; retry")

// ErrUnavailable wraps storage failures caused by PostgreSQL being
// unreachable; it is pg's, so package reads returns the same value.
var ErrUnavailable = pg.ErrUnavailable
