package broker

// PendingPushTxIDs lists the transaction id of the first row of every push
// waiting in the combiner's queue (not in a flush), for tests that need a
// push to be queued behind another.
func (b *Broker) PendingPushTxIDs() []string {
	b.push.mu.Lock()
	defer b.push.mu.Unlock()
	var out []string
	for _, q := range b.push.pending {
		for _, r := range q {
			out = append(out, r.rows[0].TxID)
		}
	}
	return out
}
