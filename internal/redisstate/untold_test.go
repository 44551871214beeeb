package redisstate

import (
	"context"
	"errors"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/redisstate/redistest"
	"github.com/btk-project/btk/internal/store"
	"github.com/btk-project/btk/internal/store/postgres"
	"github.com/btk-project/btk/internal/store/postgres/pgtest"
	"github.com/btk-project/btk/internal/store/storetest"
	"github.com/btk-project/btk/internal/testclock"
	"github.com/btk-project/btk/internal/testproc"
)

// The durable list of workspaces whose revocations were not told
// (internal/btk/untold.go, docs/access.md#workspace-key-policy), seen
// from two instances.

// onStores runs f on SQLite (one handle, as clusterOf) and on PostgreSQL
// (two pools of one schema, as two btk serve processes; skipped without
// BTK_TEST_POSTGRES).
func onStores(t *testing.T, f func(t *testing.T, dbA, dbB btk.Store)) {
	t.Run("sqlite", func(t *testing.T) {
		db, err := store.Open(context.Background(), filepath.Join(t.TempDir(), "btk.db"), true)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		f(t, db, db)
	})
	t.Run("postgres", func(t *testing.T) {
		url := pgtest.URL(t)
		var dbs [2]btk.Store
		for i := range dbs {
			db, err := postgres.Open(context.Background(), url, postgres.Options{Shared: true, MaxConns: 4})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			dbs[i] = db
		}
		f(t, dbs[0], dbs[1])
	})
}

// ownRedisCluster is two instances on a redis-server of the test's own
// (which it may stop): a reaches it through a relay the test cuts, b
// directly; clk is both instances' clock.
func ownRedisCluster(t *testing.T, dbA, dbB btk.Store) (*cluster, *redistest.Server, *testproc.Relay, *testclock.Clock) {
	t.Helper()
	r := redistest.Standalone(t)
	px := testproc.NewRelay(t, r.Addr())
	prefix := redistest.Prefix()
	clk := testclock.Stopped()
	c := clusterOn(t, dbA, dbB, open(t, "redis://"+px.Addr+"/0", prefix), open(t, r.URL(), prefix), clk.Now)
	return c, r, px, clk
}

// idleAfterOneDay sets revokeUnusedAfterDays 1 on the owner's workspace.
func (c *cluster) idleAfterOneDay(t *testing.T) {
	t.Helper()
	days := 1
	if _, err := c.a.SetWorkspaceKeyPolicy(context.Background(), c.owner, c.owner.WorkspaceID, nil, &days); err != nil {
		t.Fatal(err)
	}
}

// A revocation (by the unused-key sweep, or by a leak report) on an
// instance cut off from Redis commits but cannot tell the other instance,
// which had the key cached and keeps accepting it: the workspace stays
// listed, also across further runs of the instance still cut off. Once
// Redis is reachable, a sweep run of the other instance tells the
// workspace, takes it off the list, and the key is refused there.
func TestUntoldWorkspaceToldByAnyInstance(t *testing.T) {
	for _, rv := range []struct {
		name    string
		prepare func(c *cluster, t *testing.T)
		revoke  func(c *cluster, clk *testclock.Clock, k *btk.NewKeyResult) error
	}{
		{"sweep", (*cluster).idleAfterOneDay, func(c *cluster, clk *testclock.Clock, _ *btk.NewKeyResult) error {
			clk.Advance(49 * time.Hour)
			n, err := c.a.SweepUnusedKeys(context.Background())
			if n != 1 {
				return errors.New("the sweep revoked no key")
			}
			return err
		}},
		{"leak report", func(*cluster, *testing.T) {}, func(c *cluster, _ *testclock.Clock, k *btk.NewKeyResult) error {
			report := []btk.LeakReport{{Token: k.Plaintext, URL: "https://example.com/leak", Source: "content"}}
			_, err := c.a.ReportLeaks(context.Background(), btk.Reporter{Actor: c.admin}, report)
			return err
		}},
	} {
		t.Run(rv.name, func(t *testing.T) {
			onStores(t, func(t *testing.T, dbA, dbB btk.Store) {
				c, _, px, clk := ownRedisCluster(t, dbA, dbB)
				ctx := context.Background()
				ws := c.owner.WorkspaceID
				rv.prepare(c, t)
				k := c.acceptedKey(t, "k") // cached on b
				px.Cut()
				if err := rv.revoke(c, clk, k); btk.ErrorCode(err) != btk.CodeUnavailable {
					t.Fatalf("revocation with Redis cut off from its instance: %v, want UNAVAILABLE", err)
				}
				if u := storetest.Untold(t, dbB); len(u) != 1 || u[ws] == "" {
					t.Fatalf("after a revocation that could not tell: listed %v, want the workspace %s", u, ws)
				}
				// What the list is for: b reaches Redis, was not told, and
				// serves the revoked key from its cache.
				if !accepts(t, c.b, k.Plaintext) {
					t.Fatal("the untold instance refuses the key already: the test shows nothing")
				}
				// A run of the instance still cut off fails (and serve
				// retries it soon) and keeps the workspace listed.
				if _, err := c.a.SweepUnusedKeys(ctx); btk.ErrorCode(err) != btk.CodeUnavailable {
					t.Fatalf("a sweep run still cut off: %v, want UNAVAILABLE", err)
				}
				if u := storetest.Untold(t, dbB); u[ws] == "" {
					t.Fatalf("a failed tell took the workspace off the list: %v", u)
				}
				px.Restore()
				if n, err := c.b.SweepUnusedKeys(ctx); n != 0 || err != nil {
					t.Fatalf("b's sweep run: %d keys, %v", n, err)
				}
				if u := storetest.Untold(t, dbA); len(u) != 0 {
					t.Fatalf("after a sweep run that told: still listed %v", u)
				}
				if accepts(t, c.b, k.Plaintext) {
					t.Fatal("after b's sweep run told the workspace, b still accepts the revoked key")
				}
				c.sweepMovesNoToken(t, c.a)
			})
		})
	}
}

