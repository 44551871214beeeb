package storetest

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/btk-project/btk/internal/btk"
)

// t0 has nanoseconds so the tests prove times round-trip exactly.
var t0 = time.Date(2025, 3, 4, 5, 6, 7, 123456789, time.UTC)

func ptr[T any](v T) *T { return &v }

func write(t testing.TB, db btk.Store, fn func(btk.Tx) error) {
	t.Helper()
	if err := db.Write(context.Background(), fn); err != nil {
		t.Fatalf("Write: %v", err)
	}
}

func read(t testing.TB, db btk.Store, fn func(btk.Tx) error) {
	t.Helper()
	if err := db.Read(context.Background(), fn); err != nil {
		t.Fatalf("Read: %v", err)
	}
}

// readBack reads a row back with get and wants it to equal want in every
// field: what was written round-trips.
func readBack[T any](t testing.TB, db btk.Store, what string, want T, get func(btk.Tx) (T, error)) {
	t.Helper()
	read(t, db, func(tx btk.Tx) error {
		got, err := get(tx)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s = %+v, %v;\nwant %+v", what, got, err, want)
		}
		return nil
	})
}

func mustBe(t testing.TB, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("err = %v, want %v", err, want)
	}
}

func newWorkspace(t testing.TB, db btk.Store) *btk.Workspace {
	t.Helper()
	id := uuid.NewString()
	w := &btk.Workspace{ID: id, Name: "ws " + id[:4], Plan: btk.PlanCloudPro,
		PublicClientKey: btk.NewPublicClientKey(id), CreatedAt: t0}
	write(t, db, func(tx btk.Tx) error { return tx.CreateWorkspace(context.Background(), w) })
	return w
}

func newAccount(t testing.TB, db btk.Store, email string) *btk.Account {
	t.Helper()
	a := &btk.Account{ID: uuid.NewString(), Email: email, PasswordHash: "$argon2id$x", CreatedAt: t0} // #nosec G101 -- a placeholder hash in a test fixture, not a credential
	write(t, db, func(tx btk.Tx) error { return tx.CreateAccount(context.Background(), a) })
	return a
}

var keySeq atomic.Int64

// key returns an unsaved minimal key of the workspace with a unique hash.
func key(ws *btk.Workspace, name string) *btk.APIKey {
	h := sha256.Sum256(fmt.Appendf(nil, "key %d", keySeq.Add(1)))
	return &btk.APIKey{ID: uuid.NewString(), WorkspaceID: ws.ID, Name: name, Hash: h[:],
		DisplayPrefix: "btk_" + ws.Prefix(), Hint: "abcd", CreatedAt: t0, CreatedBy: "acct"}
}

func createKey(t testing.TB, db btk.Store, k *btk.APIKey) *btk.APIKey {
	t.Helper()
	write(t, db, func(tx btk.Tx) error { return tx.CreateAPIKey(context.Background(), k) })
	return k
}

// activeKeys reads the active keys of ws.
func activeKeys(t testing.TB, db btk.Store, ws *btk.Workspace) []*btk.APIKey {
	t.Helper()
	var keys []*btk.APIKey
	read(t, db, func(tx btk.Tx) (err error) {
		keys, _, err = tx.APIKeys(context.Background(), btk.KeyFilter{WorkspaceID: ws.ID})
		return err
	})
	return keys
}

// Helpers for an engine's own tests (reopening, locks).

// T0 is the time the suite's rows are created at.
var T0 = t0

// NewWorkspace creates a workspace of plan CLOUD_PRO.
func NewWorkspace(t testing.TB, db btk.Store) *btk.Workspace { return newWorkspace(t, db) }

// Key returns an unsaved minimal key of ws with a unique hash.
func Key(ws *btk.Workspace, name string) *btk.APIKey { return key(ws, name) }

// CreateKey stores k and returns it.
func CreateKey(t testing.TB, db btk.Store, k *btk.APIKey) *btk.APIKey { return createKey(t, db, k) }

