package node

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"
	"unicode/utf8"

	"queen-node/api"
	"queen-node/auth"
	"queen-node/broker"
	"queen-node/forward"
	"queen-node/mesh"
	"queen-node/pg"
	"queen-node/retention"
	"queen-node/stats"
)

// Defaults of Config that belong to no single package.
const (
	DefaultHTTPAddr      = ":6632"          // QUEEN_HTTP_ADDR
	DefaultVersion       = "dev"            // the binary sets its build version
	DefaultShutdownGrace = 10 * time.Second // in-flight requests' time after Stop begins
)

// Config is everything one node needs. Every package keeps its own settings
// and defaults; this struct only nests them, so a value has one home:
//
//   - PostgreSQL (Broker.PG: URL, pool size), the node name and the
//     hot-list (Broker.Hotlist: hotlist.Config with its package's defaults,
//     plus on/off and the idle sweep) live in Broker, because the broker
//     opens the pool and owns the hot-list;
//   - the tenant and the HTTP limits live in API;
//   - JWT authentication lives in Auth (Start sets API.Auth from it);
//   - membership and hint settings live in Mesh;
//   - the status/analytics sampler's intervals and sample retention live in Stats.
//
// Start copies the few values two packages both need (node name, version,
// HTTP address) from their home into the other package's config.
type Config struct {
	HTTPAddr      string        // API listen address, default ":6632"
	PprofAddr     string        // net/http/pprof listen address, default "" (off)
	Version       string        // reported by /health, /status and mesh metadata, default "dev"
	ShutdownGrace time.Duration // time in-flight requests get once Stop starts, default 10 s (callers pass it as Stop's deadline)

	API    api.Config    // default api.DefaultConfig(); Version is set from Version by Start, Auth from Auth
	Auth   auth.Config   // default auth.DefaultConfig() (authentication off)
	Broker broker.Config // default broker.DefaultConfig(); NodeName is required
	Mesh   MeshConfig    // default enabled with mesh.DefaultConfig()
	// Forward stores each pushed item on the node that owns its queue
	// (docs/api.md, "Push ownership"); default forward.DefaultConfig(), on.
	// It needs a sealed mesh (Mesh.Secret): with the mesh off or open every
	// push is stored where it arrives.
	Forward forward.Config
	Stats   stats.Config // default stats.DefaultConfig() (sampler on, 10 s); Interval 0 = off

	Retention retention.Config // default retention.DefaultConfig(): a pass every 5 minutes; Interval 0 = off on this node
}

// MeshConfig is mesh.Config plus whether the node joins a mesh at all.
// Start sets Name, HTTPAddr and Version from the rest of Config.
type MeshConfig struct {
	Enabled bool // default true; false = a single node, no membership, no hints
	mesh.Config
}

// DefaultConfig returns a Config with every default of every package filled
// in. Only Broker.NodeName is left for the caller (cmd/queen-node uses the
// host name).
func DefaultConfig() Config {
	return Config{
		HTTPAddr:      DefaultHTTPAddr,
		Version:       DefaultVersion,
		ShutdownGrace: DefaultShutdownGrace,
		API:           api.DefaultConfig(),
		Auth:          auth.DefaultConfig(),
		Broker:        broker.DefaultConfig(),
		Mesh:          MeshConfig{Enabled: true, Config: mesh.DefaultConfig()},
		Forward:       forward.DefaultConfig(),
		Stats:         stats.DefaultConfig(),
		Retention:     retention.DefaultConfig(),
	}
}

