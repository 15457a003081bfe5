package mesh

import (
	"sync"
	"time"
)

// DefaultHintRate is the number of hints one peer may have applied per
// second (QUEEN_MESH_HINT_RATE); a burst of one second's worth is allowed.
// The hint-path benchmark (docs/mesh.md, "Speed") sends 50,000 distinct
// hints a second from one node, so this leaves twice that headroom, and at
// this rate remote marks cost about 3% of a core.
const DefaultHintRate = 100000

// hintLimiter is a token bucket per peer address: each hint applied costs a
// token, tokens refill at rate per second up to burst, and hints beyond the
// tokens are dropped (and counted by the caller). The buckets are keyed by
// the address of a current member (non-members are refused before any
// frame is read), so there are as many as there are peers.
type hintLimiter struct {
	rate, burst float64
	mu          sync.Mutex
	buckets     map[string]*bucket
}

type bucket struct {
	tokens float64
	last   time.Time
}

func newHintLimiter(rate int) *hintLimiter {
	return &hintLimiter{rate: float64(rate), burst: float64(rate), buckets: map[string]*bucket{}}
}

// take spends up to n tokens of key's bucket at now and returns how many it
// got.
func (l *hintLimiter) take(key string, n int, now time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[key]
	if b == nil {
		b = &bucket{tokens: l.burst, last: now}
		l.buckets[key] = b
	}
	if dt := now.Sub(b.last).Seconds(); dt > 0 {
		b.tokens = min(l.burst, b.tokens+dt*l.rate)
		b.last = now
	}
	got := min(n, int(b.tokens))
	b.tokens -= float64(got)
	return got
}
