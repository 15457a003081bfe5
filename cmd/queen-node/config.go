package main

import (
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"queen-node/broker"
	"queen-node/node"
	"queen-node/pg"
	"queen-node/protocol"
)

// Config is everything the binary reads from QUEEN_* variables and flags:
// the node's configuration (package node nests every package's settings)
// and the process's logging.
type Config struct {
	Node     node.Config // every default from node.DefaultConfig
	LogLevel hclog.Level // QUEEN_LOG_LEVEL, default info
	LogJSON  bool        // QUEEN_LOG_JSON, default false
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
	raw    bool // taken byte for byte: a shared secret ending in a space must still match the identity provider's
	apply  func(c *Config, v string) error
}

func settings() []setting {
	// Every default is the packages' own, read from node.DefaultConfig; the
	// strings are what -h prints and what an unset variable resolves to.
	d := node.DefaultConfig()
	return []setting{
		{env: "QUEEN_PG_URL", flag: "pg-url", usage: "PostgreSQL connection URL (empty = libpq PG* variables)", secret: true,
			apply: func(c *Config, v string) error {
				c.Node.Broker.PG.URL = v
				// Checked here: the broker retries a database that is down,
				// and would retry an unparseable string forever.
				if err := pg.CheckURL(v); err != nil {
					return fmt.Errorf("want a postgres:// URL or key=value connection string (%v)", err)
				}
				return nil
			}},
		{env: "QUEEN_HTTP_ADDR", flag: "http-addr", def: d.HTTPAddr, usage: "HTTP listen address",
			apply: func(c *Config, v string) error { c.Node.HTTPAddr = v; return checkAddr(v, false) }},
		{env: "QUEEN_HTTP_READ_HEADER_TIMEOUT_MS", flag: "http-read-header-timeout-ms", def: ms(d.API.ReadHeaderTimeout), usage: "time a client has to send a request's line and headers",
			apply: func(c *Config, v string) error { return durationMS(v, &c.Node.API.ReadHeaderTimeout, 100, 600000) }},
		{env: "QUEEN_HTTP_BODY_TIMEOUT_MS", flag: "http-body-timeout-ms", def: ms(d.API.BodyTimeout), usage: "time a client has to send a request body, after its headers (408 past it)",
			apply: func(c *Config, v string) error { return durationMS(v, &c.Node.API.BodyTimeout, 100, 3600000) }},
		{env: "QUEEN_HTTP_WRITE_TIMEOUT_MS", flag: "http-write-timeout-ms", def: ms(d.API.WriteTimeout), usage: "time a client has to take a response, from its first byte (a long-poll's wait is not counted)",
			apply: func(c *Config, v string) error { return durationMS(v, &c.Node.API.WriteTimeout, 100, 3600000) }},
		{env: "QUEEN_HTTP_IDLE_TIMEOUT_MS", flag: "http-idle-timeout-ms", def: ms(d.API.IdleTimeout), usage: "how long an idle keep-alive connection stays open",
			apply: func(c *Config, v string) error { return durationMS(v, &c.Node.API.IdleTimeout, 100, 3600000) }},
		{env: "QUEEN_HTTP_MAX_CONNS", flag: "http-max-conns", def: strconv.Itoa(d.API.MaxConns), usage: "open client connections; a new one beyond gets 503 and is closed",
			apply: func(c *Config, v string) error {
				var err error
				c.Node.API.MaxConns, err = intIn(v, 1, 1000000)
				return err
			}},
		{env: "QUEEN_HTTP_MAX_CONNS_PER_ADDR", flag: "http-max-conns-per-addr", def: strconv.Itoa(d.API.MaxConnsPerAddr), usage: "open client connections from one source IP (IPv6: one /64), at most QUEEN_HTTP_MAX_CONNS; behind one proxy, raise it to QUEEN_HTTP_MAX_CONNS",
			apply: func(c *Config, v string) error {
				var err error
				c.Node.API.MaxConnsPerAddr, err = intIn(v, 1, 1000000)
				return err
			}},
		{env: "QUEEN_NODE_NAME", flag: "node-name", usage: "unique node name in the mesh (default: host name)",
			apply: func(c *Config, v string) error {
				c.Node.Broker.NodeName = v
				if v == "" {
					return nil // filled with the host name below
				}
				return checkName(v)
			}},
		{env: "QUEEN_TENANT", flag: "tenant", def: d.API.Tenant, usage: "tenant of requests that carry none",
			apply: func(c *Config, v string) error { c.Node.API.Tenant = v; return checkName(v) }},
		{env: "QUEEN_PG_MAX_CONNS", flag: "pg-max-conns", def: strconv.Itoa(int(d.Broker.PG.MaxConns)), usage: "PostgreSQL pool size",
			apply: func(c *Config, v string) error {
				n, err := intIn(v, 1, 10000)
				c.Node.Broker.PG.MaxConns = int32(n)
				return err
			}},
		{env: "QUEEN_POP_BACKOFF_MAX_MS", flag: "pop-backoff-max-ms", def: ms(d.Broker.PopBackoffMax), usage: "re-poll delay cap of a parked long-poll",
			apply: func(c *Config, v string) error {
				return durationMS(v, &c.Node.Broker.PopBackoffMax, int(d.Broker.PopBackoffMin/time.Millisecond), 60000)
			}},
		{env: "QUEEN_PUSH_COMBINE", flag: "push-combine", def: boolDef(d.Broker.PushCombine), isBool: true, usage: "pushes waiting for the one being written go to PostgreSQL together (group commit); 0 = one transaction per push",
			apply: func(c *Config, v string) error { return boolean(v, &c.Node.Broker.PushCombine) }},
		{env: "QUEEN_PUSH_LANES", flag: "push-lanes", def: strconv.Itoa(d.Broker.PushLanes),
			usage: "group commits that run side by side (1 to 16, at most a quarter of the pool), each for its own share of the partitions (a partition always goes through the same one); 1 = one push flush at a time",
			apply: func(c *Config, v string) error {
				n, err := intIn(v, 1, broker.MaxPushLanes)
				c.Node.Broker.PushLanes = n
				return err
			}},
		{env: "QUEEN_BULK_PROVISION", flag: "bulk-provision", def: boolDef(d.Broker.BulkProvision), isBool: true, usage: "a claim that meets partitions without the group's consumer row has the group's rows of the whole queue made in pages of 1,000; 0 = each claim makes its own candidates' rows",
			apply: func(c *Config, v string) error { return boolean(v, &c.Node.Broker.BulkProvision) }},
		{env: "QUEEN_POP_COMBINE", flag: "pop-combine", def: boolDef(d.Broker.PopCombine), isBool: true, usage: "claims waiting for the ones being run go to PostgreSQL together, one transaction per flush; 0 = one transaction per claim",
			apply: func(c *Config, v string) error { return boolean(v, &c.Node.Broker.PopCombine) }},
		{env: "QUEEN_ACK_CAS", flag: "ack-cas", def: boolDef(d.Broker.AckCAS), isBool: true, usage: "an ack of exactly a batch this node served under a lease is one compare-and-set, merged with concurrent ones; 0 = every ack through ack_v1",
			apply: func(c *Config, v string) error { return boolean(v, &c.Node.Broker.AckCAS) }},
		{env: "QUEEN_POP_PREFETCH", flag: "pop-prefetch", def: boolDef(d.Broker.PopPrefetch), isBool: true, usage: "an ack of a lease this node handed to its own client also takes that pop's next claim, in the ack's flight, for the client's next pop (and, forwarding a client's ack to its queue's owner, this node asks the owner to); 0 = neither",
			apply: func(c *Config, v string) error { return boolean(v, &c.Node.Broker.PopPrefetch) }},
		{env: "QUEEN_POP_MAX_BYTES", flag: "pop-max-bytes", def: strconv.Itoa(int(d.Broker.MaxPopBytes)),
			usage: "payload bytes of one pop response, about (fewer messages past it; the first always fits)",
			apply: func(c *Config, v string) error {
				n, err := intIn(v, 1024, 1<<30)
				c.Node.Broker.MaxPopBytes = int64(n)
				return err
			}},
		{env: "QUEEN_READ_MAX_BYTES", flag: "read-max-bytes", def: strconv.Itoa(int(d.API.MaxReadBytes)),
			usage: "bytes of one read answer's rows, about (DLQ, traces: fewer rows past it and truncated, the first always fits; a stream state read past it is a 413)",
			apply: func(c *Config, v string) error {
				n, err := intIn(v, 64<<10, 1<<30)
				c.Node.API.MaxReadBytes = int64(n)
				return err
			}},
		{env: "QUEEN_DEFAULT_SUBSCRIPTION_MODE", flag: "default-subscription-mode", usage: "subscription of new consumer groups: all, new or new-only (empty = all)",
			apply: func(c *Config, v string) error {
				// Normalised to "" (= all) or "new"; new-only is an alias (docs/api.md, "Semantics").
				mode, ok := protocol.ParseSubMode(v)
				if !ok {
					return errors.New("want one of all, new, new-only (or empty)")
				}
				c.Node.Broker.DefaultSubscription = ""
				if mode == protocol.SubNew {
					c.Node.Broker.DefaultSubscription = string(protocol.SubNew)
				}
				return nil
			}},
		// Maintenance modes (docs/api.md, "Maintenance modes"; docs/operations.md).
		{env: "QUEEN_BUFFER_DIR", flag: "buffer-dir", usage: "directory of this node's push buffer file, used during push maintenance; give it a persistent disk (empty = <temp dir>/queen-node-buffer/<node name>)",
			apply: func(c *Config, v string) error { c.Node.Broker.Maintenance.BufferDir = v; return nil }},
		{env: "QUEEN_BUFFER_MAX_BYTES", flag: "buffer-max-bytes", def: strconv.FormatInt(d.Broker.Maintenance.BufferMaxBytes, 10),
			usage: "bound of the push buffer file; pushes past it are answered 503",
			apply: func(c *Config, v string) error {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil || n < 1<<20 || n > 1<<40 {
					return fmt.Errorf("want an integer from %d to %d", 1<<20, int64(1)<<40)
				}
				c.Node.Broker.Maintenance.BufferMaxBytes = n
				return nil
			}},
		{env: "QUEEN_MAINTENANCE_REFRESH_MS", flag: "maintenance-refresh-ms", def: ms(d.Broker.Maintenance.RefreshInterval),
			usage: "how often the node reads the cluster's maintenance switches from PostgreSQL",
			apply: func(c *Config, v string) error {
				return durationMS(v, &c.Node.Broker.Maintenance.RefreshInterval, 50, 60000)
			}},
		{env: "QUEEN_PPROF_ADDR", flag: "pprof-addr", usage: "net/http/pprof listen address (empty = off)",
			apply: func(c *Config, v string) error { c.Node.PprofAddr = v; return checkAddr(v, true) }},
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
		{env: "QUEEN_LOG_TOPN_QUEUES", flag: "log-topn-queues", def: strconv.Itoa(d.Broker.LogTopNQueues), usage: "busiest rings in the periodic hotlist report",
			apply: func(c *Config, v string) error {
				var err error
				c.Node.Broker.LogTopNQueues, err = intIn(v, 0, 1000)
				return err
			}},

		{env: "QUEEN_HOTLIST", flag: "hotlist", def: boolDef(d.Broker.Hotlist.Enabled), isBool: true, usage: "hot-list candidate rings (0 = SQL candidate scan)",
			apply: func(c *Config, v string) error { return boolean(v, &c.Node.Broker.Hotlist.Enabled) }},
		{env: "QUEEN_HOTLIST_SHARDS", flag: "hotlist-shards", def: strconv.Itoa(d.Broker.Hotlist.Shards), usage: "sub-rings per ring",
			apply: func(c *Config, v string) error {
				var err error
				c.Node.Broker.Hotlist.Shards, err = intIn(v, 1, 256)
				return err
			}},
		{env: "QUEEN_HOTLIST_RESEED_MS", flag: "hotlist-reseed-ms", def: ms(d.Broker.Hotlist.ReseedInterval), usage: "per-ring reseed floor interval",
			apply: func(c *Config, v string) error {
				return durationMS(v, &c.Node.Broker.Hotlist.ReseedInterval, 10, 86400000)
			}},
		{env: "QUEEN_HOTLIST_IDLE_SWEEP_MS", flag: "hotlist-idle-sweep-ms", def: ms(d.Broker.Hotlist.IdleSweep), usage: "idle ring sweep interval (0 = off)",
			apply: func(c *Config, v string) error { return durationMS(v, &c.Node.Broker.Hotlist.IdleSweep, 0, 86400000) }},
		// The churn reseed (broker/churn.go): 0 switches it off.
		{env: "QUEEN_HOTLIST_CHURN_COOLDOWN_MS", flag: "hotlist-churn-cooldown-ms", def: ms(d.Broker.Churn.Cooldown),
			usage: "least time between two passes reseeding every ring after a membership change or a freeze (0 = off)",
			apply: func(c *Config, v string) error {
				if err := durationMS(v, &c.Node.Broker.Churn.Cooldown, 0, 3600000); err != nil {
					return err
				}
				if c.Node.Broker.Churn.Cooldown == 0 {
					c.Node.Broker.Churn.Check = 0
				}
				return nil
			}},
		{env: "QUEEN_HOTLIST_WINDOW_BATCH", flag: "hotlist-window-batch", def: strconv.Itoa(d.Broker.Hotlist.WindowBatch), usage: "windowBuffer early promotion threshold",
			apply: func(c *Config, v string) error {
				var err error
				c.Node.Broker.Hotlist.WindowBatch, err = intIn(v, 1, 1000000)
				return err
			}},
		// Early reseeds after lost hints (docs/hotlist.md, issue 13).
		{env: "QUEEN_HOTLIST_EARLY_RESEED_MS", flag: "hotlist-early-reseed-ms", def: ms(d.Broker.Hotlist.EarlyReseedMin),
			usage: "after lost hints: at most one early reseed per ring per this interval",
			apply: func(c *Config, v string) error {
				return durationMS(v, &c.Node.Broker.Hotlist.EarlyReseedMin, 10, 86400000)
			}},
		{env: "QUEEN_HOTLIST_EARLY_RESEED_RATE", flag: "hotlist-early-reseed-rate", def: strconv.Itoa(d.Broker.Hotlist.EarlyReseedRate),
			usage: "after lost hints: early reseeds per second over all rings (burst: one second's worth)",
			apply: func(c *Config, v string) error {
				var err error
				c.Node.Broker.Hotlist.EarlyReseedRate, err = intIn(v, 1, 1000000)
				return err
			}},
		{env: "QUEEN_HOTLIST_TRACE", flag: "hotlist-trace", usage: "queue-name prefix for trace breadcrumbs (empty = off)",
			apply: func(c *Config, v string) error {
				c.Node.Broker.Hotlist.TracePrefix = v
				if len(v) > broker.MaxNameBytes {
					return fmt.Errorf("want at most %d bytes", broker.MaxNameBytes)
				}
				return nil
			}},

		// The stats sampler behind the status and analytics reads (package stats).
		{env: "QUEEN_STATS_INTERVAL_MS", flag: "stats-interval-ms", def: ms(d.Stats.Interval), usage: "node samples for /api/v1/status and /api/v1/analytics (0 = sampler off)",
			apply: func(c *Config, v string) error { return durationMS(v, &c.Node.Stats.Interval, 0, 86400000) }},
		{env: "QUEEN_STATS_QUEUE_INTERVAL_MS", flag: "stats-queue-interval-ms", def: ms(d.Stats.QueueInterval), usage: "queue-sampling rounds, one node per round (never below the node interval)",
			apply: func(c *Config, v string) error { return durationMS(v, &c.Node.Stats.QueueInterval, 1000, 86400000) }},
		{env: "QUEEN_STATS_KEEP_HOURS", flag: "stats-keep-hours", def: strconv.Itoa(int(d.Stats.Keep / time.Hour)), usage: "samples older than this are deleted",
			apply: func(c *Config, v string) error {
				h, err := intIn(v, 1, 24*366)
				c.Node.Stats.Keep = time.Duration(h) * time.Hour
				return err
			}},
		// Retention (docs/api.md, "Retention"; docs/operations.md, "Retention").
		{env: "QUEEN_RETENTION_INTERVAL_MS", flag: "retention-interval-ms", def: ms(d.Retention.Interval), usage: "retention pass interval, Queen's RETENTION_INTERVAL; one node of the cluster at a time runs it (0 = never on this node)",
			apply: func(c *Config, v string) error { return durationMS(v, &c.Node.Retention.Interval, 0, 86400000) }},
		{env: "QUEEN_RETENTION_BATCH", flag: "retention-batch", def: strconv.Itoa(d.Retention.Batch), usage: "messages one retention delete statement looks at (each batch is its own short transaction)",
			apply: func(c *Config, v string) error {
				var err error
				c.Node.Retention.Batch, err = intIn(v, 1, 100000)
				return err
			}},
		{env: "QUEEN_RETENTION_BATCH_PAUSE_MS", flag: "retention-batch-pause-ms", def: ms(d.Retention.BatchPause), usage: "pause between two retention delete batches, to leave a saturated PostgreSQL to pushes and pops (0 = none)",
			apply: func(c *Config, v string) error { return durationMS(v, &c.Node.Retention.BatchPause, 0, 60000) }},

		// JWT authentication keeps Queen's variable names (JWT_*, not QUEEN_JWT_*).
		{env: "JWT_ENABLED", flag: "jwt-enabled", def: boolDef(d.Auth.Enabled), isBool: true, usage: "JWT bearer authentication of the API (0 = off)",
			apply: func(c *Config, v string) error { return boolean(v, &c.Node.Auth.Enabled) }},
		{env: "JWT_ALGORITHM", flag: "jwt-algorithm", def: d.Auth.Algorithm, usage: "token signature algorithm: HS256, RS256 or ES256",
			apply: func(c *Config, v string) error {
				switch strings.ToUpper(v) {
				case "HS256", "RS256", "ES256":
					c.Node.Auth.Algorithm = strings.ToUpper(v)
					return nil
				}
				return errors.New("want one of HS256, RS256, ES256")
			}},
		{env: "JWT_SECRET", flag: "jwt-secret", usage: "HS256 shared secret", secret: true, raw: true,
			apply: func(c *Config, v string) error { c.Node.Auth.Secret = v; return nil }},
		{env: "JWT_PUBLIC_KEY", flag: "jwt-public-key", usage: `PEM public key for RS256/ES256 (a one-line value may write its newlines as \n)`,
			apply: func(c *Config, v string) error {
				// A PEM in one line (e.g. a container env file) may spell its newlines as \n.
				if !strings.Contains(v, "\n") {
					v = strings.ReplaceAll(v, `\n`, "\n")
				}
				c.Node.Auth.PublicKey = v
				return nil
			}},
		{env: "JWT_JWKS_URL", flag: "jwt-jwks-url", usage: "JWKS URL for RS256/ES256 (keys by kid; an unknown kid refetches, rate-limited)",
			apply: func(c *Config, v string) error { c.Node.Auth.JWKSURL = v; return nil }},
		{env: "JWT_ISSUER", flag: "jwt-issuer", usage: "required token issuer (iss) when set",
			apply: func(c *Config, v string) error { c.Node.Auth.Issuer = v; return nil }},
		{env: "JWT_AUDIENCE", flag: "jwt-audience", usage: "required token audience (aud) when set",
			apply: func(c *Config, v string) error { c.Node.Auth.Audience = v; return nil }},
		{env: "JWT_CLOCK_SKEW", flag: "jwt-clock-skew", def: strconv.Itoa(int(d.Auth.ClockSkew / time.Second)), usage: "seconds of leeway for exp and nbf",
			apply: func(c *Config, v string) error {
				n, err := intIn(v, 0, 3600)
				if err != nil {
					return errors.New("want an integer number of seconds from 0 to 3600")
				}
				c.Node.Auth.ClockSkew = time.Duration(n) * time.Second
				return nil
			}},
		{env: "JWT_ROLE_CLAIM", flag: "jwt-role-claim", def: d.Auth.RoleClaim, usage: "claim holding the role (a string)",
			apply: func(c *Config, v string) error { c.Node.Auth.RoleClaim = v; return nonEmpty(v) }},
		{env: "JWT_ROLES_CLAIM", flag: "jwt-roles-claim", def: d.Auth.RolesClaim, usage: "claim holding roles (an array of strings)",
			apply: func(c *Config, v string) error { c.Node.Auth.RolesClaim = v; return nonEmpty(v) }},
		{env: "JWT_TENANT_CLAIM", flag: "jwt-tenant-claim", def: d.Auth.TenantClaim, usage: "claim holding the request's tenant (absent = QUEEN_TENANT)",
			apply: func(c *Config, v string) error { c.Node.Auth.TenantClaim = v; return nonEmpty(v) }},
		{env: "JWT_ROLE_READ_ONLY", flag: "jwt-role-read-only", def: d.Auth.RoleReadOnly, usage: "role value of read-only access",
			apply: func(c *Config, v string) error { c.Node.Auth.RoleReadOnly = v; return nonEmpty(v) }},
		{env: "JWT_ROLE_READ_WRITE", flag: "jwt-role-read-write", def: d.Auth.RoleReadWrite, usage: "role value of read-write access",
			apply: func(c *Config, v string) error { c.Node.Auth.RoleReadWrite = v; return nonEmpty(v) }},
		{env: "JWT_ROLE_ADMIN", flag: "jwt-role-admin", def: d.Auth.RoleAdmin, usage: "role value of admin access",
			apply: func(c *Config, v string) error { c.Node.Auth.RoleAdmin = v; return nonEmpty(v) }},
		{env: "JWT_SKIP_PATHS", flag: "jwt-skip-paths", def: strings.Join(d.Auth.SkipPaths, ","), usage: "comma-separated paths never authenticated (exact match)",
			apply: func(c *Config, v string) error {
				c.Node.Auth.SkipPaths = []string{}
				for _, p := range strings.Split(v, ",") {
					if p = strings.TrimSpace(p); p == "" {
						continue
					}
					if !strings.HasPrefix(p, "/") {
						return errors.New("want comma-separated paths starting with /")
					}
					c.Node.Auth.SkipPaths = append(c.Node.Auth.SkipPaths, p)
				}
				return nil
			}},

		{env: "QUEEN_MESH", flag: "mesh", def: boolDef(d.Mesh.Enabled), isBool: true, usage: "membership and hints (0 = off)",
			apply: func(c *Config, v string) error { return boolean(v, &c.Node.Mesh.Enabled) }},
		{env: "QUEEN_PUSH_FORWARD", flag: "push-forward", def: boolDef(d.Forward.Enabled), isBool: true,
			usage: "store each pushed item on the node that owns its queue (needs the mesh; 0 = store every push where it arrives)",
			apply: func(c *Config, v string) error { return boolean(v, &c.Node.Forward.Enabled) }},
		{env: "QUEEN_PUSH_FORWARD_TIMEOUT_MS", flag: "push-forward-timeout-ms", def: ms(d.Forward.Timeout),
			usage: "bound of one forwarded push or ack, and a forwarded pop's margin beyond its wait; past it this node serves the request",
			apply: func(c *Config, v string) error { return durationMS(v, &c.Node.Forward.Timeout, 1, 50000) }}, // below the 60 s write timeout, fallback included
		{env: "QUEEN_PUSH_FORWARD_COOLDOWN_MS", flag: "push-forward-cooldown-ms", def: ms(d.Forward.Cooldown),
			usage: "after a failed forward, how long the owner's queues are served on this node without asking it",
			apply: func(c *Config, v string) error { return durationMS(v, &c.Node.Forward.Cooldown, 1, 600000) }},
		{env: "QUEEN_CONSUME_FORWARD", flag: "consume-forward", def: boolDef(d.Forward.Consume), isBool: true,
			usage: "serve each queue's pops and acks on the node that owns it (needs a sealed mesh; 0 = serve them where they arrive)",
			apply: func(c *Config, v string) error { return boolean(v, &c.Node.Forward.Consume) }},
		{env: "QUEEN_MESH_BIND", flag: "mesh-bind", def: d.Mesh.Bind, usage: "memberlist bind address",
			apply: func(c *Config, v string) error { c.Node.Mesh.Bind = v; return checkHostPort(v) }},
		{env: "QUEEN_MESH_ADVERTISE", flag: "mesh-advertise", usage: "address peers use to reach this node (empty = derived)",
			apply: func(c *Config, v string) error {
				c.Node.Mesh.Advertise = v
				if v == "" {
					return nil
				}
				return checkHostPort(v)
			}},
		{env: "QUEEN_MESH_JOIN", flag: "mesh-join", usage: "comma-separated host:port seeds (empty = start alone)",
			apply: func(c *Config, v string) error {
				c.Node.Mesh.Join = nil
				for _, p := range strings.Split(v, ",") {
					if p = strings.TrimSpace(p); p == "" {
						continue
					}
					if checkHostPort(p) != nil {
						return errors.New("want comma-separated host:port seeds")
					}
					c.Node.Mesh.Join = append(c.Node.Mesh.Join, p)
				}
				return nil
			}},
		{env: "QUEEN_MESH_SECRET", flag: "mesh-secret", usage: "base64 of a 16, 24 or 32-byte key (empty = no encryption)", secret: true,
			apply: func(c *Config, v string) error {
				c.Node.Mesh.Secret = nil
				if v == "" {
					return nil
				}
				key, err := base64.StdEncoding.DecodeString(v)
				if err != nil || (len(key) != 16 && len(key) != 24 && len(key) != 32) {
					return errors.New("want base64 of a 16, 24 or 32-byte key")
				}
				c.Node.Mesh.Secret = key
				return nil
			}},
		{env: "QUEEN_MESH_FLUSH_MS", flag: "mesh-flush-ms", def: ms(d.Mesh.FlushInterval), usage: "least time between two hint flushes (an idle mesh flushes at once)",
			apply: func(c *Config, v string) error { return durationMS(v, &c.Node.Mesh.FlushInterval, 1, 10000) }},
		{env: "QUEEN_MESH_HINT_CAP", flag: "mesh-hint-cap", def: strconv.Itoa(d.Mesh.HintCap), usage: "coalescing set bound",
			apply: func(c *Config, v string) error {
				var err error
				c.Node.Mesh.HintCap, err = intIn(v, 1, 100000000)
				return err
			}},
		{env: "QUEEN_MESH_DROP_RATE", flag: "mesh-drop-rate", def: strconv.FormatFloat(d.Mesh.DropRate, 'g', -1, 64), usage: "chaos: fraction of outgoing hint frames dropped",
			apply: func(c *Config, v string) error {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil || math.IsNaN(f) || f < 0 || f > 1 {
					return errors.New("want a number from 0 to 1")
				}
				c.Node.Mesh.DropRate = f
				return nil
			}},
		{env: "QUEEN_MESH_HINT_PORT", flag: "mesh-hint-port", def: strconv.Itoa(d.Mesh.HintPort), usage: "TCP port of the hint stream listener (0 = any free port, advertised to peers)",
			apply: func(c *Config, v string) error {
				var err error
				c.Node.Mesh.HintPort, err = intIn(v, 0, 65535)
				return err
			}},
		{env: "QUEEN_MESH_GOSSIP_MS", flag: "mesh-gossip-ms", def: ms(d.Mesh.Timings.GossipInterval), usage: "memberlist gossip interval",
			apply: func(c *Config, v string) error {
				return durationMS(v, &c.Node.Mesh.Timings.GossipInterval, 5, 60000)
			}},
		{env: "QUEEN_MESH_PROBE_MS", flag: "mesh-probe-ms", def: ms(d.Mesh.Timings.ProbeInterval), usage: "memberlist failure probe interval (probe timeout is half of it)",
			apply: func(c *Config, v string) error {
				// Failure detection scales with the interval; the probe
				// timeout is half of it, as in memberlist's LAN defaults.
				err := durationMS(v, &c.Node.Mesh.Timings.ProbeInterval, 20, 60000)
				c.Node.Mesh.Timings.ProbeTimeout = c.Node.Mesh.Timings.ProbeInterval / 2
				return err
			}},
		{env: "QUEEN_MESH_HINT_FRAME_TIMEOUT_MS", flag: "mesh-hint-frame-timeout-ms", def: ms(d.Mesh.HintFrameTimeout),
			usage: "inbound hint stream: time allowed for one frame once it started, and for a new stream's first frame",
			apply: func(c *Config, v string) error { return durationMS(v, &c.Node.Mesh.HintFrameTimeout, 50, 600000) }},
		{env: "QUEEN_MESH_HINT_IDLE_TIMEOUT_MS", flag: "mesh-hint-idle-timeout-ms", def: ms(d.Mesh.HintIdleTimeout),
			usage: "inbound hint stream: quiet allowed between frames (senders close idle streams at half of it; same value on every node)",
			apply: func(c *Config, v string) error { return durationMS(v, &c.Node.Mesh.HintIdleTimeout, 1000, 86400000) }},
		{env: "QUEEN_MESH_HEARTBEAT_MS", flag: "mesh-heartbeat-ms", def: ms(d.Mesh.HeartbeatInterval),
			usage: "an open hint stream silent for this long sends a heartbeat with its last frame number (loss detection); same value on every node",
			apply: func(c *Config, v string) error { return durationMS(v, &c.Node.Mesh.HeartbeatInterval, 10, 60000) }},
		{env: "QUEEN_MESH_CONFIRM_MS", flag: "mesh-confirm-ms", def: ms(d.Mesh.ConfirmInterval),
			usage: "for QUEEN_MESH_CONFIRM_WINDOW_MS after a hints frame, a stream silent this long sends a heartbeat, so a lost last frame is learned at once; 0 = off",
			apply: func(c *Config, v string) error {
				if v == "0" {
					c.Node.Mesh.ConfirmInterval = -1 // off: mesh.Config reads 0 as the default
					return nil
				}
				return durationMS(v, &c.Node.Mesh.ConfirmInterval, 1, 60000)
			}},
		{env: "QUEEN_MESH_CONFIRM_WINDOW_MS", flag: "mesh-confirm-window-ms", def: ms(d.Mesh.ConfirmWindow),
			usage: "how long after a hints frame the confirm heartbeats (QUEEN_MESH_CONFIRM_MS) go on",
			apply: func(c *Config, v string) error { return durationMS(v, &c.Node.Mesh.ConfirmWindow, 10, 600000) }},
		{env: "QUEEN_MESH_HINT_RATE", flag: "mesh-hint-rate", def: strconv.Itoa(d.Mesh.HintRate),
			usage: "received hints one peer may have applied per second (burst: one second's worth); the excess is dropped and counted",
			apply: func(c *Config, v string) error {
				var err error
				c.Node.Mesh.HintRate, err = intIn(v, 1, 100000000)
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

	cfg := Config{Node: node.DefaultConfig()}
	cfg.Node.Version = version
	for i, s := range ss {
		v, source := s.def, s.env
		switch {
		case vals[i].set:
			v, source = vals[i].val, "-"+s.flag
		case getenv(s.env) != "":
			v = getenv(s.env)
		}
		if !s.raw {
			v = strings.TrimSpace(v)
		}
		if err := s.apply(&cfg, v); err != nil {
			if s.secret {
				return Config{}, fmt.Errorf("invalid %s: %v", source, err)
			}
			return Config{}, fmt.Errorf("invalid %s=%q: %v", source, v, err)
		}
	}
	if cfg.Node.Broker.NodeName == "" {
		host, err := os.Hostname()
		if err != nil || checkName(host) != nil {
			return Config{}, errors.New("QUEEN_NODE_NAME is not set and the host name is unusable: set QUEEN_NODE_NAME")
		}
		cfg.Node.Broker.NodeName = host
	}
	// Every setting was checked above; this catches combinations, and any
	// check node adds later, before a database wait. One line per run.
	if err := cfg.Node.Validate(); err != nil {
		return Config{}, fmt.Errorf("invalid configuration: %s", strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	return cfg, nil
}

func nonEmpty(v string) error {
	if v == "" {
		return errors.New("want a non-empty name")
	}
	return nil
}

// boolDef spells a default for a boolean setting as its variable takes it.
func boolDef(b bool) string {
	if b {
		return "1"
	}
	return "0"
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

// checkName and checkHostPort are node's checks: the command line refuses
// what Config.Validate would.
var (
	checkName     = node.CheckName
	checkHostPort = node.CheckHostPort
)

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
