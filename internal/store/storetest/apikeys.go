package storetest

import (
	"crypto/sha256"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/btk-project/btk/internal/btk"
)

func testAPIKeyRoundTrip(t *testing.T, db btk.Store, ws *btk.Workspace) {
	old := createKey(t, db, key(ws, "old"))
	for name, fill := range map[string]func(*btk.APIKey){
		"unset": func(k *btk.APIKey) { k.CreatedBy = "" },
		"set": func(k *btk.APIKey) {
			k.RateLimitPerMinute, k.RateLimitPerDay = ptr(60), ptr(1000)
			k.ExpiresAt, k.LastUsedAt, k.RevokedAt = ptr(t0.Add(90*24*time.Hour)), ptr(t0.Add(time.Second)), ptr(t0.Add(time.Hour))
			k.Scopes = []string{"keys:read", "rides.write"}
			k.RevokedBy, k.RotatedFromID, k.ReplacedByID = "acct-2", old.ID, uuid.NewString()
			k.DayState = -1 << 40
			k.Canary = true
		},
	} {
		t.Run(name, func(t *testing.T) {
			k := key(ws, name)
			fill(k)
			createKey(t, db, k)
			readBack(t, db, "APIKey", k, func(tx btk.Tx) (*btk.APIKey, error) { return tx.APIKey(ctx, k.ID) })
			readBack(t, db, "APIKeyByHash", k, func(tx btk.Tx) (*btk.APIKey, error) { return tx.APIKeyByHash(ctx, k.Hash) })
		})
	}
	read(t, db, func(tx btk.Tx) error {
		_, err := tx.APIKey(ctx, "nope")
		mustBe(t, err, btk.ErrNotFound)
		h := sha256.Sum256([]byte("nope"))
		_, err = tx.APIKeyByHash(ctx, h[:])
		mustBe(t, err, btk.ErrNotFound)
		return nil
	})
	// The hot-path statement also works inside a write transaction.
	write(t, db, func(tx btk.Tx) error {
		_, err := tx.APIKeyByHash(ctx, old.Hash)
		return err
	})
}

func testAPIKeyNameUniqueAmongActive(t *testing.T, db btk.Store, ws *btk.Workspace) {
	other := newWorkspace(t, db)
	first := createKey(t, db, key(ws, "ci"))
	createKey(t, db, key(other, "ci")) // another workspace: fine

	err := db.Write(ctx, func(tx btk.Tx) error { return tx.CreateAPIKey(ctx, key(ws, "ci")) })
	mustBe(t, err, btk.ErrNameTaken)

	// Expired is not revoked: the name stays taken.
	exp := key(ws, "expired")
	exp.ExpiresAt = ptr(t0.Add(-time.Hour))
	createKey(t, db, exp)
	err = db.Write(ctx, func(tx btk.Tx) error { return tx.CreateAPIKey(ctx, key(ws, "expired")) })
	mustBe(t, err, btk.ErrNameTaken)

	write(t, db, func(tx btk.Tx) error { return tx.RevokeAPIKey(ctx, first.ID, t0, "acct", "") })
	second := createKey(t, db, key(ws, "ci"))
	read(t, db, func(tx btk.Tx) error {
		keys, _, err := tx.APIKeys(ctx, btk.KeyFilter{WorkspaceID: ws.ID, Page: btk.Page{First: 50}})
		var active []string
		for _, k := range keys {
			if k.Name == "ci" {
				active = append(active, k.ID)
			}
		}
		if err != nil || len(active) != 1 || active[0] != second.ID {
			t.Errorf("non-revoked keys named ci: %v, %v; want only the new key", active, err)
		}
		return nil
	})
}

func testAPIKeyNameRace(t *testing.T, db btk.Store, ws *btk.Workspace) {
	const n = 16
	errs := make([]error, n)
	race(db, n, func(i int) {
		// No check before the insert: the partial unique index alone
		// must hold under concurrent writers.
		errs[i] = db.Write(ctx, func(tx btk.Tx) error { return tx.CreateAPIKey(ctx, key(ws, "deploy")) })
	})
	oneWon(t, "creations", errs, btk.ErrNameTaken)
}

