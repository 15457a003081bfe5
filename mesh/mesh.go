// Package mesh turns single nodes into a cluster: membership through
// hashicorp/memberlist, and "dirty hints" ((tenant, queue, partition) just
// received data) coalesced per node and sent to every live peer as batched
// msgpack frames over one persistent TCP stream per peer. A receiver hands
// hints to its Receiver (the broker marks its hot-list and wakes parked
// pops) and never forwards them. Hints are lossy by design: the hot-list's
// reseed floor heals any loss.
package mesh

import (
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"math/rand/v2"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/memberlist"

	"queen-node/coalesce"
	"queen-node/owner"
	"queen-node/protocol"
)

// Receiver gets the hints received from peers. It must not block for long.
type Receiver interface {
	HintsReceived(tenant, queue string, partitions []string)
}

// Stats are the mesh counters. They only grow while the process lives.
type Stats struct {
	Encrypted                  bool // QUEEN_MESH_SECRET is set: membership and hints are authenticated
	FramesSent, FramesReceived uint64
	HintsSent, HintsReceived   uint64
	FramesDropped              uint64 // chaos drops (QUEEN_MESH_DROP_RATE)
	FramesRejected             uint64 // bad or unauthenticated frames received
	QueueDropped               uint64 // frames dropped because a peer's send queue was full or it was unreachable
	InboundStreams             int    // inbound hint streams open now
	InboundRefusedLimit        uint64 // inbound streams refused: the total limit reached and no stream could make room
	InboundEvicted             uint64 // inbound streams that had not named their member yet, closed to make room for a new one
	InboundEvictedIdle         uint64 // member streams silent for StreamIdleBeats heartbeats, closed to give their slot to a newer stream
	InboundReplaced            uint64 // live member streams closed for a newer stream naming the same member
	InboundRefusedHeld         uint64 // streams refused: they named a member whose live stream holds its slot
	InboundTimedOut            uint64 // inbound streams closed because a read deadline passed
	InboundRefusedNotMember    uint64 // inbound streams refused: the remote address is not a current member's, or the first frame names a sender that is not a member at that address
	HintsRateLimited           uint64 // received hints dropped: over the sending peer's rate (HintRate)
	GossipErrors               uint64 // error lines memberlist logged (garbage packets, failed exchanges)
	CoalescerSize              int
	CoalescerCap               int
	CoalescerDropped           uint64
	LivePeers                  int

	// Loss detection (docs/mesh.md, "Loss detection").
	HeartbeatsSent      uint64 // heartbeat frames written
	HeartbeatsReceived  uint64 // heartbeat frames accepted
	GapsSeen            uint64 // received frames whose numbers show missed frames (gap, reconnect without continuity, sender restart)
	OverflowSignalsSent uint64 // frames that told a peer about hints dropped before numbering (new overflow count)
	OverflowSignalsSeen uint64 // received frames whose sender reported hints dropped for us
}

// Member is one member this node knows, itself included.
type Member struct {
	Name     string               `json:"name"`
	Addr     string               `json:"addr"`      // mesh host:port
	HTTPAddr string               `json:"http_addr"` // from its metadata
	State    protocol.MemberState `json:"state"`
	Version  string               `json:"version,omitempty"`
	Self     bool                 `json:"self,omitempty"`

	hint    string // advertised hint address (metadata)
	inc     uint64 // advertised hint-stream incarnation (metadata); 0 from a node too old to say
	leaving bool   // advertised just before a graceful leave (metadata)
}

// meta is what a node advertises in memberlist metadata (at most 512 bytes).
type meta struct {
	Version string `json:"v"`
	HTTP    string `json:"http"`
	Hint    string `json:"hint"`
	Leaving bool   `json:"leaving,omitempty"` // set just before a graceful leave
	// Inc is the incarnation this node stamps on its hint streams, so a
	// receiver can tell its streams from others naming it (docs/mesh.md,
	// "Hint port limits").
	Inc uint64 `json:"inc,omitempty"`
}

