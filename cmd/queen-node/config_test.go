package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"os"
	"reflect"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"queen-node/broker"
	"queen-node/node"
)

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestLoadConfigDefaults(t *testing.T) {
	cfg, err := loadConfig(nil, envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	want := broker.DefaultConfig()
	want.NodeName = host
	got := cfg.Node.Broker
	// The hot-list's function hooks cannot be compared; the rest must match.
	got.Hotlist.Jitter, want.Hotlist.Jitter = nil, nil
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("broker config %+v, want %+v", got, want)
	}
	n := cfg.Node
	if n.HTTPAddr != ":6632" || n.API.Tenant != "default" || n.PprofAddr != "" || cfg.LogLevel != hclog.Info || cfg.LogJSON {
		t.Fatalf("%+v", cfg)
	}
	h := n.API
	if h.ReadHeaderTimeout != 10*time.Second || h.BodyTimeout != 30*time.Second || h.IdleTimeout != 120*time.Second ||
		h.WriteTimeout != 60*time.Second || h.MaxConns != 4096 || h.MaxReadBytes != 16<<20 {
		t.Fatalf("http %+v", h)
	}
	m := n.Mesh
	if !m.Enabled || m.Bind != "0.0.0.0:7946" || m.Advertise != "" || m.Join != nil || m.Secret != nil ||
		m.FlushInterval != 20*time.Millisecond || m.HintCap != 200000 || m.DropRate != 0 {
		t.Fatalf("mesh %+v", m)
	}
	if m.HintPort != 0 || m.Timings.GossipInterval != 200*time.Millisecond || m.Timings.ProbeInterval != time.Second ||
		m.Timings.ProbeTimeout != 500*time.Millisecond {
		t.Fatalf("mesh %+v", m)
	}
	// The defaults are the packages' own: what the binary resolves with
	// nothing set is node.DefaultConfig plus the host name.
	d := node.DefaultConfig()
	d.Broker.NodeName, d.Version = host, version
	if err := sameConfig(cfg.Node, d); err != "" {
		t.Fatal(err)
	}
}

