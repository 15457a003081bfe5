package main

import (
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"queen-node/api"
	"queen-node/broker"
	"queen-node/mesh"
	"queen-node/pg"
	"queen-node/protocol"
)

// Config is everything the binary reads from QUEEN_* variables and flags.
type Config struct {
	HTTPAddr  string      // QUEEN_HTTP_ADDR, default ":6632"
	PprofAddr string      // QUEEN_PPROF_ADDR, default "" (off)
	Tenant    string      // QUEEN_TENANT, default "default"
	LogLevel  hclog.Level // QUEEN_LOG_LEVEL, default info
	LogJSON   bool        // QUEEN_LOG_JSON, default false

	HTTP   HTTPLimits
	Broker broker.Config // PGURL, NodeName, pool, pop back-off, hot-list, log report
	Mesh   MeshConfig
}

// HTTPLimits bound what one client connection can hold (docs/operations.md, "Limits").
type HTTPLimits struct {
	ReadHeaderTimeout time.Duration // QUEEN_HTTP_READ_HEADER_TIMEOUT_MS, default 10 s
	BodyTimeout       time.Duration // QUEEN_HTTP_BODY_TIMEOUT_MS, default 30 s (from the end of the headers)
	IdleTimeout       time.Duration // QUEEN_HTTP_IDLE_TIMEOUT_MS, default 120 s (keep-alive)
	WriteTimeout      time.Duration // QUEEN_HTTP_WRITE_TIMEOUT_MS, default 60 s (from a response's first byte)
	MaxConns          int           // QUEEN_HTTP_MAX_CONNS, default 4096 (beyond: 503 and close)
}

// MeshConfig is parsed and validated now so bad settings fail at start;
// the mesh package that consumes it comes later.
type MeshConfig struct {
	Enabled       bool          // QUEEN_MESH, default true
	Bind          string        // QUEEN_MESH_BIND, default "0.0.0.0:7946"
	Advertise     string        // QUEEN_MESH_ADVERTISE, default "" (derived)
	Join          []string      // QUEEN_MESH_JOIN, comma-separated host:port seeds
	Secret        []byte        // QUEEN_MESH_SECRET decoded: 16, 24 or 32 bytes, nil = plaintext
	FlushInterval time.Duration // QUEEN_MESH_FLUSH_MS, default 20 ms
	HintCap       int           // QUEEN_MESH_HINT_CAP, default 200000
	DropRate      float64       // QUEEN_MESH_DROP_RATE, default 0 (chaos knob)
	HintPort      int           // QUEEN_MESH_HINT_PORT, default 0 (any free port, advertised in metadata)
	GossipMS      int           // QUEEN_MESH_GOSSIP_MS, default 200 (memberlist LAN)
	ProbeMS       int           // QUEEN_MESH_PROBE_MS, default 1000 (memberlist LAN); failure detection scales with it

	HintFrameTimeout time.Duration // QUEEN_MESH_HINT_FRAME_TIMEOUT_MS, default 5 s: one inbound frame (and a new stream's first)
	HintIdleTimeout  time.Duration // QUEEN_MESH_HINT_IDLE_TIMEOUT_MS, default 2 min: quiet between frames of an inbound stream
	HintRate         int           // QUEEN_MESH_HINT_RATE, default 100000: hints one peer may have applied per second
}

// setting is one QUEEN_* variable and its flag. apply parses a value into
// the Config; its error text says what is accepted ("want ...").
type setting struct {
	env    string
	flag   string
	def    string
	usage  string
	isBool bool
	secret bool // never echo the value in errors
	apply  func(c *Config, v string) error
}