// Mesh is a running membership plus hint transport.
type Mesh struct {
	cfg    Config
	log    hclog.Logger
	recv   Receiver
	sealer *Sealer
	ml     *memberlist.Memberlist
	ln     net.Listener
	self   meta

	live    atomic.Int32 // live peers, read on every push without a lock
	leaving atomic.Bool  // advertised in metadata before a graceful leave

	setMu sync.Mutex
	set   *coalesce.Set

	memMu   sync.Mutex
	members map[string]*Member
	owners  atomic.Pointer[owner.Table] // rebuilt from members on every change (Owners)

	peerMu sync.Mutex
	peers  map[string]*peer // by node name
	// sendStates: each peer's numbering, kept across its re-creation
	// (under peerMu).
	sendStates map[string]*sendState

	inbound atomic.Int32 // inbound streams open: inOpen, for Stats without the lock
	inMu    sync.Mutex
	// Inbound stream slots (transport.go, admit and claim): streams that
	// have not named their member yet, per remote address, oldest first;
	// the stream holding each member's slot, by member name; how many are
	// open in all, at most maxInbound.
	pending    map[string][]*inConn
	slots      map[string]*inConn
	inOpen     int
	maxInbound int // DefaultMaxInbound; lowered by tests
	logs       *logLimiter

	inRefusedLimit, inEvicted, inTimedOut    atomic.Uint64
	inEvictedIdle, inReplaced, inRefusedHeld atomic.Uint64
	inRefusedNotMember, hintsLimited         atomic.Uint64
	gossipErrors                             atomic.Uint64
	limiter                                  *hintLimiter

	nw  network // tcpNetwork, or a test's in-memory one (Config.network)
	src net.IP  // hint streams leave from our own bind or advertise address (isMember); nil: the route picks

	framesSent, framesRecv, hintsSent, hintsRecv atomic.Uint64
	framesDropped, framesRejected, queueDropped  atomic.Uint64

	incarnation                    uint64 // random, fixed for the process: peers see a restart as a new one
	gaps                           *gapTracker
	lossRecv                       LossReceiver // recv, when it wants loss signals
	heartbeatsSent, heartbeatsRecv atomic.Uint64
	gapsSeen, overflowSeen         atomic.Uint64
	overflowSent                   atomic.Uint64
	coalDropped                    uint64                               // coalescer drops already reported to peers (flush goroutine only)
	dropHook                       atomic.Pointer[func(kind byte) bool] // tests: drop chosen frames, as the chaos knob does

	stop chan struct{}
	kick chan struct{} // Enqueue's signal to the flusher (capacity 1)
	wg   sync.WaitGroup
	once sync.Once
}