func TestLoadConfigValues(t *testing.T) {
	env := map[string]string{
		"QUEEN_PG_URL":                    "postgres://u:p@h/db",
		"QUEEN_HTTP_ADDR":                 "127.0.0.1:7000",
		"QUEEN_NODE_NAME":                 "n1",
		"QUEEN_TENANT":                    "acme",
		"QUEEN_PG_MAX_CONNS":              "8",
		"QUEEN_PUSH_LANES":                "5",
		"QUEEN_POP_BACKOFF_MAX_MS":        "500",
		"QUEEN_DEFAULT_SUBSCRIPTION_MODE": "new-only",
		"QUEEN_PPROF_ADDR":                "localhost:6060",
		"QUEEN_LOG_LEVEL":                 "DEBUG",
		"QUEEN_LOG_JSON":                  "1",
		"QUEEN_LOG_TOPN_QUEUES":           "0",
		"QUEEN_HOTLIST":                   "0",
		"QUEEN_HOTLIST_SHARDS":            "16",
		"QUEEN_HOTLIST_RESEED_MS":         "2000",
		"QUEEN_HOTLIST_IDLE_SWEEP_MS":     "0",
		"QUEEN_HOTLIST_WINDOW_BATCH":      "5",
		"QUEEN_HOTLIST_TRACE":             "trace-",
		"QUEEN_MESH":                      "0",
		"QUEEN_MESH_BIND":                 "127.0.0.1:7947",
		"QUEEN_MESH_ADVERTISE":            "10.0.0.1:7947",
		"QUEEN_MESH_JOIN":                 " a:1, ,b:2 ",
		"QUEEN_MESH_SECRET":               "MDEyMzQ1Njc4OWFiY2RlZg==", // 16 bytes
		"QUEEN_MESH_FLUSH_MS":             "5",
		"QUEEN_MESH_HINT_CAP":             "100",
		"QUEEN_MESH_DROP_RATE":            "0.25",
		"QUEEN_RETENTION_INTERVAL_MS":     "0",
		"QUEEN_RETENTION_BATCH":           "50",
		"QUEEN_RETENTION_BATCH_PAUSE_MS":  "20",
	}
	cfg, err := loadConfig(nil, envOf(env))
	if err != nil {
		t.Fatal(err)
	}
	b := cfg.Node.Broker
	if b.PG.URL != "postgres://u:p@h/db" || b.NodeName != "n1" || b.PG.MaxConns != 8 || b.PushLanes != 5 || b.PopBackoffMax != 500*time.Millisecond ||
		b.DefaultSubscription != "new" || b.LogTopNQueues != 0 || b.Hotlist.Enabled || b.Hotlist.Shards != 16 ||
		b.Hotlist.ReseedInterval != 2*time.Second || b.Hotlist.IdleSweep != 0 || b.Hotlist.WindowBatch != 5 || b.Hotlist.TracePrefix != "trace-" {
		t.Fatalf("broker %+v", b)
	}
	if cfg.Node.HTTPAddr != "127.0.0.1:7000" || cfg.Node.API.Tenant != "acme" || cfg.Node.PprofAddr != "localhost:6060" ||
		cfg.LogLevel != hclog.Debug || !cfg.LogJSON {
		t.Fatalf("%+v", cfg)
	}
	m := cfg.Node.Mesh
	if m.Enabled || m.Bind != "127.0.0.1:7947" || m.Advertise != "10.0.0.1:7947" || strings.Join(m.Join, ";") != "a:1;b:2" ||
		string(m.Secret) != "0123456789abcdef" || m.FlushInterval != 5*time.Millisecond || m.HintCap != 100 || m.DropRate != 0.25 {
		t.Fatalf("mesh %+v", m)
	}
	if r := cfg.Node.Retention; r.Interval != 0 || r.Batch != 50 || r.BatchPause != 20*time.Millisecond {
		t.Fatalf("retention %+v", r)
	}
}

func TestLoadConfigFlagsWin(t *testing.T) {
	env := map[string]string{"QUEEN_HTTP_ADDR": ":1", "QUEEN_HOTLIST": "1", "QUEEN_HOTLIST_SHARDS": "bad", "QUEEN_LOG_JSON": "0"}
	cfg, err := loadConfig([]string{"-http-addr", ":2", "-hotlist=0", "--hotlist-shards=4", "-log-json"}, envOf(env))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Node.HTTPAddr != ":2" || cfg.Node.Broker.Hotlist.Enabled || cfg.Node.Broker.Hotlist.Shards != 4 || !cfg.LogJSON {
		t.Fatalf("%+v", cfg)
	}
}

