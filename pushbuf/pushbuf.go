// Package pushbuf is the node's durable push buffer: an append-only file of
// length-prefixed, checksummed records, written and fsynced before a
// buffered push is answered (push maintenance, docs/api.md "Maintenance
// modes"). The broker replays it in order and truncates it.
//
// Record layout: a 4-byte little-endian payload length, a 4-byte CRC-32C
// of the payload, the payload. A crash can leave a torn last record (short
// or with a wrong checksum); Open detects it, logs it and cuts the file
// back to the last whole record, which a client was never told was stored.
package pushbuf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/hashicorp/go-hclog"
)

// FileName is the buffer's file inside its directory.
const FileName = "push.buf"

const headerSize = 8

// MaxRecordBytes bounds one record's payload; a length past it in the file
// can only be damage, and is treated as a torn tail.
const MaxRecordBytes = 64 << 20

// ErrFull is returned by Append when the records would take the file past
// its byte bound; nothing was written.
var ErrFull = errors.New("push buffer full")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Buffer is one buffer file. It is safe for concurrent use: appends are
// serialised, and reads of the part already written may run beside them.
type Buffer struct {
	mu       sync.Mutex
	f        *os.File
	path     string
	size     int64 // bytes of whole records
	count    int64 // records in the file
	maxBytes int64
	log      hclog.Logger
}

// Open opens (creating) dir/FileName, scans it, and drops a torn tail.
// maxBytes bounds the file (0 or less: no bound).
func Open(dir string, maxBytes int64, log hclog.Logger) (*Buffer, error) {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("push buffer dir %s: %w", dir, err)
	}
	path := filepath.Join(dir, FileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open push buffer: %w", err)
	}
	b := &Buffer{f: f, path: path, maxBytes: maxBytes, log: log}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("stat push buffer: %w", err)
	}
	var off int64
	var reason string
	scratch := make([]byte, scanChunk)
	for {
		next, err := b.checkAt(off, scratch)
		if err == io.EOF {
			break
		}
		var torn errTorn
		if errors.As(err, &torn) {
			reason = err.Error()
			break
		}
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("scan push buffer: %w", err)
		}
		off = next
		b.count++
	}
	if off < st.Size() {
		// Only the last append can be torn: earlier ones were fsynced
		// before the next began.
		log.Warn("push buffer: dropping a torn tail left by a crash", "path", path,
			"kept_bytes", off, "dropped_bytes", st.Size()-off, "reason", reason)
		if err := f.Truncate(off); err != nil {
			f.Close()
			return nil, fmt.Errorf("truncate torn push buffer tail: %w", err)
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return nil, fmt.Errorf("sync push buffer: %w", err)
		}
	}
	b.size = off
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		f.Close()
		return nil, fmt.Errorf("seek push buffer: %w", err)
	}
	if err := syncDir(dir); err != nil {
		f.Close()
		return nil, err
	}
	return b, nil
}

// errTorn marks a record that is not whole.
type errTorn string

func (e errTorn) Error() string { return string(e) }

// header reads the header of the record at off: its payload length and
// checksum. io.EOF exactly at the end of the file.
func (b *Buffer) header(off int64) (length, sum uint32, err error) {
	var h [headerSize]byte
	n, err := b.f.ReadAt(h[:], off)
	if n == 0 && err == io.EOF {
		return 0, 0, io.EOF
	}
	if err != nil && err != io.EOF {
		return 0, 0, err
	}
	if n < headerSize {
		return 0, 0, errTorn("short record header")
	}
	length = binary.LittleEndian.Uint32(h[0:4])
	if length > MaxRecordBytes {
		return 0, 0, errTorn("record length out of bounds")
	}
	return length, binary.LittleEndian.Uint32(h[4:8]), nil
}

// readAt reads the record at off; io.EOF exactly at the end of the file.
func (b *Buffer) readAt(off int64) ([]byte, int64, error) {
	length, sum, err := b.header(off)
	if err != nil {
		return nil, 0, err
	}
	p := make([]byte, length)
	n, err := b.f.ReadAt(p, off+headerSize)
	if err != nil && err != io.EOF {
		return nil, 0, err
	}
	if n < int(length) {
		return nil, 0, errTorn("short record")
	}
	if crc32.Checksum(p, castagnoli) != sum {
		return nil, 0, errTorn("record checksum mismatch")
	}
	return p, off + headerSize + int64(length), nil
}

// scanChunk is how much of a record Open holds at a time while it checks
// the file: a start costs the same memory whatever the records' sizes.
const scanChunk = 256 << 10

