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
	for {
		_, next, err := b.readAt(off)
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

// readAt reads the record at off; io.EOF exactly at the end of the file.
func (b *Buffer) readAt(off int64) ([]byte, int64, error) {
	var h [headerSize]byte
	n, err := b.f.ReadAt(h[:], off)
	if n == 0 && err == io.EOF {
		return nil, 0, io.EOF
	}
	if err != nil && err != io.EOF {
		return nil, 0, err
	}
	if n < headerSize {
		return nil, 0, errTorn("short record header")
	}
	length := binary.LittleEndian.Uint32(h[0:4])
	sum := binary.LittleEndian.Uint32(h[4:8])
	if length > MaxRecordBytes {
		return nil, 0, errTorn("record length out of bounds")
	}
	p := make([]byte, length)
	n, err = b.f.ReadAt(p, off+headerSize)
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

// Read returns up to max records from off (0 = the first record), which
// must be 0 or a Next returned before the last Truncate. It reads only what
// was appended when it started.
func (b *Buffer) Read(off int64, max int) ([]Record, error) {
	b.mu.Lock()
	end := b.size
	b.mu.Unlock()
	var out []Record
	for off < end && len(out) < max {
		p, next, err := b.readAt(off)
		if err != nil {
			return out, fmt.Errorf("read push buffer at %d: %w", off, err)
		}
		out = append(out, Record{Data: p, Next: next})
		off = next
	}
	return out, nil
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