// Validate checks every field Start relies on and returns one error per bad
// field (joined), each naming the field.
func (c Config) Validate() error {
	var errs []error
	bad := func(field string, err error) {
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", field, err))
		}
	}
	positive := func(field string, d time.Duration) {
		if d <= 0 {
			bad(field, fmt.Errorf("%v: want more than 0", d))
		}
	}

	bad("HTTPAddr", CheckHostPort(c.HTTPAddr))
	if c.PprofAddr != "" {
		bad("PprofAddr", CheckHostPort(c.PprofAddr))
	}
	if c.ShutdownGrace < 0 {
		bad("ShutdownGrace", fmt.Errorf("%v: want 0 or more", c.ShutdownGrace))
	}

	bad("API.Tenant", CheckName(c.API.Tenant))
	if c.API.MaxConns < 1 {
		bad("API.MaxConns", fmt.Errorf("%d: want 1 or more", c.API.MaxConns))
	}
	positive("API.ReadHeaderTimeout", c.API.ReadHeaderTimeout)
	positive("API.BodyTimeout", c.API.BodyTimeout)
	positive("API.IdleTimeout", c.API.IdleTimeout)
	positive("API.WriteTimeout", c.API.WriteTimeout)

	bad("Auth", c.Auth.Validate())
	bad("Retention", c.Retention.Validate())

	b := c.Broker
	bad("Broker.NodeName", CheckName(b.NodeName))
	if err := pg.CheckURL(b.PG.URL); err != nil {
		bad("Broker.PG.URL", err) // never echoes the URL: it may hold a password
	}
	if b.PG.MaxConns < 1 {
		bad("Broker.PG.MaxConns", fmt.Errorf("%d: want 1 or more", b.PG.MaxConns))
	}
	positive("Broker.PopBackoffMin", b.PopBackoffMin)
	if b.PopBackoffMax < b.PopBackoffMin {
		bad("Broker.PopBackoffMax", fmt.Errorf("%v: want at least PopBackoffMin (%v)", b.PopBackoffMax, b.PopBackoffMin))
	}
	if b.MaxPopBytes < 0 {
		bad("Broker.MaxPopBytes", fmt.Errorf("%d: want 0 (no bound) or more", b.MaxPopBytes))
	}
	switch b.DefaultSubscription {
	case "", "all", "new", "new-only":
	default:
		bad("Broker.DefaultSubscription", fmt.Errorf("%q: want all, new or new-only", b.DefaultSubscription))
	}
	// Maintenance modes (broker/maintenance.go).
	positive("Broker.Maintenance.RefreshInterval", b.Maintenance.RefreshInterval)
	if b.Maintenance.BufferMaxBytes < 1 {
		bad("Broker.Maintenance.BufferMaxBytes", fmt.Errorf("%d: want 1 or more", b.Maintenance.BufferMaxBytes))
	}
	if b.Hotlist.Enabled {
		if b.Hotlist.Shards < 1 {
			bad("Broker.Hotlist.Shards", fmt.Errorf("%d: want 1 or more", b.Hotlist.Shards))
		}
		if b.Hotlist.WindowBatch < 1 {
			bad("Broker.Hotlist.WindowBatch", fmt.Errorf("%d: want 1 or more", b.Hotlist.WindowBatch))
		}
		positive("Broker.Hotlist.ReseedInterval", b.Hotlist.ReseedInterval)
		positive("Broker.Hotlist.EarlyReseedMin", b.Hotlist.EarlyReseedMin)
		if b.Hotlist.EarlyReseedRate < 1 {
			bad("Broker.Hotlist.EarlyReseedRate", fmt.Errorf("%d: want 1 or more", b.Hotlist.EarlyReseedRate))
		}
		if b.Hotlist.IdleSweep < 0 {
			bad("Broker.Hotlist.IdleSweep", fmt.Errorf("%v: want 0 (off) or more", b.Hotlist.IdleSweep))
		}
	}

	if c.Stats.Interval < 0 || c.Stats.QueueInterval < 0 || c.Stats.Keep < 0 {
		bad("Stats", fmt.Errorf("intervals and Keep must be 0 (default or off) or more"))
	}

	if m := c.Mesh; m.Enabled {
		bad("Mesh.Bind", CheckHostPort(m.Bind))
		if m.Advertise != "" {
			bad("Mesh.Advertise", CheckHostPort(m.Advertise))
		}
		for _, j := range m.Join {
			bad("Mesh.Join", CheckHostPort(j))
		}
		if n := len(m.Secret); n != 0 && n != 16 && n != 24 && n != 32 {
			bad("Mesh.Secret", fmt.Errorf("%d bytes: want 16, 24 or 32 (or none)", n))
		}
		positive("Mesh.FlushInterval", m.FlushInterval)
		if m.HintCap < 1 {
			bad("Mesh.HintCap", fmt.Errorf("%d: want 1 or more", m.HintCap))
		}
		if !(m.DropRate >= 0 && m.DropRate <= 1) { // also refuses NaN
			bad("Mesh.DropRate", fmt.Errorf("%v: want 0 to 1", m.DropRate))
		}
		if m.HintPort < 0 || m.HintPort > 65535 {
			bad("Mesh.HintPort", fmt.Errorf("%d: want 0 to 65535", m.HintPort))
		}
		positive("Mesh.Timings.GossipInterval", m.Timings.GossipInterval)
		positive("Mesh.Timings.ProbeInterval", m.Timings.ProbeInterval)
		positive("Mesh.Timings.ProbeTimeout", m.Timings.ProbeTimeout)
		positive("Mesh.HintFrameTimeout", m.HintFrameTimeout)
		positive("Mesh.HintIdleTimeout", m.HintIdleTimeout)
		positive("Mesh.HeartbeatInterval", m.HeartbeatInterval)
		if m.HintRate < 1 {
			bad("Mesh.HintRate", fmt.Errorf("%d: want 1 or more", m.HintRate))
		}
	}
	return errors.Join(errs...)
}

// CheckName accepts what the API accepts as a name: 1 to 255 bytes
// (broker.MaxNameBytes) of UTF-8 without white space or control characters
// (like a JWT tenant claim: \x1f separates tenant and queue in the broker's
// ring and long-poll keys, NUL cannot be stored).
func CheckName(v string) error {
	bad := v == "" || len(v) > broker.MaxNameBytes || !utf8.ValidString(v)
	for _, r := range v {
		bad = bad || r == ' ' || r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0)
	}
	if bad {
		return fmt.Errorf("want 1 to %d bytes without spaces or control characters", broker.MaxNameBytes)
	}
	return nil
}

// CheckHostPort accepts "host:port" and ":port" with a port from 0 to 65535.
func CheckHostPort(v string) error {
	_, port, err := net.SplitHostPort(v)
	if err != nil {
		return errors.New("want host:port")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return errors.New("want host:port with a port from 0 to 65535")
	}
	return nil
}
