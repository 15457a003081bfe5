package pg

import (
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A single host with the default sslmode=prefer has a fallback (TLS, then
// plain) and is still one host; a refused role or database must stop its
// start (review finding: every test URL had sslmode=disable).
func TestMultiHost(t *testing.T) {
	for url, want := range map[string]bool{
		"postgres://u@db.example/q":                              false, // sslmode=prefer: one fallback, the same host
		"postgres://u@db.example/q?sslmode=disable":              false,
		"postgres://u@db1.example,db2.example/q?sslmode=disable": true,
		"postgres://u@db.example:5432,db.example:5433/q":         true,
		"postgres://u@db1.example,db2.example/q":                 true,
	} {
		cfg, err := pgxpool.ParseConfig(url)
		if err != nil {
			t.Fatal(err)
		}
		c := cfg.ConnConfig
		if got := multiHost(c.Host, c.Port, c.Fallbacks); got != want {
			t.Errorf("multiHost(%s) = %v, want %v (%d fallbacks)", url, got, want, len(c.Fallbacks))
		}
	}
}

// Errors a later attempt may not meet are not schema errors (review
// finding: a read-only standby made the start give up).
func TestPermanentLeavesTransientErrors(t *testing.T) {
	for _, c := range []string{"25006", "25P03", "25P04", "72000", "40001", "55P03", "57014", "08006"} {
		if _, ok := permanent(&pgconn.PgError{Code: c}).(*schemaError); ok {
			t.Errorf("%s taken as a schema error", c)
		}
	}
	for _, c := range []string{"42601", "42703", "23505"} {
		if _, ok := permanent(&pgconn.PgError{Code: c}).(*schemaError); !ok {
			t.Errorf("%s not taken as a schema error", c)
		}
	}
}