// New starts the hint listener and memberlist, joins the seeds in the
// background (retrying with back-off), and starts the flusher.
func New(cfg Config, recv Receiver) (*Mesh, error) {
	if cfg.Name == "" {
		return nil, errors.New("mesh: a node name is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.FlushInterval <= 0 {
		cfg.FlushInterval = DefaultFlushInterval
	}
	if cfg.Timings == (Timings{}) {
		cfg.Timings = LANTimings()
	}
	if cfg.HintFrameTimeout <= 0 {
		cfg.HintFrameTimeout = DefaultHintFrameTimeout
	}
	if cfg.HintIdleTimeout <= 0 {
		cfg.HintIdleTimeout = DefaultHintIdleTimeout
	}
	if cfg.HintRate <= 0 {
		cfg.HintRate = DefaultHintRate
	}
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if cfg.ConfirmInterval == 0 {
		cfg.ConfirmInterval = DefaultConfirmInterval
	}
	if cfg.ConfirmWindow <= 0 {
		cfg.ConfirmWindow = DefaultConfirmWindow
	}
	sealer, err := NewSealer(cfg.Secret)
	if err != nil {
		return nil, fmt.Errorf("mesh: %w", err)
	}
	if len(cfg.Secret) == 0 {
		sealer = nil
		cfg.Logger.Warn("QUEEN_MESH_SECRET is not set: membership and hints are unauthenticated and unencrypted; anyone who reaches the mesh port can join")
	}
	m := &Mesh{
		cfg: cfg, log: cfg.Logger, recv: recv, sealer: sealer,
		set:        coalesce.New(cfg.HintCap),
		members:    map[string]*Member{},
		peers:      map[string]*peer{},
		sendStates: map[string]*sendState{},
		pending:    map[string][]*inConn{},
		slots:      map[string]*inConn{},
		maxInbound: DefaultMaxInbound,
		logs:       newLogLimiter(DefaultLogEvery),
		limiter:    newHintLimiter(cfg.HintRate),
		stop:       make(chan struct{}),
		kick:       make(chan struct{}, 1),

		incarnation: rand.Uint64() | 1, // never 0
		gaps:        newGapTracker(),
	}
	m.lossRecv, _ = recv.(LossReceiver)
	m.nw = cfg.network
	if m.nw == nil {
		m.nw = tcpNetwork{}
	}
	bindHost, bindPort, err := splitHostPort(cfg.Bind)
	if err != nil {
		return nil, fmt.Errorf("mesh: bind %q: %w", cfg.Bind, err)
	}
	advHost, advPort := bindHost, bindPort
	if cfg.Advertise != "" {
		if advHost, advPort, err = splitHostPort(cfg.Advertise); err != nil {
			return nil, fmt.Errorf("mesh: advertise %q: %w", cfg.Advertise, err)
		}
	}
	if advHost == "" || advHost == "0.0.0.0" || advHost == "::" {
		if advHost, err = defaultAdvertiseIP(); err != nil {
			return nil, fmt.Errorf("mesh: derive an advertise address: %w", err)
		}
	}
	ln, err := m.nw.listenHints(bindHost, cfg.HintPort)
	if err != nil {
		return nil, fmt.Errorf("mesh: hint listener: %w", err)
	}
	m.ln = ln
	m.src = sourceIP(m.nw, bindHost, advHost)
	m.self = meta{Version: cfg.Version, HTTP: advertisedHTTP(cfg.HTTPAddr, advHost),
		Hint: net.JoinHostPort(advHost, strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)), Inc: m.incarnation}
	m.owners.Store(owner.New([]owner.Node{{Name: cfg.Name, Addr: m.self.HTTP, Self: true}}))

	mc := memberlist.DefaultLANConfig()
	mc.Name = cfg.Name
	mc.BindAddr, mc.BindPort = bindHost, bindPort
	mc.AdvertiseAddr, mc.AdvertisePort = advHost, advPort
	mc.GossipInterval = cfg.Timings.GossipInterval
	mc.ProbeInterval = cfg.Timings.ProbeInterval
	mc.ProbeTimeout = cfg.Timings.ProbeTimeout
	mc.SuspicionMult = cfg.Timings.SuspicionMult
	mc.PushPullInterval = cfg.Timings.PushPullInterval
	mc.SecretKey = cfg.Secret
	mc.Delegate = delegate{m}
	mc.Events = events{m}
	mc.Logger = log.New(memberlistLog{m: m, log: cfg.Logger.Named("memberlist")}, "", 0)
	if mc.Transport, err = m.nw.gossip(bindHost, bindPort); err != nil {
		ln.Close()
		return nil, fmt.Errorf("mesh: gossip transport on %s: %w", cfg.Bind, err)
	}
	ml, err := memberlist.Create(mc)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("mesh: memberlist on %s: %w", cfg.Bind, err)
	}
	m.ml = ml
	m.log.Info("mesh started", "name", cfg.Name, "gossip", net.JoinHostPort(advHost, strconv.Itoa(advPort)),
		"hints", m.self.Hint, "encrypted", sealer != nil)

	m.wg.Add(2)
	go m.acceptLoop()
	go m.joinLoop(net.JoinHostPort(advHost, strconv.Itoa(advPort)))
	if !cfg.noFlusher {
		m.wg.Add(1)
		go m.flushLoop()
	}
	return m, nil
}

// Close leaves the cluster gracefully and stops everything.
func (m *Mesh) Close() {
	m.once.Do(func() {
		// memberlist tells peers about a leave and a death the same way
		// (NotifyLeave, and its Node.State is not maintained), so say we are
		// leaving in our metadata first: peers then list us as "left".
		m.leaving.Store(true)
		if err := m.ml.UpdateNode(time.Second); err != nil {
			m.log.Debug("advertise leaving", "error", err)
		}
		if err := m.ml.Leave(2 * time.Second); err != nil {
			m.log.Warn("leave", "error", err)
		}
		close(m.stop)
		m.ln.Close()
		_ = m.ml.Shutdown()
		m.peerMu.Lock()
		for _, p := range m.peers {
			p.close()
		}
		m.peerMu.Unlock()
		m.wg.Wait()
	})
}