// Redis itself stops (every instance loses it) while the sweep revokes,
// and comes back empty. The list still holds the workspace, but it is not
// what ends the cached key here: an empty Redis is a new epoch, so every
// instance reads its keys again, and b refuses the key before any tell.
// The next sweep run takes the workspace off the list all the same.
func TestUntoldWorkspaceAfterRedisRestarts(t *testing.T) {
	onStores(t, func(t *testing.T, dbA, dbB btk.Store) {
		c, r, _, clk := ownRedisCluster(t, dbA, dbB)
		ctx := context.Background()
		ws := c.owner.WorkspaceID
		c.idleAfterOneDay(t)
		k := c.acceptedKey(t, "idle") // cached on b
		clk.Advance(49 * time.Hour)
		r.Kill()
		if n, err := c.a.SweepUnusedKeys(ctx); n != 1 || btk.ErrorCode(err) != btk.CodeUnavailable {
			t.Fatalf("sweep with Redis down: %d keys, %v; want 1, UNAVAILABLE", n, err)
		}
		// Meanwhile b fails closed: it accepts no key without Redis.
		if _, _, err := c.b.AuthenticateKey(ctx, k.Plaintext); btk.ErrorCode(err) != btk.CodeUnavailable {
			t.Fatalf("b with Redis down: %v, want UNAVAILABLE", err)
		}
		r.Restart() // empty: no persistence
		if u := storetest.Untold(t, dbB); u[ws] == "" {
			t.Fatalf("listed %v, want the workspace %s", u, ws)
		}
		if accepts(t, c.b, k.Plaintext) {
			t.Fatal("after Redis came back empty, b accepts the key revoked while it was down")
		}
		if n, err := c.b.SweepUnusedKeys(ctx); n != 0 || err != nil {
			t.Fatalf("b's sweep run: %d keys, %v", n, err)
		}
		if u := storetest.Untold(t, dbA); len(u) != 0 {
			t.Fatalf("after a sweep run that told: still listed %v", u)
		}
	})
}

// afterTell is a KeyGate whose first successful Changed runs then before
// returning: what another instance does between a tell and the removal
// of the workspace from the list.
type afterTell struct {
	btk.KeyGate
	then func()
}

func (g *afterTell) Changed(ctx context.Context, workspaceID string) error {
	err := g.KeyGate.Changed(ctx, workspaceID)
	if err == nil && g.then != nil {
		then := g.then
		g.then = nil
		then()
	}
	return err
}

