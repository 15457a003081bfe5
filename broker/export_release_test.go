package broker

import "time"

// ReleaseState reports the lease releases waiting for the next flush and
// whether a flush runs (release.go).
func (b *Broker) ReleaseState() (pending int, running bool) {
	b.rel.mu.Lock()
	defer b.rel.mu.Unlock()
	return len(b.rel.pending), b.rel.running
}

// SetReleaseTimeout changes the bound of each release statement, for
// tests that hold the rows a release waits for.
func (b *Broker) SetReleaseTimeout(d time.Duration) { b.rel.timeout = d }
