package forward

import (
	"context"
	"net/http"
	"strings"

	"github.com/google/uuid"

	"queen-node/broker"
)

// NextLeaseHeader carries, on an ack forwarded to a queue's owner, the
// claims the forwarding node asks the owner to take ahead for its
// clients' next pops (docs/api.md, "Claims taken ahead"): comma-separated
// "acked=next" pairs of lease ids, where acked is a lease of a pop this
// node forwarded and next the lease id it will forward its client's next
// pop under. The owner honours it only beside Header's mark, and reads at
// most MaxNextLeases pairs of UUIDs.
const NextLeaseHeader = "X-Queen-Next-Lease"

// MaxNextLeases bounds the pairs of one NextLeaseHeader.
const MaxNextLeases = 16

type nextLeasesKey struct{}

// WithNextLeases returns ctx carrying next (acked lease -> next lease):
// Forwarder.Ack sends each owner the pairs of the leases its items carry.
func WithNextLeases(ctx context.Context, next map[string]string) context.Context {
	if len(next) == 0 {
		return ctx
	}
	return context.WithValue(ctx, nextLeasesKey{}, next)
}

// nextLeaseHeader is the NextLeaseHeader for items sent to one owner.
func nextLeaseHeader(ctx context.Context, items []broker.AckItem) http.Header {
	next, _ := ctx.Value(nextLeasesKey{}).(map[string]string)
	if next == nil {
		return nil
	}
	var pairs []string
	seen := map[string]bool{}
	for _, it := range items {
		n, ok := next[it.LeaseID]
		if !ok || seen[it.LeaseID] || len(pairs) == MaxNextLeases {
			continue
		}
		seen[it.LeaseID] = true
		pairs = append(pairs, it.LeaseID+"="+n)
	}
	if len(pairs) == 0 {
		return nil
	}
	return http.Header{NextLeaseHeader: {strings.Join(pairs, ",")}}
}

// ParseNextLeases reads a NextLeaseHeader: at most MaxNextLeases pairs,
// both sides UUIDs, canonical, the next one not nil (others are skipped).
func ParseNextLeases(h string) []broker.PeerClaim {
	if h == "" || len(h) > MaxNextLeases*80 {
		return nil
	}
	var out []broker.PeerClaim
	for _, p := range strings.Split(h, ",") {
		acked, next, ok := strings.Cut(strings.TrimSpace(p), "=")
		if !ok {
			continue
		}
		// Canonical, as the owner spells a forwarded pop's lease
		// (api/pop.go); never the nil UUID, which no pop is given.
		a, errA := uuid.Parse(acked)
		n, errN := uuid.Parse(next)
		if errA != nil || errN != nil || n == uuid.Nil {
			continue
		}
		out = append(out, broker.PeerClaim{AckedLease: a.String(), NextLease: n.String()})
		if len(out) == MaxNextLeases {
			break
		}
	}
	return out
}