// Enqueue records a dirty hint for every live peer. With no live peer it
// returns at once: a single node pays neither the lock nor the allocation.
func (m *Mesh) Enqueue(tenant, queue, partition string) {
	if m.live.Load() == 0 {
		return
	}
	if !validName(tenant) || !validName(queue) || !validName(partition) {
		return // one unencodable hint would fail its whole flush
	}
	m.setMu.Lock()
	m.set.Add(coalesce.Hint{Tenant: tenant, Queue: queue, Partition: partition})
	m.setMu.Unlock()
	select {
	case m.kick <- struct{}{}:
	default: // a flush is already due
	}
}

// HintAddr is the host:port of this node's hint listener, as advertised.
func (m *Mesh) HintAddr() string { return m.self.Hint }

// HasPeers tells whether any peer is alive (callers can skip building hints).
func (m *Mesh) HasPeers() bool { return m.live.Load() > 0 }

// Stats returns the counters.
func (m *Mesh) Stats() Stats {
	m.setMu.Lock()
	size, capacity, dropped := m.set.Len(), m.set.Cap(), m.set.Dropped()
	m.setMu.Unlock()
	return Stats{
		Encrypted:  m.sealer != nil,
		FramesSent: m.framesSent.Load(), FramesReceived: m.framesRecv.Load(),
		HintsSent: m.hintsSent.Load(), HintsReceived: m.hintsRecv.Load(),
		FramesDropped: m.framesDropped.Load(), FramesRejected: m.framesRejected.Load(),
		QueueDropped:   m.queueDropped.Load(),
		InboundStreams: int(m.inbound.Load()), InboundRefusedLimit: m.inRefusedLimit.Load(),
		InboundEvicted: m.inEvicted.Load(), InboundTimedOut: m.inTimedOut.Load(),
		InboundEvictedIdle: m.inEvictedIdle.Load(), InboundReplaced: m.inReplaced.Load(), InboundRefusedHeld: m.inRefusedHeld.Load(),
		InboundRefusedNotMember: m.inRefusedNotMember.Load(), HintsRateLimited: m.hintsLimited.Load(),
		GossipErrors:  m.gossipErrors.Load(),
		CoalescerSize: size, CoalescerCap: capacity, CoalescerDropped: dropped,
		LivePeers:      int(m.live.Load()),
		HeartbeatsSent: m.heartbeatsSent.Load(), HeartbeatsReceived: m.heartbeatsRecv.Load(),
		GapsSeen: m.gapsSeen.Load(), OverflowSignalsSent: m.overflowSent.Load(), OverflowSignalsSeen: m.overflowSeen.Load(),
	}
}

