package pushbuf

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/go-hclog"
)

func recs(from, n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = []byte(fmt.Sprintf(`{"n":%d}`, from+i))
	}
	return out
}

func readAll(t *testing.T, b *Buffer) ([][]byte, int64) {
	t.Helper()
	var out [][]byte
	var off int64
	for {
		r, err := b.ReadRecord(off)
		if err == io.EOF {
			return out, off
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r.Data)
		off = r.Next
	}
}

func open(t *testing.T, dir string, max int64) *Buffer {
	t.Helper()
	b, err := Open(dir, max, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// Records come back in append order, across appends and across a reopen.
func TestOrderAndReopen(t *testing.T) {
	dir := t.TempDir()
	b := open(t, dir, 0)
	for i := 0; i < 5; i++ {
		if err := b.Append(recs(i*4, 4)); err != nil {
			t.Fatal(err)
		}
	}
	if n, _ := b.Stats(); n != 20 {
		t.Fatalf("count %d, want 20", n)
	}
	b.Close()
	b = open(t, dir, 0)
	got, _ := readAll(t, b)
	want := recs(0, 20)
	if len(got) != len(want) {
		t.Fatalf("read %d records after reopen, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("record %d = %s, want %s", i, got[i], want[i])
		}
	}
	if n, _ := b.Stats(); n != 20 {
		t.Fatalf("count after reopen %d, want 20", n)
	}
}

// A torn last record (cut short, or with a flipped byte) is dropped at
// Open; the records before it stay, and appends continue after them.
func TestTornTail(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(p string, size int64) error
	}{
		{"short header", func(p string, size int64) error { return appendBytes(p, []byte{9, 0, 0}) }},
		{"short payload", func(p string, size int64) error { return os.Truncate(p, size-2) }},
		{"bad checksum", func(p string, size int64) error {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			data[len(data)-1] ^= 0xff
			return os.WriteFile(p, data, 0o600)
		}},
		{"absurd length", func(p string, size int64) error {
			return appendBytes(p, []byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 1})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			b := open(t, dir, 0)
			if err := b.Append(recs(0, 3)); err != nil {
				t.Fatal(err)
			}
			_, whole := b.Stats()
			if err := b.Append(recs(3, 1)); err != nil {
				t.Fatal(err)
			}
			_, size := b.Stats()
			b.Close()
			if err := tc.damage(filepath.Join(dir, FileName), size); err != nil {
				t.Fatal(err)
			}
			b = open(t, dir, 0)
			got, _ := readAll(t, b)
			wantN := 3
			if tc.name == "short header" || tc.name == "absurd length" {
				wantN = 4 // the damage is after the fourth record
			}
			if len(got) != wantN {
				t.Fatalf("kept %d records, want %d", len(got), wantN)
			}
			if n, sz := b.Stats(); n != int64(wantN) || (wantN == 3 && sz != whole) {
				t.Fatalf("stats %d records %d bytes", n, sz)
			}
			if err := b.Append(recs(100, 1)); err != nil {
				t.Fatal(err)
			}
			b.Close()
			b = open(t, dir, 0)
			got, _ = readAll(t, b)
			if len(got) != wantN+1 || string(got[wantN]) != `{"n":100}` {
				t.Fatalf("after the repair an append reads back as %q", got)
			}
		})
	}
}

func appendBytes(p string, data []byte) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.Write(data)
	return err
}

// The byte bound refuses a whole append, keeping what is there.
func TestFull(t *testing.T) {
	b := open(t, t.TempDir(), 100)
	if err := b.Append(recs(0, 5)); err != nil { // 5 * (8 + 7) = 75 bytes
		t.Fatal(err)
	}
	if err := b.Append(recs(5, 2)); !errors.Is(err, ErrFull) {
		t.Fatalf("over the bound: %v, want ErrFull", err)
	}
	if n, sz := b.Stats(); n != 5 || sz != 75 {
		t.Fatalf("stats %d/%d after a refused append", n, sz)
	}
}

// TruncateIf empties only when nothing was appended after the caller's read.
func TestTruncateIf(t *testing.T) {
	dir := t.TempDir()
	b := open(t, dir, 0)
	if err := b.Append(recs(0, 2)); err != nil {
		t.Fatal(err)
	}
	_, end := readAll(t, b)
	if err := b.Append(recs(2, 1)); err != nil {
		t.Fatal(err)
	}
	if ok, err := b.TruncateIf(end); err != nil || ok {
		t.Fatalf("truncated past a newer append: %v %v", ok, err)
	}
	_, end = readAll(t, b)
	if ok, err := b.TruncateIf(end); err != nil || !ok {
		t.Fatalf("did not truncate: %v %v", ok, err)
	}
	b.Close()
	b = open(t, dir, 0)
	if n, sz := b.Stats(); n != 0 || sz != 0 {
		t.Fatalf("reopened a truncated buffer with %d records, %d bytes", n, sz)
	}
	if fi, err := os.Stat(filepath.Join(dir, FileName)); err != nil || fi.Size() != 0 {
		t.Fatalf("file not empty: %v %v", fi, err)
	}
}

// Len and Payload see a record's size and bytes without reading it whole;
// a record larger than Open's scan chunk is checked across chunks, and a
// flipped byte in its last chunk still makes it a torn tail.
func TestLenPayloadAndLargeRecords(t *testing.T) {
	dir := t.TempDir()
	b := open(t, dir, 0)
	big := bytes.Repeat([]byte("0123456789"), scanChunk/4) // 2.5 chunks
	if err := b.Append([][]byte{[]byte("small"), big}); err != nil {
		t.Fatal(err)
	}
	n, next, err := b.Len(0)
	if err != nil || n != 5 || next != headerSize+5 {
		t.Fatalf("Len(0) = %d, %d, %v", n, next, err)
	}
	n, end, err := b.Len(next)
	if err != nil || n != len(big) {
		t.Fatalf("Len(%d) = %d, %d, %v", next, n, end, err)
	}
	got, err := io.ReadAll(b.Payload(next, n))
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("Payload: %d bytes, %v", len(got), err)
	}
	if _, _, err := b.Len(end); err != io.EOF {
		t.Fatalf("Len at the end: %v, want io.EOF", err)
	}
	if _, err := b.ReadRecord(end); err != io.EOF {
		t.Fatalf("ReadRecord at the end: %v, want io.EOF", err)
	}
	b.Close()

	b = open(t, dir, 0)
	if recs, _ := readAll(t, b); len(recs) != 2 || !bytes.Equal(recs[1], big) {
		t.Fatalf("after reopen: %d records", len(recs))
	}
	b.Close()
	p := filepath.Join(dir, FileName)
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)-3] ^= 0xff
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	b = open(t, dir, 0)
	if n, sz := b.Stats(); n != 1 || sz != next {
		t.Fatalf("a damaged large record kept: %d records, %d bytes", n, sz)
	}
}
