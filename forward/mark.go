package forward

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
)

// A request a node forwards to a queue's owner carries Header, and the
// owner serves it as its own, never forwards it again and, for a pop,
// claims under the lease id in LeaseHeader. A client that could send the
// header would pass its requests off as forwarded: bypass the queue's
// owner and choose its lease ids. So the header's value is a mark only
// the members of a sealed mesh know: an HMAC of a fixed label under the
// mesh secret (the same on every node). A request whose Header does not
// carry it is a client's, whatever it says.

// markLabel is what the mark authenticates; a new meaning of the header
// would take a new label.
const markLabel = "queen-node forwarded request v1"

// Mark returns the Header value of the members of a mesh sealed with
// secret; "" without a secret (nothing is then forwarded).
func Mark(secret []byte) string {
	if len(secret) == 0 {
		return ""
	}
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(markLabel))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// Marked reports whether value, a request's Header, is mark; never with
// an empty mark or a forwarder's default one ("1", Config.Mark), which any
// client can send.
func Marked(value, mark string) bool {
	return mark != "" && mark != defaultMark && subtle.ConstantTimeCompare([]byte(value), []byte(mark)) == 1
}

// defaultMark is what a forwarder without Config.Mark sends (this
// package's tests); no node accepts it.
const defaultMark = "1"