func TestLoadConfigErrors(t *testing.T) {
	cases := []struct {
		args []string
		env  map[string]string
		want string
	}{
		{nil, map[string]string{"QUEEN_HOTLIST_SHARDS": "x"}, `invalid QUEEN_HOTLIST_SHARDS="x": want an integer from 1 to 256`},
		{nil, map[string]string{"QUEEN_HOTLIST_SHARDS": "0"}, `invalid QUEEN_HOTLIST_SHARDS="0": want an integer from 1 to 256`},
		{[]string{"-hotlist-shards=300"}, nil, `invalid -hotlist-shards="300": want an integer from 1 to 256`},
		{nil, map[string]string{"QUEEN_HOTLIST": "yes"}, `invalid QUEEN_HOTLIST="yes": want 0 or 1`},
		{nil, map[string]string{"QUEEN_MESH": "2"}, `invalid QUEEN_MESH="2": want 0 or 1`},
		{nil, map[string]string{"QUEEN_LOG_LEVEL": "loud"}, `invalid QUEEN_LOG_LEVEL="loud": want one of trace, debug, info, warn, error`},
		{nil, map[string]string{"QUEEN_LOG_JSON": "json"}, `invalid QUEEN_LOG_JSON="json": want 0 or 1`},
		{nil, map[string]string{"QUEEN_HTTP_ADDR": "6632"}, `invalid QUEEN_HTTP_ADDR="6632": want host:port or :port, e.g. :6632`},
		{nil, map[string]string{"QUEEN_PPROF_ADDR": "x:y"}, `invalid QUEEN_PPROF_ADDR="x:y": want host:port or :port, e.g. :6632`},
		{nil, map[string]string{"QUEEN_PG_MAX_CONNS": "0"}, `invalid QUEEN_PG_MAX_CONNS="0": want an integer from 1 to 10000`},
		{nil, map[string]string{"QUEEN_PUSH_LANES": "0"}, `invalid QUEEN_PUSH_LANES="0": want an integer from 1 to 16`},
		{[]string{"-push-lanes=17"}, nil, `invalid -push-lanes="17": want an integer from 1 to 16`},
		{nil, map[string]string{"QUEEN_POP_BACKOFF_MAX_MS": "1"}, `invalid QUEEN_POP_BACKOFF_MAX_MS="1": want an integer number of milliseconds from 25 to 60000`},
		{nil, map[string]string{"QUEEN_DEFAULT_SUBSCRIPTION_MODE": "latest"}, `invalid QUEEN_DEFAULT_SUBSCRIPTION_MODE="latest": want one of all, new, new-only (or empty)`},
		{nil, map[string]string{"QUEEN_HOTLIST_RESEED_MS": "-1"}, `invalid QUEEN_HOTLIST_RESEED_MS="-1": want an integer number of milliseconds from 10 to 86400000`},
		{nil, map[string]string{"QUEEN_HOTLIST_IDLE_SWEEP_MS": "1.5"}, `invalid QUEEN_HOTLIST_IDLE_SWEEP_MS="1.5": want an integer number of milliseconds from 0 to 86400000`},
		{nil, map[string]string{"QUEEN_HOTLIST_WINDOW_BATCH": "0"}, `invalid QUEEN_HOTLIST_WINDOW_BATCH="0": want an integer from 1 to 1000000`},
		{nil, map[string]string{"QUEEN_HOTLIST_TRACE": strings.Repeat("t", 256)}, `want at most 255 bytes`},
		{nil, map[string]string{"QUEEN_LOG_TOPN_QUEUES": "-1"}, `invalid QUEEN_LOG_TOPN_QUEUES="-1": want an integer from 0 to 1000`},
		{nil, map[string]string{"QUEEN_NODE_NAME": "has space"}, `invalid QUEEN_NODE_NAME="has space": want 1 to 255 bytes without spaces`},
		{nil, map[string]string{"QUEEN_TENANT": strings.Repeat("t", 256)}, `want 1 to 255 bytes without spaces`},
		{nil, map[string]string{"QUEEN_MESH_BIND": "nohost"}, `invalid QUEEN_MESH_BIND="nohost": want host:port`},
		{nil, map[string]string{"QUEEN_MESH_ADVERTISE": "h:99999"}, `invalid QUEEN_MESH_ADVERTISE="h:99999": want host:port with a port from 0 to 65535`},
		{nil, map[string]string{"QUEEN_MESH_JOIN": "a:1,b"}, `invalid QUEEN_MESH_JOIN="a:1,b": want comma-separated host:port seeds`},
		{nil, map[string]string{"QUEEN_MESH_SECRET": "c2hvcnQ="}, `invalid QUEEN_MESH_SECRET: want base64 of a 16, 24 or 32-byte key`},
		{nil, map[string]string{"QUEEN_MESH_SECRET": "!!!"}, `invalid QUEEN_MESH_SECRET: want base64 of a 16, 24 or 32-byte key`},
		{nil, map[string]string{"QUEEN_MESH_FLUSH_MS": "0"}, `invalid QUEEN_MESH_FLUSH_MS="0": want an integer number of milliseconds from 1 to 10000`},
		{nil, map[string]string{"QUEEN_MESH_HINT_CAP": "0"}, `invalid QUEEN_MESH_HINT_CAP="0": want an integer from 1 to 100000000`},
		{nil, map[string]string{"QUEEN_MESH_DROP_RATE": "1.5"}, `invalid QUEEN_MESH_DROP_RATE="1.5": want a number from 0 to 1`},
		{nil, map[string]string{"QUEEN_MESH_DROP_RATE": "NaN"}, `invalid QUEEN_MESH_DROP_RATE="NaN": want a number from 0 to 1`},
		{nil, map[string]string{"QUEEN_HTTP_READ_HEADER_TIMEOUT_MS": "0"}, `invalid QUEEN_HTTP_READ_HEADER_TIMEOUT_MS="0": want an integer number of milliseconds from 100 to 600000`},
		{nil, map[string]string{"QUEEN_HTTP_BODY_TIMEOUT_MS": "30s"}, `invalid QUEEN_HTTP_BODY_TIMEOUT_MS="30s": want an integer number of milliseconds from 100 to 3600000`},
		{nil, map[string]string{"QUEEN_HTTP_IDLE_TIMEOUT_MS": "-5"}, `invalid QUEEN_HTTP_IDLE_TIMEOUT_MS="-5": want an integer number of milliseconds from 100 to 3600000`},
		{[]string{"-http-max-conns=0"}, nil, `invalid -http-max-conns="0": want an integer from 1 to 1000000`},
		{nil, map[string]string{"JWT_ENABLED": "true"}, `invalid configuration: Auth: JWT_SECRET is required with JWT_ENABLED=true and JWT_ALGORITHM=HS256`},
		{nil, map[string]string{"JWT_ENABLED": "1", "JWT_ALGORITHM": "RS256"}, `invalid configuration: Auth: JWT_PUBLIC_KEY or JWT_JWKS_URL is required with JWT_ENABLED=true and JWT_ALGORITHM=RS256`},
		{nil, map[string]string{"JWT_ENABLED": "1", "JWT_ALGORITHM": "ES256", "JWT_PUBLIC_KEY": "nope"}, `invalid configuration: Auth: JWT_PUBLIC_KEY: not a PEM EC P-256 public key`},
		{nil, map[string]string{"JWT_ENABLED": "1", "JWT_ALGORITHM": "ES256", "JWT_JWKS_URL": "idp/jwks"}, `invalid configuration: Auth: JWT_JWKS_URL: want an http:// or https:// URL`},
		{nil, map[string]string{"JWT_ALGORITHM": "HS512"}, `invalid JWT_ALGORITHM="HS512": want one of HS256, RS256, ES256`},
		{nil, map[string]string{"JWT_ENABLED": "yes"}, `invalid JWT_ENABLED="yes": want 0 or 1`},
		{nil, map[string]string{"JWT_CLOCK_SKEW": "-1"}, `invalid JWT_CLOCK_SKEW="-1": want an integer number of seconds from 0 to 3600`},
		{nil, map[string]string{"JWT_SKIP_PATHS": "/health,metrics"}, `invalid JWT_SKIP_PATHS="/health,metrics": want comma-separated paths starting with /`},
		{[]string{"-no-such-flag"}, nil, `flag provided but not defined: -no-such-flag`},
		{[]string{"stray"}, nil, `unexpected argument "stray"`},
	}
	for _, c := range cases {
		_, err := loadConfig(c.args, envOf(c.env))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("args %v env %v: error %v, want %q", c.args, c.env, err, c.want)
			continue
		}
		if strings.Contains(err.Error(), "\n") {
			t.Errorf("error must be one line: %q", err)
		}
	}
}