// A sweep run tells a listed workspace; before it takes it off the list,
// another revocation in that workspace commits, lists it again and cannot
// tell (its instance is cut off from Redis), and b caches that key after
// the tell. The run must leave the newer entry listed (the mark differs),
// or nothing would ever tell b, which would accept the key for good. The
// next sweep run tells it, and b refuses the key.
func TestToldKeepsALaterRevocationListed(t *testing.T) {
	onStores(t, func(t *testing.T, dbA, dbB btk.Store) {
		c, r, px, _ := ownRedisCluster(t, dbA, dbB)
		ctx := context.Background()
		ws := c.owner.WorkspaceID
		first, second := c.key(t, "first"), c.key(t, "second")
		report := func(k *btk.NewKeyResult) error {
			leak := []btk.LeakReport{{Token: k.Plaintext, URL: "https://example.com/leak", Source: "content"}}
			_, err := c.a.ReportLeaks(ctx, btk.Reporter{Actor: c.admin}, leak)
			return err
		}
		px.Cut()
		if err := report(first); btk.ErrorCode(err) != btk.CodeUnavailable {
			t.Fatalf("leak report cut off from Redis: %v, want UNAVAILABLE", err)
		}
		listed := storetest.Untold(t, dbB)[ws]
		if listed == "" {
			t.Fatalf("the failed report did not list the workspace: %v", storetest.Untold(t, dbB))
		}
		st := open(t, r.URL(), c.sa.prefix)
		gate := &afterTell{KeyGate: st, then: func() {
			if !accepts(t, c.b, second.Plaintext) { // cached under the revision the tell just made
				t.Fatal("b refuses the second key before it is revoked")
			}
			if err := report(second); btk.ErrorCode(err) != btk.CodeUnavailable {
				t.Fatalf("second leak report cut off from Redis: %v, want UNAVAILABLE", err)
			}
		}}
		teller := c.gated(t, dbB, st, gate)
		if n, err := teller.SweepUnusedKeys(ctx); n != 0 || err != nil {
			t.Fatalf("the telling run: %d keys, %v", n, err)
		}
		if gate.then != nil {
			t.Fatal("the run told nothing")
		}
		u := storetest.Untold(t, dbA)
		if len(u) != 1 || u[ws] == "" || u[ws] == listed {
			t.Fatalf("after a tell that began before the second revocation: listed %v, want %s under a newer mark than %s", u, ws, listed)
		}
		if !accepts(t, c.b, second.Plaintext) {
			t.Fatal("b refuses the second key before any tell: the test shows nothing")
		}
		px.Restore()
		if _, err := c.b.SweepUnusedKeys(ctx); err != nil {
			t.Fatalf("the next sweep run: %v", err)
		}
		if u := storetest.Untold(t, dbA); len(u) != 0 {
			t.Fatalf("after the next run: still listed %v", u)
		}
		if accepts(t, c.b, second.Plaintext) {
			t.Fatal("after the next sweep run, b still accepts the key the second report revoked")
		}
	})
}

// Revocations in several workspaces at once, on two instances cut off from
// Redis, each list their workspace in the one setting: none may overwrite
// another's entry (a lost entry is a key some instance accepts until the
// key cache drops it, which no maximum age does). PostgreSQL writes in
// READ COMMITTED; the settings lock makes the read and the write of the
// list one step.
func TestConcurrentRevocationsAllListed(t *testing.T) {
	onStores(t, func(t *testing.T, dbA, dbB btk.Store) {
		c, _, px, _ := ownRedisCluster(t, dbA, dbB)
		ctx := context.Background()
		cutB := c.instanceOn(t, dbB, open(t, "redis://"+px.Addr+"/0", c.sa.prefix))
		const n = 8
		keys := make([]*btk.NewKeyResult, n)
		for i := range keys {
			w, err := c.a.CreateWorkspace(ctx, c.admin, "w"+strconv.Itoa(i), btk.PlanSelfHosted)
			if err != nil {
				t.Fatal(err)
			}
			owner := *c.owner
			owner.WorkspaceID = w.ID
			if keys[i], err = c.a.CreateKey(ctx, &owner, btk.CreateKeyInput{Name: "k"}); err != nil {
				t.Fatal(err)
			}
		}
		px.Cut()
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i, k := range keys {
			svc := c.a
			if i%2 == 1 {
				svc = cutB
			}
			wg.Go(func() {
				leak := []btk.LeakReport{{Token: k.Plaintext, URL: "https://example.com/leak", Source: "content"}}
				_, errs[i] = svc.ReportLeaks(ctx, btk.Reporter{Actor: c.admin}, leak)
			})
		}
		wg.Wait()
		for i, err := range errs {
			if btk.ErrorCode(err) != btk.CodeUnavailable {
				t.Fatalf("report %d cut off from Redis: %v, want UNAVAILABLE", i, err)
			}
		}
		u := storetest.Untold(t, dbA)
		for _, k := range keys {
			if u[k.Key.WorkspaceID] == "" {
				t.Errorf("workspace %s not listed", k.Key.WorkspaceID)
			}
		}
		if len(u) != n {
			t.Errorf("listed %d workspaces, want %d", len(u), n)
		}
	})
}