func settings() []setting {
	return []setting{
		{env: "QUEEN_PG_URL", flag: "pg-url", usage: "PostgreSQL connection URL (empty = libpq PG* variables)", secret: true,
			apply: func(c *Config, v string) error {
				c.Broker.PGURL = v
				// Checked here: the broker retries a database that is down,
				// and would retry an unparseable string forever.
				if err := pg.CheckURL(v); err != nil {
					return fmt.Errorf("want a postgres:// URL or key=value connection string (%v)", err)
				}
				return nil
			}},
		{env: "QUEEN_HTTP_ADDR", flag: "http-addr", def: ":6632", usage: "HTTP listen address",
			apply: func(c *Config, v string) error { c.HTTPAddr = v; return checkAddr(v, false) }},
		{env: "QUEEN_HTTP_READ_HEADER_TIMEOUT_MS", flag: "http-read-header-timeout-ms", def: ms(api.DefaultReadHeaderTimeout), usage: "time a client has to send a request's line and headers",
			apply: func(c *Config, v string) error { return durationMS(v, &c.HTTP.ReadHeaderTimeout, 100, 600000) }},
		{env: "QUEEN_HTTP_BODY_TIMEOUT_MS", flag: "http-body-timeout-ms", def: ms(api.DefaultBodyTimeout), usage: "time a client has to send a request body, after its headers (408 past it)",
			apply: func(c *Config, v string) error { return durationMS(v, &c.HTTP.BodyTimeout, 100, 3600000) }},
		{env: "QUEEN_HTTP_WRITE_TIMEOUT_MS", flag: "http-write-timeout-ms", def: ms(api.DefaultWriteTimeout), usage: "time a client has to take a response, from its first byte (a long-poll's wait is not counted)",
			apply: func(c *Config, v string) error { return durationMS(v, &c.HTTP.WriteTimeout, 100, 3600000) }},
		{env: "QUEEN_HTTP_IDLE_TIMEOUT_MS", flag: "http-idle-timeout-ms", def: ms(api.DefaultIdleTimeout), usage: "how long an idle keep-alive connection stays open",
			apply: func(c *Config, v string) error { return durationMS(v, &c.HTTP.IdleTimeout, 100, 3600000) }},
		{env: "QUEEN_HTTP_MAX_CONNS", flag: "http-max-conns", def: strconv.Itoa(api.DefaultMaxConns), usage: "open client connections; a new one beyond gets 503 and is closed",
			apply: func(c *Config, v string) error {
				var err error
				c.HTTP.MaxConns, err = intIn(v, 1, 1000000)
				return err
			}},
		{env: "QUEEN_NODE_NAME", flag: "node-name", usage: "unique node name in the mesh (default: host name)",
			apply: func(c *Config, v string) error {
				c.Broker.NodeName = v
				if v == "" {
					return nil // filled with the host name below
				}
				return checkName(v)
			}},
		{env: "QUEEN_TENANT", flag: "tenant", def: broker.DefaultTenant, usage: "tenant of requests that carry none",
			apply: func(c *Config, v string) error { c.Tenant = v; return checkName(v) }},
		{env: "QUEEN_PG_MAX_CONNS", flag: "pg-max-conns", def: strconv.Itoa(broker.DefaultPoolMaxConns), usage: "PostgreSQL pool size",
			apply: func(c *Config, v string) error {
				n, err := intIn(v, 1, 10000)
				c.Broker.PoolMaxConns = int32(n)
				return err
			}},
		{env: "QUEEN_POP_BACKOFF_MAX_MS", flag: "pop-backoff-max-ms", def: ms(broker.DefaultPopBackoffMax), usage: "re-poll delay cap of a parked long-poll",
			apply: func(c *Config, v string) error {
				return durationMS(v, &c.Broker.PopBackoffMax, int(broker.DefaultPopBackoffMin/time.Millisecond), 60000)
			}},
		{env: "QUEEN_PUSH_COMBINE", flag: "push-combine", def: "1", isBool: true, usage: "pushes waiting for the one being written go to PostgreSQL together (group commit); 0 = one transaction per push",
			apply: func(c *Config, v string) error { return boolean(v, &c.Broker.PushCombine) }},
		{env: "QUEEN_POP_MAX_BYTES", flag: "pop-max-bytes", def: strconv.Itoa(broker.DefaultMaxPopBytes),
			usage: "payload bytes of one pop response, about (fewer messages past it; the first always fits)",
			apply: func(c *Config, v string) error {
				n, err := intIn(v, 1024, 1<<30)
				c.Broker.MaxPopBytes = int64(n)
				return err
			}},
		{env: "QUEEN_DEFAULT_SUBSCRIPTION_MODE", flag: "default-subscription-mode", usage: "subscription of new consumer groups: all, new or new-only (empty = all)",
			apply: func(c *Config, v string) error {
				// Normalised to "" (= all) or "new"; new-only is an alias (docs/api.md, "Semantics").
				mode, ok := protocol.ParseSubMode(v)
				if !ok {
					return errors.New("want one of all, new, new-only (or empty)")
				}
				c.Broker.DefaultSubscription = ""
				if mode == protocol.SubNew {
					c.Broker.DefaultSubscription = string(protocol.SubNew)
				}
				return nil
			}},
		{env: "QUEEN_PPROF_ADDR", flag: "pprof-addr", usage: "net/http/pprof listen address (empty = off)",
			apply: func(c *Config, v string) error { c.PprofAddr = v; return checkAddr(v, true) }},
		{env: "QUEEN_LOG_LEVEL", flag: "log-level", def: "info", usage: "log level: trace, debug, info, warn, error",
			apply: func(c *Config, v string) error {
				switch strings.ToLower(v) {
				case "trace", "debug", "info", "warn", "error":
					c.LogLevel = hclog.LevelFromString(v)
					return nil
				}
				return errors.New("want one of trace, debug, info, warn, error")
			}},
		{env: "QUEEN_LOG_JSON", flag: "log-json", def: "0", isBool: true, usage: "JSON log lines",
			apply: func(c *Config, v string) error { return boolean(v, &c.LogJSON) }},
		{env: "QUEEN_LOG_TOPN_QUEUES", flag: "log-topn-queues", def: strconv.Itoa(broker.DefaultLogTopN), usage: "busiest rings in the periodic hotlist report",
			apply: func(c *Config, v string) error {
				var err error
				c.Broker.LogTopNQueues, err = intIn(v, 0, 1000)
				return err
			}},

		{env: "QUEEN_HOTLIST", flag: "hotlist", def: "1", isBool: true, usage: "hot-list candidate rings (0 = SQL candidate scan)",
			apply: func(c *Config, v string) error { return boolean(v, &c.Broker.Hotlist) }},
		{env: "QUEEN_HOTLIST_SHARDS", flag: "hotlist-shards", def: strconv.Itoa(broker.DefaultHotlistShards), usage: "sub-rings per ring",
			apply: func(c *Config, v string) error {
				var err error
				c.Broker.HotlistShards, err = intIn(v, 1, 256)
				return err
			}},
		{env: "QUEEN_HOTLIST_RESEED_MS", flag: "hotlist-reseed-ms", def: ms(broker.DefaultHotlistReseed), usage: "per-ring reseed floor interval",
			apply: func(c *Config, v string) error { return durationMS(v, &c.Broker.HotlistReseed, 10, 86400000) }},
		{env: "QUEEN_HOTLIST_IDLE_SWEEP_MS", flag: "hotlist-idle-sweep-ms", def: ms(broker.DefaultHotlistIdle), usage: "idle ring sweep interval (0 = off)",
			apply: func(c *Config, v string) error { return durationMS(v, &c.Broker.HotlistIdleSweep, 0, 86400000) }},
		{env: "QUEEN_HOTLIST_WINDOW_BATCH", flag: "hotlist-window-batch", def: strconv.Itoa(broker.DefaultHotlistWinBatch), usage: "windowBuffer early promotion threshold",
			apply: func(c *Config, v string) error {
				var err error
				c.Broker.HotlistWindowBatch, err = intIn(v, 1, 1000000)
				return err
			}},
		{env: "QUEEN_HOTLIST_TRACE", flag: "hotlist-trace", usage: "queue-name prefix for trace breadcrumbs (empty = off)",
			apply: func(c *Config, v string) error {
				c.Broker.HotlistTrace = v
				if len(v) > broker.MaxNameBytes {
					return fmt.Errorf("want at most %d bytes", broker.MaxNameBytes)
				}
				return nil
			}},

		{env: "QUEEN_MESH", flag: "mesh", def: "1", isBool: true, usage: "membership and hints (0 = off)",
			apply: func(c *Config, v string) error { return boolean(v, &c.Mesh.Enabled) }},
		{env: "QUEEN_MESH_BIND", flag: "mesh-bind", def: "0.0.0.0:7946", usage: "memberlist bind address",
			apply: func(c *Config, v string) error { c.Mesh.Bind = v; return checkHostPort(v) }},
		{env: "QUEEN_MESH_ADVERTISE", flag: "mesh-advertise", usage: "address peers use to reach this node (empty = derived)",
			apply: func(c *Config, v string) error {
				c.Mesh.Advertise = v
				if v == "" {
					return nil
				}
				return checkHostPort(v)
			}},
		{env: "QUEEN_MESH_JOIN", flag: "mesh-join", usage: "comma-separated host:port seeds (empty = start alone)",
			apply: func(c *Config, v string) error {
				c.Mesh.Join = nil
				for _, p := range strings.Split(v, ",") {
					if p = strings.TrimSpace(p); p == "" {
						continue
					}
					if checkHostPort(p) != nil {
						return errors.New("want comma-separated host:port seeds")
					}
					c.Mesh.Join = append(c.Mesh.Join, p)
				}
				return nil
			}},
		{env: "QUEEN_MESH_SECRET", flag: "mesh-secret", usage: "base64 of a 16, 24 or 32-byte key (empty = no encryption)", secret: true,
			apply: func(c *Config, v string) error {
				c.Mesh.Secret = nil
				if v == "" {
					return nil
				}
				key, err := base64.StdEncoding.DecodeString(v)
				if err != nil || (len(key) != 16 && len(key) != 24 && len(key) != 32) {
					return errors.New("want base64 of a 16, 24 or 32-byte key")
				}
				c.Mesh.Secret = key
				return nil
			}},
		{env: "QUEEN_MESH_FLUSH_MS", flag: "mesh-flush-ms", def: "20", usage: "hint flush cadence",
			apply: func(c *Config, v string) error { return durationMS(v, &c.Mesh.FlushInterval, 1, 10000) }},
		{env: "QUEEN_MESH_HINT_CAP", flag: "mesh-hint-cap", def: "200000", usage: "coalescing set bound",
			apply: func(c *Config, v string) error {
				var err error
				c.Mesh.HintCap, err = intIn(v, 1, 100000000)
				return err
			}},
		{env: "QUEEN_MESH_DROP_RATE", flag: "mesh-drop-rate", def: "0", usage: "chaos: fraction of outgoing hint frames dropped",
			apply: func(c *Config, v string) error {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil || math.IsNaN(f) || f < 0 || f > 1 {
					return errors.New("want a number from 0 to 1")
				}
				c.Mesh.DropRate = f
				return nil
			}},
		{env: "QUEEN_MESH_HINT_PORT", flag: "mesh-hint-port", def: "0", usage: "TCP port of the hint stream listener (0 = any free port, advertised to peers)",
			apply: func(c *Config, v string) error {
				var err error
				c.Mesh.HintPort, err = intIn(v, 0, 65535)
				return err
			}},
		{env: "QUEEN_MESH_GOSSIP_MS", flag: "mesh-gossip-ms", def: "200", usage: "memberlist gossip interval",
			apply: func(c *Config, v string) error {
				var err error
				c.Mesh.GossipMS, err = intIn(v, 5, 60000)
				return err
			}},
		{env: "QUEEN_MESH_PROBE_MS", flag: "mesh-probe-ms", def: "1000", usage: "memberlist failure probe interval (probe timeout is half of it)",
			apply: func(c *Config, v string) error {
				var err error
				c.Mesh.ProbeMS, err = intIn(v, 20, 60000)
				return err
			}},
		{env: "QUEEN_MESH_HINT_FRAME_TIMEOUT_MS", flag: "mesh-hint-frame-timeout-ms", def: ms(mesh.DefaultHintFrameTimeout),
			usage: "inbound hint stream: time allowed for one frame once it started, and for a new stream's first frame",
			apply: func(c *Config, v string) error { return durationMS(v, &c.Mesh.HintFrameTimeout, 50, 600000) }},
		{env: "QUEEN_MESH_HINT_IDLE_TIMEOUT_MS", flag: "mesh-hint-idle-timeout-ms", def: ms(mesh.DefaultHintIdleTimeout),
			usage: "inbound hint stream: quiet allowed between frames (senders close idle streams at half of it; same value on every node)",
			apply: func(c *Config, v string) error { return durationMS(v, &c.Mesh.HintIdleTimeout, 1000, 86400000) }},
		{env: "QUEEN_MESH_HINT_RATE", flag: "mesh-hint-rate", def: strconv.Itoa(mesh.DefaultHintRate),
			usage: "received hints one peer may have applied per second (burst: one second's worth); the excess is dropped and counted",
			apply: func(c *Config, v string) error {
				var err error
				c.Mesh.HintRate, err = intIn(v, 1, 100000000)
				return err
			}},
	}
}

