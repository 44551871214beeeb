package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/btk-project/btk/internal/btk"
)

// race runs fn(i) for i in [0, n) at once (released together) and waits.
func race(db btk.Store, n int, fn func(i int)) {
	warm(db, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			fn(i)
		})
	}
	close(start)
	wg.Wait()
}

// widen holds a transaction between its read and its write a little, so
// that racing writers overlap there even on a loaded machine.
func widen() { time.Sleep(50 * time.Millisecond) }

// warm has n transactions open at once (or as many as the store allows
// within a second), so that a pool that dials lazily has its connections
// before a race and the racers are not staggered by connecting.
func warm(db btk.Store, n int) {
	var wg, in sync.WaitGroup
	in.Add(n)
	release := make(chan struct{})
	for range n {
		wg.Go(func() {
			_ = db.Read(ctx, func(btk.Tx) error { // a warm-up: a failure shows in the test that follows
				in.Done()
				<-release
				return nil
			})
		})
	}
	all := make(chan struct{})
	go func() { in.Wait(); close(all) }()
	select {
	case <-all:
	case <-time.After(time.Second):
	}
	close(release)
	wg.Wait()
}

var errAlreadyRevoked = errors.New("already revoked")

// oneWon checks that exactly one of the racers' errs is nil and that the
// others lost with the error lost.
func oneWon(t *testing.T, what string, errs []error, lost error) {
	t.Helper()
	ok := 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case err != lost:
			t.Errorf("err = %v, want %v", err, lost)
		}
	}
	if ok != 1 {
		t.Fatalf("%d %s succeeded, want 1", ok, what)
	}
}

// rotate does what the service's rotation does in one transaction: read the
// key, check the workspace, revoke it, issue its replacement under the same
// name, write the audit pair.
func rotate(db btk.Store, ws *btk.Workspace, id string) (*btk.APIKey, error) {
	var nk *btk.APIKey
	err := db.Write(ctx, func(tx btk.Tx) error {
		old, err := tx.APIKey(ctx, id)
		if err != nil {
			return err
		}
		if old.RevokedAt != nil {
			return errAlreadyRevoked
		}
		widen()
		if _, err := tx.Workspace(ctx, old.WorkspaceID); err != nil {
			return err
		}
		nk = key(ws, old.Name)
		nk.RotatedFromID = old.ID
		if err := tx.RevokeAPIKey(ctx, old.ID, t0, "acct", nk.ID); err != nil {
			return err
		}
		if err := tx.CreateAPIKey(ctx, nk); err != nil {
			return err
		}
		return tx.AddAudit(ctx, &btk.AuditEntry{WorkspaceID: ws.ID, Action: btk.AuditRotated, APIKeyID: old.ID,
			APIKeyName: old.Name, NewAPIKeyID: nk.ID, CreatedAt: t0},
			&btk.AuditEvent{WorkspaceID: ws.ID, Action: "api_key.rotated", TargetType: "api_key", TargetID: old.ID, CreatedAt: t0})
	})
	return nk, err
}

// Two revocations of one key: the second reads the key after the first has
// committed and finds it revoked.
func testConcurrentRevokeSameKey(t *testing.T, db btk.Store, ws *btk.Workspace) {
	k := createKey(t, db, key(ws, "k"))
	errs := make([]error, 8)
	race(db, len(errs), func(i int) {
		errs[i] = db.Write(ctx, func(tx btk.Tx) error {
			got, err := tx.APIKey(ctx, k.ID)
			if err != nil {
				return err
			}
			if got.RevokedAt != nil {
				return errAlreadyRevoked
			}
			widen()
			return tx.RevokeAPIKey(ctx, k.ID, t0, fmt.Sprint(i), "")
		})
	})
	oneWon(t, "revocations", errs, errAlreadyRevoked)
}

// Concurrent rotations of one key: one wins, the others read it revoked; one
// active key has the name and one rotation is audited.
func testConcurrentRotateSameKey(t *testing.T, db btk.Store, ws *btk.Workspace) {
	k := createKey(t, db, key(ws, "k"))
	errs := make([]error, 8)
	race(db, len(errs), func(i int) { _, errs[i] = rotate(db, ws, k.ID) })
	oneWon(t, "rotations", errs, errAlreadyRevoked)
	if keys := activeKeys(t, db, ws); len(keys) != 1 || keys[0].RotatedFromID != k.ID {
		t.Errorf("active keys %+v; want the one replacement", keys)
	}
	read(t, db, func(tx btk.Tx) error {
		es, _, err := tx.AuditEntries(ctx, btk.AuditFilter{WorkspaceID: ws.ID})
		if err != nil || len(es) != 1 {
			t.Errorf("%d audit entries, %v; want 1", len(es), err)
		}
		return nil
	})
}

