package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
)

// RecordUsage over several batched statements (more keys than one carries)
// and for a single key (the prepared statement): every row is written, and
// last_used_at never moves back.
func testRecordUsageBatches(t *testing.T, db btk.Store) {
	ws := newWorkspace(t, db)
	const n = 1201 // three statements: 500, 500, 201
	keys := make([]*btk.APIKey, n)
	usage := make([]btk.KeyUsage, n)
	// One transaction for the keys: 1,201 commits would dominate the test.
	write(t, db, func(tx btk.Tx) error {
		for i := range keys {
			keys[i] = key(ws, fmt.Sprintf("k%04d", i))
			if err := tx.CreateAPIKey(ctx, keys[i]); err != nil {
				return err
			}
			usage[i] = btk.KeyUsage{KeyID: keys[i].ID, LastUsedAt: t0.Add(time.Duration(i) * time.Second), DayState: int64(i + 1)}
		}
		return nil
	})
	if err := db.RecordUsage(ctx, usage); err != nil {
		t.Fatal(err)
	}
	// One key again, older: the time stays, the day state follows.
	if err := db.RecordUsage(ctx, []btk.KeyUsage{{KeyID: keys[7].ID, LastUsedAt: t0, DayState: 99}}); err != nil {
		t.Fatal(err)
	}
	read(t, db, func(tx btk.Tx) error {
		for i, k := range keys {
			got, err := tx.APIKey(ctx, k.ID)
			if err != nil {
				return err
			}
			want, wantDay := t0.Add(time.Duration(i)*time.Second), int64(i+1)
			if i == 7 {
				wantDay = 99
			}
			if got.LastUsedAt == nil || !got.LastUsedAt.Equal(want) || got.DayState != wantDay {
				t.Fatalf("key %d: last used %v, day state %d; want %v, %d", i, got.LastUsedAt, got.DayState, want, wantDay)
			}
		}
		return nil
	})
}
