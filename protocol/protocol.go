// Package protocol holds the string values of Queen MQ's protocol that more
// than one layer must spell the same way: push and ack statuses,
// subscription modes, the queue-mode consumer group, the claim core's
// verdicts and the mesh member states of /status. The SQL functions in pg/sql/functions spell them too;
// pg/protocol_test.go checks that the two agree.
//
// It is a leaf package (no imports) so that pg, broker and api can all
// depend on it: pg sits below broker, so broker cannot hold these values.
package protocol

// QueueMode is the built-in consumer group used when a request names none:
// competing consumers share one cursor per partition (docs/api.md). The SQL
// functions use it for an empty group too.
const QueueMode = "__QUEUE_MODE__"

// PushStatus is the status of one pushed item (docs/api.md).
type PushStatus string

const (
	PushQueued    PushStatus = "queued"    // appended
	PushDuplicate PushStatus = "duplicate" // the partition already holds this transaction id
	PushFailed    PushStatus = "failed"    // not stored; the item carries an error
	// PushMissing is push_v4's internal answer "a queue or partition does
	// not exist yet" (push_v3's sentinel row too); it never reaches a client.
	PushMissing PushStatus = "missing"
	// PushDeferred is push_v4's internal answer "not written: another
	// transaction holds the partition"; the push combiner sends the item
	// again. It never reaches a client.
	PushDeferred PushStatus = "deferred"
)

// AckStatus is the status of one acknowledgement (docs/api.md, "Acks").
// Clients may send any case; ack_v2 (pg/sql/functions/31_ack_v2.sql)
// lowercases it and refuses an unknown value per item with ErrInvalidStatus.
type AckStatus string

const (
	AckCompleted AckStatus = "completed" // resolved; also the meaning of ""
	AckSuccess   AckStatus = "success"   // an alias of completed
	AckFailed    AckStatus = "failed"    // retry or dead-letter by the queue's retryLimit
	AckDLQ       AckStatus = "dlq"       // dead-letter at once
	AckRetry     AckStatus = "retry"     // release the lease for redelivery, not counted against retryLimit
)

// AckStatuses lists every status the claim core accepts.
var AckStatuses = []AckStatus{AckCompleted, AckSuccess, AckFailed, AckDLQ, AckRetry}

// SubMode is where a consumer group's cursor starts on the first pop of a
// (group, queue) (docs/api.md, "Semantics"); it is decided once and
// persisted in the group marker.
type SubMode string

const (
	SubAll  SubMode = "all"  // from the beginning of every partition
	SubNew  SubMode = "new"  // from the first pop's time
	SubFrom SubMode = "from" // from a given time
)

// SubNewOnly is the request alias of SubNew that clients may send as
// subscriptionMode (and QUEEN_DEFAULT_SUBSCRIPTION accepts).
const SubNewOnly = "new-only"

// ParseSubMode maps a request's subscriptionMode to a mode. "" and any
// unknown value mean SubAll, as in the reference; ok tells whether the value
// was one of the known spellings ("", all, new, new-only).
func ParseSubMode(s string) (mode SubMode, ok bool) {
	switch s {
	case "", string(SubAll):
		return SubAll, true
	case string(SubNew), SubNewOnly:
		return SubNew, true
	}
	return SubAll, false
}

// SubFromNow is the subscriptionFrom value that means "from now" (SubNew).
const SubFromNow = "now"

// Verdict is the claim core's answer for one candidate partition
// (pg/sql/functions/22_pop_v3.sql).
type Verdict string

const (
	VerdictTook    Verdict = "took"    // messages delivered
	VerdictEmpty   Verdict = "empty"   // nothing visible and no live lease
	VerdictLeased  Verdict = "leased"  // a live lease of this group
	VerdictBusy    Verdict = "busy"    // another transaction holds the consumer row
	VerdictRequeue Verdict = "requeue" // not evaluated: the budget ran out first
)

// Verdicts lists every verdict kind.
var Verdicts = []Verdict{VerdictTook, VerdictEmpty, VerdictLeased, VerdictBusy, VerdictRequeue}

// Row kinds and group-marker states of the result rows of pop_v1 and
// pop_v2 (pg/sql/functions/20_pop.sql, 21_pop_v2.sql), which stay for the
// previous release; pop_v3 answers one row of arrays instead. Only pg's
// tests read them.
const (
	PopRowMeta    = "meta"    // the first row: queue id, group marker state, deferral options
	PopRowVerdict = "verdict" // one per candidate
	PopRowMsg     = "msg"     // one per delivered message
	GroupSeeded   = "seeded"  // the group marker existed before the call
	GroupFresh    = "fresh"   // the call wrote the group marker
)

