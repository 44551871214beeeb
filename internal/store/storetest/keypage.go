package storetest

import (
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
)

// The reads of a page of keys (docs/usage.md#what-the-reads-cost): the last
// client of every key of the page in one statement, only of the keys of
// the workspace asked for (another workspace's key, an unknown id and a key
// never used are left out).
func testKeyClientsOfPage(t *testing.T, db btk.Store, ws *btk.Workspace) {
	other := newWorkspace(t, db)
	used, unused := createKey(t, db, key(ws, "used")), createKey(t, db, key(ws, "unused"))
	used2 := createKey(t, db, key(ws, "used2"))
	elsewhere := createKey(t, db, key(other, "elsewhere"))
	clients := []btk.KeyClient{
		{KeyID: used.ID, At: t0, IP: "192.0.2.1", UserAgent: "a/1"},
		{KeyID: used2.ID, At: t0.Add(time.Second), IP: "2001:db8::2", UserAgent: "b/2"},
		{KeyID: elsewhere.ID, At: t0, IP: "192.0.2.3", UserAgent: "c/3"},
	}
	if err := db.RecordUsage(ctx, nil, nil, clients); err != nil {
		t.Fatal(err)
	}
	read(t, db, func(tx btk.Tx) error {
		got, err := tx.KeyClients(ctx, ws.ID, []string{used.ID, unused.ID, elsewhere.ID, "no-such-key", used2.ID})
		if err != nil {
			return err
		}
		slices.SortFunc(got, func(a, b btk.KeyClient) int { return a.At.Compare(b.At) })
		if !reflect.DeepEqual(got, clients[:2]) {
			t.Errorf("KeyClients = %+v;\nwant %+v", got, clients[:2])
		}
		if got, err := tx.KeyClients(ctx, ws.ID, nil); err != nil || len(got) != 0 {
			t.Errorf("KeyClients of no key = %+v, %v", got, err)
		}
		return nil
	})
	// A full page (btk.MaxPageSize ids) is one statement too.
	ids := make([]string, btk.MaxPageSize)
	for i := range ids {
		ids[i] = fmt.Sprintf("unknown-%d", i)
	}
	ids[btk.MaxPageSize-1] = used.ID
	read(t, db, func(tx btk.Tx) error {
		got, err := tx.KeyClients(ctx, ws.ID, ids)
		if err != nil || len(got) != 1 || got[0].KeyID != used.ID {
			t.Errorf("KeyClients of a page of %d = %+v, %v", len(ids), got, err)
		}
		return nil
	})
}

// A page of keys' usage series in one statement: each key's hourly rows of
// the range summed per period (hours, or days from the range's start), by
// key then period; another workspace's key and hours outside the range are
// left out.
func testKeyUsageSeriesOfPage(t *testing.T, db btk.Store, ws *btk.Workspace) {
	other := newWorkspace(t, db)
	a, b := createKey(t, db, key(ws, "a")), createKey(t, db, key(ws, "b"))
	elsewhere := createKey(t, db, key(other, "elsewhere"))
	day := t0.Truncate(24 * time.Hour)
	at := func(h int) time.Time { return day.Add(time.Duration(h) * time.Hour) }
	rows := []btk.UsageCount{
		{KeyID: a.ID, WorkspaceID: ws.ID, Start: at(-1), Accepted: 100}, // before the range
		{KeyID: a.ID, WorkspaceID: ws.ID, Start: at(0), Accepted: 1, RateLimited: 2, Refused: 3},
		{KeyID: a.ID, WorkspaceID: ws.ID, Start: at(5), Accepted: 10},
		{KeyID: a.ID, WorkspaceID: ws.ID, Start: at(30), Refused: 7},
		{KeyID: a.ID, WorkspaceID: ws.ID, Start: at(48), Accepted: 100}, // at the range's end
		{KeyID: b.ID, WorkspaceID: ws.ID, Start: at(47), Accepted: 4},
		{KeyID: elsewhere.ID, WorkspaceID: other.ID, Start: at(1), Accepted: 9},
	}
	if err := db.RecordUsage(ctx, nil, counted(rows), nil); err != nil {
		t.Fatal(err)
	}
	f := btk.UsageFilter{WorkspaceID: ws.ID, KeyID: "ignored", Since: day, Until: at(48)}
	ids := []string{b.ID, a.ID, elsewhere.ID, "no-such-key"}
	count := func(k *btk.APIKey, start time.Time, acc, rl, ref int64) btk.UsageCount {
		return btk.UsageCount{KeyID: k.ID, WorkspaceID: ws.ID, Start: start, Accepted: acc, RateLimited: rl, Refused: ref}
	}
	byKey := func(want []btk.UsageCount) []btk.UsageCount { // the answer's order: key id, then period
		slices.SortStableFunc(want, func(x, y btk.UsageCount) int {
			if x.KeyID < y.KeyID {
				return -1
			}
			if x.KeyID > y.KeyID {
				return 1
			}
			return x.Start.Compare(y.Start)
		})
		return want
	}
	for _, c := range []struct {
		period time.Duration
		want   []btk.UsageCount
	}{
		{24 * time.Hour, byKey([]btk.UsageCount{
			count(a, at(0), 11, 2, 3), count(a, at(24), 0, 0, 7), count(b, at(24), 4, 0, 0),
		})},
		{time.Hour, byKey([]btk.UsageCount{
			count(a, at(0), 1, 2, 3), count(a, at(5), 10, 0, 0), count(a, at(30), 0, 0, 7), count(b, at(47), 4, 0, 0),
		})},
	} {
		read(t, db, func(tx btk.Tx) error {
			got, err := tx.KeyUsageSeries(ctx, f, ids, c.period)
			if err != nil {
				return err
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("KeyUsageSeries per %v = %+v;\nwant %+v", c.period, got, c.want)
			}
			return nil
		})
	}
	read(t, db, func(tx btk.Tx) error {
		if got, err := tx.KeyUsageSeries(ctx, f, nil, time.Hour); err != nil || len(got) != 0 {
			t.Errorf("KeyUsageSeries of no key = %+v, %v", got, err)
		}
		return nil
	})
}

