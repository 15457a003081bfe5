package broker

import "queen-node/pg"

// Unlearnt returns the names of a (queue, group) the node does not know
// to have their consumer row (provisioned.unprov), for the tests of the
// bulk provisioning's learning.
func (b *Broker) Unlearnt(tenant, queue, group string, names []string) []string {
	return b.prov.unprov(pg.PopArgs{Tenant: tenant, Queue: queue, Group: group, Names: names})
}