func TestLoadConfigJWT(t *testing.T) {
	cfg, err := loadConfig(nil, envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	if a := cfg.Node.Auth; a.Enabled || a.Algorithm != "HS256" || a.ClockSkew != 30*time.Second ||
		strings.Join(a.SkipPaths, ",") != "/health,/metrics,/metrics/prometheus,/" {
		t.Fatalf("defaults %+v", a)
	}
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	// One line, its newlines written as \n (as in a container env file).
	pemKey := strings.ReplaceAll(strings.TrimSpace(string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))), "\n", `\n`)
	cfg, err = loadConfig(nil, envOf(map[string]string{
		"JWT_ENABLED": "true", "JWT_ALGORITHM": "es256", "JWT_PUBLIC_KEY": pemKey, "JWT_JWKS_URL": "https://idp/jwks",
		"JWT_ISSUER": "iss", "JWT_AUDIENCE": "aud", "JWT_CLOCK_SKEW": "0",
		"JWT_ROLE_CLAIM": "r", "JWT_ROLES_CLAIM": "rs", "JWT_TENANT_CLAIM": "org",
		"JWT_ROLE_READ_ONLY": "ro", "JWT_ROLE_READ_WRITE": "rw", "JWT_ROLE_ADMIN": "boss",
		"JWT_SKIP_PATHS": " /health , /status ",
	}))
	if err != nil {
		t.Fatal(err)
	}
	a := cfg.Node.Auth
	if !a.Enabled || a.Algorithm != "ES256" || !strings.Contains(a.PublicKey, "\n") || strings.Contains(a.PublicKey, `\n`) ||
		a.JWKSURL != "https://idp/jwks" || a.Issuer != "iss" || a.Audience != "aud" || a.ClockSkew != 0 ||
		a.RoleClaim != "r" || a.RolesClaim != "rs" || a.TenantClaim != "org" ||
		a.RoleReadOnly != "ro" || a.RoleReadWrite != "rw" || a.RoleAdmin != "boss" || strings.Join(a.SkipPaths, ",") != "/health,/status" {
		t.Fatalf("%+v", a)
	}
	// The secret is never echoed.
	_, err = loadConfig(nil, envOf(map[string]string{"JWT_ENABLED": "1", "JWT_ALGORITHM": "RS256", "JWT_SECRET": "s3cr3t-value"}))
	if err == nil || strings.Contains(err.Error(), "s3cr3t-value") {
		t.Fatalf("%v", err)
	}
}

