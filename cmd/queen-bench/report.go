package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"queen-node/internal/bench"
)

// printProgress rewrites the live line (terminals only).
func printProgress(p bench.Progress) {
	left := fmt.Sprintf("%s left", p.Left)
	if p.Draining {
		left = "draining"
	} else if p.Left == 0 {
		left = p.Elapsed.Round(1e9).String()
	}
	fmt.Printf("\r\033[K%-10s push %s/s  deliver %s/s  ack %s/s  backlog %s  p99 %.1f ms  errors %d",
		left, num(p.PushRate), num(p.DelivRate), num(p.AckRate), num(float64(p.Backlog)), p.P99, p.Errors)
}

// num formats with thousands separators and no decimals.
func num(v float64) string { return bench.Thousands(v) }

// printReport writes the final table.
func printReport(w io.Writer, o *Output) {
	r, c := o.Result, o.Config
	mode := "queue mode"
	if c.Groups > 0 {
		mode = fmt.Sprintf("%d groups", c.Groups)
	}
	ack := "batch ack"
	if c.AutoAck {
		ack = "autoAck"
	}
	pace := "as fast as possible"
	if c.Rate > 0 {
		pace = fmt.Sprintf("open loop at %s msgs/s", num(c.Rate))
	}
	fmt.Fprintf(w, "queue %s, %d node(s), %d producers x push batch %d, %d partitions, %d-byte payloads, %s\n",
		r.Queue, len(c.Nodes), c.Producers, c.PushBatch, c.Partitions, c.PayloadBytes, pace)
	fmt.Fprintf(w, "%d consumers per group, %s, pop batch %d, partitions=%d, wait=%v, %s\n\n",
		c.Consumers, mode, c.PopBatch, c.PopPartitions, c.Wait, ack)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	row := func(cells ...string) { fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t") }
	row("", "total", "per second")
	row("pushed (queued)", num(float64(r.Pushed)), num(r.PushedPerSec))
	row("delivered (first, all groups)", num(float64(r.Delivered)), num(r.DeliveredPerSec))
	if c.Backlog {
		row("drained (consumers started after the pushes)", fmt.Sprintf("%.1f s", r.DrainSeconds), num(r.DrainedPerSec))
	}
	row("acked", num(float64(r.Acked)), num(r.AckedPerSec))
	row("redeliveries", num(float64(r.Redeliveries)), "")
	row("push requests / pops / empty pops / acks", fmt.Sprintf("%s / %s / %s / %s",
		num(float64(r.PushRequests)), num(float64(r.Pops)), num(float64(r.EmptyPops)), num(float64(r.AckRequests))), "")
	row("messages per non-empty pop", fmt.Sprintf("%.1f", r.MsgsPerPop), "")
	row("push phase / until last delivery", fmt.Sprintf("%.1f s / %.1f s", r.PushSeconds, r.TotalSeconds), "")
	tw.Flush()

	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	row = func(cells ...string) { fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t") }
	row("latency ms", "count", "p50", "p90", "p99", "p99.9", "max")
	lat := func(name string, l bench.LatencySummary) {
		row(name, num(float64(l.Count)), f2(l.P50), f2(l.P90), f2(l.P99), f2(l.P999), f2(l.Max))
	}
	lat("send -> delivered", r.Latency)
	lat("push request", r.PushLatency)
	tw.Flush()

	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	row = func(cells ...string) { fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t") }
	row("CPU", "seconds", "cores", "us/msg")
	for _, u := range r.CPU {
		if u.Error != "" {
			row(u.Name, "n/a", "", "")
			continue
		}
		row(u.Name, f2(u.Seconds), f2(u.Cores), f2(u.UsPerMsg))
	}
	tw.Flush()
	for _, u := range r.CPU {
		if u.Error != "" {
			fmt.Fprintf(w, "  (%s: %s)\n", u.Name, u.Error)
		}
	}
	if r.WALBytesPerMsg > 0 {
		fmt.Fprintf(w, "WAL written: %.0f bytes per delivered message\n", r.WALBytesPerMsg)
	}

	if o.Raw != nil {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		row = func(cells ...string) { fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t") }
		row("raw PostgreSQL ceiling", "conns", "rows/s", "node figure", "fraction")
		row("INSERT, 100 rows/txn", fmt.Sprint(o.Raw.Insert.Conns), num(o.Raw.Insert.PerSec), num(r.PushedPerSec)+" pushed/s", f2(o.Raw.PushOfInsert))
		row("SKIP LOCKED claim <=100", fmt.Sprint(o.Raw.Claim.Conns), num(o.Raw.Claim.PerSec), num(r.DeliveredPerSec)+" delivered/s", f2(o.Raw.DeliverOfClaim))
		tw.Flush()
	}

	fmt.Fprintln(w)
	if len(r.Errors) > 0 {
		fmt.Fprintln(w, "errors:")
		for _, k := range bench.SortedKeys(r.Errors) {
			fmt.Fprintf(w, "  %-40s %d", k, r.Errors[k])
			if s := r.ErrorSamples[k]; s != "" {
				fmt.Fprintf(w, "  (%s)", strings.TrimSpace(s))
			}
			fmt.Fprintln(w)
		}
	}
	var codes []string
	for _, k := range bench.SortedKeys(r.StatusCodes) {
		codes = append(codes, fmt.Sprintf("%s: %s", k, num(float64(r.StatusCodes[k]))))
	}
	fmt.Fprintf(w, "HTTP status codes: %s\n", strings.Join(codes, ", "))
	ch := r.Check
	fmt.Fprintf(w, "delivery check: %d queued, %d lost, %d duplicates, %d out of order, %d redeliveries, %d unacked over %d group(s)\n",
		ch.Queued, ch.Lost, ch.Duplicates, ch.OutOfOrder, ch.Redeliveries, ch.Unacked, len(ch.Groups))
	for _, p := range ch.Problems {
		fmt.Fprintf(w, "  %s\n", p)
	}
	switch {
	case r.OK:
		fmt.Fprintln(w, "PASS: every queued message delivered exactly once per group, in order per partition; no 5xx")
	case ch.OK && r.ServerErrors == 0 && r.Pushed == 0:
		fmt.Fprintln(w, "FAIL: nothing was queued (every push failed)")
	case r.ServerErrors > 0 && ch.OK:
		fmt.Fprintf(w, "FAIL: %d 5xx answers\n", r.ServerErrors)
	default:
		fmt.Fprintf(w, "FAIL: delivery check failed (5xx answers: %d)\n", r.ServerErrors)
	}
}

func f2(v float64) string { return fmt.Sprintf("%.2f", v) }
