package reads

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"queen-node/pg"
)

// The registration and state reads of Queen's stream processors
// (docs/api.md, "Streams"). A cycle commits state, sink pushes and the
// source ack in one transaction with the push and ack paths, so it is the
// broker's.

// MaxStreamStateRows bounds one state read: the client cannot page, so a
// partition holding more is refused rather than answered in pieces.
const MaxStreamStateRows = 100000

// ErrStreamNotFound: the query id is not the tenant's, or the partition is
// not one of its source queue's. It is pg's, as broker.ErrStreamNotFound is.
var ErrStreamNotFound = pg.ErrStreamNotFound

// ErrStreamConfigMismatch: a registration's config hash differs from the
// stored one and reset was not asked for.
var ErrStreamConfigMismatch = errors.New("config_hash differs from the registered query's; register with reset=true to wipe its state and accept the new configuration")

// ErrStreamStateTooLarge: a state read matched more than MaxStreamStateRows.
var ErrStreamStateTooLarge = fmt.Errorf("more than %d state rows match; narrow the read with key_prefix or ripe_at_or_before", MaxStreamStateRows)

// ErrStreamStateTooManyBytes: a state read's answer would pass its byte
// bound; nothing is answered (the client cannot page, docs/api.md
// "Read answers").
var ErrStreamStateTooManyBytes = errors.New("the matching state rows pass the answer's byte bound; narrow the read with key_prefix or ripe_at_or_before")

// StreamQuery is a registration.
type StreamQuery = pg.StreamQuery

// StreamRegistration answers a registration.
type StreamRegistration struct {
	QueryID      string
	Fresh, Reset bool
}

// StreamStateFilter narrows a state read.
type StreamStateFilter = pg.StreamStateFilter

// StreamStateRow is one state entry; Value is the stored JSON text.
type StreamStateRow = pg.StreamStateRow

// RegisterStreamQuery creates or finds the tenant's query by name.
func (s *Service) RegisterStreamQuery(ctx context.Context, tenant string, q StreamQuery) (StreamRegistration, error) {
	reg, err := s.db.RegisterStreamQuery(ctx, tenant, uuid.NewString(), q)
	if err != nil {
		return StreamRegistration{}, wrap(err)
	}
	if reg.Mismatch {
		return StreamRegistration{}, ErrStreamConfigMismatch
	}
	if reg.Fresh || reg.Reset {
		s.log.Named("streams").Info("stream query registered", "tenant", tenant, "name", q.Name,
			"query_id", reg.ID, "fresh", reg.Fresh, "reset", reg.Reset)
	}
	return StreamRegistration{QueryID: reg.ID, Fresh: reg.Fresh, Reset: reg.Reset}, nil
}

// StreamState reads the state rows of (query, partition) that pass f: all
// of them, or ErrStreamStateTooLarge past MaxStreamStateRows and
// ErrStreamStateTooManyBytes past about maxBytes of answer (0 = no bound).
func (s *Service) StreamState(ctx context.Context, tenant, queryID, partitionID string, f StreamStateFilter, maxBytes int64) ([]StreamStateRow, error) {
	rows, err := s.db.StreamState(ctx, tenant, queryID, partitionID, f, MaxStreamStateRows, maxBytes)
	switch {
	case errors.Is(err, pg.ErrStreamNotFound):
		return nil, err
	case errors.Is(err, pg.ErrStreamStateRows):
		return nil, ErrStreamStateTooLarge
	case errors.Is(err, pg.ErrStreamStateBytes):
		return nil, ErrStreamStateTooManyBytes
	case err != nil:
		return nil, wrap(err)
	}
	return rows, nil
}
