// Package reads is the read side of the HTTP API, served straight from
// package pg: resources, messages and consumer groups, status and
// analytics, traces, the dead-letter list and stream state (docs/api.md).
// It also holds the admin writes on those resources that are not part of
// the push, pop and ack paths (trace recording, message and dead-letter
// deletion, seeks, consumer group deletion, stream registration); the ones
// that change what a parked pop may take tell the broker through Waker.
//
// It keeps no state of its own: every call is one or a few pg calls.
package reads

import (
	"context"
	"errors"

	"github.com/hashicorp/go-hclog"

	"queen-node/pg"
)

// Waker is what reads tells the node core after an admin write that can
// make messages deliverable, so pops parked on the queue look again and
// the hot-list forgets what the write made stale; *broker.Broker
// implements it. Each call comes after the write committed.
type Waker interface {
	// AfterSeek: group's cursors on queue moved (a backwards seek makes
	// messages deliverable again).
	AfterSeek(ctx context.Context, tenant, queue, group string) error
	// AfterGroupDelete: group's cursors and leases on queue ("" = every
	// queue of the tenant) were dropped.
	AfterGroupDelete(tenant, queue, group string)
	// AfterMessageDelete: a message of partitionID was deleted; res says
	// which groups' leases that ended.
	AfterMessageDelete(tenant, partitionID string, res pg.DeleteResult)
}

// Service serves the reads of one node. It is safe for concurrent use.
type Service struct {
	db   *pg.DB
	node string // stored as the worker id of the traces this node records
	wake Waker
	log  hclog.Logger
}

// New returns the reads of the node named node over db; w is told of the
// admin writes that wake pops. logger may be nil.
func New(db *pg.DB, node string, w Waker, logger hclog.Logger) *Service {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	return &Service{db: db, node: node, wake: w, log: logger}
}

// ErrNotFound: the queue, partition, message or dead letter does not exist
// in the caller's tenant (404). It is pg's, as broker.ErrNotFound is.
var ErrNotFound = pg.ErrNotFound

// ErrUnavailable wraps errors caused by PostgreSQL being unreachable
// (503). It is pg's, as broker.ErrUnavailable is.
var ErrUnavailable = pg.ErrUnavailable

// wrap marks an unreachable database with ErrUnavailable.
func wrap(err error) error { return pg.MarkUnavailable(err) }

// notFound answers pg's not-found as the bare ErrNotFound, and wraps the rest.
func notFound(err error) error {
	if errors.Is(err, pg.ErrNotFound) {
		return ErrNotFound
	}
	return wrap(err)
}
