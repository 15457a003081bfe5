package reads_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"

	"queen-node/internal/pgtest"
	"queen-node/pg"
	"queen-node/reads"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// fakeWaker records the Waker calls; seekErr is AfterSeek's answer.
type fakeWaker struct {
	mu      sync.Mutex
	calls   []string
	seekErr error
}

func (w *fakeWaker) record(s string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls = append(w.calls, s)
}

func (w *fakeWaker) AfterSeek(_ context.Context, tenant, queue, group string) error {
	w.record(fmt.Sprintf("seek %s/%s/%s", tenant, queue, group))
	return w.seekErr
}

func (w *fakeWaker) AfterGroupDelete(tenant, queue, group string) {
	w.record(fmt.Sprintf("group delete %s/%s/%s", tenant, queue, group))
}

func (w *fakeWaker) AfterMessageDelete(tenant, partitionID string, _ pg.DeleteResult) {
	w.record(fmt.Sprintf("message delete %s/%s", tenant, partitionID))
}

func (w *fakeWaker) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.calls
	w.calls = nil
	return out
}

// TestWaker: the admin writes that can make messages deliverable tell the
// Waker after they committed, the ones that failed do not, and a Waker
// error is the write's.
func TestWaker(t *testing.T) {
	ctx := context.Background()
	db, err := pg.Open(ctx, pgtest.NewDatabase(t), 4, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	_, pid, err := db.Configure(ctx, "t", "q", "Default", pg.QueueConfig{})
	if err != nil {
		t.Fatalf("configure: %v", err)
	}
	w := &fakeWaker{}
	s := reads.New(db, "n1", w, nil)

	if _, err := s.Seek(ctx, "t", "g", "q", true, nil); err != nil {
		t.Fatalf("seek: %v", err)
	}
	if _, err := s.DeleteConsumerGroup(ctx, "t", "g", "q", true); err != nil {
		t.Fatalf("delete group: %v", err)
	}
	if want := []string{"seek t/q/g", "group delete t/q/g"}; !slices.Equal(w.take(), want) {
		t.Fatalf("waker calls differ, want %q", want)
	}
	// A seek of one partition to its end makes nothing deliverable, but
	// tells the Waker as a seek: a claim taken ahead before it must not
	// be handed out after it (broker/prefetch.go).
	if err := s.SeekPartitionToEnd(ctx, "t", "g", "q", "Default"); err != nil {
		t.Fatalf("seek of a partition: %v", err)
	}
	if want := []string{"seek t/q/g"}; !slices.Equal(w.take(), want) {
		t.Fatalf("waker calls differ, want %q", want)
	}

	if _, err := s.DeleteMessage(ctx, "t", pid, "no-such-tx"); !errors.Is(err, reads.ErrNotFound) {
		t.Fatalf("delete of a missing message: %v, want ErrNotFound", err)
	}
	if got := w.take(); len(got) != 0 {
		t.Fatalf("a failed delete woke: %q", got)
	}

	w.seekErr = errors.New("reseed failed")
	if _, err := s.Seek(ctx, "t", "g", "q", false, nil); !errors.Is(err, w.seekErr) {
		t.Fatalf("seek with a failing waker: %v", err)
	}
}
