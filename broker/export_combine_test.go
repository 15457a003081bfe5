package broker

// PendingPushTxIDs lists the transaction id of the first row of every push
// waiting in a push lane's queue (not in a flush), for tests that need a
// push to be queued behind another.
func (b *Broker) PendingPushTxIDs() []string {
	var out []string
	for _, c := range b.push.lanes {
		c.mu.Lock()
		for _, q := range c.pending {
			for _, r := range q {
				out = append(out, r.rows[0].TxID)
			}
		}
		c.mu.Unlock()
	}
	return out
}

// LaneOf is laneOf, for tests that pick partitions of each push lane.
func LaneOf(queue, partition string, lanes int) int { return laneOf(queue, partition, lanes) }

// PushLaneCount is pushLaneCount of a configuration with these settings.
func PushLaneCount(lanes int, pool int32) int {
	return pushLaneCount(Config{PushLanes: lanes, PG: PGConfig{MaxConns: pool}})
}
