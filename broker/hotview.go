package broker

import (
	"time"

	"queen-node/hotlist"
)

// HotlistView is this node's hot-list view of one tenant queue
// (GET /api/v1/status/hotlist/{queue}, docs/api.md).
type HotlistView struct {
	Node       string
	Enabled    bool // false with QUEEN_HOTLIST=0: nothing else is set
	Registered bool // this node holds rings for the queue
	hotlist.QueueView
}

// HotlistView reads the queue's rings with up to maxParts tracked entries
// each. No SQL; see hotlist.QueueView for the locks it takes.
func (b *Broker) HotlistView(tenant, queue string, maxParts int) HotlistView {
	v := HotlistView{Node: b.cfg.NodeName, Enabled: b.hot != nil}
	if b.hot != nil {
		v.QueueView, v.Registered = b.hot.QueueView(queueKey(tenant, queue), maxParts, time.Now())
	}
	return v
}
