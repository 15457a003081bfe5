package pg_test

import (
	"context"
	"testing"
	"time"
)

// The reseed walk reports each partition's age since its last write (the
// early reseed's dark-time histogram, docs/hotlist.md), on the database's
// clock.
func TestReseedPageReportsAgeSinceLastWrite(t *testing.T) {
	t.Parallel()
	db, _ := openDB(t)
	pushN(t, db, "q", "old", 1)
	time.Sleep(300 * time.Millisecond) // the age must grow measurably between the two writes
	pushN(t, db, "q", "new", 1)
	rows, err := db.ReseedPage(context.Background(), "t", "q", "g", "", 10)
	if err != nil {
		t.Fatal(err)
	}
	age := map[string]int64{}
	for _, r := range rows {
		if r.AgeMs == nil {
			t.Fatalf("%s: no age although it was written", r.Name)
		}
		age[r.Name] = *r.AgeMs
	}
	if len(age) != 2 || age["old"] < 300 || age["new"] < 0 || age["old"]-age["new"] < 300 || age["old"] > 60000 {
		t.Fatalf("ages %v: want old >= new + 300 ms, both within a minute", age)
	}
}
