package pg_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"queen-node/pg"
)

// TestCompletedRetryAfterSeekPastOldDLQEntry: docs/api.md, "Acks",
// rule 5: a completed ack for a message already resolved answers success,
// whatever lease it carries; only a message that was dead-lettered (not
// completed) refuses a stale lease's completed ack. A message dead-lettered
// once, then delivered again after a seek back and completed, is resolved
// as completed: the client retrying that completed ack (its first answer
// lost, the lease ended by that very ack) must be told success. ack_v1
// finds the old dead-letter entry and answers "Invalid or expired lease".
func TestCompletedRetryAfterSeekPastOldDLQEntry(t *testing.T) {
	db, _ := openDB(t)
	ctx := context.Background()
	before := time.Now().Add(-time.Hour)
	pushN(t, db, "q", "p", 1)

	// Delivered, then dead-lettered under the live lease.
	l0 := uuid.NewString()
	out := claim(t, db, pg.PopArgs{Queue: "q", Names: []string{"p"}, Budget: 1, LeaseID: l0, LeaseSeconds: 600})
	if len(out.Messages) != 1 {
		t.Fatalf("first pop: %d messages", len(out.Messages))
	}
	m := out.Messages[0]
	o, err := db.Ack(ctx, "t", []pg.AckRow{{Group: "g", PartitionID: m.PartitionID, TxID: m.TxID, Status: "dlq", LeaseID: l0}})
	if err != nil || !o[0].Success || !o[0].DLQ {
		t.Fatalf("dlq ack: %+v, %v", o, err)
	}

	// The group seeks back before the message: it is pending again.
	if _, err := db.Seek(ctx, "t", "g", "q", false, &before); err != nil {
		t.Fatal(err)
	}
	l1 := uuid.NewString()
	out = claim(t, db, pg.PopArgs{Queue: "q", Names: []string{"p"}, Budget: 1, LeaseID: l1, LeaseSeconds: 600})
	if len(out.Messages) != 1 || out.Messages[0].TxID != m.TxID {
		t.Fatalf("pop after seek: %+v", out.Messages)
	}
	// Completed this time: the lease ends with this ack.
	o, err = db.Ack(ctx, "t", []pg.AckRow{{Group: "g", PartitionID: m.PartitionID, TxID: m.TxID, Status: "completed", LeaseID: l1}})
	if err != nil || !o[0].Success || !o[0].Released {
		t.Fatalf("completed ack: %+v, %v", o, err)
	}
	// The same ack again (its answer was lost): the truth is success.
	o, err = db.Ack(ctx, "t", []pg.AckRow{{Group: "g", PartitionID: m.PartitionID, TxID: m.TxID, Status: "completed", LeaseID: l1}})
	if err != nil {
		t.Fatal(err)
	}
	if !o[0].Success {
		t.Fatalf("retried completed ack of a message completed after a seek: %+v; want success (docs/api.md, Acks, rule 5)", o[0])
	}
}

// TestCompletedRetryAfterGroupDeleteOldDLQEntry: as above, with the
// consumer group deleted (and so started over) instead of a seek.
func TestCompletedRetryAfterGroupDeleteOldDLQEntry(t *testing.T) {
	db, _ := openDB(t)
	ctx := context.Background()
	pushN(t, db, "q", "p", 1)
	l0 := uuid.NewString()
	out := claim(t, db, pg.PopArgs{Queue: "q", Names: []string{"p"}, Budget: 1, LeaseID: l0, LeaseSeconds: 600})
	if len(out.Messages) != 1 {
		t.Fatalf("first pop: %d messages", len(out.Messages))
	}
	m := out.Messages[0]
	o, err := db.Ack(ctx, "t", []pg.AckRow{{Group: "g", PartitionID: m.PartitionID, TxID: m.TxID, Status: "dlq", LeaseID: l0}})
	if err != nil || !o[0].Success || !o[0].DLQ {
		t.Fatalf("dlq ack: %+v, %v", o, err)
	}
	if _, err := db.DeleteConsumerGroup(ctx, "t", "g", "q", true); err != nil {
		t.Fatal(err)
	}
	l1 := uuid.NewString()
	out = claim(t, db, pg.PopArgs{Queue: "q", Names: []string{"p"}, Budget: 1, LeaseID: l1, LeaseSeconds: 600})
	if len(out.Messages) != 1 || out.Messages[0].TxID != m.TxID {
		t.Fatalf("pop after the group delete: %+v", out.Messages)
	}
	o, err = db.Ack(ctx, "t", []pg.AckRow{{Group: "g", PartitionID: m.PartitionID, TxID: m.TxID, Status: "completed", LeaseID: l1}})
	if err != nil || !o[0].Success || !o[0].Released {
		t.Fatalf("completed ack: %+v, %v", o, err)
	}
	o, err = db.Ack(ctx, "t", []pg.AckRow{{Group: "g", PartitionID: m.PartitionID, TxID: m.TxID, Status: "completed", LeaseID: l1}})
	if err != nil {
		t.Fatal(err)
	}
	if !o[0].Success {
		t.Fatalf("retried completed ack of a message completed after a group delete: %+v; want success (docs/api.md, Acks, rule 5)", o[0])
	}
}

// TestSeekToEndKeepsDLQRefusal: a seek forward over a dead-lettered
// message does not complete it: a stale lease's completed ack for it is
// still refused (the rule 5 exception), as before the seek.
func TestSeekToEndKeepsDLQRefusal(t *testing.T) {
	db, _ := openDB(t)
	ctx := context.Background()
	pushN(t, db, "q", "p", 2)
	l0 := uuid.NewString()
	out := claim(t, db, pg.PopArgs{Queue: "q", Names: []string{"p"}, Budget: 2, LeaseID: l0, LeaseSeconds: 600})
	if len(out.Messages) != 2 {
		t.Fatalf("first pop: %d messages", len(out.Messages))
	}
	m := out.Messages[0]
	o, err := db.Ack(ctx, "t", []pg.AckRow{{Group: "g", PartitionID: m.PartitionID, TxID: m.TxID, Status: "dlq", LeaseID: l0}})
	if err != nil || !o[0].Success || !o[0].DLQ {
		t.Fatalf("dlq ack: %+v, %v", o, err)
	}
	if _, err := db.Seek(ctx, "t", "g", "q", true, nil); err != nil {
		t.Fatal(err)
	}
	o, err = db.Ack(ctx, "t", []pg.AckRow{{Group: "g", PartitionID: m.PartitionID, TxID: m.TxID, Status: "completed", LeaseID: l0}})
	if err != nil {
		t.Fatal(err)
	}
	if o[0].Success || o[0].Error != "Invalid or expired lease" {
		t.Fatalf("stale completed ack of a dead-lettered message after a seek to the end: %+v; want Invalid or expired lease", o[0])
	}
}