func TestLoadConfigSecretsNotEchoed(t *testing.T) {
	_, err := loadConfig(nil, envOf(map[string]string{"QUEEN_MESH_SECRET": "c2VjcmV0LXZhbHVl"}))
	if err == nil || strings.Contains(err.Error(), "c2VjcmV0LXZhbHVl") {
		t.Fatalf("%v", err)
	}
}

func TestLoadConfigHelp(t *testing.T) {
	if _, err := loadConfig([]string{"-h"}, envOf(nil)); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("%v", err)
	}
	var sb strings.Builder
	printUsage(&sb)
	for _, s := range settings() {
		if !strings.Contains(sb.String(), s.env) || !strings.Contains(sb.String(), "-"+s.flag) {
			t.Fatalf("usage lacks %s / -%s", s.env, s.flag)
		}
	}
}

// An unparseable QUEEN_PG_URL used to reach broker.New, which retried it
// forever as if the database were merely down (issue 9, item 12).
func TestLoadConfigBadPGURL(t *testing.T) {
	for _, bad := range []string{
		"postgres://u:hunter2@h:notaport/db",
		"postgres://u:hunter2@[::1/db",
		"host=h port=x password=hunter2",
		"postgres://h/db?connect_timeout=x",
	} {
		for _, c := range []struct {
			args []string
			env  map[string]string
			src  string
		}{
			{nil, map[string]string{"QUEEN_PG_URL": bad}, "QUEEN_PG_URL"},
			{[]string{"-pg-url", bad}, nil, "-pg-url"},
		} {
			_, err := loadConfig(c.args, envOf(c.env))
			if err == nil {
				t.Errorf("%s=%q accepted", c.src, bad)
				continue
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "invalid "+c.src+": want a postgres:// URL or key=value connection string") ||
				strings.Contains(msg, "\n") || strings.Contains(msg, "hunter2") {
				t.Errorf("%s=%q: error %q", c.src, bad, msg)
			}
		}
	}
	for _, good := range []string{"", "postgres://u:p@h:5432/db?sslmode=disable", "host=h port=5432 dbname=q"} {
		if _, err := loadConfig(nil, envOf(map[string]string{"QUEEN_PG_URL": good})); err != nil {
			t.Errorf("%q refused: %v", good, err)
		}
	}
}

