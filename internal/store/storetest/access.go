package storetest

import (
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
)

// Least privilege (docs/access.md): networks, updates, key policy, sweep.

func testAPIKeyNetworksAndUpdate(t *testing.T, db btk.Store, ws *btk.Workspace) {
	k := key(ws, "net")
	k.AllowedCIDRs = []string{"192.0.2.0/24", "2001:db8::1"}
	k.Scopes = []string{"orders:read"}
	createKey(t, db, k)
	other := createKey(t, db, key(ws, "other"))
	read(t, db, func(tx btk.Tx) error {
		got, err := tx.APIKeyByHash(ctx, k.Hash)
		if err != nil || !reflect.DeepEqual(got.AllowedCIDRs, k.AllowedCIDRs) {
			t.Errorf("AllowedCIDRs = %v, %v; want %v", got.AllowedCIDRs, err, k.AllowedCIDRs)
		}
		return nil
	})

	up := *k
	up.Name, up.RateLimitPerMinute, up.RateLimitPerDay = "renamed", ptr(5), ptr(50)
	up.Scopes, up.AllowedCIDRs = nil, []string{"10.0.0.0/8"}
	write(t, db, func(tx btk.Tx) error { return tx.UpdateAPIKey(ctx, &up) })
	read(t, db, func(tx btk.Tx) error {
		got, err := tx.APIKey(ctx, k.ID)
		if err != nil {
			return err
		}
		if got.Name != "renamed" || *got.RateLimitPerMinute != 5 || *got.RateLimitPerDay != 50 ||
			len(got.Scopes) != 0 || !reflect.DeepEqual(got.AllowedCIDRs, []string{"10.0.0.0/8"}) {
			t.Errorf("after update: %+v", got)
		}
		return nil
	})
	// The active name index holds for updates too.
	dup := *other
	dup.Name = "renamed"
	mustBe(t, db.Write(ctx, func(tx btk.Tx) error { return tx.UpdateAPIKey(ctx, &dup) }), btk.ErrNameTaken)
	// A revoked key is not updated.
	write(t, db, func(tx btk.Tx) error { return tx.RevokeAPIKey(ctx, other.ID, t0, "acct", "") })
	dup.Name = "fresh"
	mustBe(t, db.Write(ctx, func(tx btk.Tx) error { return tx.UpdateAPIKey(ctx, &dup) }), btk.ErrNotFound)
}

func testWorkspaceKeyPolicy(t *testing.T, db btk.Store, ws *btk.Workspace) {
	ws.KeyPolicy = btk.KeyPolicy{MaxLifetimeDays: ptr(90), RevokeUnusedAfterDays: ptr(30)}
	write(t, db, func(tx btk.Tx) error { return tx.UpdateWorkspace(ctx, ws) })
	read(t, db, func(tx btk.Tx) error {
		got, err := tx.Workspace(ctx, ws.ID)
		if err != nil || !reflect.DeepEqual(got.KeyPolicy, ws.KeyPolicy) {
			t.Errorf("KeyPolicy = %+v, %v", got.KeyPolicy, err)
		}
		return nil
	})
	ws.KeyPolicy = btk.KeyPolicy{}
	write(t, db, func(tx btk.Tx) error { return tx.UpdateWorkspace(ctx, ws) })
	read(t, db, func(tx btk.Tx) error {
		got, err := tx.Workspace(ctx, ws.ID)
		if err != nil || got.KeyPolicy.MaxLifetimeDays != nil || got.KeyPolicy.RevokeUnusedAfterDays != nil {
			t.Errorf("KeyPolicy after off = %+v, %v", got.KeyPolicy, err)
		}
		return nil
	})
	// The database itself refuses a policy out of range.
	ws.KeyPolicy.MaxLifetimeDays = ptr(0)
	if err := db.Write(ctx, func(tx btk.Tx) error { return tx.UpdateWorkspace(ctx, ws) }); err == nil {
		t.Error("a 0-day lifetime was stored")
	}
}

// testRevokeUnusedOnce races sweeps over the same keys: each unused key is
// revoked, and returned (audited), by exactly one of them.
func testRevokeUnusedOnce(t *testing.T, db btk.Store, ws *btk.Workspace) {
	unused := map[string]bool{}
	for i := range 20 {
		k := key(ws, "k"+string(rune('a'+i)))
		if i%2 == 0 {
			k.LastUsedAt = ptr(t0.Add(40 * 24 * time.Hour)) // used recently
		} else {
			unused[k.ID] = true
		}
		createKey(t, db, k)
	}
	before := t0.Add(10 * 24 * time.Hour)
	at := t0.Add(41 * 24 * time.Hour)
	var mu sync.Mutex
	got := map[string]int{}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				var keys []*btk.APIKey
				err := db.Write(ctx, func(tx btk.Tx) (err error) {
					keys, err = tx.RevokeUnusedAPIKeys(ctx, ws.ID, before, at, 3)
					return err
				})
				if errors.Is(err, btk.ErrUnavailable) {
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, k := range keys {
					got[k.ID]++
					if k.RevokedAt == nil {
						t.Errorf("returned key %s not revoked", k.ID)
					}
				}
				mu.Unlock()
				if len(keys) == 0 {
					return
				}
			}
		})
	}
	wg.Wait()
	if len(got) != len(unused) {
		t.Errorf("revoked %d keys, want %d", len(got), len(unused))
	}
	for id, n := range got {
		if n != 1 || !unused[id] {
			t.Errorf("key %s revoked %d times (unused %v)", id, n, unused[id])
		}
	}
}