// flagValue records whether a flag was given; bool settings also accept a
// bare -flag.
type flagValue struct {
	val    string
	set    bool
	isBool bool
}

func (f *flagValue) String() string     { return f.val }
func (f *flagValue) Set(v string) error { f.val, f.set = v, true; return nil }
func (f *flagValue) IsBoolFlag() bool   { return f.isBool }

// newFlagSet declares one flag per setting; the returned values record
// which flags were given.
func newFlagSet(ss []setting) (*flag.FlagSet, []*flagValue) {
	fs := flag.NewFlagSet("queen-node", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported by main as one line
	vals := make([]*flagValue, len(ss))
	for i, s := range ss {
		vals[i] = &flagValue{val: s.def, isBool: s.isBool}
		def := s.def
		if def == "" {
			def = "empty"
		}
		fs.Var(vals[i], s.flag, fmt.Sprintf("%s (env %s, default %s)", s.usage, s.env, def))
	}
	return fs, vals
}

// printUsage writes the -h text.
func printUsage(w io.Writer) {
	fs, _ := newFlagSet(settings())
	fs.SetOutput(w)
	fmt.Fprintln(w, "usage: queen-node [serve] [flags]")
	fmt.Fprintln(w, "       queen-node status [--addr URL] [--json] [--cluster] [--watch DURATION]")
	fmt.Fprintln(w, "       queen-node version")
	fmt.Fprintln(w, "Every flag has a QUEEN_* environment variable; a flag wins over its variable.")
	fs.PrintDefaults()
}

// loadConfig resolves every setting: the flag if given, else the
// environment variable if non-empty, else the default. It returns
// flag.ErrHelp for -h / -help.
func loadConfig(args []string, getenv func(string) string) (Config, error) {
	ss := settings()
	fs, vals := newFlagSet(ss)
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("unexpected argument %q (flags only; see -h)", fs.Arg(0))
	}

	cfg := Config{Broker: broker.DefaultConfig()}
	for i, s := range ss {
		v, source := s.def, s.env
		switch {
		case vals[i].set:
			v, source = vals[i].val, "-"+s.flag
		case getenv(s.env) != "":
			v = getenv(s.env)
		}
		if err := s.apply(&cfg, strings.TrimSpace(v)); err != nil {
			if s.secret {
				return Config{}, fmt.Errorf("invalid %s: %v", source, err)
			}
			return Config{}, fmt.Errorf("invalid %s=%q: %v", source, v, err)
		}
	}
	if cfg.Broker.NodeName == "" {
		host, err := os.Hostname()
		if err != nil || checkName(host) != nil {
			return Config{}, errors.New("QUEEN_NODE_NAME is not set and the host name is unusable: set QUEEN_NODE_NAME")
		}
		cfg.Broker.NodeName = host
	}
	return cfg, nil
}

