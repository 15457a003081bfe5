package mesh

import (
	"sync"
	"time"
)

// DefaultLogEvery is how often one kind of abuse-driven log line (refused or
// timed-out hint streams, rejected frames, memberlist errors) may be written:
// the count goes to the counters, the log gets one line per kind per
// interval, with how many were suppressed since the last one.
const DefaultLogEvery = 10 * time.Second

// logLimiter lets one line of each kind through per interval.
type logLimiter struct {
	every time.Duration
	mu    sync.Mutex
	next  map[string]time.Time
	quiet map[string]uint64 // suppressed since the last line of the kind
}

func newLogLimiter(every time.Duration) *logLimiter {
	return &logLimiter{every: every, next: map[string]time.Time{}, quiet: map[string]uint64{}}
}

// allow reports whether a line of kind may be written at now, and how many
// were suppressed before it.
func (l *logLimiter) allow(kind string, now time.Time) (bool, uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Before(l.next[kind]) {
		l.quiet[kind]++
		return false, 0
	}
	l.next[kind] = now.Add(l.every)
	n := l.quiet[kind]
	delete(l.quiet, kind)
	return true, n
}

// logLimited writes a warning of kind unless one was written less than
// DefaultLogEvery ago.
func (m *Mesh) logLimited(kind, msg string, kv ...any) {
	ok, suppressed := m.logs.allow(kind, time.Now())
	if !ok {
		return
	}
	if suppressed > 0 {
		kv = append(kv, "suppressed", suppressed)
	}
	m.log.Warn(msg, kv...)
}
