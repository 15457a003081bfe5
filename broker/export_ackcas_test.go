package broker

// AckCASPending is how many ack requests wait for a CAS flush (tests).
func AckCASPending(b *Broker) int {
	if b.acks == nil {
		return 0
	}
	b.acks.mu.Lock()
	defer b.acks.mu.Unlock()
	return len(b.acks.pending)
}
