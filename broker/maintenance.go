package broker

// Maintenance modes (docs/api.md, "Maintenance modes"; docs/operations.md,
// "Draining for a database upgrade"): two cluster-wide switches kept in
// PostgreSQL (queen.system_state), which every node polls.
//
//   - Push maintenance: pushes are appended, fsynced, to this node's buffer
//     file (package pushbuf) and answered "buffered". Once the switch is
//     off, the node replays its buffer in order through the normal push
//     path, then empties the file. While its buffer still holds records,
//     the node keeps appending new pushes to it, so they cannot overtake
//     the buffered ones.
//   - Pop maintenance: every pop answers empty (204), parked long-polls
//     included, which are woken as soon as the node sees the switch.
//
// A replayed push is bounded like a pushed one, in records and in bytes,
// and the replay holds one such push at a time, so its memory does not grow
// with the buffer. A record too large for any replayed push is refused at
// append (413) or, if one is in the file anyway, set aside to a side file
// for an operator instead of blocking the replay (docs/operations.md,
// "Draining for a database upgrade").

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"

	"queen-node/pg"
	"queen-node/protocol"
	"queen-node/pushbuf"
)

// Defaults of MaintenanceConfig.
const (
	DefaultMaintenanceRefresh = time.Second // how stale a node's view of the switches may be
	DefaultBufferMaxBytes     = 1 << 30     // 1 GiB of buffered pushes per node
)

// SetAsideFileName is the side file, next to the buffer file, that holds
// the records a replay cannot send: one JSON record per line.
const SetAsideFileName = "push.aside.jsonl"

// MaintenanceConfig is the maintenance modes' part of Config.
type MaintenanceConfig struct {
	// RefreshInterval (QUEEN_MAINTENANCE_REFRESH_MS, default 1 s) is how
	// often the node reads the switches from PostgreSQL: another node's
	// toggle reaches this one within it. The toggling node applies it at once.
	RefreshInterval time.Duration
	// BufferDir (QUEEN_BUFFER_DIR) holds this node's push buffer file. The
	// default "" is <os.TempDir()>/queen-node-buffer/<NodeName>; give it a
	// persistent disk in production (a temp dir may be wiped at boot).
	BufferDir string
	// BufferMaxBytes (QUEEN_BUFFER_MAX_BYTES, default 1 GiB) bounds the
	// buffer file; a push that does not fit is answered 503.
	BufferMaxBytes int64
	// ReplayBatch (default DefaultMaxPushRows) and ReplayBatchBytes
	// (default DefaultMaxPushBytes) bound one replayed push, as a push
	// request is bounded: at most that many records and that many bytes of
	// records, except that a replayed push always carries its first record.
	// A record over twice ReplayBatchBytes is never replayed: bufferPush
	// refuses it (ErrBufferItemTooLarge), and one found in the file is set
	// aside (SetAsideFileName). No environment variable sets them.
	ReplayBatch      int
	ReplayBatchBytes int64
}

// DefaultMaintenanceConfig returns a MaintenanceConfig with every default.
func DefaultMaintenanceConfig() MaintenanceConfig {
	return MaintenanceConfig{RefreshInterval: DefaultMaintenanceRefresh,
		BufferMaxBytes: DefaultBufferMaxBytes, ReplayBatch: DefaultMaxPushRows, ReplayBatchBytes: DefaultMaxPushBytes}
}

// PushBuffered is the status of a pushed item written to the node's buffer
// during push maintenance; it is stored when the buffer is replayed.
const PushBuffered protocol.PushStatus = "buffered"

// ErrMaintenanceRefused is wrapped by the errors of requests refused
// because of push maintenance; the API answers them 503 with their text.
var ErrMaintenanceRefused = errors.New("push maintenance")

var (
	// ErrBufferFull: the push does not fit under MaintenanceConfig.BufferMaxBytes.
	ErrBufferFull = fmt.Errorf("%w: this node's push buffer is full; retry later", ErrMaintenanceRefused)
	// ErrTxPushMaintenance: a transaction with push operations while pushes
	// are buffered. Its acks and pushes must commit together, and a
	// buffered push does not commit until the replay.
	ErrTxPushMaintenance = fmt.Errorf("%w: transactions with push operations are refused until it is off and this node's buffer is replayed; retry later", ErrMaintenanceRefused)
)