func testAPIKeyNameRaceWithoutCheck(t *testing.T, db btk.Store, ws *btk.Workspace) {
	// Without the read-then-insert check the partial unique index alone
	// refuses the duplicates.
	const n = 16
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() { errs <- db.Write(ctx, func(tx btk.Tx) error { return tx.CreateAPIKey(ctx, key(ws, "same")) }) })
	}
	wg.Wait()
	close(errs)
	ok := 0
	for err := range errs {
		if err == nil {
			ok++
		} else {
			mustBe(t, err, btk.ErrNameTaken)
		}
	}
	if ok != 1 {
		t.Fatalf("%d creations succeeded, want exactly 1", ok)
	}
}

func testRevokeAPIKey(t *testing.T, db btk.Store, ws *btk.Workspace) {
	old, repl := createKey(t, db, key(ws, "old")), createKey(t, db, key(ws, "new"))
	at := t0.Add(time.Hour)
	write(t, db, func(tx btk.Tx) error { return tx.RevokeAPIKey(ctx, old.ID, at, "acct-9", repl.ID) })
	read(t, db, func(tx btk.Tx) error {
		got, err := tx.APIKey(ctx, old.ID)
		if err != nil {
			return err
		}
		if got.RevokedAt == nil || *got.RevokedAt != at || got.RevokedBy != "acct-9" || got.ReplacedByID != repl.ID {
			t.Errorf("revoked key: %+v", got)
		}
		if got.Status(at) != btk.KeyRevoked {
			t.Errorf("status %s", got.Status(at))
		}
		// Still found by hash, in any state.
		if _, err := tx.APIKeyByHash(ctx, old.Hash); err != nil {
			t.Errorf("APIKeyByHash of a revoked key: %v", err)
		}
		return nil
	})
	for _, id := range []string{old.ID, "missing"} {
		err := db.Write(ctx, func(tx btk.Tx) error { return tx.RevokeAPIKey(ctx, id, at.Add(time.Hour), "x", "") })
		mustBe(t, err, btk.ErrNotFound)
	}
	read(t, db, func(tx btk.Tx) error {
		got, _ := tx.APIKey(ctx, old.ID)
		if *got.RevokedAt != at || got.RevokedBy != "acct-9" {
			t.Errorf("second revoke changed the key: %+v", got)
		}
		return nil
	})
	// An empty replacement is stored as NULL.
	write(t, db, func(tx btk.Tx) error { return tx.RevokeAPIKey(ctx, repl.ID, at, "", "") })
	read(t, db, func(tx btk.Tx) error {
		got, _ := tx.APIKey(ctx, repl.ID)
		if got.ReplacedByID != "" || got.RevokedBy != "" {
			t.Errorf("got %+v", got)
		}
		return nil
	})
}

func testRevokeAllAPIKeys(t *testing.T, db btk.Store, ws *btk.Workspace) {
	other := newWorkspace(t, db)
	gone := keysInEveryState(t, db, ws)
	createKey(t, db, key(ws, "b"))
	keep := createKey(t, db, key(other, "a"))

	for _, want := range []int{3, 0} {
		var n int
		write(t, db, func(tx btk.Tx) (err error) {
			n, err = tx.RevokeAllAPIKeys(ctx, ws.ID, t0.Add(time.Hour), "acct")
			return err
		})
		if n != want {
			t.Errorf("RevokeAllAPIKeys = %d, want %d", n, want)
		}
	}
	read(t, db, func(tx btk.Tx) error {
		keys, _, err := tx.APIKeys(ctx, btk.KeyFilter{WorkspaceID: ws.ID})
		if len(keys) != 0 || err != nil {
			t.Errorf("%d keys left active, %v", len(keys), err)
		}
		g, _ := tx.APIKey(ctx, gone.ID)
		if *g.RevokedAt != t0 {
			t.Errorf("revoke-all rewrote an earlier revocation: %v", g.RevokedAt)
		}
		k, _ := tx.APIKey(ctx, keep.ID)
		if k.RevokedAt != nil {
			t.Error("revoke-all touched another workspace")
		}
		return nil
	})
}

