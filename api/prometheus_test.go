package api_test

// GET /metrics/prometheus on a node wired by package node with JWT on: the
// same text exposition as /metrics, public through the default skip list
// and guarded (read-only) when the skip list leaves it out.

import (
	"bytes"
	"sort"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"queen-node/internal/nodetest"
	"queen-node/node"
)

func parseExposition(t *testing.T, r nodetest.Response) map[string]*dto.MetricFamily {
	t.Helper()
	want(t, r, 200)
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("Content-Type %q, want the text exposition", ct)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(r.Body))
	if err != nil {
		t.Fatalf("not Prometheus text: %v\n%s", err, r.Body)
	}
	return fams
}

func familyNames(f map[string]*dto.MetricFamily) string {
	var names []string
	for n := range f {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, " ")
}

func TestMetricsPrometheusShape(t *testing.T) {
	n := authNode(t, nil)
	rw := bearer(t, "acme", "read-write")
	want(t, n.DoAuth(t, rw, "POST", "/api/v1/push", `{"items":[{"queue":"m","payload":1}]}`), 201)

	// Public by the default skip list: no token needed.
	prom := parseExposition(t, n.DoAuth(t, "", "GET", "/metrics/prometheus", nil))
	plain := parseExposition(t, n.DoAuth(t, "", "GET", "/metrics", nil))
	if familyNames(prom) != familyNames(plain) {
		t.Errorf("/metrics/prometheus and /metrics differ:\n%s\n%s", familyNames(prom), familyNames(plain))
	}
	for name, typ := range map[string]dto.MetricType{
		"queen_pushes_total":                  dto.MetricType_COUNTER,
		"queen_build_info":                    dto.MetricType_GAUGE,
		"queen_uptime_seconds":                dto.MetricType_GAUGE,
		"queen_hotlist_enabled":               dto.MetricType_GAUGE,
		"queen_http_request_duration_seconds": dto.MetricType_HISTOGRAM,
	} {
		f := prom[name]
		if f == nil {
			t.Errorf("no family %s in %s", name, familyNames(prom))
			continue
		}
		if f.GetType() != typ || f.GetHelp() == "" || len(f.GetMetric()) == 0 {
			t.Errorf("%s: type %v help %q metrics %d, want %v with help", name, f.GetType(), f.GetHelp(), len(f.GetMetric()), typ)
		}
	}
	if v := prom["queen_pushes_total"].GetMetric()[0].GetCounter().GetValue(); v != 1 {
		t.Errorf("queen_pushes_total = %v, want 1", v)
	}

	// Without the skip list entry it needs a token of at least read-only.
	g := authNode(t, func(c *node.Config) { c.Auth.SkipPaths = []string{"/health"} })
	want(t, g.DoAuth(t, "", "GET", "/metrics/prometheus", nil), 401)
	parseExposition(t, g.DoAuth(t, bearer(t, "acme", "read-only"), "GET", "/metrics/prometheus", nil))
}