// Untold reads the server setting untold_workspaces (internal/btk/untold.go):
// workspace id → mark of the change that listed it last; empty when unset.
// It is a stored name, which a rename would orphan in existing databases.
func Untold(t testing.TB, db btk.Store) map[string]string {
	t.Helper()
	ctx := context.Background()
	var v string
	err := db.Read(ctx, func(tx btk.Tx) (err error) {
		v, err = tx.Setting(ctx, "untold_workspaces")
		return err
	})
	u := map[string]string{}
	if errors.Is(err, btk.ErrNotFound) {
		return u
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(v), &u); err != nil {
		t.Fatalf("untold_workspaces %q: %v", v, err)
	}
	return u
}

// UsageRows are the usage rows SeedUsage wrote, for an engine's migration
// tests: Check reads them back after the upgrade.
type UsageRows struct {
	ws, other *btk.Workspace
	a, b, o   *btk.APIKey
	rows      int
}

// SeedUsage writes hourly usage of two keys of a workspace and of one key
// of another workspace, over three days.
func SeedUsage(t testing.TB, db btk.Store) *UsageRows {
	t.Helper()
	u := &UsageRows{ws: newWorkspace(t, db), other: newWorkspace(t, db)}
	u.a, u.b, u.o = createKey(t, db, key(u.ws, "a")), createKey(t, db, key(u.ws, "b")), createKey(t, db, key(u.other, "o"))
	var counts []btk.UsageCount
	for h := range 72 {
		counts = append(counts,
			btk.UsageCount{KeyID: u.a.ID, WorkspaceID: u.ws.ID, Start: hourOf(h), Accepted: 1, Refused: 1},
			btk.UsageCount{KeyID: u.b.ID, WorkspaceID: u.ws.ID, Start: hourOf(h), Accepted: 2, RateLimited: 1},
			btk.UsageCount{KeyID: u.o.ID, WorkspaceID: u.other.ID, Start: hourOf(h), Accepted: 100})
	}
	slices.SortFunc(counts, func(x, y btk.UsageCount) int { return strings.Compare(x.KeyID, y.KeyID) })
	if err := db.RecordUsage(context.Background(), nil, counted(counts), nil); err != nil {
		t.Fatal(err)
	}
	u.rows = len(counts)
	return u
}

// Check wants every row SeedUsage wrote, read back through the workspace's
// series, a key's series and the top keys.
func (u *UsageRows) Check(t testing.TB, db btk.Store) {
	t.Helper()
	f := btk.UsageFilter{WorkspaceID: u.ws.ID, Since: hourOf(0), Until: hourOf(72)}
	read(t, db, func(tx btk.Tx) error {
		series, err := tx.UsageSeries(context.Background(), f)
		if err != nil {
			return err
		}
		if len(series) != 72 || series[0].Accepted != 3 || series[71].Refused != 1 || series[71].RateLimited != 1 {
			t.Errorf("workspace series: %d hours, first %+v", len(series), series[0])
		}
		kf := f
		kf.KeyID = u.b.ID
		if series, err = tx.UsageSeries(context.Background(), kf); err != nil {
			return err
		}
		if len(series) != 72 || series[5].Accepted != 2 || series[5].Refused != 0 {
			t.Errorf("key series: %d hours, %+v", len(series), series[5])
		}
		top, err := tx.TopKeys(context.Background(), f, 10)
		if err != nil {
			return err
		}
		if len(top) != 2 || top[0].KeyID != u.b.ID || top[0].Accepted != 144 || top[0].RateLimited != 72 ||
			top[1].KeyID != u.a.ID || top[1].Accepted != 72 || top[1].Refused != 72 {
			t.Errorf("top keys %+v", top)
		}
		f.WorkspaceID = u.other.ID
		if top, err = tx.TopKeys(context.Background(), f, 10); err != nil {
			return err
		}
		if len(top) != 1 || top[0].KeyID != u.o.ID || top[0].Accepted != 7200 {
			t.Errorf("other workspace's top keys %+v", top)
		}
		return nil
	})
}

// Rows is how many rows SeedUsage wrote.
func (u *UsageRows) Rows() int { return u.rows }

// counted is counts as one flush without an id: added whatever was written
// before, as a test that writes each flush once needs.
func counted(counts []btk.UsageCount) []btk.UsageFlush {
	return []btk.UsageFlush{{Counts: counts}}
}
