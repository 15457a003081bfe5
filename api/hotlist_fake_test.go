package api

import "queen-node/broker"

// HotlistView: the fake broker has no hot-list (as with QUEEN_HOTLIST=0).
func (f *fakeBroker) HotlistView(tenant, queue string, maxParts int) broker.HotlistView {
	return broker.HotlistView{Node: "fake"}
}
