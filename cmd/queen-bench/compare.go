package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
)

// headline figures come first in a comparison, in this order; every other
// number of the two files follows alphabetically.
var headline = []string{
	"result.pushed_per_s",
	"result.delivered_per_s",
	"result.acked_per_s",
	"result.latency.p50_ms",
	"result.latency.p90_ms",
	"result.latency.p99_ms",
	"result.latency.p99_9_ms",
	"result.latency.max_ms",
	"result.cpu[postgresql].us_per_msg",
	"result.wal_bytes_per_msg",
	"raw.insert.rows_per_s",
	"raw.claim.rows_per_s",
	"raw.push_of_insert",
	"raw.deliver_of_claim",
}

// compareMain prints two --json files side by side with B/A ratios.
func compareMain(args []string) int {
	if len(args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: queen-bench compare A.json B.json")
		return 2
	}
	a, err := loadFlat(args[0])
	if err != nil {
		fmt.Fprintf(os.Stderr, "queen-bench compare: %v\n", err)
		return 2
	}
	b, err := loadFlat(args[1])
	if err != nil {
		fmt.Fprintf(os.Stderr, "queen-bench compare: %v\n", err)
		return 2
	}
	printCompare(os.Stdout, args[0], args[1], a, b)
	return 0
}

func printCompare(w io.Writer, nameA, nameB string, a, b map[string]float64) {
	seen := map[string]bool{}
	var keys []string
	for _, k := range headline {
		if _, ok := a[k]; ok {
			keys = append(keys, k)
			seen[k] = true
		} else if _, ok := b[k]; ok {
			keys = append(keys, k)
			seen[k] = true
		}
	}
	var rest []string
	for k := range a {
		if !seen[k] {
			rest = append(rest, k)
			seen[k] = true
		}
	}
	for k := range b {
		if !seen[k] {
			rest = append(rest, k)
		}
	}
	sort.Strings(rest)
	keys = append(keys, rest...)

	fmt.Fprintf(w, "A = %s\nB = %s\n\n", nameA, nameB)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "figure\tA\tB\tB/A\t")
	for _, k := range keys {
		va, okA := a[k]
		vb, okB := b[k]
		if va == 0 && vb == 0 {
			continue
		}
		ratio := ""
		if okA && okB && va != 0 {
			ratio = fmt.Sprintf("%.2f", vb/va)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t\n", k, cell(va, okA), cell(vb, okB), ratio)
	}
	tw.Flush()
}

func cell(v float64, ok bool) string {
	if !ok {
		return "-"
	}
	abs := v
	if abs < 0 {
		abs = -abs
	}
	switch {
	case abs >= 100 || v == float64(int64(v)):
		return num(v)
	case abs >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3g", v)
	}
}

// loadFlat reads a --json file and flattens its numbers to dotted paths;
// arrays of objects with a "name" are keyed by it (cpu[postgresql]).
func loadFlat(path string) (map[string]float64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, fmt.Errorf("decode %s: %w", path, err)
	}
	out := map[string]float64{}
	flatten("", v, out)
	return out, nil
}

func flatten(prefix string, v any, out map[string]float64) {
	join := func(k string) string {
		if prefix == "" {
			return k
		}
		return prefix + "." + k
	}
	switch t := v.(type) {
	case float64:
		out[prefix] = t
	case bool:
		if t {
			out[prefix] = 1
		} else {
			out[prefix] = 0
		}
	case map[string]any:
		for k, e := range t {
			if strings.HasSuffix(k, "_ns") {
				continue // durations of the config; seconds figures exist
			}
			flatten(join(k), e, out)
		}
	case []any:
		for i, e := range t {
			key := fmt.Sprintf("%s[%d]", prefix, i)
			if m, ok := e.(map[string]any); ok {
				if name, ok := m["name"].(string); ok {
					key = fmt.Sprintf("%s[%s]", prefix, name)
				}
			}
			flatten(key, e, out)
		}
	}
}