// Members returns every member this node knows, itself included, sorted by
// name. Dead and left members stay listed until the process restarts.
// ("suspect" is part of the status contract but memberlist v0.7.0 does not
// expose it: its public Node.State is never updated, so a suspect member
// shows as alive until it is declared dead.)
func (m *Mesh) Members() []Member {
	m.memMu.Lock()
	out := make([]Member, 0, len(m.members))
	for _, mb := range m.members {
		out = append(out, *mb)
	}
	m.memMu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// joinLoop joins the seeds, retrying with back-off while this node is alone:
// a seed that is not up yet is normal, and a node whose join is refused
// (another secret) keeps running alone, says why, and retries.
func (m *Mesh) joinLoop(selfAddr string) {
	defer m.wg.Done()
	var seeds []string
	for _, s := range m.cfg.Join {
		if s != "" && s != selfAddr && s != m.cfg.Bind {
			seeds = append(seeds, s)
		}
	}
	if len(seeds) == 0 {
		return
	}
	backoff := 200 * time.Millisecond
	for attempt := 1; ; attempt++ {
		if m.ml.NumMembers() > 1 {
			// Joined; memberlist keeps the membership from here. Check again
			// later in case every peer went away and came back.
			backoff = 5 * time.Second
		} else {
			n, err := m.ml.Join(seeds)
			switch {
			case err == nil && n > 0:
				m.log.Info("joined the mesh", "contacted", n, "members", m.ml.NumMembers())
				backoff = 5 * time.Second
			case attempt == 1 || attempt%10 == 0:
				m.log.Warn("cannot join the mesh yet, running alone and retrying", "seeds", strings.Join(seeds, ","), "error", err)
			}
		}
		select {
		case <-m.stop:
			return
		case <-time.After(backoff):
		}
		if m.ml.NumMembers() <= 1 {
			backoff = min(backoff*2, 5*time.Second)
		}
	}
}

// flushLoop drains the coalescing set and sends the frames to every live
// peer: at once when hints arrive on an idle mesh (a fixed cadence made
// every cross-node wake wait half of it on average), and at most once per
// FlushInterval under load, so that hints still coalesce into few frames.
// It runs only when kicked: every Enqueue kicks (an overflow of the set
// too), and a flush that left hints behind (more than one flush's worth)
// goes again. No ticker: an idle node is not woken for nothing.
func (m *Mesh) flushLoop() {
	defer m.wg.Done()
	var last time.Time
	for {
		select {
		case <-m.stop:
			return
		case <-m.kick:
		}
		for {
			if wait := m.cfg.FlushInterval - time.Since(last); wait > 0 {
				select {
				case <-m.stop:
					return
				case <-time.After(wait):
				}
			}
			if m.flush() {
				last = time.Now()
			}
			m.setMu.Lock()
			more := m.set.Len() > 0
			m.setMu.Unlock()
			if !more {
				break
			}
		}
	}
}

// flush sends what the coalescing set holds and tells whether it sent any.
func (m *Mesh) flush() bool {
	m.setMu.Lock()
	batches := m.set.Drain(DefaultMaxFlushHints, MaxFrameBytes/2)
	dropped := m.set.Dropped()
	m.setMu.Unlock()
	if dropped != m.coalDropped {
		// The coalescing set overflowed since the last flush: those hints
		// were meant for every peer, so every peer's next frame says so.
		m.coalDropped = dropped
		for _, p := range m.syncPeers() {
			p.lost.Add(1)
		}
	}
	if len(batches) == 0 {
		return false
	}
	frames, counts, err := encodeFramesCounted(m.cfg.Name, batches)
	if err != nil {
		m.log.Warn("encode hint frames", "error", err)
		return false
	}
	// Each peer's goroutine numbers, stamps and seals its own copy; the
	// chaos knob drops there, after numbering (peer.writeHints).
	peers := m.syncPeers()
	for _, p := range peers {
		for i, f := range frames {
			if !p.send(outFrame{body: f, hints: counts[i]}) {
				m.queueDropped.Add(1)
			}
		}
	}
	return true
}

// chaosDrop tells whether the chaos knob (QUEEN_MESH_DROP_RATE) drops the
// frame about to be written.
func (m *Mesh) chaosDrop(kind byte) bool {
	if h := m.dropHook.Load(); h != nil && (*h)(kind) {
		m.framesDropped.Add(1)
		return true
	}
	if m.cfg.DropRate > 0 && rand.Float64() < m.cfg.DropRate {
		m.framesDropped.Add(1)
		return true
	}
	return false
}

// syncPeers makes the sender set match the live membership and returns it.
func (m *Mesh) syncPeers() []*peer {
	// From our member table, filled by memberlist's event callbacks (which
	// run under its lock): the *Node pointers of ml.Members() are updated by
	// memberlist concurrently, so reading their metadata here would race.
	// "alive" there includes suspect members (most likely alive and slow to
	// answer probes: keep hinting them rather than tear their stream down).
	want := map[string]string{}
	m.memMu.Lock()
	for name, mb := range m.members {
		if !mb.Self && mb.State == protocol.MemberAlive && mb.hint != "" {
			want[name] = mb.hint
		}
	}
	m.memMu.Unlock()
	m.peerMu.Lock()
	defer m.peerMu.Unlock()
	for name, p := range m.peers {
		if addr, ok := want[name]; !ok || addr != p.addr {
			p.close()
			delete(m.peers, name)
		}
	}
	out := make([]*peer, 0, len(want))
	for name, addr := range want {
		p := m.peers[name]
		if p == nil {
			ss := m.sendStates[name]
			if ss == nil {
				ss = &sendState{}
				m.sendStates[name] = ss
			} else {
				// Back in the live set: what was flushed while it was out
				// never went to it.
				ss.lost.Add(1)
			}
			p = newPeer(m, name, addr, ss)
			m.peers[name] = p
		}
		out = append(out, p)
	}
	return out
}

// delegate answers memberlist's metadata requests; user messages are not
// used (hints travel on their own streams).
type delegate struct{ m *Mesh }

func (d delegate) NodeMeta(limit int) []byte {
	md := d.m.self
	md.Leaving = d.m.leaving.Load()
	b, _ := json.Marshal(md)
	if len(b) > limit {
		return nil
	}
	return b
}
func (d delegate) NotifyMsg([]byte)                           {}
func (d delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d delegate) LocalState(join bool) []byte                { return nil }
func (d delegate) MergeRemoteState(buf []byte, join bool)     {}

// events keeps the member table and the live peer count, and logs changes.
type events struct{ m *Mesh }

func (e events) NotifyJoin(n *memberlist.Node) {
	e.m.upsert(n, protocol.MemberAlive)
	e.m.log.Info("member joined", "member", n.Name, "addr", n.Address())
}

func (e events) NotifyUpdate(n *memberlist.Node) { e.m.upsert(n, protocol.MemberAlive) }

func (e events) NotifyLeave(n *memberlist.Node) {
	state := protocol.MemberDead
	var md meta
	if json.Unmarshal(n.Meta, &md) == nil && md.Leaving {
		state = protocol.MemberLeft
	}
	e.m.upsert(n, state)
	if n.Name != e.m.cfg.Name {
		e.m.log.Info("member gone", "member", n.Name, "addr", n.Address(), "state", state)
	}
}

func (m *Mesh) upsert(n *memberlist.Node, state protocol.MemberState) {
	var md meta
	_ = json.Unmarshal(n.Meta, &md)
	m.memMu.Lock()
	defer m.memMu.Unlock()
	m.members[n.Name] = &Member{Name: n.Name, Addr: n.Address(), HTTPAddr: md.HTTP, State: state,
		Version: md.Version, Self: n.Name == m.cfg.Name, hint: md.Hint, inc: md.Inc, leaving: md.Leaving}
	live := 0
	for _, mb := range m.members {
		if !mb.Self && mb.State == protocol.MemberAlive {
			live++
		}
	}
	m.live.Store(int32(live))
	m.owners.Store(ownerTable(m.members))
}

// ownerTable is the owner table of members: the live ones with an HTTP
// address. A member about to leave owns nothing already: pushes for its
// queues move to their next owner before it stops answering.
func ownerTable(members map[string]*Member) *owner.Table {
	nodes := make([]owner.Node, 0, len(members))
	for _, mb := range members {
		if mb.State == protocol.MemberAlive && !mb.leaving && mb.HTTPAddr != "" {
			nodes = append(nodes, owner.Node{Name: mb.Name, Addr: mb.HTTPAddr, Self: mb.Self})
		}
	}
	return owner.New(nodes)
}

// Owners returns the members that own queues' pushes: the live ones
// with an HTTP address, this node included, leaving ones excluded
// (docs/api.md, "Push ownership"). Never nil; it holds only this
// node until memberlist has reported it.
func (m *Mesh) Owners() *owner.Table { return m.owners.Load() }

func validName(s string) bool {
	return s != "" && len(s) <= MaxNameBytes && utf8.ValidString(s)
}

func splitHostPort(s string) (string, int, error) {
	h, p, err := net.SplitHostPort(s)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("bad port %q", p)
	}
	return h, port, nil
}

