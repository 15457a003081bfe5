package broker

// ReleaseState reports the lease releases waiting for the next flush and
// whether a flush runs (release.go).
func (b *Broker) ReleaseState() (pending int, running bool) {
	b.rel.mu.Lock()
	defer b.rel.mu.Unlock()
	return len(b.rel.pending), b.rel.running
}