// ErrBufferItemTooLarge is wrapped by the error of a push refused during
// push maintenance because one of its items would make a buffer record
// larger than a replay can send; the API answers it 413. Retrying cannot
// help, so it does not wrap ErrMaintenanceRefused (503). A push request
// within the body bound never meets it (see maxRecord).
var ErrBufferItemTooLarge = errors.New("push maintenance: item too large for the push buffer")

// MaintenanceState is the cluster's switches as this node sees them.
type MaintenanceState struct {
	Push bool // push maintenance: pushes are buffered on disk
	Pop  bool // pop maintenance: pops answer empty
}

// BufferStats are this node's push buffer figures (for /status and
// GET /api/v1/status/buffers).
type BufferStats struct {
	Path             string // the buffer file
	Pending          int64  // records not replayed yet, every tenant
	Bytes            int64  // size of the file (replayed records stay until it is emptied)
	MaxBytes         int64  // MaintenanceConfig.BufferMaxBytes
	Replaying        bool   // a replay is running
	Healthy          bool   // the last append succeeded and the file has room
	Buffered         int64  // records appended since start
	Replayed         int64  // records replayed and stored since start
	ReplayDuplicates int64  // records replayed that were already stored (a replay after a crash)
	ReplayFailed     int64  // records a replay could not store (their queue was deleted meanwhile), logged
	SetAside         int64  // records a replay could not send, moved to SetAsidePath since start, logged
	SetAsideBytes    int64  // size of the side file: set-aside records an operator has not removed yet
	SetAsidePath     string // the side file (SetAsideFileName next to the buffer file)
}

// bufRecord is one buffered push item, JSON in a pushbuf record. The
// transaction id is fixed when buffering so a replay that runs twice (a
// crash after some records were stored) stores each message once.
type bufRecord struct {
	Tenant    string          `json:"t"`
	Sub       *string         `json:"s,omitempty"`
	Queue     string          `json:"q"`
	Partition string          `json:"p"`
	TxID      string          `json:"x"`
	Trace     *string         `json:"r,omitempty"`
	Payload   json.RawMessage `json:"d,omitempty"`
}

type maintenance struct {
	cfg MaintenanceConfig
	log hclog.Logger
	buf *pushbuf.Buffer

	push   atomic.Bool
	popMu  sync.Mutex                    // serialises pop switch changes
	popCh  atomic.Pointer[chan struct{}] // closed while pop maintenance is on, so parked pops wake
	kick   chan struct{}                 // wakes the replayer
	failed atomic.Bool                   // the last append failed

	pending   atomic.Int64 // records not replayed yet
	replayPos int64        // file offset the next replay starts from; the replay loop's own
	mu        sync.Mutex
	tenants   map[string]int64 // pending per tenant, under mu
	replaying atomic.Bool

	buffered, replayed, replayDup, replayFailed atomic.Int64

	asidePath  string       // the side file
	setAside   atomic.Int64 // records set aside since start
	asideBytes atomic.Int64 // size of the side file

	// toggles counts this node's own toggles, under applyMu: a read of the
	// switches that started before a toggle is dropped rather than applied
	// after it, which would undo the toggle until the next refresh.
	applyMu sync.Mutex
	toggles uint64
}

// readGen returns the toggle count to pass to applyRead, taken before
// reading the switches.
func (m *maintenance) readGen() uint64 {
	m.applyMu.Lock()
	defer m.applyMu.Unlock()
	return m.toggles
}

// applyRead applies switches read from PostgreSQL unless this node
// toggled one since gen (the read may predate the toggle's write).
func (m *maintenance) applyRead(gen uint64, f pg.MaintenanceFlags) {
	m.applyMu.Lock()
	defer m.applyMu.Unlock()
	if m.toggles != gen {
		return
	}
	m.apply(f)
}

// toggled applies this node's own toggle, stored in PostgreSQL already.
func (m *maintenance) toggled(fn func()) {
	m.applyMu.Lock()
	defer m.applyMu.Unlock()
	m.toggles++
	fn()
}

