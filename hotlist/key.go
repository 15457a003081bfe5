package hotlist

import "strings"

// Key returns the composite ring key "<tenant>\x1f<queue>". The long-poll
// wake gates use this same function: a byte mismatch between the two would
// be a silently lost wake.
func Key(tenant, queue string) string {
	return tenant + "\x1f" + queue
}

// SplitKey is the inverse of Key.
func SplitKey(key string) (tenant, queue string) {
	tenant, queue, _ = strings.Cut(key, "\x1f")
	return tenant, queue
}
