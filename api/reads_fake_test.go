package api

import (
	"context"
	"time"

	"queen-node/reads"
)

// The fakeBroker's ResourceReads part (resources.go): it records the call and
// answers empty, or f.err. The real answers are tested end to end in
// resources_e2e_test.go.

func (f *fakeBroker) readsCall(name, tenant string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record(name, tenant)
	return f.err
}

func (f *fakeBroker) Overview(_ context.Context, tenant string) (reads.Overview, error) {
	return reads.Overview{}, f.readsCall("Overview", tenant)
}

func (f *fakeBroker) ListQueues(_ context.Context, tenant string, _ reads.QueueFilter) ([]reads.QueueRow, int, error) {
	return nil, 0, f.readsCall("ListQueues", tenant)
}

func (f *fakeBroker) GetQueue(_ context.Context, tenant, _ string, _ reads.DetailOpts) (reads.QueueDetail, error) {
	return reads.QueueDetail{}, f.readsCall("GetQueue", tenant)
}

func (f *fakeBroker) ListNamespaces(_ context.Context, tenant string) ([]reads.CountRow, error) {
	return nil, f.readsCall("ListNamespaces", tenant)
}

func (f *fakeBroker) ListTasks(_ context.Context, tenant string) ([]reads.CountRow, error) {
	return nil, f.readsCall("ListTasks", tenant)
}

func (f *fakeBroker) ListGroups(_ context.Context, tenant string, _ reads.GroupFilter) ([]reads.GroupRow, error) {
	return nil, f.readsCall("ListGroups", tenant)
}

func (f *fakeBroker) GroupQueueCursors(_ context.Context, tenant, _, _ string, _ int) (reads.QueueCursors, error) {
	return reads.QueueCursors{}, f.readsCall("GroupQueueCursors", tenant)
}

func (f *fakeBroker) GroupCursors(_ context.Context, tenant, _ string) ([]reads.CursorRow, error) {
	return nil, f.readsCall("GroupCursors", tenant)
}

func (f *fakeBroker) Lagging(_ context.Context, tenant string, _ time.Duration, _ int) ([]reads.CursorRow, error) {
	return nil, f.readsCall("Lagging", tenant)
}

func (f *fakeBroker) ListMessages(_ context.Context, tenant string, _ reads.MessageFilter) ([]reads.MessageRow, reads.MessageMode, error) {
	return nil, reads.MessageMode{}, f.readsCall("ListMessages", tenant)
}

func (f *fakeBroker) GetMessage(_ context.Context, tenant, _, _, _ string) (reads.MessageRow, error) {
	return reads.MessageRow{}, f.readsCall("GetMessage", tenant)
}

func (f *fakeBroker) DeleteMessage(_ context.Context, tenant, _, _ string) (reads.DeleteResult, error) {
	return reads.DeleteResult{}, f.readsCall("DeleteMessage", tenant)
}

func (f *fakeBroker) UpdateSubscription(_ context.Context, tenant, _ string, _ time.Time) (int, error) {
	return 0, f.readsCall("UpdateSubscription", tenant)
}

func (f *fakeBroker) SeekPartitionToEnd(_ context.Context, tenant, _, _, _ string) error {
	return f.readsCall("SeekPartitionToEnd", tenant)
}
