package redisstate

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/store/storetest"
)

// Every change to a workspace's keys or limits takes the settings lock
// last in its transaction (untold.go), after its row and audit-chain
// locks: a load of concurrent creates, rotations, revocations, updates,
// revoke-alls, limit changes, leak reports and sweep runs, on two
// instances with their own pools of one PostgreSQL schema, neither
// deadlocks (40P01) nor fails, and leaves nothing listed as untold (Redis
// is reachable throughout). It deadlocked before revoke-all's second pass
// stopped waiting for keys while holding the workspace row (an update of
// a key created between its passes holds the key, then needs the row for
// its audit rows' foreign key; postgres.RevokeAllAPIKeys).
func TestConcurrentChangesUnderTheUntoldList(t *testing.T) {
	onStores(t, func(t *testing.T, dbA, dbB btk.Store) {
		sa, sb := instances(t)
		c := clusterOn(t, dbA, dbB, sa, sb, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		w2, err := c.a.CreateWorkspace(ctx, c.admin, "second", btk.PlanSelfHosted)
		if err != nil {
			t.Fatal(err)
		}
		owner2 := *c.owner
		owner2.WorkspaceID = w2.ID
		owners := []*btk.Actor{c.owner, &owner2}
		svcs := []*btk.Service{c.a, c.b}
		for _, w := range []string{c.owner.WorkspaceID, w2.ID} {
			days := 30 // the sweep runs, finds no key idle
			if _, err := c.a.SetWorkspaceKeyPolicy(ctx, c.admin, w, nil, &days); err != nil {
				t.Fatal(err)
			}
		}

		const workers, rounds = 12, 8
		var wg sync.WaitGroup
		errs := make(chan error, workers*rounds*5) // at most five changes a round
		for g := range workers {
			wg.Go(func() {
				svc, owner := svcs[g%2], owners[(g/2)%2]
				fail := func(op string, err error) {
					if err != nil && !errors.Is(err, btk.ErrKeyRevoked) {
						errs <- errors.New(op + ": " + err.Error())
					}
				}
				for r := range rounds {
					name := "g" + strconv.Itoa(g) + "r" + strconv.Itoa(r)
					k, err := svc.CreateKey(ctx, owner, btk.CreateKeyInput{Name: name})
					if err != nil {
						fail("create", err)
						continue
					}
					per := 100 + r
					_, err = svc.UpdateKey(ctx, owner, k.Key.ID, btk.UpdateKeyInput{RateLimitPerMinute: btk.Change[int]{Set: true, Value: &per}})
					fail("update", err)
					nk, err := svc.RotateKey(ctx, owner, k.Key.ID, btk.RotateKeyInput{})
					fail("rotate", err)
					switch {
					case nk != nil && r%3 == 0:
						_, err = svc.ReportLeaks(ctx, btk.Reporter{Actor: c.admin},
							[]btk.LeakReport{{Token: nk.Plaintext, URL: "https://example.com/leak", Source: "content"}})
						fail("leak report", err)
					case nk != nil:
						_, err = svc.RevokeKey(ctx, owner, nk.Key.ID)
						fail("revoke", err)
					}
					switch r % 4 {
					case 1:
						_, err = svc.SetWorkspaceRateLimits(ctx, owner, owner.WorkspaceID, &per, nil)
						fail("workspace limits", err)
					case 2:
						_, err = svc.SweepUnusedKeys(ctx)
						fail("sweep", err)
					case 3:
						if g < 2 {
							_, err = svc.RevokeAllKeys(ctx, owner)
							fail("revoke all", err)
						}
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if ctx.Err() != nil {
			t.Fatal("the load did not finish within its bound")
		}
		if u := storetest.Untold(t, dbA); len(u) != 0 {
			t.Errorf("listed as untold with Redis reachable: %v", u)
		}
	})
}
