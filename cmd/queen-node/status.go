package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"queen-node/api"
	"queen-node/mesh"
	"queen-node/protocol"
)

// Defaults of the status subcommand.
const (
	defaultStatusAddr  = "http://127.0.0.1:6632"
	statusFetchTimeout = 2 * time.Second // per /status request; a node slower than this is in trouble anyway
	maxStatusBody      = 8 << 20         // a status document is a few KiB; refuse anything absurd
)

// clearScreen moves the cursor home and clears the terminal, so --watch
// redraws in place instead of scrolling.
const clearScreen = "\033[H\033[2J"

type statusOptions struct {
	addr    string
	json    bool
	cluster bool
	watch   time.Duration
}

// statusCmd is `queen-node status`. Exit codes: 0 ok, 1 the node did not
// answer, 2 bad arguments.
func statusCmd(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return statusMain(ctx, args, stdout, stderr)
}

func statusMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	opts, err := parseStatusArgs(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "queen-node status: %v\n", err)
		return exitUsage
	}
	client := &http.Client{Timeout: statusFetchTimeout}

	render := func(w io.Writer) error {
		if opts.cluster {
			return showCluster(ctx, client, opts, w)
		}
		return showNode(ctx, client, opts, w)
	}

	if opts.watch <= 0 {
		var buf bytes.Buffer
		if err := render(&buf); err != nil {
			fmt.Fprintf(stderr, "queen-node status: %v\n", err)
			return exitFailure
		}
		_, _ = stdout.Write(buf.Bytes())
		return 0
	}

	// --watch: render into a buffer first so each frame replaces the last in
	// one write (no flicker); a node that stops answering shows the error
	// on screen and the loop keeps trying until Ctrl-C.
	tick := time.NewTicker(opts.watch)
	defer tick.Stop()
	for {
		var buf bytes.Buffer
		buf.WriteString(clearScreen)
		fmt.Fprintf(&buf, "queen-node status %s   every %s   %s   (Ctrl-C to stop)\n\n",
			opts.addr, opts.watch, time.Now().Format("15:04:05"))
		if err := render(&buf); err != nil {
			fmt.Fprintf(&buf, "%v\n", err)
		}
		_, _ = stdout.Write(buf.Bytes())
		select {
		case <-ctx.Done():
			return 0
		case <-tick.C:
		}
	}
}

// parseStatusArgs reads the flags; the flag package accepts both -addr and
// --addr.
func parseStatusArgs(args []string, stderr io.Writer) (statusOptions, error) {
	opts := statusOptions{}
	fs := flag.NewFlagSet("queen-node status", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported in one line by the caller
	fs.StringVar(&opts.addr, "addr", defaultStatusAddr, "base URL (or host:port) of the node to ask")
	fs.BoolVar(&opts.json, "json", false, "print the raw /status document(s) as JSON")
	fs.BoolVar(&opts.cluster, "cluster", false, "ask every member the node knows and print one row per node")
	fs.DurationVar(&opts.watch, "watch", 0, "redraw every DURATION (e.g. 2s) until Ctrl-C")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stderr)
			fmt.Fprintln(stderr, "usage: queen-node status [--addr URL] [--json] [--cluster] [--watch DURATION]")
			fs.PrintDefaults()
		}
		return opts, err
	}
	if fs.NArg() > 0 {
		return opts, fmt.Errorf("unexpected argument %q (flags only: --addr URL --json --cluster --watch DURATION)", fs.Arg(0))
	}
	if opts.watch < 0 {
		return opts, fmt.Errorf("--watch %s: want a positive duration such as 2s", opts.watch)
	}
	if opts.watch > 0 && opts.watch < 100*time.Millisecond {
		return opts, fmt.Errorf("--watch %s: want at least 100ms", opts.watch)
	}
	base, err := normalizeBaseURL(opts.addr)
	if err != nil {
		return opts, fmt.Errorf("--addr %q: %w", opts.addr, err)
	}
	opts.addr = base
	return opts, nil
}

