package pg

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// FunctionSet numbers the contents of sql/functions. Bump it with every
// change to those files: a node installs its functions only when its number
// is at least the one recorded in the database, so an older node restarting
// during a rolling upgrade cannot put back older bodies (docs/storage.md,
// "Schema migrations"). TestFunctionSetNumbered fails when the files change
// and this number does not.
const FunctionSet = 19

// ErrSchema marks a schema problem that retrying cannot fix: the database
// was migrated by a newer node, a migration or function file fails, two
// builds carry different function files under one FunctionSet number, or
// the database's newer functions lack one this node calls. The node stops
// with one line instead of waiting for PostgreSQL (docs/operations.md,
// "Upgrades").
var ErrSchema = errors.New("schema cannot be used by this node")

type schemaError struct{ err error }

func (e *schemaError) Error() string   { return e.err.Error() }
func (e *schemaError) Unwrap() []error { return []error{e.err, ErrSchema} }

// permanent wraps err with ErrSchema unless it may pass on its own: a lost
// connection, a failover, a lock or resource shortage, a cancellation.
// Anything else the server answers (a syntax error, a missing column, a
// violated constraint) fails the same way on every retry.
func permanent(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || IsUnavailable(err) {
		// Not the server's answer, or the server is away, read-only or
		// short of slots (IsUnavailable decides, as for requests).
		return err
	}
	switch pgErr.Code[:2] {
	case "40", "55", "57", "58", "72":
		// transaction rollback, object not in prerequisite state (lock
		// timeout), operator intervention (cancel), system error, snapshot
		// too old
		return err
	}
	switch pgErr.Code {
	case "25P03", "25P04":
		// idle-in-transaction and transaction timeouts: a later attempt
		// may not wait as long
		return err
	}
	return &schemaError{err: err}
}

// sqlFile is one embedded function file.
type sqlFile struct {
	Name string // path inside the embedded tree, e.g. sql/functions/10_push.sql
	Body string
}

// functionSet is what Migrate installs: the numbered function files.
type functionSet struct {
	Version int
	Files   []sqlFile // in name order
}

// Hash identifies the files' exact contents, so that two builds claiming
// one number with different files are told apart.
func (s functionSet) Hash() string {
	h := sha256.New()
	for _, f := range s.Files {
		fmt.Fprintf(h, "%s\x00%d\x00%s", f.Name, len(f.Body), f.Body)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// embeddedFunctionSet is this build's set.
func embeddedFunctionSet() (functionSet, error) {
	names, err := functionFiles()
	if err != nil {
		return functionSet{}, err
	}
	set := functionSet{Version: FunctionSet}
	for _, name := range names {
		body, err := sqlFiles.ReadFile(name)
		if err != nil {
			return functionSet{}, fmt.Errorf("read %s: %w", name, err)
		}
		set.Files = append(set.Files, sqlFile{Name: name, Body: string(body)})
	}
	return set, nil
}

var createFunction = regexp.MustCompile(`(?i)CREATE\s+OR\s+REPLACE\s+FUNCTION\s+([a-z_][a-z0-9_]*\.[a-z_][a-z0-9_]*)\s*\(`)

// Signatures lists the functions the set creates as PostgreSQL resolves
// them, name and input argument types ("queen.f(text, int[])"). A node that
// finds newer functions in the database checks that each of these is there
// before it runs on them. The files' parameter lists are plain "name type"
// pairs (TestFunctionSignaturesMatchCatalog holds the parser to the
// catalog).
func (s functionSet) Signatures() ([]string, error) {
	var out []string
	for _, f := range s.Files {
		body := stripLineComments(f.Body)
		for _, loc := range createFunction.FindAllStringSubmatchIndex(body, -1) {
			name := body[loc[2]:loc[3]]
			args, err := paramTypes(body[loc[1]:])
			if err != nil {
				return nil, fmt.Errorf("%s: %s: %w", f.Name, name, err)
			}
			out = append(out, name+"("+strings.Join(args, ", ")+")")
		}
	}
	return out, nil
}

// stripLineComments drops "--" comments, which may sit inside a parameter
// list. Function bodies are not parsed further than their header.
func stripLineComments(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		if j := strings.Index(l, "--"); j >= 0 {
			lines[i] = l[:j]
		}
	}
	return strings.Join(lines, "\n")
}

// paramTypes reads a parameter list from just after its "(" to the matching
// ")" and returns the input parameters' types.
func paramTypes(s string) ([]string, error) {
	depth, start := 0, 0
	var params []string
	for i, c := range s {
		switch c {
		case '(':
			depth++
		case ')':
			if depth > 0 {
				depth--
				continue
			}
			params = append(params, s[start:i])
			var types []string
			for _, p := range params {
				p = strings.Join(strings.Fields(p), " ")
				if p == "" {
					continue
				}
				if j := strings.Index(strings.ToUpper(p), " DEFAULT "); j >= 0 {
					p = p[:j]
				}
				words := strings.SplitN(p, " ", 2)
				switch strings.ToUpper(words[0]) {
				case "OUT":
					continue // not part of the identity
				case "IN", "INOUT", "VARIADIC":
					if len(words) < 2 {
						return nil, fmt.Errorf("parameter %q", p)
					}
					words = strings.SplitN(words[1], " ", 2)
				}
				if len(words) < 2 {
					return nil, fmt.Errorf("parameter %q: want \"name type\"", p)
				}
				types = append(types, words[1])
			}
			return types, nil
		case ',':
			if depth == 0 {
				params = append(params, s[start:i])
				start = i + 1
			}
		}
	}
	return nil, errors.New("unterminated parameter list")
}