// chainOf stores n keys of ws, each rotated from the one before (both
// links set, all but the last revoked), in one transaction, and returns
// them oldest first.
func chainOf(t testing.TB, db btk.Store, ws *btk.Workspace, n int) []*btk.APIKey {
	t.Helper()
	keys := make([]*btk.APIKey, n)
	name := fmt.Sprintf("chain %d", keySeq.Load()) // one name, as rotation keeps it
	for i := range keys {
		keys[i] = key(ws, name)
	}
	for i, k := range keys {
		if i > 0 {
			k.RotatedFromID = keys[i-1].ID
		}
		if i < n-1 {
			k.ReplacedByID = keys[i+1].ID
			k.RevokedAt = ptr(t0)
		}
	}
	write(t, db, func(tx btk.Tx) error {
		for _, k := range keys {
			if err := tx.CreateAPIKey(ctx, k); err != nil {
				return err
			}
		}
		return nil
	})
	return keys
}

func ids(keys []*btk.APIKey) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = k.ID
	}
	return out
}

// A rotation chain is walked in one statement, both ways from any of its
// keys, nearest first, at most n keys a side; a link to no key of the
// workspace ends a side; a key of another workspace is not found; a chain
// corrupted into a loop stops at n.
func testRotationChain(t *testing.T, db btk.Store, ws *btk.Workspace) {
	chain := chainOf(t, db, ws, 9)
	rev := func(keys []*btk.APIKey) []string { s := ids(keys); slices.Reverse(s); return s }
	walk := func(keyID string, n int) (older, newer []string, err error) {
		err = db.Read(ctx, func(tx btk.Tx) (err error) {
			older, newer, err = tx.RotationChain(ctx, ws.ID, keyID, n)
			return err
		})
		return older, newer, err
	}
	for _, c := range []struct {
		name         string
		from, n      int
		older, newer []string
	}{
		{"middle, whole", 4, 100, rev(chain[:4]), ids(chain[5:])},
		{"middle, 2 a side", 4, 2, rev(chain[2:4]), ids(chain[5:7])},
		{"oldest", 0, 100, nil, ids(chain[1:])},
		{"newest, 3", 8, 3, rev(chain[5:8]), nil},
		{"none", 4, 0, nil, nil},
	} {
		older, newer, err := walk(chain[c.from].ID, c.n)
		if err != nil || !slices.Equal(older, c.older) || !slices.Equal(newer, c.newer) {
			t.Errorf("%s: older %v, newer %v, %v;\nwant %v, %v", c.name, older, newer, err, c.older, c.newer)
		}
	}
	other := newWorkspace(t, db)
	_, _, err := walk(chainOf(t, db, other, 2)[0].ID, 10)
	mustBe(t, err, btk.ErrNotFound)
	_, _, err = walk("no-such-key", 10)
	mustBe(t, err, btk.ErrNotFound)

	// Links to a missing key and to another workspace's key end the walk.
	foreign := chainOf(t, db, other, 1)[0]
	k := key(ws, "dangling")
	k.RotatedFromID, k.ReplacedByID = "no-such-key", foreign.ID
	createKey(t, db, k)
	if older, newer, err := walk(k.ID, 10); err != nil || len(older)+len(newer) != 0 {
		t.Errorf("dangling links: older %v, newer %v, %v; want none", older, newer, err)
	}

	// A loop (never written by btk) repeats up to n, and ends.
	x, y := key(ws, "x"), key(ws, "y")
	x.ReplacedByID, x.RotatedFromID, x.RevokedAt = y.ID, y.ID, ptr(t0)
	y.ReplacedByID, y.RotatedFromID = x.ID, x.ID
	createKey(t, db, x)
	createKey(t, db, y)
	older, newer, err := walk(x.ID, 5)
	if err != nil || len(older) != 5 || len(newer) != 5 || older[0] != y.ID || older[1] != x.ID {
		t.Errorf("loop: older %v, newer %v, %v; want 5 a side, y first", older, newer, err)
	}
}
