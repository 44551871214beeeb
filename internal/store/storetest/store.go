package storetest

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
)

var ctx = context.Background()

func testForeignKeysEnforced(t *testing.T, db btk.Store) {
	err := db.Write(ctx, func(tx btk.Tx) error {
		return tx.SetMembership(ctx, btk.Membership{WorkspaceID: "nope", AccountID: "nope", Role: btk.RoleOwner})
	})
	if err == nil {
		t.Fatal("membership of unknown workspace and account accepted")
	}
}

func testWriteRollsBackOnError(t *testing.T, db btk.Store, ws *btk.Workspace) {
	k := key(ws, "doomed")
	boom := errors.New("boom")
	err := db.Write(ctx, func(tx btk.Tx) error {
		if err := tx.CreateAPIKey(ctx, k); err != nil {
			return err
		}
		if err := tx.SetSetting(ctx, "s", "v"); err != nil {
			return err
		}
		return boom
	})
	if err != boom {
		t.Fatalf("Write returned %v, want fn's own error", err)
	}
	read(t, db, func(tx btk.Tx) error {
		_, err := tx.APIKey(ctx, k.ID)
		mustBe(t, err, btk.ErrNotFound)
		_, err = tx.Setting(ctx, "s")
		mustBe(t, err, btk.ErrNotFound)
		return nil
	})
	// The writer connection was released: the next write works.
	createKey(t, db, key(ws, "doomed"))
}

func testWriteRollsBackOnPanic(t *testing.T, db btk.Store) {
	func() {
		defer func() { recover() }()
		_ = db.Write(ctx, func(tx btk.Tx) error { // panics
			if err := tx.SetSetting(ctx, "s", "v"); err != nil {
				t.Error(err) // or the rollback checked below proves nothing
			}
			panic("boom")
		})
	}()
	c, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := db.Write(c, func(tx btk.Tx) error {
		_, err := tx.Setting(ctx, "s")
		mustBe(t, err, btk.ErrNotFound)
		return nil
	})
	if err != nil {
		t.Fatalf("writer not released after a panic: %v", err)
	}
}

func testReadRefusesWrites(t *testing.T, db btk.Store, ws *btk.Workspace) {
	writes := map[string]func(btk.Tx) error{
		"SetSetting": func(tx btk.Tx) error { return tx.SetSetting(ctx, "a", "b") },
		"CreateAccount": func(tx btk.Tx) error {
			return tx.CreateAccount(ctx, &btk.Account{ID: "x", Email: "x@y", CreatedAt: t0})
		},
		"CreateAPIKey": func(tx btk.Tx) error { return tx.CreateAPIKey(ctx, key(ws, "r")) },
		"RevokeAll": func(tx btk.Tx) error {
			_, err := tx.RevokeAllAPIKeys(ctx, ws.ID, t0, "")
			return err
		},
	}
	for name, fn := range writes {
		t.Run(name, func(t *testing.T) {
			err := db.Read(ctx, fn)
			if err == nil {
				t.Fatal("write inside Read succeeded")
			}
			if btk.ErrorCode(err) != btk.CodeInternal {
				t.Fatalf("err = %v, want an internal error", err)
			}
		})
	}
	read(t, db, func(tx btk.Tx) error {
		empty, err := tx.Empty(ctx)
		if !empty {
			t.Error("account written through Read")
		}
		return err
	})
}

func testPing(t *testing.T, db btk.Store) {
	if err := db.Ping(ctx); err != nil {
		t.Fatal(err)
	}
}

func testTimeOutOfRange(t *testing.T, db btk.Store, ws *btk.Workspace) {
	k := key(ws, "far")
	k.ExpiresAt = ptr(time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC))
	err := db.Write(ctx, func(tx btk.Tx) error { return tx.CreateAPIKey(ctx, k) })
	if btk.ErrorCode(err) != btk.CodeBadUserInput {
		t.Fatalf("err = %v, want BAD_USER_INPUT", err)
	}
	// A zero time is the caller's bug: internal, not user input.
	zero := key(ws, "zero")
	zero.CreatedAt = time.Time{}
	err = db.Write(ctx, func(tx btk.Tx) error { return tx.CreateAPIKey(ctx, zero) })
	if err == nil || btk.ErrorCode(err) != btk.CodeInternal {
		t.Fatalf("err = %v, want an internal error", err)
	}
}

func testUnknownConstraintIsInternal(t *testing.T, db btk.Store, ws *btk.Workspace) {
	k := createKey(t, db, key(ws, "a"))
	dup := key(ws, "b")
	dup.ID = k.ID
	err := db.Write(ctx, func(tx btk.Tx) error { return tx.CreateAPIKey(ctx, dup) })
	var be *btk.Error
	if err == nil || errors.As(err, &be) || !strings.HasPrefix(err.Error(), "store: create api key: ") {
		t.Fatalf("err = %v, want a wrapped internal error", err)
	}
}

func testConcurrentReadsAndWrites(t *testing.T, db btk.Store, ws *btk.Workspace) {
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 10 {
				k := key(ws, string(rune('a'+i))+string(rune('a'+j))) // #nosec G115 -- i and j are below 10: letters a to j
				if err := db.Write(ctx, func(tx btk.Tx) error { return tx.CreateAPIKey(ctx, k) }); err != nil {
					t.Error(err)
				}
				if err := db.Read(ctx, func(tx btk.Tx) error { _, err := tx.APIKeyByHash(ctx, k.Hash); return err }); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
}
