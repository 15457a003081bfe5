package pg

import (
	"errors"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrBadURL marks a connection string that cannot be parsed: retrying it
// cannot help, unlike a database that is not up yet.
var ErrBadURL = errors.New("unparseable PostgreSQL connection string")

// CheckURL tells whether Open can parse url ("" = the libpq PG* variables).
// The error never contains the connection string, which may hold a
// password; it names the problem only.
func CheckURL(url string) error {
	if _, err := pgxpool.ParseConfig(url); err != nil {
		return &badURLError{reason: parseReason(err)}
	}
	return nil
}

// ErrRefused marks a server that answered and refused this connection's
// role, password or database (SQLSTATE 28000, 28P01, 3D000): retrying
// cannot help until the URL or the server's roles and databases change.
var ErrRefused = errors.New("PostgreSQL refuses this role, password or database")

// refused wraps err with ErrRefused when the server's answer says so.
func refused(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "28000", "28P01", "3D000":
			return &refusedError{err: err}
		}
	}
	return err
}

type refusedError struct{ err error }

func (e *refusedError) Error() string   { return e.err.Error() }
func (e *refusedError) Unwrap() []error { return []error{e.err, ErrRefused} }

type badURLError struct{ reason string }

func (e *badURLError) Error() string { return e.reason }
func (e *badURLError) Unwrap() error { return ErrBadURL }

// parseReason extracts what is wrong from a pgconn parse error without the
// connection string itself (pgconn redacts passwords only best effort).
func parseReason(err error) string {
	var pce *pgconn.ParseConfigError
	if !errors.As(err, &pce) {
		return "cannot parse"
	}
	// pgconn's text is "cannot parse `<redacted string>`: <what> (<inner>)".
	what := pce.Error()
	if i := strings.LastIndex(what, "`: "); i >= 0 {
		what = what[i+3:]
	}
	inner := errors.Unwrap(pce)
	if inner == nil {
		return what
	}
	what = strings.TrimSuffix(what, " ("+inner.Error()+")")
	var ue *url.Error
	if errors.As(inner, &ue) {
		inner = ue.Err // url.Error's own text quotes the whole URL
	}
	return what + ": " + inner.Error()
}
