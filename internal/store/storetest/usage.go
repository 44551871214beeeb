package storetest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
)

// RecordUsage over several batched statements (more keys than one carries)
// and for a single key (the prepared statement): every row is written, and
// last_used_at never moves back.
func testRecordUsageBatches(t *testing.T, db btk.Store, ws *btk.Workspace) {
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
	if err := db.RecordUsage(ctx, usage, nil, nil); err != nil {
		t.Fatal(err)
	}
	// One key again, older: the time stays, the day state follows.
	if err := db.RecordUsage(ctx, []btk.KeyUsage{{KeyID: keys[7].ID, LastUsedAt: t0, DayState: 99}}, nil, nil); err != nil {
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
// same keys in its own order (docs/usage.md#how-it-is-counted-and-why-it-is-exact): every flush succeeds, none
// is picked as a deadlock victim, because the store takes the rows in one
// fixed order whatever the order of the batch.
func testRecordUsageConcurrentOrders(t *testing.T, db btk.Store, ws *btk.Workspace) {
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
		rng := rand.New(rand.NewPCG(uint64(f), 15)) // #nosec G115 G404 -- a test's reproducible pseudo-random schedule; f is a small non-negative index
		for r := range rounds {
			batch := make([]btk.KeyUsage, n)
			for i, p := range rng.Perm(n) {
				batch[i] = btk.KeyUsage{KeyID: ids[p], LastUsedAt: t0.Add(time.Duration(r) * time.Second), DayState: int64(r + 1)}
			}
			if err := db.RecordUsage(ctx, batch, nil, nil); err != nil {
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

func hourOf(i int) time.Time { return t0.Truncate(time.Hour).Add(time.Duration(i) * time.Hour) }

func series(t *testing.T, db btk.Store, f btk.UsageFilter) []btk.UsageCount {
	t.Helper()
	var out []btk.UsageCount
	read(t, db, func(tx btk.Tx) (err error) {
		out, err = tx.UsageSeries(ctx, f)
		return err
	})
	return out
}

// Counts of the same key and hour add up (each instance adds what it
// counted), in one transaction with last_used_at, and many rows at once
// (more than one statement carries).
func testUsageCountsAdd(t *testing.T, db btk.Store, ws *btk.Workspace) {
	k := createKey(t, db, key(ws, "k"))
	c := btk.UsageCount{KeyID: k.ID, WorkspaceID: ws.ID, Start: hourOf(0), Accepted: 3, RateLimited: 2, Refused: 1}
	for range 2 {
		if err := db.RecordUsage(ctx, []btk.KeyUsage{{KeyID: k.ID, LastUsedAt: t0, DayState: 1}}, counted([]btk.UsageCount{c}), nil); err != nil {
			t.Fatal(err)
		}
	}
	var many []btk.UsageCount
	for i := 1; i <= 450; i++ {
		many = append(many, btk.UsageCount{KeyID: k.ID, WorkspaceID: ws.ID, Start: hourOf(i), Accepted: 1})
	}
	if err := db.RecordUsage(ctx, nil, counted(many), nil); err != nil {
		t.Fatal(err)
	}
	got := series(t, db, btk.UsageFilter{WorkspaceID: ws.ID, KeyID: k.ID, Since: hourOf(0), Until: hourOf(451)})
	if len(got) != 451 || got[0].Accepted != 6 || got[0].RateLimited != 4 || got[0].Refused != 2 || !got[0].Start.Equal(hourOf(0)) {
		t.Fatalf("got %d rows, first %+v", len(got), got[0])
	}
	for i, g := range got[1:] {
		if g.Accepted != 1 || !g.Start.Equal(hourOf(i+1)) {
			t.Fatalf("row %d: %+v", i+1, g)
		}
	}
}

// Writers adding to the same rows at once (instances flushing together)
// lose nothing and do not deadlock: every batch takes the rows in the same
// order.
func testUsageCountsConcurrent(t *testing.T, db btk.Store, ws *btk.Workspace) {
	keys := make([]*btk.APIKey, 5)
	for i := range keys {
		keys[i] = createKey(t, db, key(ws, fmt.Sprintf("k%d", i)))
	}
	var batch []btk.UsageCount
	for _, k := range keys {
		for h := range 3 {
			batch = append(batch, btk.UsageCount{KeyID: k.ID, WorkspaceID: ws.ID, Start: hourOf(h), Accepted: 1, RateLimited: 1, Refused: 1})
		}
	}
	slices.SortFunc(batch, func(a, b btk.UsageCount) int {
		if c := strings.Compare(a.KeyID, b.KeyID); c != 0 {
			return c
		}
		return a.Start.Compare(b.Start)
	})
	const writers, rounds = 4, 10
	errs := make(chan error, writers*rounds)
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			for range rounds {
				err := db.RecordUsage(ctx, nil, counted(batch), nil)
				for errors.Is(err, btk.ErrUnavailable) { // SQLite's writer busy: retry
					err = db.RecordUsage(ctx, nil, counted(batch), nil)
				}
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range keys {
		got := series(t, db, btk.UsageFilter{WorkspaceID: ws.ID, KeyID: k.ID, Since: hourOf(0), Until: hourOf(3)})
		if len(got) != 3 {
			t.Fatalf("%d hours", len(got))
		}
		for _, g := range got {
			if g.Accepted != writers*rounds || g.RateLimited != writers*rounds || g.Refused != writers*rounds {
				t.Fatalf("hour %v: %+v, want %d each", g.Start, g, writers*rounds)
			}
		}
	}
}

// A workspace's series sums its keys per hour, within [Since, Until) and
// never another workspace's; TopKeys ranks keys by all their uses.
func testUsageSeriesAndTopKeys(t *testing.T, db btk.Store, ws *btk.Workspace) {
	other := newWorkspace(t, db)
	a, b, c := createKey(t, db, key(ws, "a")), createKey(t, db, key(ws, "b")), createKey(t, db, key(ws, "c"))
	o := createKey(t, db, key(other, "o"))
	rows := []btk.UsageCount{
		{KeyID: a.ID, WorkspaceID: ws.ID, Start: hourOf(0), Accepted: 5},
		{KeyID: a.ID, WorkspaceID: ws.ID, Start: hourOf(2), Accepted: 1},
		{KeyID: b.ID, WorkspaceID: ws.ID, Start: hourOf(0), Refused: 7},
		{KeyID: b.ID, WorkspaceID: ws.ID, Start: hourOf(5), Refused: 100}, // outside the range
		{KeyID: c.ID, WorkspaceID: ws.ID, Start: hourOf(1), RateLimited: 2},
		{KeyID: o.ID, WorkspaceID: other.ID, Start: hourOf(0), Accepted: 1000},
	}
	if err := db.RecordUsage(ctx, nil, counted(rows), nil); err != nil {
		t.Fatal(err)
	}
	f := btk.UsageFilter{WorkspaceID: ws.ID, Since: hourOf(0), Until: hourOf(5)}
	got := series(t, db, f)
	want := []btk.UsageCount{
		{WorkspaceID: ws.ID, Start: hourOf(0), Accepted: 5, Refused: 7},
		{WorkspaceID: ws.ID, Start: hourOf(1), RateLimited: 2},
		{WorkspaceID: ws.ID, Start: hourOf(2), Accepted: 1},
	}
	if !slices.EqualFunc(got, want, func(x, y btk.UsageCount) bool {
		return x.Start.Equal(y.Start) && x.Accepted == y.Accepted && x.RateLimited == y.RateLimited && x.Refused == y.Refused
	}) {
		t.Fatalf("series %+v, want %+v", got, want)
	}
	var top []btk.UsageCount
	read(t, db, func(tx btk.Tx) (err error) {
		top, err = tx.TopKeys(ctx, f, 2)
		return err
	})
	if len(top) != 2 || top[0].KeyID != b.ID || top[0].Refused != 7 || top[1].KeyID != a.ID || top[1].Accepted != 6 {
		t.Fatalf("top keys %+v", top)
	}
}

// Each usage read gives back the sums of its own rows: a workspace's
// series, a key's series, and the top keys of two workspaces (what an
// engine's migration test also checks after an upgrade, SeedUsage).
func testUsageReadBack(t *testing.T, db btk.Store, _ *btk.Workspace) {
	SeedUsage(t, db).Check(t, db)
}

// The latest client of a key is kept; an older one (a late flush of
// another instance) does not replace it. Unknown: ErrNotFound.
func testKeyClientLatestWins(t *testing.T, db btk.Store, ws *btk.Workspace) {
	k := createKey(t, db, key(ws, "k"))
	read(t, db, func(tx btk.Tx) error {
		_, err := tx.KeyClient(ctx, k.ID)
		mustBe(t, err, btk.ErrNotFound)
		return nil
	})
	for _, c := range []btk.KeyClient{
		{KeyID: k.ID, At: t0.Add(time.Minute), IP: "192.0.2.1", UserAgent: "new/1"},
		{KeyID: k.ID, At: t0, IP: "192.0.2.9", UserAgent: "old/1"},
	} {
		if err := db.RecordUsage(ctx, nil, nil, []btk.KeyClient{c}); err != nil {
			t.Fatal(err)
		}
	}
	read(t, db, func(tx btk.Tx) error {
		c, err := tx.KeyClient(ctx, k.ID)
		if err != nil {
			return err
		}
		if c.IP != "192.0.2.1" || c.UserAgent != "new/1" || !c.At.Equal(t0.Add(time.Minute)) {
			t.Fatalf("client %+v", c)
		}
		return nil
	})
}

// Retention deletes the hours before the cut and nothing after; running it
// twice (two instances) deletes nothing more.
func testPruneUsage(t *testing.T, db btk.Store, ws *btk.Workspace) {
	k := createKey(t, db, key(ws, "k"))
	var rows []btk.UsageCount
	for h := range 5 {
		rows = append(rows, btk.UsageCount{KeyID: k.ID, WorkspaceID: ws.ID, Start: hourOf(h), Accepted: 1})
	}
	if err := db.RecordUsage(ctx, nil, counted(rows), nil); err != nil {
		t.Fatal(err)
	}
	n, err := db.PruneUsage(ctx, hourOf(3))
	if err != nil || n != 3 {
		t.Fatalf("pruned %d, %v; want 3", n, err)
	}
	if n, err := db.PruneUsage(ctx, hourOf(3)); err != nil || n != 0 {
		t.Fatalf("pruned again %d, %v", n, err)
	}
	got := series(t, db, btk.UsageFilter{WorkspaceID: ws.ID, Since: hourOf(0), Until: hourOf(10)})
	if len(got) != 2 || !got[0].Start.Equal(hourOf(3)) {
		t.Fatalf("left %+v", got)
	}
}

// A flush written again (its first commit's answer was lost) adds nothing a
// second time, also when it comes back with a new flush; concurrent writes
// of one flush add it once; once its id is forgotten by retention it would
// count again (docs/usage.md).
func testUsageFlushCountedOnce(t *testing.T, db btk.Store, ws *btk.Workspace) {
	k := createKey(t, db, key(ws, "k"))
	at := hourOf(1)
	one := func(id string, n int64) btk.UsageFlush {
		return btk.UsageFlush{ID: id, At: at, Counts: []btk.UsageCount{{KeyID: k.ID, WorkspaceID: ws.ID, Start: hourOf(1), Accepted: n}}}
	}
	accepted := func() int64 {
		t.Helper()
		var n int64
		for _, p := range series(t, db, btk.UsageFilter{WorkspaceID: ws.ID, Since: hourOf(0), Until: hourOf(10)}) {
			n += p.Accepted
		}
		return n
	}
	for i, fs := range [][]btk.UsageFlush{
		{one("a", 3)},
		{one("a", 3)},                // written again alone
		{one("a", 3), one("b", 5)},   // again, with the next flush
		{one("b", 5), one("", 1)},    // an id-less flush always adds
		{one("c", 10), one("c", 10)}, // one flush twice in a batch
	} {
		if err := db.RecordUsage(ctx, nil, fs, nil); err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
	}
	if n := accepted(); n != 3+5+1+10 {
		t.Fatalf("accepted %d, want 19", n)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() { errs <- db.RecordUsage(ctx, nil, []btk.UsageFlush{one("d", 7)}, nil) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := accepted(); n != 26 {
		t.Fatalf("accepted %d after one flush written by 8 at once, want 26", n)
	}
	if n, err := db.PruneUsageFlushes(ctx, at); err != nil || n != 0 {
		t.Fatalf("pruned %d ids recorded at the cut, %v; want none", n, err)
	}
	if n, err := db.PruneUsageFlushes(ctx, at.Add(time.Nanosecond)); err != nil || n != 4 {
		t.Fatalf("pruned %d ids, %v; want 4", n, err)
	}
	if err := db.RecordUsage(ctx, nil, []btk.UsageFlush{one("a", 3)}, nil); err != nil {
		t.Fatal(err)
	}
	if n := accepted(); n != 29 {
		t.Fatalf("accepted %d after a forgotten id came back, want 29", n)
	}
}