// checkAt checks the record at off through scratch, without holding it
// whole, and returns the offset past it; io.EOF exactly at the end.
func (b *Buffer) checkAt(off int64, scratch []byte) (int64, error) {
	length, sum, err := b.header(off)
	if err != nil {
		return 0, err
	}
	var crc uint32
	pos, left := off+headerSize, int64(length)
	for left > 0 {
		p := scratch[:min(left, int64(len(scratch)))]
		n, err := b.f.ReadAt(p, pos)
		if err != nil && err != io.EOF {
			return 0, err
		}
		if n < len(p) {
			return 0, errTorn("short record")
		}
		crc = crc32.Update(crc, castagnoli, p)
		pos, left = pos+int64(n), left-int64(n)
	}
	if crc != sum {
		return 0, errTorn("record checksum mismatch")
	}
	return pos, nil
}

// Append writes recs as consecutive records and fsyncs them before it
// returns: all are durable, or (on an error) none is counted and the file
// is cut back. ErrFull when they do not fit under the bound.
func (b *Buffer) Append(recs [][]byte) error {
	var total int64
	for _, r := range recs {
		if len(r) > MaxRecordBytes {
			return fmt.Errorf("push buffer record of %d bytes: over %d", len(r), MaxRecordBytes)
		}
		total += headerSize + int64(len(r))
	}
	buf := make([]byte, 0, total)
	for _, r := range recs {
		buf = binary.LittleEndian.AppendUint32(buf, uint32(len(r)))
		buf = binary.LittleEndian.AppendUint32(buf, crc32.Checksum(r, castagnoli))
		buf = append(buf, r...)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.maxBytes > 0 && b.size+total > b.maxBytes {
		return ErrFull
	}
	if _, err := b.f.WriteAt(buf, b.size); err != nil {
		b.cutBack()
		return fmt.Errorf("write push buffer: %w", err)
	}
	if err := b.f.Sync(); err != nil {
		b.cutBack()
		return fmt.Errorf("sync push buffer: %w", err)
	}
	b.size += total
	b.count += int64(len(recs))
	return nil
}

// cutBack drops a failed append's partial bytes; on failure Open will find
// them torn.
func (b *Buffer) cutBack() {
	if err := b.f.Truncate(b.size); err != nil {
		b.log.Error("push buffer: cannot cut back a failed append", "path", b.path, "error", err)
	}
}

// Record is one record read back and the offset just past it.
type Record struct {
	Data []byte
	Next int64
}

// Offsets passed to Len, ReadRecord and Payload must be 0 (the first
// record) or a Next returned before the last Truncate; they see only what
// was appended before they were called.

// Len returns the payload length of the record at off and the offset just
// past it, reading only its header, so that a caller can judge a record's
// size before it reads it. io.EOF when off is the end.
func (b *Buffer) Len(off int64) (int, int64, error) {
	if off >= b.end() {
		return 0, 0, io.EOF
	}
	length, _, err := b.header(off)
	if err != nil {
		return 0, 0, fmt.Errorf("read push buffer at %d: %w", off, err)
	}
	return int(length), off + headerSize + int64(length), nil
}

// ReadRecord reads the record at off and checks its checksum. io.EOF when
// off is the end.
func (b *Buffer) ReadRecord(off int64) (Record, error) {
	if off >= b.end() {
		return Record{}, io.EOF
	}
	p, next, err := b.readAt(off)
	if err != nil {
		return Record{}, fmt.Errorf("read push buffer at %d: %w", off, err)
	}
	return Record{Data: p, Next: next}, nil
}

// Payload reads the payload of the record at off, n bytes long (as Len
// returned), without holding it whole: for copying a large record. The
// checksum is not checked again (Open checked the file, and Append wrote
// the rest).
func (b *Buffer) Payload(off int64, n int) io.Reader {
	return io.NewSectionReader(b.f, off+headerSize, int64(n))
}

func (b *Buffer) end() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.size
}

// TruncateIf empties the file when its size is still end (nothing was
// appended since the caller read up to end) and reports whether it did.
func (b *Buffer) TruncateIf(end int64) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.size != end {
		return false, nil
	}
	if err := b.f.Truncate(0); err != nil {
		return false, fmt.Errorf("truncate push buffer: %w", err)
	}
	if err := b.f.Sync(); err != nil {
		return false, fmt.Errorf("sync push buffer: %w", err)
	}
	b.size, b.count = 0, 0
	return true, nil
}

// Stats returns the records and bytes in the file.
func (b *Buffer) Stats() (count, bytes int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.count, b.size
}

// MaxBytes is the byte bound (0 = none).
func (b *Buffer) MaxBytes() int64 { return b.maxBytes }

// Path is the buffer file's path.
func (b *Buffer) Path() string { return b.path }

// Close closes the file.
func (b *Buffer) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.f.Close()
}

// syncDir makes a newly created file's directory entry durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open push buffer dir: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync push buffer dir: %w", err)
	}
	return nil
}