// startMaintenance opens the push buffer, reads the switches and starts
// the refresh and replay loops. A buffer left non-empty by the last run is
// replayed at once when push maintenance is off.
func (b *Broker) startMaintenance(ctx context.Context) error {
	cfg := b.cfg.Maintenance
	def := DefaultMaintenanceConfig()
	if cfg.RefreshInterval <= 0 {
		cfg.RefreshInterval = def.RefreshInterval
	}
	if cfg.ReplayBatch <= 0 {
		cfg.ReplayBatch = def.ReplayBatch
	}
	if cfg.ReplayBatchBytes <= 0 {
		cfg.ReplayBatchBytes = def.ReplayBatchBytes
	}
	if cfg.BufferDir == "" {
		cfg.BufferDir = filepath.Join(os.TempDir(), "queen-node-buffer", b.cfg.NodeName)
	}
	m := &maintenance{cfg: cfg, log: b.log.Named("maintenance"), kick: make(chan struct{}, 1),
		tenants: make(map[string]int64), asidePath: filepath.Join(cfg.BufferDir, SetAsideFileName)}
	open := make(chan struct{})
	m.popCh.Store(&open)
	buf, err := pushbuf.Open(cfg.BufferDir, cfg.BufferMaxBytes, m.log)
	if err != nil {
		return fmt.Errorf("push buffer: %w", err)
	}
	m.buf = buf
	if st, err := os.Stat(m.asidePath); err == nil && st.Size() > 0 {
		m.asideBytes.Store(st.Size())
		m.log.Warn("push buffer: records a replay could not send were set aside; recover them and remove the file",
			"file", m.asidePath, "bytes", st.Size())
	}
	if err := m.countPending(); err != nil {
		buf.Close()
		return err
	}
	flags, err := b.db.MaintenanceFlags(ctx)
	if err != nil {
		buf.Close()
		return fmt.Errorf("maintenance: %w", err)
	}
	m.apply(flags)
	count, bytes := buf.Stats()
	m.log.Info("push buffer ready", "path", buf.Path(), "records", count, "bytes", bytes,
		"max_bytes", cfg.BufferMaxBytes, "push_maintenance", flags.Push, "pop_maintenance", flags.Pop)
	b.maint = m
	b.spawn(b.refreshLoop)
	b.spawn(b.replayLoop)
	return nil
}

// countPending rebuilds the pending counts from the file after a start. It
// reads only each record's head, so a file of large records costs no more
// memory than one of small ones.
func (m *maintenance) countPending() error {
	var off int64
	for {
		n, next, err := m.buf.Len(off)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("push buffer: %w", err)
		}
		head, err := readHead(m.buf.Payload(off, n))
		if err != nil {
			return fmt.Errorf("push buffer record at %d: %w", off, err)
		}
		m.tenants[head.Tenant]++
		m.pending.Add(1)
		off = next
	}
}

// readHead decodes the fields of a record before its payload ("d", which
// encodeRecord writes last) and reads no further.
func readHead(r io.Reader) (bufRecord, error) {
	var rec bufRecord
	dec := json.NewDecoder(r)
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return rec, fmt.Errorf("decode buffered push: not a JSON object (%v)", err)
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return rec, fmt.Errorf("decode buffered push: %w", err)
		}
		if tok == "d" {
			break
		}
		key := tok
		if tok, err = dec.Token(); err != nil {
			return rec, fmt.Errorf("decode buffered push: %w", err)
		}
		v, ok := tok.(string)
		if !ok {
			return rec, fmt.Errorf("decode buffered push: field %v is not a string", key)
		}
		switch key {
		case "t":
			rec.Tenant = v
		case "s":
			rec.Sub = &v
		case "q":
			rec.Queue = v
		case "p":
			rec.Partition = v
		case "x":
			rec.TxID = v
		case "r":
			rec.Trace = &v
		}
	}
	return rec, nil
}

// encodeRecord encodes one buffer record. HTML characters are not escaped:
// json.Marshal would write each '<', '>' or '&' of a payload as six bytes,
// and a record could then be six times the item it buffers.
func encodeRecord(rec bufRecord) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(rec); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// maxRecord is the largest record a replay sends: twice the byte bound of
// a replayed push. A push request's body is at most that bound, and the
// record of one of its items adds only ids, the tenant and the producer
// subject (a JWT claim, inside request headers that net/http bounds to
// 1 MiB), so every record a request within the body bound makes fits.
func (m *maintenance) maxRecord() int64 {
	return min(2*m.cfg.ReplayBatchBytes, pushbuf.MaxRecordBytes)
}