// CountActiveAPIKeys counts the workspace's keys that are not revoked,
// expired ones included, and no other workspace's: the domain bounds a
// workspace's keys by it (btk.MaxKeysPerWorkspace).
func testCountActiveAPIKeys(t *testing.T, db btk.Store, ws *btk.Workspace) {
	count := func() int {
		t.Helper()
		var n int
		read(t, db, func(tx btk.Tx) (err error) {
			n, err = tx.CountActiveAPIKeys(ctx, ws.ID)
			return err
		})
		return n
	}
	if n := count(); n != 0 {
		t.Fatalf("an empty workspace counts %d keys", n)
	}
	keysInEveryState(t, db, ws)
	createKey(t, db, key(newWorkspace(t, db), "a"))
	if n := count(); n != 2 {
		t.Errorf("CountActiveAPIKeys = %d, want 2 (one active, one expired)", n)
	}
}

// keysInEveryState creates in ws an active key ("a"), an expired one and
// one revoked at t0 ("gone"), which it returns.
func keysInEveryState(t *testing.T, db btk.Store, ws *btk.Workspace) *btk.APIKey {
	t.Helper()
	createKey(t, db, key(ws, "a"))
	exp := key(ws, "expired")
	exp.ExpiresAt = ptr(t0)
	createKey(t, db, exp)
	gone := createKey(t, db, key(ws, "gone"))
	write(t, db, func(tx btk.Tx) error { return tx.RevokeAPIKey(ctx, gone.ID, t0, "", "") })
	return gone
}

func testAPIKeysPaging(t *testing.T, db btk.Store, ws *btk.Workspace) {
	other := newWorkspace(t, db)
	var ids []string // newest first
	for i := range 7 {
		k := createKey(t, db, key(ws, fmt.Sprint("k", i)))
		ids = append([]string{k.ID}, ids...)
		createKey(t, db, key(other, fmt.Sprint("k", i)))
	}

	var (
		got   []string
		sizes []int
		after string
	)
	for range 10 {
		var keys []*btk.APIKey
		var next string
		read(t, db, func(tx btk.Tx) (err error) {
			keys, next, err = tx.APIKeys(ctx, btk.KeyFilter{WorkspaceID: ws.ID, Page: btk.Page{First: 3, After: after}})
			return err
		})
		sizes = append(sizes, len(keys))
		for _, k := range keys {
			got = append(got, k.ID)
		}
		if next != "" && len(keys) > 0 && next == after {
			t.Fatal("cursor did not advance")
		}
		if next == "" {
			break
		}
		after = next
	}
	if !reflect.DeepEqual(sizes, []int{3, 3, 1}) {
		t.Errorf("page sizes %v, want [3 3 1]", sizes)
	}
	if !reflect.DeepEqual(got, ids) {
		t.Errorf("paged ids %v,\nwant newest first %v", got, ids)
	}

	// Exactly one page's worth: no next cursor.
	read(t, db, func(tx btk.Tx) error {
		keys, next, err := tx.APIKeys(ctx, btk.KeyFilter{WorkspaceID: ws.ID, Page: btk.Page{First: 7}})
		if len(keys) != 7 || next != "" || err != nil {
			t.Errorf("First=7: %d keys, next %q, %v", len(keys), next, err)
		}
		keys, _, err = tx.APIKeys(ctx, btk.KeyFilter{WorkspaceID: ws.ID})
		if len(keys) != 7 || err != nil {
			t.Errorf("First=0 (default page): %d keys, %v", len(keys), err)
		}
		return nil
	})

	// Revoked keys are listed only on request.
	write(t, db, func(tx btk.Tx) error { return tx.RevokeAPIKey(ctx, ids[0], t0, "", "") })
	read(t, db, func(tx btk.Tx) error {
		for include, want := range map[bool]int{false: 6, true: 7} {
			keys, _, err := tx.APIKeys(ctx, btk.KeyFilter{WorkspaceID: ws.ID, IncludeRevoked: include})
			if len(keys) != want || err != nil {
				t.Errorf("IncludeRevoked=%v: %d keys, %v; want %d", include, len(keys), err, want)
			}
		}
		return nil
	})
}