// normalizeBaseURL accepts "http://host:port", "host:port" and ":port".
func normalizeBaseURL(addr string) (string, error) {
	addr = strings.TrimSpace(addr)
	if addr == "" {
		return "", errors.New("want a URL such as " + defaultStatusAddr)
	}
	if !strings.Contains(addr, "://") {
		if strings.HasPrefix(addr, ":") {
			addr = "127.0.0.1" + addr
		}
		addr = "http://" + addr
	}
	u, err := url.Parse(addr)
	if err != nil {
		return "", errors.New("want a URL such as " + defaultStatusAddr)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", errors.New("want an http:// or https:// URL such as " + defaultStatusAddr)
	}
	return strings.TrimRight(u.Scheme+"://"+u.Host+u.Path, "/"), nil
}

// fetchStatus GETs base/status and returns the raw body and its decoding.
// Errors read "cannot reach URL: why" so the one stderr line says it all.
func fetchStatus(ctx context.Context, client *http.Client, base string) ([]byte, *api.Snapshot, error) {
	target := base + "/status"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("cannot reach %s: %w", target, err)
	}
	// With JWT authentication on, /status needs a read-only token.
	if tok := strings.TrimSpace(os.Getenv("QUEEN_TOKEN")); tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := client.Do(req)
	if err != nil {
		// *url.Error repeats the method and URL; keep only the cause.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, nil, fmt.Errorf("cannot reach %s: %w", target, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxStatusBody))
	if err != nil {
		return nil, nil, fmt.Errorf("cannot reach %s: read: %w", target, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, nil, fmt.Errorf("cannot reach %s: HTTP %d: %s", target, resp.StatusCode, oneLine(body, 120))
	}
	st, err := api.DecodeStatus(body)
	if err != nil {
		return nil, nil, fmt.Errorf("cannot reach %s: not a queen-node status document: %w", target, err)
	}
	return body, st, nil
}

func oneLine(b []byte, n int) string {
	s := strings.Join(strings.Fields(string(b)), " ")
	if len(s) > n {
		s = s[:n] + "..."
	}
	return s
}

// showNode prints one node's status: the raw document with --json, else
// the tables.
func showNode(ctx context.Context, client *http.Client, opts statusOptions, w io.Writer) error {
	raw, st, err := fetchStatus(ctx, client, opts.addr)
	if err != nil {
		return err
	}
	if opts.json {
		_, err := w.Write(raw)
		if len(raw) > 0 && raw[len(raw)-1] != '\n' {
			_, _ = io.WriteString(w, "\n")
		}
		return err
	}
	writeNodeTables(w, st)
	return nil
}

func writeNodeTables(w io.Writer, st *api.Snapshot) {
	fmt.Fprintf(w, "node %s   version %s   uptime %s   http %s   tenant %s\n",
		st.Name, st.Version, fmtUptime(st.UptimeS), dash(st.HTTPAddr), dash(st.Tenant))

	h := st.Hotlist
	if !h.Enabled {
		fmt.Fprint(w, "\nHOTLIST off (SQL candidate scan)\n")
	} else {
		table(w,
			"HOTLIST\tRINGS\tQUEUES\tREADY\tWHEEL\tINFLIGHT",
			fmt.Sprintf("  on\t%d\t%d\t%d\t%d\t%d", h.Rings, h.Queues, h.Ready, h.Wheel, h.Inflight))
		table(w,
			"MARKS\tLOCAL\tREMOTE\tCOMMIT\t\tFLOOR\tRESEEDS\tRESEED ADDED\tRECLAIMED\tSWEPT",
			fmt.Sprintf("\t%d\t%d\t%d\t\t\t%d\t%d\t%d\t%d", h.MarksLocal, h.MarksRemote, h.MarksCommit, h.Reseeds, h.ReseedAdded, h.Reclaimed, h.Swept))
		rows := []string{"TENANT\tQUEUE\tGROUP\tREADY\tWHEEL\tINFLIGHT"}
		for _, r := range h.TopRings {
			rows = append(rows, fmt.Sprintf("%s\t%s\t%s\t%d\t%d\t%d", r.Tenant, r.Queue, r.Group, r.Ready, r.Wheel, r.Inflight))
		}
		if len(h.TopRings) == 0 {
			rows = append(rows, "  (no ring holds work)")
		}
		fmt.Fprint(w, "\nRINGS (busiest first)")
		table(w, rows...)
	}

	m := st.Mesh
	if !m.Enabled {
		fmt.Fprint(w, "\nMESH off\n")
	} else {
		fmt.Fprintf(w, "\nMEMBERS (%d known, %d live peers)", len(m.Members), m.LivePeers)
		rows := []string{"NAME\tADDR\tHTTP\tSTATE"}
		members := append([]mesh.Member(nil), m.Members...)
		sort.Slice(members, func(i, j int) bool { return members[i].Name < members[j].Name })
		for _, mem := range members {
			state := mem.State
			if mem.Self || mem.Name == st.Name {
				state += " (self)"
			}
			rows = append(rows, fmt.Sprintf("%s\t%s\t%s\t%s", mem.Name, dash(mem.Addr), dash(mem.HTTPAddr), state))
		}
		table(w, rows...)
		table(w,
			"HINTS\tFRAMES\tHINTS",
			fmt.Sprintf("  sent\t%d\t%d", m.FramesSent, m.HintsSent),
			fmt.Sprintf("  received\t%d\t%d", m.FramesReceived, m.HintsReceived),
			fmt.Sprintf("  dropped (chaos)\t%d", m.FramesDropped),
			fmt.Sprintf("  dropped (peer queue)\t%d", m.QueueDropped),
			fmt.Sprintf("  rejected\t%d", m.FramesRejected))
		table(w,
			"COALESCER\tSIZE\tCAP\tDROPPED",
			fmt.Sprintf("\t%d\t%d\t%d", m.CoalescerSize, m.CoalescerCap, m.CoalescerDropped))
	}

	p := st.PG
	table(w,
		"PG POOL\tACQUIRED\tIDLE\tTOTAL\tMAX\tACQUIRES\tEMPTY ACQUIRES\tNEW CONNS",
		fmt.Sprintf("\t%d\t%d\t%d\t%d\t%d\t%d\t%d", p.AcquiredConns, p.IdleConns, p.TotalConns, p.MaxConns, p.AcquireCount, p.EmptyAcquire, p.NewConns))

	q := st.Requests
	table(w,
		"REQUESTS\tCOUNT\tMESSAGES\tDETAIL",
		fmt.Sprintf("  push\t%d\t%d\tduplicates %d", q.Pushes, q.PushedItems, q.Duplicates),
		fmt.Sprintf("  pop\t%d\t%d\twith messages %d, empty %d, sql calls %d", q.Pops, q.PoppedItems, q.PopsMessages, q.PopsEmpty, q.PopSQLCalls),
		fmt.Sprintf("  ack\t%d\t-\trefused %d, dead-lettered %d", q.Acks, q.AcksRefused, q.DeadLettered),
		fmt.Sprintf("  transaction\t%d\t-", q.Transactions))
	fmt.Fprintf(w, "parked long-polls %d   in flight %d   undelivered leases released %d\n", st.Parked, st.InFlight, q.LeasesDropped)
}

// table writes a blank line and rows aligned on their tabs. Each table
// gets its own tabwriter so columns of different tables do not widen
// each other.
func table(w io.Writer, rows ...string) {
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, r := range rows {
		fmt.Fprintln(tw, r)
	}
	_ = tw.Flush()
}

// memberResult is one row of the cluster view.
type memberResult struct {
	Name     string               `json:"name"`
	State    protocol.MemberState `json:"state"`
	HTTPAddr string               `json:"http_addr"`
	URL      string               `json:"url"`
	Error    string               `json:"error,omitempty"`
	Status   json.RawMessage      `json:"status,omitempty"`
	st       *api.Snapshot
}

// showCluster asks the node at opts.addr for its members, then every
// member's own /status concurrently, and prints one row per member.
func showCluster(ctx context.Context, client *http.Client, opts statusOptions, w io.Writer) error {
	seedRaw, seed, err := fetchStatus(ctx, client, opts.addr)
	if err != nil {
		return err
	}
	members := seed.Mesh.Members
	if len(members) == 0 { // mesh off: the cluster is this node
		members = []mesh.Member{{Name: seed.Name, HTTPAddr: seed.HTTPAddr, State: protocol.MemberAlive, Self: true}}
	}
	rows := make([]memberResult, len(members))
	var wg sync.WaitGroup
	for i, m := range members {
		rows[i] = memberResult{Name: m.Name, State: m.State, HTTPAddr: m.HTTPAddr}
		if m.Self || m.Name == seed.Name {
			// The seed already answered; its advertised address may not be
			// reachable from here (e.g. it listens on a wildcard).
			rows[i].URL, rows[i].Status, rows[i].st = opts.addr, seedRaw, seed
			continue
		}
		base, err := memberBaseURL(m, opts.addr)
		if err != nil {
			rows[i].Error = err.Error()
			continue
		}
		rows[i].URL = base
		wg.Add(1)
		go func(r *memberResult) {
			defer wg.Done()
			raw, st, err := fetchStatus(ctx, client, r.URL)
			if err != nil {
				r.Error = err.Error()
				return
			}
			r.Status, r.st = raw, st
		}(&rows[i])
	}
	wg.Wait()
	sort.Slice(rows, func(i, j int) bool { return rows[i].Name < rows[j].Name })

	if opts.json {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			Members []memberResult `json:"members"`
		}{rows})
	}

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	defer tw.Flush()
	fmt.Fprintf(tw, "cluster seen by %s (%s): %d members\n\n", seed.Name, opts.addr, len(rows))
	fmt.Fprintln(tw, "NAME\tSTATE\tHTTP\tUPTIME\tRINGS\tREADY\tWHEEL\tMARKS L/R\tHINTS S/R\tFRAMES DROP/REJ\tPG ACQ/MAX")
	for _, r := range rows {
		if r.st == nil {
			// The error is the line's last cell: tabwriter does not align
			// it, so a long message does not widen the columns.
			fmt.Fprintf(tw, "%s\t%s\t%s\tunreachable: %s\n", r.Name, dash(string(r.State)), dash(r.HTTPAddr), shortErr(r.Error))
			continue
		}
		s := r.st
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d/%d\t%d/%d\t%d/%d\t%d/%d\n",
			r.Name, dash(string(r.State)), dash(r.HTTPAddr), fmtUptime(s.UptimeS),
			s.Hotlist.Rings, s.Hotlist.Ready, s.Hotlist.Wheel,
			s.Hotlist.MarksLocal, s.Hotlist.MarksRemote,
			s.Mesh.HintsSent, s.Mesh.HintsReceived,
			s.Mesh.FramesDropped, s.Mesh.FramesRejected,
			s.PG.AcquiredConns, s.PG.MaxConns)
	}
	return nil
}