// Revoke-all racing rotations: a rotation that succeeds came before the
// revoke-all (after it, the old key is revoked), so its replacement must be
// revoked too. Nothing stays active, and revoke-all counts each key once.
func testRevokeAllRacesRotations(t *testing.T, db btk.Store, ws *btk.Workspace) {
	const n = 6
	var ids []string
	for i := range n {
		ids = append(ids, createKey(t, db, key(ws, fmt.Sprint("k", i))).ID)
	}
	var revoked int
	var revokeErr error
	rotErrs := make([]error, n)
	race(db, n+1, func(i int) {
		if i == n {
			revokeErr = db.Write(ctx, func(tx btk.Tx) (err error) {
				revoked, err = tx.RevokeAllAPIKeys(ctx, ws.ID, t0, "acct")
				return err
			})
			return
		}
		_, rotErrs[i] = rotate(db, ws, ids[i])
	})
	if revokeErr != nil {
		t.Fatal(revokeErr)
	}
	for _, err := range rotErrs {
		if err != nil && err != errAlreadyRevoked {
			t.Errorf("rotation: %v", err)
		}
	}
	if revoked != n {
		t.Errorf("revoke-all revoked %d keys, want %d", revoked, n)
	}
	if keys := activeKeys(t, db, ws); len(keys) != 0 {
		t.Errorf("%d keys still active after revoke-all", len(keys))
	}
}

// Read-modify-write of a workspace loses no concurrent update.
func testConcurrentWorkspaceUpdates(t *testing.T, db btk.Store, ws *btk.Workspace) {
	const n = 10
	race(db, n, func(int) {
		err := db.Write(ctx, func(tx btk.Tx) error {
			w, err := tx.Workspace(ctx, ws.ID)
			if err != nil {
				return err
			}
			widen()
			day := 1
			if w.RateLimitPerDay != nil {
				day = *w.RateLimitPerDay + 1
			}
			w.RateLimitPerDay = &day
			return tx.UpdateWorkspace(ctx, w)
		})
		if err != nil {
			t.Error(err)
		}
	})
	read(t, db, func(tx btk.Tx) error {
		w, err := tx.Workspace(ctx, ws.ID)
		if err != nil || w.RateLimitPerDay == nil || *w.RateLimitPerDay != n {
			t.Errorf("after %d increments: %+v, %v", n, w.RateLimitPerDay, err)
		}
		return nil
	})
}

// Instances started together each bootstrap in a write transaction that
// checks Empty first: one account is made.
func testBootstrapOnce(t *testing.T, db btk.Store) {
	const n = 8
	emails := make([]string, n)
	race(db, n, func(i int) {
		emails[i] = fmt.Sprintf("admin%d@example.com", i)
		err := db.Write(ctx, func(tx btk.Tx) error {
			empty, err := tx.Empty(ctx)
			if err != nil || !empty {
				return err
			}
			widen()
			return tx.CreateAccount(ctx, &btk.Account{ID: uuid.NewString(), Email: emails[i], PasswordHash: "x", CreatedAt: t0})
		})
		if err != nil {
			t.Error(err)
		}
	})
	found := 0
	read(t, db, func(tx btk.Tx) error {
		for _, e := range emails {
			if _, err := tx.AccountByEmail(ctx, e); err == nil {
				found++
			}
		}
		return nil
	})
	if found != 1 {
		t.Fatalf("%d accounts bootstrapped, want 1", found)
	}
}

// A setting read as missing and then made (the generated server secret) is
// made once: every writer ends up with the same value.
func testSettingMadeOnce(t *testing.T, db btk.Store) {
	const n = 8
	got := make([]string, n)
	race(db, n, func(i int) {
		err := db.Write(ctx, func(tx btk.Tx) error {
			v, err := tx.Setting(ctx, "secret")
			if errors.Is(err, btk.ErrNotFound) {
				widen()
				v = uuid.NewString()
				err = tx.SetSetting(ctx, "secret", v)
			}
			got[i] = v
			return err
		})
		if err != nil {
			t.Error(err)
		}
	})
	for i := range got {
		if got[i] != got[0] {
			t.Fatalf("writers disagree on the setting: %q", got)
		}
	}
}