// sameConfig compares two node configs but their mesh loggers (two
// discard loggers are equal in effect, not necessarily in value).
func sameConfig(got, want node.Config) string {
	got.Mesh.Logger, want.Mesh.Logger = nil, nil
	// Function hooks cannot be compared.
	got.Broker.Hotlist.Jitter, want.Broker.Hotlist.Jitter = nil, nil
	if !reflect.DeepEqual(got, want) {
		return fmt.Sprintf("node config\n%+v\nwant\n%+v", got, want)
	}
	return ""
}

// TestJWTSecretKeptByteForByte: other values are trimmed, the shared
// secret is not (it must match the identity provider's exactly).
func TestJWTSecretKeptByteForByte(t *testing.T) {
	cfg, err := loadConfig(nil, envOf(map[string]string{"JWT_ENABLED": "1", "JWT_SECRET": " s3cr3t ", "QUEEN_TENANT": " acme "}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Node.Auth.Secret != " s3cr3t " || cfg.Node.API.Tenant != "acme" {
		t.Fatalf("secret %q, tenant %q: want the secret as given and the tenant trimmed", cfg.Node.Auth.Secret, cfg.Node.API.Tenant)
	}
}

func TestStampedVersion(t *testing.T) {
	info := func(settings ...debug.BuildSetting) func() (*debug.BuildInfo, bool) {
		return func() (*debug.BuildInfo, bool) { return &debug.BuildInfo{Settings: settings}, true }
	}
	rev := debug.BuildSetting{Key: "vcs.revision", Value: "0123456789abcdef0123"}
	for _, c := range []struct {
		v    string
		info func() (*debug.BuildInfo, bool)
		want string
	}{
		{"1.2.3", info(rev), "1.2.3"},
		{"dev", info(rev), "dev+0123456789ab"},
		{"dev", info(rev, debug.BuildSetting{Key: "vcs.modified", Value: "true"}), "dev+0123456789ab-dirty"},
		{"dev", info(), "dev"},
		{"dev", func() (*debug.BuildInfo, bool) { return nil, false }, "dev"},
	} {
		if got := stampedVersion(c.v, c.info); got != c.want {
			t.Errorf("stampedVersion(%q) = %q, want %q", c.v, got, c.want)
		}
	}
}

func TestGCPercentDefaultsUnlessGOGCIsSet(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	if pct, ok := gcPercent(env(nil)); !ok || pct != defaultGCPercent {
		t.Fatalf("GOGC unset: got %d, %v; want %d, true", pct, ok, defaultGCPercent)
	}
	for _, v := range []string{"100", "off"} {
		if _, ok := gcPercent(env(map[string]string{"GOGC": v})); ok {
			t.Fatalf("GOGC=%s: the node overrode the operator's setting", v)
		}
	}
}

func TestGCSettingsReadsTheLiveTarget(t *testing.T) {
	old := debug.SetGCPercent(400)
	defer debug.SetGCPercent(old)
	if got, _ := gcSettings(); got != 400 {
		t.Fatalf("gcSettings after SetGCPercent(400) = %d", got)
	}
	debug.SetGCPercent(150)
	if got, lim := gcSettings(); got != 150 || lim == 0 {
		t.Fatalf("gcSettings after SetGCPercent(150) = %d, limit %d", got, lim)
	}
}
