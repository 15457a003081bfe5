package pg

// AgeRetentionRenewal makes s renew its lease at its next call, as if a
// quarter of the lease time had passed.
func AgeRetentionRenewal(s *RetentionSession) { s.renewed = s.renewed.Add(-RetentionLeaseTTL) }

// SetSampleQueuePage sets how many queues one sampling statement covers,
// until the test ends.
func SetSampleQueuePage(t interface{ Cleanup(func()) }, n int) {
	old := sampleQueuePage
	sampleQueuePage = n
	t.Cleanup(func() { sampleQueuePage = old })
}
