package suite

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
)

// metricPopSQL is the node's counter of claim-core calls (docs/operations.md).
const metricPopSQL = "queen_pop_sql_calls_total"

// metricSum reads a node's /metrics and sums every sample of family name
// (all label sets). A node without the family answers 0.
func metricSum(ctx context.Context, base, name string) (float64, error) {
	body, err := get(ctx, base+"/metrics")
	if err != nil {
		return 0, fmt.Errorf("%s/metrics: %w", base, err)
	}
	return parseMetricSum(body, name), nil
}

// parseMetricSum sums the samples of one family in Prometheus text.
func parseMetricSum(body []byte, name string) float64 {
	var sum float64
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		if i := strings.LastIndexByte(rest, '}'); i >= 0 {
			rest = rest[i+1:]
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		if v, err := strconv.ParseFloat(f[0], 64); err == nil {
			sum += v
		}
	}
	return sum
}

// clusterMetric sums a family over every node of urls; the first error wins.
func clusterMetric(ctx context.Context, urls []string, name string) (float64, error) {
	var sum float64
	for _, u := range urls {
		v, err := metricSum(ctx, u, name)
		if err != nil {
			return 0, err
		}
		sum += v
	}
	return sum, nil
}
