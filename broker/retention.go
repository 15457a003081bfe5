package broker

import "queen-node/pg"

// Store is the broker's PostgreSQL pool, for node-level background jobs
// that share it (the retention job, package retention).
func (b *Broker) Store() *pg.DB { return b.db }
