package mesh

import (
	"bytes"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
)

// memberlistLog receives memberlist's log lines ("[ERR] memberlist: ...")
// and routes them through the mesh's hclog logger. Error and warning lines
// can be caused by anyone who reaches the gossip port (each garbage packet
// is one "[ERR]" line), so they are counted (GossipErrors for errors) and
// written at most once per DefaultLogEvery per level, with the number
// suppressed; info and debug lines pass through at their level.
type memberlistLog struct {
	m   *Mesh
	log hclog.Logger
}

func (w memberlistLog) Write(p []byte) (int, error) {
	for _, line := range bytes.Split(bytes.TrimRight(p, "\n"), []byte("\n")) {
		w.line(string(line))
	}
	return len(p), nil
}

func (w memberlistLog) line(s string) {
	level, msg := "", s
	if strings.HasPrefix(s, "[") {
		if i := strings.IndexByte(s, ']'); i > 0 {
			level, msg = s[1:i], strings.TrimSpace(s[i+1:])
		}
	}
	msg = strings.TrimPrefix(msg, "memberlist: ")
	log := w.log
	switch level {
	case "ERR", "ERROR":
		w.m.gossipErrors.Add(1)
		if ok, suppressed := w.m.logs.allow("memberlist-error", time.Now()); ok {
			log.Warn("gossip error (garbage, unauthenticated or failed exchange)", "error", msg, "suppressed", suppressed)
		}
	case "WARN":
		if ok, suppressed := w.m.logs.allow("memberlist-warn", time.Now()); ok {
			log.Warn(msg, "suppressed", suppressed)
		}
	case "INFO":
		log.Info(msg)
	default:
		log.Debug(msg)
	}
}
