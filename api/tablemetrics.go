package api

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// tableCollector exports Table on /metrics: one Snapshot per scrape, no
// SQL, no lock a hot path holds for long. Until MetricsHandler names the
// node core's source it exports only the HTTP layer's own rows.
type tableCollector struct {
	s   *Server
	src atomic.Pointer[sourceRef]
}

type sourceRef struct {
	src      SnapshotSource
	httpAddr string
}

// family is one Prometheus family of Table; rows sharing a name share it.
type family struct {
	desc *prometheus.Desc
	typ  prometheus.ValueType
}

// families are Table's families by name, checked once: a family's rows
// must agree on help, kind and label name, or registration would fail at
// scrape time instead of at start.
var families = func() map[string]family {
	out := map[string]family{}
	seen := map[string]Row{}
	for _, r := range Table {
		if r.Metric == "" {
			continue
		}
		if first, ok := seen[r.Metric]; ok {
			if first.Help != r.Help || first.Kind != r.Kind || first.Label.Name != r.Label.Name {
				panic("api: rows of family " + r.Metric + " disagree on help, kind or label")
			}
			continue
		}
		seen[r.Metric] = r
		var labels []string
		if r.Label.Name != "" {
			labels = []string{r.Label.Name}
		}
		typ := prometheus.GaugeValue
		if r.Kind == Counter {
			typ = prometheus.CounterValue
		}
		out[r.Metric] = family{desc: prometheus.NewDesc(r.Metric, r.Help, labels, nil), typ: typ}
	}
	return out
}()

func (c *tableCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, f := range families {
		ch <- f.desc
	}
}

func (c *tableCollector) Collect(ch chan<- prometheus.Metric) {
	ref := c.src.Load()
	var snap *Snapshot
	if ref != nil {
		snap = c.s.snapshot(ref.src, ref.httpAddr)
	} else {
		snap = c.s.ownSnapshot()
	}
	for _, r := range Table {
		if r.Metric == "" || (ref == nil && !r.Own) {
			continue
		}
		f := families[r.Metric]
		if h, ok := r.Field.(hist); ok {
			count, sum, buckets := h.prometheus(snap)
			ch <- prometheus.MustNewConstHistogram(f.desc, count, sum, buckets)
			continue
		}
		var v float64
		var labels []string
		switch {
		case r.Count != nil:
			v = r.Count(snap)
		case r.Kind == Info:
			v = 1
		default:
			v = r.Field.number(snap)
		}
		switch {
		case r.Kind == Info:
			labels = []string{r.Field.text(snap)}
		case r.Label.Name != "":
			labels = []string{r.Label.Value}
		}
		ch <- prometheus.MustNewConstMetric(f.desc, f.typ, v, labels...)
	}
}