// apply makes flags this node's view.
func (m *maintenance) apply(f pg.MaintenanceFlags) {
	if old := m.push.Swap(f.Push); old != f.Push {
		m.log.Info("push maintenance changed", "enabled", f.Push, "pending", m.pending.Load())
		if !f.Push {
			m.kickReplay()
		}
	}
	m.setPop(f.Pop)
}

func (m *maintenance) setPop(on bool) {
	m.popMu.Lock()
	defer m.popMu.Unlock()
	ch := *m.popCh.Load()
	if isClosed(ch) == on {
		return
	}
	if on {
		close(ch) // wakes every parked pop
	} else {
		open := make(chan struct{})
		m.popCh.Store(&open)
	}
	m.log.Info("pop maintenance changed", "enabled", on)
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func (m *maintenance) kickReplay() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// popGate returns whether pop maintenance is on, and a channel closed when
// it turns on: a parked pop waits on it beside its wake gate.
func (b *Broker) popGate() (<-chan struct{}, bool) {
	if b.maint == nil {
		return nil, false
	}
	ch := *b.maint.popCh.Load()
	return ch, isClosed(ch)
}

// buffering reports whether pushes go to the buffer: push maintenance is
// on, or records wait for their replay (new pushes queue behind them).
func (m *maintenance) buffering() bool {
	return m != nil && (m.push.Load() || m.pending.Load() > 0)
}

// bufferPush appends items to the buffer when pushes are being buffered;
// ok false means push them normally.
func (b *Broker) bufferPush(tenant string, sub *string, items []PushItem) (res []PushResult, ok bool, err error) {
	m := b.maint
	if !m.buffering() {
		return nil, false, nil
	}
	if sub != nil && *sub == "" {
		sub = nil // stored as null, as pushRows does
	}
	recs := make([][]byte, len(items))
	res = make([]PushResult, len(items))
	for i, it := range items {
		rec := bufRecord{Tenant: tenant, Sub: sub, Queue: it.Queue, Partition: it.Partition,
			TxID: it.TransactionID, Trace: it.TraceID, Payload: it.Payload}
		if rec.Partition == "" {
			rec.Partition = DefaultPartition
		}
		if rec.TxID == "" {
			id, err := uuid.NewV7()
			if err != nil {
				return nil, true, fmt.Errorf("transaction id: %w", err)
			}
			rec.TxID = id.String()
		}
		if recs[i], err = encodeRecord(rec); err != nil {
			return nil, true, fmt.Errorf("encode buffered push: %w", err)
		}
		if limit := m.maxRecord(); int64(len(recs[i])) > limit {
			// The replay could never send it (docs/api.md, "Maintenance modes").
			return nil, true, fmt.Errorf("%w: item %d takes %d bytes buffered, over the %d one replayed push can carry",
				ErrBufferItemTooLarge, i, len(recs[i]), limit)
		}
		res[i] = PushResult{Index: i, Status: PushBuffered, TransactionID: rec.TxID, TraceID: it.TraceID,
			Queue: it.Queue, partition: rec.Partition}
	}
	if err := m.buf.Append(recs); err != nil {
		if errors.Is(err, pushbuf.ErrFull) {
			return nil, true, ErrBufferFull
		}
		m.failed.Store(true)
		m.log.Error("push buffer append failed", "path", m.buf.Path(), "error", err)
		return nil, true, fmt.Errorf("push buffer: %w", err)
	}
	m.failed.Store(false)
	m.mu.Lock()
	m.tenants[tenant] += int64(len(items))
	m.mu.Unlock()
	m.pending.Add(int64(len(items)))
	m.buffered.Add(int64(len(items)))
	if !m.push.Load() {
		m.kickReplay() // buffered behind a replay that may be finishing
	}
	return res, true, nil
}

// checkTxMaintenance refuses a transaction with push operations while
// pushes are buffered (ErrTxPushMaintenance); ack-only ones run.
func (b *Broker) checkTxMaintenance(ops []TxOp) error {
	if !b.maint.buffering() {
		return nil
	}
	for _, op := range ops {
		if op.Type == "push" && len(op.Items) > 0 {
			return ErrTxPushMaintenance
		}
	}
	return nil
}

// refreshLoop polls the switches every RefreshInterval. A failed read
// keeps the last view: during a database upgrade the node must go on
// buffering.
func (b *Broker) refreshLoop(ctx context.Context) {
	m := b.maint
	t := time.NewTicker(m.cfg.RefreshInterval)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, rcancel := context.WithTimeout(ctx, max(m.cfg.RefreshInterval, 2*time.Second))
		gen := m.readGen()
		f, err := b.db.MaintenanceFlags(rctx)
		rcancel()
		if err != nil {
			if !failing && ctx.Err() == nil {
				m.log.Warn("cannot read the maintenance switches; keeping the last view", "error", err,
					"push_maintenance", m.push.Load())
			}
			failing = true
			continue
		}
		if failing {
			m.log.Info("maintenance switches readable again")
			failing = false
		}
		m.applyRead(gen, f)
	}
}