// defaultAdvertiseIP picks the first non-loopback IPv4 address.
func defaultAdvertiseIP() (string, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return "", err
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && !ipn.IP.IsLoopback() && ipn.IP.To4() != nil {
			return ipn.IP.String(), nil
		}
	}
	return "127.0.0.1", nil
}

// sourceIP is the local address hint streams are dialled from, so that
// receivers recognise a member by the connection's source address: the bind
// host when it is a specific address, else the advertise host when it can be
// bound here (not behind NAT), else nil (the route picks).
func sourceIP(nw network, bindHost, advHost string) net.IP {
	for _, h := range []string{bindHost, advHost} {
		if h == "" || h == "0.0.0.0" || h == "::" {
			continue
		}
		ip := net.ParseIP(h)
		if ip == nil {
			continue
		}
		l, err := nw.listenHints(h, 0)
		if err != nil {
			continue
		}
		l.Close()
		return ip
	}
	return nil
}

// advertisedHTTP turns a listen address such as ":6632" into one peers can
// reach.
func advertisedHTTP(httpAddr, host string) string {
	h, p, err := net.SplitHostPort(httpAddr)
	if err != nil {
		return httpAddr
	}
	if h == "" || h == "0.0.0.0" || h == "::" {
		h = host
	}
	return net.JoinHostPort(h, p)
}
