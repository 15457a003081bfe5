package api

import (
	"queen-node/broker"
	"queen-node/internal/jsonscan"
)

// fieldName is Field.Text for a name field: ok also requires what
// checkName does, and allows "" (unset too) when optional.
func fieldName(f *jsonscan.Field, prev string, optional bool) (string, bool) {
	v, ok := f.Text(prev)
	switch {
	case !ok || len(v) > broker.MaxNameBytes:
		return "", false
	case v == "":
		return "", optional
	case f.Escaped:
		return v, validText(v)
	}
	return v, true // Str has checked it is UTF-8 without control bytes (NUL)
}
