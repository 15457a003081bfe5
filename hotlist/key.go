package hotlist

import "strings"

// Key names one tenant queue: the ring registry and the broker's long-poll
// wake gates are keyed by it, so a hot-list mark and a wake always name the
// same queue. It is built only by KeyOf: a key spelled by hand with a byte
// of difference would be a silently lost wake.
//
// It holds the encoded "<tenant>\x1f<queue>" in a single-field struct, which
// Go maps hash exactly as the string itself (no cost over a string key), and
// the unexported field keeps every other spelling out. Tenant names cannot
// hold \x1f (auth refuses them), so the encoding is unambiguous.
type Key struct{ s string }

const keySep = "\x1f"

// KeyOf returns the key of (tenant, queue).
func KeyOf(tenant, queue string) Key { return Key{tenant + keySep + queue} }

// Split returns the key's tenant and queue.
func (k Key) Split() (tenant, queue string) {
	tenant, queue, _ = strings.Cut(k.s, keySep)
	return tenant, queue
}

// Tenant returns the key's tenant.
func (k Key) Tenant() string { t, _ := k.Split(); return t }

// Queue returns the key's queue name.
func (k Key) Queue() string { _, q := k.Split(); return q }

// Less orders keys by tenant, then queue.
func (k Key) Less(o Key) bool { return k.s < o.s }

// String returns "tenant/queue", for logs and test messages only.
func (k Key) String() string { t, q := k.Split(); return t + "/" + q }