func ms(d time.Duration) string { return strconv.Itoa(int(d / time.Millisecond)) }

func intIn(v string, lo, hi int) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, fmt.Errorf("want an integer from %d to %d", lo, hi)
	}
	return n, nil
}

func durationMS(v string, dst *time.Duration, lo, hi int) error {
	n, err := intIn(v, lo, hi)
	if err != nil {
		return fmt.Errorf("want an integer number of milliseconds from %d to %d", lo, hi)
	}
	*dst = time.Duration(n) * time.Millisecond
	return nil
}

func boolean(v string, dst *bool) error {
	switch strings.ToLower(v) {
	case "1", "true":
		*dst = true
	case "0", "false":
		*dst = false
	default:
		return errors.New("want 0 or 1")
	}
	return nil
}

// checkName accepts what the API accepts as a name (1 to 255 bytes).
func checkName(v string) error {
	if v == "" || len(v) > broker.MaxNameBytes || strings.ContainsAny(v, " \t\r\n") {
		return fmt.Errorf("want 1 to %d bytes without spaces", broker.MaxNameBytes)
	}
	return nil
}

// checkAddr validates a listen address ("host:port" or ":port").
func checkAddr(v string, optional bool) error {
	if v == "" && optional {
		return nil
	}
	if checkHostPort(v) != nil {
		return errors.New("want host:port or :port, e.g. :6632")
	}
	return nil
}

func checkHostPort(v string) error {
	_, port, err := net.SplitHostPort(v)
	if err != nil {
		return errors.New("want host:port")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return errors.New("want host:port with a port from 0 to 65535")
	}
	return nil
}