// replayLoop replays the buffer whenever push maintenance is off and
// records are pending, then closes the buffer when the broker stops.
func (b *Broker) replayLoop(ctx context.Context) {
	m := b.maint
	defer m.buf.Close()
	t := time.NewTicker(m.cfg.RefreshInterval)
	defer t.Stop()
	for {
		if !m.push.Load() && m.pending.Load() > 0 {
			b.replay(ctx)
		}
		select {
		case <-ctx.Done():
			return
		case <-m.kick:
		case <-t.C:
		}
	}
}

// replay pushes the buffered records in file order, consecutive records of
// one tenant and producer together, and empties the file once it has
// caught up with the appends. It stops early when push maintenance turns
// back on or the broker stops, and the next replay resumes where it
// stopped. Records stored twice by a crash mid-replay (the position is not
// persisted; a restart replays the file from its start) keep their
// transaction ids and are refused as duplicates by the partition's dedup
// (docs/api.md, "Maintenance modes").
func (b *Broker) replay(ctx context.Context) {
	m := b.maint
	m.replaying.Store(true)
	defer m.replaying.Store(false)
	m.log.Info("replaying push buffer", "pending", m.pending.Load())
	pos := m.replayPos
	backoff := 250 * time.Millisecond
	retry := func(what string, err error) bool {
		m.log.Warn(what+"; retrying", "error", err, "in", backoff)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
		return true
	}
	for ctx.Err() == nil && !m.push.Load() {
		bt, err := m.nextBatch(pos)
		if err != nil {
			m.log.Error("push buffer unreadable; replay stopped", "error", err)
			return
		}
		if bt.aside != "" {
			if err := m.setAsideRecord(pos, bt.size, bt.aside); err != nil {
				if !retry("cannot set a push buffer record aside", err) {
					return
				}
				continue
			}
			pos, m.replayPos = bt.next, bt.next
			continue
		}
		if len(bt.items) == 0 {
			done, err := m.buf.TruncateIf(pos)
			if err != nil {
				m.log.Error("cannot empty the replayed push buffer", "error", err)
				return
			}
			if done {
				m.replayPos = 0
				m.log.Info("push buffer replayed", "replayed", m.replayed.Load(),
					"duplicates", m.replayDup.Load(), "failed", m.replayFailed.Load(),
					"set_aside", m.setAside.Load())
				return
			}
			continue // appended meanwhile: replay that too
		}
		if err := b.replayBatch(ctx, bt); err != nil {
			if ctx.Err() != nil || !retry("push buffer replay failed", err) {
				return
			}
			continue
		}
		pos, m.replayPos = bt.next, bt.next
		backoff = 250 * time.Millisecond
	}
}

// replayBatch is one replayed push: consecutive records of one tenant and
// producer, within MaintenanceConfig's bounds.
type replayBatch struct {
	tenant string
	sub    *string
	items  []PushItem
	next   int64 // offset past the batch's last record
	// aside, when not "", says why the record at the batch's position
	// cannot be replayed; it is alone, size bytes long.
	aside string
	size  int
}