func testBadCursor(t *testing.T, db btk.Store, ws *btk.Workspace) {
	for range 3 {
		createKey(t, db, key(ws, uuid.NewString()))
	}
	write(t, db, func(tx btk.Tx) error {
		for range 3 {
			if err := tx.AddAudit(ctx, &btk.AuditEntry{WorkspaceID: ws.ID, Action: btk.AuditCreated, CreatedAt: t0},
				&btk.AuditEvent{WorkspaceID: ws.ID, Action: "api_key.created", CreatedAt: t0}); err != nil {
				return err
			}
		}
		return nil
	})
	var keyCur, entryCur string
	read(t, db, func(tx btk.Tx) (err error) {
		if _, keyCur, err = tx.APIKeys(ctx, btk.KeyFilter{WorkspaceID: ws.ID, Page: btk.Page{First: 1}}); err != nil {
			return err
		}
		_, entryCur, err = tx.AuditEntries(ctx, btk.AuditFilter{WorkspaceID: ws.ID, Page: btk.Page{First: 1}})
		return err
	})
	for _, c := range []string{"garbage!", "Zm9v", "aw", "azA", "ay0x", "a3x4"} {
		read(t, db, func(tx btk.Tx) error {
			_, _, err := tx.APIKeys(ctx, btk.KeyFilter{WorkspaceID: ws.ID, Page: btk.Page{After: c}})
			mustBe(t, err, btk.ErrBadCursor)
			return nil
		})
	}
	// A cursor of one list is refused by the others.
	read(t, db, func(tx btk.Tx) error {
		_, _, err := tx.APIKeys(ctx, btk.KeyFilter{WorkspaceID: ws.ID, Page: btk.Page{After: entryCur}})
		mustBe(t, err, btk.ErrBadCursor)
		_, _, err = tx.AuditEntries(ctx, btk.AuditFilter{WorkspaceID: ws.ID, Page: btk.Page{After: keyCur}})
		mustBe(t, err, btk.ErrBadCursor)
		_, _, err = tx.AuditEvents(ctx, btk.AuditFilter{WorkspaceID: ws.ID, Page: btk.Page{After: entryCur}})
		mustBe(t, err, btk.ErrBadCursor)
		return nil
	})
}

func testRecordUsage(t *testing.T, db btk.Store, ws *btk.Workspace) {
	a, b := key(ws, "a"), key(ws, "b")
	b.LastUsedAt = ptr(t0.Add(time.Hour))
	createKey(t, db, a)
	createKey(t, db, b)
	err := db.RecordUsage(ctx, []btk.KeyUsage{
		{KeyID: a.ID, LastUsedAt: t0.Add(time.Minute), DayState: 7},
		{KeyID: b.ID, LastUsedAt: t0.Add(time.Minute), DayState: 9}, // older than stored: time kept
		{KeyID: "unknown", LastUsedAt: t0, DayState: 1},
	}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.RecordUsage(ctx, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	read(t, db, func(tx btk.Tx) error {
		ga, _ := tx.APIKey(ctx, a.ID)
		gb, _ := tx.APIKey(ctx, b.ID)
		if ga.LastUsedAt == nil || *ga.LastUsedAt != t0.Add(time.Minute) || ga.DayState != 7 {
			t.Errorf("a: last used %v, day state %d", ga.LastUsedAt, ga.DayState)
		}
		if *gb.LastUsedAt != t0.Add(time.Hour) || gb.DayState != 9 {
			t.Errorf("b: last used %v, day state %d", gb.LastUsedAt, gb.DayState)
		}
		return nil
	})
}