// MessageStatus is a message's state for one consumer group, as the message
// reads (GET /api/v1/messages, pg/sql/functions/70_resources.sql) answer
// and filter it.
type MessageStatus string

// Message states; completed is spelled like AckCompleted.
const (
	MsgPending    MessageStatus = "pending"     // not resolved, not under a live lease
	MsgProcessing MessageStatus = "processing"  // in a live lease's batch
	MsgCompleted  MessageStatus = "completed"   // the group's cursor passed it, or it is in acked
	MsgDeadLetter MessageStatus = "dead_letter" // dead-lettered for the group
)

// MessageStatuses are the accepted `status` filters of the message list.
var MessageStatuses = []MessageStatus{MsgPending, MsgProcessing, MsgCompleted, MsgDeadLetter}

// ack_v2 (pg/sql/functions/31_ack_v2.sql) decides a failed item with the values of
// AckRetry (release for redelivery) and AckDLQ (dead-letter).

// DLQRetrySep joins a dead-lettered message's transaction id and its
// dead-letter entry's number into the transaction id of the copy a retry
// appends (pg/sql/functions/80_dlq.sql, docs/api.md "Retry or drop a dead
// letter").
const DLQRetrySep = "~retry-"

// DLQRetryOutcome is what queen.dlq_retry_v2 (pg/sql/functions/80_dlq.sql)
// did with a dead letter; only pg reads it.
type DLQRetryOutcome string

const (
	DLQRetried    DLQRetryOutcome = "retried"    // the copy was appended
	DLQNotFound   DLQRetryOutcome = "not_found"  // the tenant has no such entry
	DLQSuperseded DLQRetryOutcome = "superseded" // the group's entries of the message are all superseded
	DLQTaken      DLQRetryOutcome = "taken"      // the copy's transaction id is already in the partition
)

// Why queen.stream_state_read_v1 (pg/sql/functions/90_reads.sql) refused a
// state read: too many rows, or an answer past its byte bound.
const (
	StateRefusedRows  = "rows"
	StateRefusedBytes = "bytes"
)

// Error texts that clients see and the SQL functions write too
// (docs/api.md, "Acks" and "Semantics").
const (
	ErrMessageNotFound = "Message not found"
	ErrInvalidLease    = "Invalid or expired lease"
	ErrInvalidStatus   = "Invalid status"
)

// MemberState is a mesh member's state as /status (mesh.members[].state),
// the queen_mesh_members gauge and the churn reseed name it
// (docs/operations.md). The mesh sets it; broker, api and the tools read it.
type MemberState string

const (
	MemberAlive MemberState = "alive"
	// MemberSuspect is in the status contract, but memberlist does not
	// expose suspicion, so the mesh never sets it (docs/mesh.md).
	MemberSuspect MemberState = "suspect"
	MemberDead    MemberState = "dead" // declared dead by the failure detector
	MemberLeft    MemberState = "left" // left on purpose (graceful shutdown)
)

// MemberStates lists every state, in the order of the status contract.
var MemberStates = []MemberState{MemberAlive, MemberSuspect, MemberDead, MemberLeft}

// Numbers that Go and the SQL functions both use. The SQL writes each once,
// as an inlined IMMUTABLE function of pg/sql/functions/00_constants.sql
// (named beside each constant); pg/protocol_test.go (TestSQLNumbers) ties
// the two and refuses the bare number anywhere else in the SQL.
const (
	// DefaultLeaseSeconds is the lease of a queue whose leaseTime is 0
	// (queen.default_lease_seconds()) and the length of a lease extension
	// that names no seconds (docs/api.md, "Semantics").
	DefaultLeaseSeconds = 60
	// RowEnvelopeBytes is what a row's keys, ids and times add to its
	// values in a JSON answer: pops and reads count it per row against
	// their byte bounds and write deadlines (queen.row_envelope_bytes()).
	RowEnvelopeBytes = 400
	// MaxAckedPastGap bounds the completed acks one (partition, group)
	// remembers past an unresolved message (consumers.acked); past it an
	// ack item is refused (queen.max_acked_past_gap(); docs/api.md, "Acks").
	MaxAckedPastGap = 100000
)
