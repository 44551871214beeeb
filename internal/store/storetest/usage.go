package storetest

import (
	"fmt"
	"math/rand/v2"
	"sync"
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

// Instances flush their usage batches at the same time, each listing the
// same keys in its own order (issue 15, row 11): every flush succeeds, none
// is picked as a deadlock victim, because the store takes the rows in one
// fixed order whatever the order of the batch.
func testRecordUsageConcurrentOrders(t *testing.T, db btk.Store) {
	ws := newWorkspace(t, db)
	const n, flushers, rounds = 200, 3, 15
	ids := make([]string, n)
	write(t, db, func(tx btk.Tx) error {
		for i := range ids {
			k := key(ws, fmt.Sprintf("k%04d", i))
			if err := tx.CreateAPIKey(ctx, k); err != nil {
				return err
			}
			ids[i] = k.ID
		}
		return nil
	})
	var mu sync.Mutex
	var failures []error
	race(db, flushers, func(f int) {
		rng := rand.New(rand.NewPCG(uint64(f), 15))
		for r := range rounds {
			batch := make([]btk.KeyUsage, n)
			for i, p := range rng.Perm(n) {
				batch[i] = btk.KeyUsage{KeyID: ids[p], LastUsedAt: t0.Add(time.Duration(r) * time.Second), DayState: int64(r + 1)}
			}
			if err := db.RecordUsage(ctx, batch); err != nil {
				mu.Lock()
				failures = append(failures, err)
				mu.Unlock()
			}
		}
	})
	if len(failures) > 0 {
		t.Fatalf("%d of %d concurrent flushes failed, first: %v", len(failures), flushers*rounds, failures[0])
	}
}
