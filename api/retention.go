package api

import "queen-node/retention"

// SetRetentionSource names where /status and /metrics read the retention
// job's counters (the retention.* rows of table.go). Call it before the
// server serves; without it those rows read zero.
func (s *Server) SetRetentionSource(src func() retention.Stats) { s.retention = src }

// retentionStats reads the job's counters, zero without a source.
func (s *Server) retentionStats() retention.Stats {
	if s.retention == nil {
		return retention.Stats{}
	}
	return s.retention()
}
