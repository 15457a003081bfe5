package api_test

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"queen-node/api"
	"queen-node/internal/nodetest"
)

// notInTable are the /metrics families that are not figures of a snapshot:
// latency histograms observed per request (metrics.go).
var notInTable = map[string]bool{
	"queen_http_request_duration_seconds": true,
	"queen_pop_duration_seconds":          true,
}

// Every row of api.Table appears in /status and on /metrics of a real
// node, and nothing appears in either output outside the table: a figure
// added to one output and not the other fails here.
func TestTableMatchesStatusAndMetrics(t *testing.T) {
	// The harness's node serves /status and /metrics as main registers
	// them; a cluster of one has a mesh, so its rows are live too.
	n := &observedNode{Node: nodetest.StartCluster(t, 1)[0]}
	n.Do(t, "GET", "/api/v1/pop/queue/tabled?wait=false", nil)

	r := n.Do(t, "GET", "/status", nil)
	if r.Status != http.StatusOK {
		t.Fatalf("GET /status: %d %s", r.Status, r.Body)
	}
	doc := r.Obj(t)
	fams := scrape(t, n, "/metrics")

	wantJSON := map[api.Kind]string{api.Counter: "number", api.Gauge: "number", api.Info: "string", api.Histogram: "object"}
	wantType := map[api.Kind]dto.MetricType{api.Counter: dto.MetricType_COUNTER, api.Gauge: dto.MetricType_GAUGE, api.Info: dto.MetricType_GAUGE,
		api.Histogram: dto.MetricType_HISTOGRAM}
	leaves := map[string]bool{}
	families := map[string]bool{}
	for _, row := range api.Table {
		// /status: the path exists with the JSON type of its kind.
		v, ok := at(doc, row.Status)
		if !ok {
			t.Errorf("%s: missing from /status", row.Status)
		} else if row.Field != nil {
			leaves[row.Status] = true
			got := kind(v)
			if want := wantJSON[row.Kind]; row.Kind != api.Doc && got != want && !(got == "boolean" && row.Kind == api.Gauge) {
				t.Errorf("%s: %s %v in /status, want %s", row.Status, got, v, want)
			}
			if row.Kind == api.Doc && got == "number" {
				t.Errorf("%s: a number with no metric (give it a Metric, kind Counter or Gauge)", row.Status)
			}
		}

		// /metrics: the family exists with the row's type and label.
		if row.Metric == "" {
			continue
		}
		families[row.Metric] = true
		f := fams[row.Metric]
		if f == nil {
			t.Errorf("%s: family %s missing from /metrics", row.Status, row.Metric)
			continue
		}
		if f.GetType() != wantType[row.Kind] {
			t.Errorf("%s: type %v, want %v", row.Metric, f.GetType(), wantType[row.Kind])
		}
		want := ""
		switch {
		case row.Kind == api.Info:
			want = fmt.Sprintf("%s=%v", row.Label.Name, v)
		case row.Label.Name != "":
			want = row.Label.Name + "=" + row.Label.Value
		}
		found := false
		for _, m := range f.GetMetric() {
			found = found || labelKey(m) == want
		}
		if !found {
			t.Errorf("%s: no series {%s} on /metrics", row.Metric, want)
		}
	}

	// Nothing outside the table.
	var extra []string
	walk(doc, "", leaves, func(path string) {
		if !leaves[path] {
			extra = append(extra, "/status "+path)
		}
	})
	for name := range fams {
		if strings.HasPrefix(name, "queen_") && !families[name] && !notInTable[name] {
			extra = append(extra, "/metrics "+name)
		}
	}
	sort.Strings(extra)
	for _, e := range extra {
		t.Errorf("%s is not a row of api.Table", e)
	}
}

// at finds a dotted path in a decoded JSON object.
func at(obj map[string]any, path string) (any, bool) {
	head, rest, nested := strings.Cut(path, ".")
	v, ok := obj[head]
	if !ok || !nested {
		return v, ok
	}
	inner, ok := v.(map[string]any)
	if !ok {
		return nil, false
	}
	return at(inner, rest)
}

// walk calls leaf with the dotted path of every value that is not an object
// or is a row's own object (a histogram).
func walk(obj map[string]any, prefix string, rows map[string]bool, leaf func(string)) {
	for k, v := range obj {
		if inner, ok := v.(map[string]any); ok && !rows[prefix+k] {
			walk(inner, prefix+k+".", rows, leaf)
			continue
		}
		leaf(prefix + k)
	}
}

func labelKey(m *dto.Metric) string {
	var parts []string
	for _, l := range m.GetLabel() {
		parts = append(parts, l.GetName()+"="+l.GetValue())
	}
	return strings.Join(parts, ",")
}
