package hotlist

// Key returns the composite ring key "<tenant>\x1f<queue>". The long-poll
// wake gates use this same function: a byte mismatch between the two would
// be a silently lost wake.
func Key(tenant, queue string) string {
	return tenant + "\x1f" + queue
}