// shortErr drops the "cannot reach URL/status: " prefix: the row already
// names the member and its address.
func shortErr(e string) string {
	if _, rest, ok := strings.Cut(e, "/status: "); ok && strings.HasPrefix(e, "cannot reach ") {
		return rest
	}
	return e
}

// memberBaseURL turns a member's advertised HTTP address into a base URL.
// A node listening on a wildcard (":6632", "[::]:6632") advertises an
// address without a usable host; its mesh address names the host peers
// reach it on, so that host is used instead.
func memberBaseURL(m mesh.Member, seedURL string) (string, error) {
	addr := strings.TrimSpace(m.HTTPAddr)
	if addr == "" {
		return "", errors.New("no http address advertised")
	}
	if strings.Contains(addr, "://") {
		return normalizeBaseURL(addr)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("bad http address %q: %w", addr, err)
	}
	if unspecifiedHost(host) {
		host = ""
		if mh, _, err := net.SplitHostPort(m.Addr); err == nil && !unspecifiedHost(mh) {
			host = mh
		} else if u, err := url.Parse(seedURL); err == nil {
			host = u.Hostname()
		}
	}
	return "http://" + net.JoinHostPort(host, port), nil
}

func unspecifiedHost(h string) bool {
	if h == "" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsUnspecified()
}

// fmtUptime renders seconds as a Go duration rounded to the second (1h2m3s).
func fmtUptime(s float64) string {
	return (time.Duration(s * float64(time.Second))).Round(time.Second).String()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