// nextBatch reads the next replayed push from pos, one record at a time:
// it judges each record's size from its header before reading it, and
// stops before the record that would take it past a bound or is another
// tenant's or producer's. No items and no aside: nothing left to replay.
func (m *maintenance) nextBatch(pos int64) (replayBatch, error) {
	var bt replayBatch
	var size int64
	for off := pos; len(bt.items) < m.cfg.ReplayBatch; {
		n, next, err := m.buf.Len(off)
		if err == io.EOF {
			break
		}
		if err != nil {
			return bt, err
		}
		if limit := m.maxRecord(); int64(n) > limit {
			if len(bt.items) == 0 {
				bt.aside, bt.size, bt.next = fmt.Sprintf("%d bytes, over the %d one replayed push can carry", n, limit), n, next
			}
			break
		}
		if len(bt.items) > 0 && size+int64(n) > m.cfg.ReplayBatchBytes {
			break
		}
		r, err := m.buf.ReadRecord(off)
		if err != nil {
			return bt, err
		}
		var rec bufRecord
		if err := json.Unmarshal(r.Data, &rec); err != nil {
			// The checksum holds, so no retry would decode it either.
			if len(bt.items) == 0 {
				bt.aside, bt.size, bt.next = "cannot be decoded: "+err.Error(), n, next
			}
			break
		}
		if len(bt.items) > 0 && (rec.Tenant != bt.tenant || !sameSub(rec.Sub, bt.sub)) {
			break
		}
		bt.tenant, bt.sub = rec.Tenant, rec.Sub
		bt.items = append(bt.items, rec.item())
		size += int64(n)
		off, bt.next = next, next
	}
	return bt, nil
}

// replayBatch stores bt through the push path and counts its outcome.
func (b *Broker) replayBatch(ctx context.Context, bt replayBatch) error {
	m := b.maint
	res, err := b.pushStore(ctx, bt.tenant, bt.sub, bt.items)
	if err != nil {
		return err
	}
	for _, r := range res {
		switch r.Status {
		case protocol.PushQueued:
			m.replayed.Add(1)
		case protocol.PushDuplicate:
			m.replayDup.Add(1)
		default:
			m.replayFailed.Add(1)
			m.log.Warn("buffered push not stored by its replay", "tenant", bt.tenant,
				"queue", r.Queue, "transaction_id", r.TransactionID, "error", r.Error)
		}
	}
	m.replayedOut(bt.tenant, len(bt.items))
	return nil
}

// replayedOut takes n records of tenant off the pending counts.
func (m *maintenance) replayedOut(tenant string, n int) {
	m.mu.Lock()
	if m.tenants[tenant] -= int64(n); m.tenants[tenant] <= 0 {
		delete(m.tenants, tenant)
	}
	m.mu.Unlock()
	m.pending.Add(-int64(n))
}

