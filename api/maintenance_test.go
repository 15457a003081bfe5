package api

import (
	"context"
	"net/http"
	"testing"

	"queen-node/broker"
)

// fakeBroker's MaintenanceBroker: every call is recorded; the switches are
// kept in the fake so a toggle reads back.

func (f *fakeBroker) Maintenance(_ context.Context) (broker.MaintenanceState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("Maintenance", "")
	return f.maint, f.err
}

func (f *fakeBroker) SetPushMaintenance(_ context.Context, on bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("SetPushMaintenance", "")
	if f.err == nil {
		f.maint.Push = on
	}
	return f.err
}

func (f *fakeBroker) SetPopMaintenance(_ context.Context, on bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("SetPopMaintenance", "")
	if f.err == nil {
		f.maint.Pop = on
	}
	return f.err
}

func (f *fakeBroker) BufferStats() broker.BufferStats {
	return broker.BufferStats{Healthy: true, MaxBytes: 1 << 20, Pending: 99}
}

func (f *fakeBroker) PushBuffering() bool { return false }
func (f *fakeBroker) PopsPaused() bool    { return false }
func (f *fakeBroker) MaxPopBytes() int64  { return 0 }

func (f *fakeBroker) TenantBuffered(tenant string) int64 {
	if tenant == "t1" {
		return 7
	}
	return 0
}

// Shapes of the four routes, as the reference answers them (docs/api.md,
// "Maintenance modes"); the buffered count is the request tenant's.
func TestMaintenanceShapes(t *testing.T) {
	tb := setup(t)
	r := tb.do("POST", "/api/v1/system/maintenance", `{"enabled":true}`)
	if r.status != http.StatusOK {
		t.Fatalf("POST: %d %s", r.status, r.body)
	}
	checkJSONHeaders(t, r)
	m := r.object(t)
	if keys(m) != "bufferHealthy,bufferedMessages,maintenanceMode,message" || m["maintenanceMode"] != true || m["bufferedMessages"].(interface{ String() string }).String() != "7" {
		t.Fatalf("POST body %s", r.body)
	}
	r = tb.do("GET", "/api/v1/system/maintenance", "")
	m = r.object(t)
	if keys(m) != "bufferHealthy,bufferStats,bufferedMessages,maintenanceMode,popMaintenanceMode" || m["maintenanceMode"] != true || m["popMaintenanceMode"] != false {
		t.Fatalf("GET body %s", r.body)
	}
	if st := m["bufferStats"].(map[string]any); keys(st) != "healthy,maxBytes,pendingCount,replaying" {
		t.Fatalf("bufferStats %s", r.body)
	}
	r = tb.do("GET", "/api/v1/status/buffers", "")
	if m = r.object(t); r.status != http.StatusOK || keys(m) != "dbHealthy,failed,healthy,pending,replaying" ||
		m["pending"].(interface{ String() string }).String() != "7" || m["dbHealthy"] != true {
		t.Fatalf("GET /api/v1/status/buffers: %d %s", r.status, r.body)
	}
	r = tb.do("POST", "/api/v1/system/maintenance/pop", `{"enabled":true}`)
	if m = r.object(t); r.status != http.StatusOK || keys(m) != "message,popMaintenanceMode" || m["popMaintenanceMode"] != true {
		t.Fatalf("POST pop: %d %s", r.status, r.body)
	}
	r = tb.do("GET", "/api/v1/system/maintenance/pop", "")
	if m = r.object(t); r.status != http.StatusOK || m["popMaintenanceMode"] != true {
		t.Fatalf("GET pop: %d %s", r.status, r.body)
	}
}

// A toggle needs a boolean "enabled"; anything else is 400 (413 past the
// small body bound) and never reaches the broker.
func TestMaintenanceBadBodies(t *testing.T) {
	for _, path := range []string{"/api/v1/system/maintenance", "/api/v1/system/maintenance/pop"} {
		for _, body := range []string{``, `{}`, `{"enabled":"true"}`, `{"enabled":1}`, `{"enabled":null}`, `[true]`, `{"enabled":tru`} {
			tb := setup(t)
			tb.do("POST", path, body).wantError(t, http.StatusBadRequest, "")
			tb.noBrokerCalls()
		}
		tb := setup(t)
		big := `{"enabled":true,"pad":"` + string(make([]byte, 8<<10)) + `"}`
		tb.do("POST", path, big).wantError(t, http.StatusRequestEntityTooLarge, "")
		tb.noBrokerCalls()
	}
}

// Refusals caused by push maintenance are 503 with their reason.
func TestMaintenanceRefusals(t *testing.T) {
	tb := setup(t)
	tb.fb.err = broker.ErrBufferFull
	tb.do("POST", "/api/v1/push", `{"items":[{"queue":"q","payload":{}}]}`).wantError(t, http.StatusServiceUnavailable, broker.ErrBufferFull.Error())
	tb.fb.err = broker.ErrTxPushMaintenance
	tb.do("POST", "/api/v1/transaction", `{"operations":[{"type":"push","items":[{"queue":"q","payload":{}}]}]}`).
		wantError(t, http.StatusServiceUnavailable, broker.ErrTxPushMaintenance.Error())
}
