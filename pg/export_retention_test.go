package pg

// AgeRetentionRenewal makes s renew its lease at its next call, as if a
// quarter of the lease time had passed.
func AgeRetentionRenewal(s *RetentionSession) { s.renewed = s.renewed.Add(-RetentionLeaseTTL) }