// setAsideRecord appends the payload of the record at off (n bytes, one
// JSON record) as a line of the side file and fsyncs it, so the replay can
// move past a record it cannot send without losing a push that was
// answered 201; an operator recovers it (docs/operations.md, "Draining for
// a database upgrade"). It copies the record without holding it whole. A
// crash before the replay moves on sets it aside again: the side file may
// hold a record twice, with the same transaction id.
func (m *maintenance) setAsideRecord(off int64, n int, why string) error {
	head, headErr := readHead(m.buf.Payload(off, n))
	f, err := os.OpenFile(m.asidePath, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("open the side file: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("stat the side file: %w", err)
	}
	size := st.Size()
	if size > 0 {
		// A crash mid-copy leaves a partial last line: start a new one so
		// that it spoils no other record.
		var last [1]byte
		if _, err := f.ReadAt(last[:], size-1); err != nil {
			return fmt.Errorf("read the side file: %w", err)
		}
		if last[0] != '\n' {
			if _, err := f.Write([]byte("\n")); err != nil {
				return fmt.Errorf("write the side file: %w", err)
			}
			size++
		}
	}
	if _, err := io.Copy(f, m.buf.Payload(off, n)); err != nil {
		return fmt.Errorf("write the side file: %w", err)
	}
	if _, err := f.Write([]byte("\n")); err != nil {
		return fmt.Errorf("write the side file: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync the side file: %w", err)
	}
	if size == 0 {
		if err := syncDir(filepath.Dir(m.asidePath)); err != nil {
			return err
		}
	}
	m.asideBytes.Store(size + int64(n) + 1)
	m.setAside.Add(1)
	kv := []any{"offset", off, "bytes", n, "reason", why, "file", m.asidePath}
	if headErr != nil {
		kv = append(kv, "head_error", headErr)
	} else {
		kv = append(kv, "tenant", head.Tenant, "queue", head.Queue, "partition", head.Partition, "transaction_id", head.TxID)
	}
	m.log.Error("push buffer: a record the replay cannot send was set aside; recover it from the side file", kv...)
	m.replayedOut(head.Tenant, 1)
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

func (r bufRecord) item() PushItem {
	return PushItem{Queue: r.Queue, Partition: r.Partition, TransactionID: r.TxID, TraceID: r.Trace, Payload: r.Payload}
}

func sameSub(a, b *string) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// Maintenance reads the switches from PostgreSQL (not the cached view),
// makes them this node's view and returns them.
func (b *Broker) Maintenance(ctx context.Context) (MaintenanceState, error) {
	gen := b.maint.readGen()
	f, err := b.db.MaintenanceFlags(ctx)
	if err != nil {
		return MaintenanceState{}, wrap(err)
	}
	b.maint.applyRead(gen, f)
	return MaintenanceState{Push: f.Push, Pop: f.Pop}, nil
}

// SetPushMaintenance turns push maintenance on or off for the cluster: it
// is written to PostgreSQL and applied on this node at once; the others
// follow within their RefreshInterval.
func (b *Broker) SetPushMaintenance(ctx context.Context, on bool) error {
	if err := b.db.SetMaintenanceFlag(ctx, pg.StatePushMaintenance, on); err != nil {
		return wrap(err)
	}
	m := b.maint
	m.toggled(func() {
		if old := m.push.Swap(on); old != on {
			m.log.Info("push maintenance changed here", "enabled", on, "pending", m.pending.Load())
		}
	})
	if !on {
		m.kickReplay()
	}
	return nil
}

// SetPopMaintenance turns pop maintenance on or off for the cluster, like
// SetPushMaintenance; turning it on wakes this node's parked pops at once.
func (b *Broker) SetPopMaintenance(ctx context.Context, on bool) error {
	if err := b.db.SetMaintenanceFlag(ctx, pg.StatePopMaintenance, on); err != nil {
		return wrap(err)
	}
	b.maint.toggled(func() { b.maint.setPop(on) })
	return nil
}

// MaintenanceView is the switches as this node sees them now, without SQL.
func (b *Broker) MaintenanceView() MaintenanceState {
	_, pop := b.popGate()
	return MaintenanceState{Push: b.maint.push.Load(), Pop: pop}
}

// PushBuffering reports whether this node's pushes go to its buffer now:
// push maintenance is on, or its buffer is still being replayed. The HTTP
// layer then stores pushes here rather than forward them (docs/api.md,
// "Push ownership"): their order behind this node's buffer is kept only
// here.
func (b *Broker) PushBuffering() bool { return b.maint.buffering() }

// BufferStats returns this node's push buffer figures, every tenant's.
func (b *Broker) BufferStats() BufferStats {
	m := b.maint
	_, size := m.buf.Stats()
	return BufferStats{
		Path: m.buf.Path(), Pending: m.pending.Load(), Bytes: size, MaxBytes: m.buf.MaxBytes(),
		Replaying: m.replaying.Load(),
		Healthy:   !m.failed.Load() && (m.buf.MaxBytes() <= 0 || size < m.buf.MaxBytes()),
		Buffered:  m.buffered.Load(), Replayed: m.replayed.Load(),
		ReplayDuplicates: m.replayDup.Load(), ReplayFailed: m.replayFailed.Load(),
		SetAside: m.setAside.Load(), SetAsideBytes: m.asideBytes.Load(), SetAsidePath: m.asidePath,
	}
}

// TenantBuffered returns the records of one tenant waiting in this node's
// buffer.
func (b *Broker) TenantBuffered(tenant string) int64 {
	m := b.maint
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.tenants[tenant]
}

// MaintenanceSnapshot is the maintenance figures of Snapshot.
type MaintenanceSnapshot struct {
	PushMaintenance bool
	PopMaintenance  bool
	BufferStats
}

func (b *Broker) maintenanceSnapshot() MaintenanceSnapshot {
	if b.maint == nil {
		return MaintenanceSnapshot{}
	}
	v := b.MaintenanceView()
	return MaintenanceSnapshot{PushMaintenance: v.Push, PopMaintenance: v.Pop, BufferStats: b.BufferStats()}
}

// PopsPaused reports whether pop maintenance is on here: a node that
// forwards pops serves them itself then, so the switch takes effect at once
// on every node that has seen it (docs/api.md, "Queue ownership").
func (b *Broker) PopsPaused() bool {
	_, paused := b.popGate()
	return paused
}
