package storetest

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
)

// testCanaryMarkOncePerWindow: a canary key's use is claimed once per window,
// also by concurrent writers (docs/leaks.md).
func testCanaryMarkOncePerWindow(t *testing.T, db btk.Store) {
	claim := func(id string, at time.Time) (won bool) {
		t.Helper()
		write(t, db, func(tx btk.Tx) (err error) {
			won, err = tx.ClaimCanaryMark(ctx, id, at, at.Add(-time.Minute))
			return err
		})
		return won
	}
	if !claim("k1", t0) {
		t.Fatal("the first use was not claimed")
	}
	if claim("k1", t0.Add(30*time.Second)) {
		t.Error("a use 30 s later was claimed again")
	}
	if !claim("k2", t0.Add(30*time.Second)) {
		t.Error("another key's use was refused")
	}
	if !claim("k1", t0.Add(61*time.Second)) {
		t.Error("a use past the window was refused")
	}
	var wins atomic.Int32
	var wg sync.WaitGroup
	at := t0.Add(10 * time.Minute)
	for range 8 {
		wg.Go(func() {
			err := db.Write(ctx, func(tx btk.Tx) error {
				won, err := tx.ClaimCanaryMark(ctx, "k1", at, at.Add(-time.Minute))
				if won {
					wins.Add(1)
				}
				return err
			})
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := wins.Load(); n != 1 {
		t.Errorf("%d concurrent claims won; want 1", n)
	}
}
