package redisstate

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/store"
)

// cluster is two services ("instances") on one database, each with its own
// key cache and its own connections to one Redis prefix.
type cluster struct {
	a, b   *btk.Service
	sa, sb *State
	owner  *btk.Actor
	admin  *btk.Actor
	db     btk.Store
	now    btk.Clock // nil: the real time
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	sa, sb := instances(t)
	return clusterOf(t, sa, sb, nil)
}

// clusterOf is newCluster on the given States, with the clock now (nil:
// the real time; the States then keep the Redis server's).
func clusterOf(t *testing.T, sa, sb *State, now btk.Clock) *cluster {
	t.Helper()
	db, err := store.Open(context.Background(), filepath.Join(t.TempDir(), "btk.db"), true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return clusterOn(t, db, db, sa, sb, now)
}

// clusterOn is clusterOf with a on the store dbA and b on dbB: one SQLite
// handle for both, or two pools of one PostgreSQL schema, as two btk serve
// processes have. c.db is dbA.
func clusterOn(t *testing.T, dbA, dbB btk.Store, sa, sb *State, now btk.Clock) *cluster {
	t.Helper()
	c := &cluster{sa: sa, sb: sb, now: now, db: dbA}
	ctx := context.Background()
	c.a, c.b = c.instanceOn(t, dbA, sa), c.instanceOn(t, dbB, sb)
	boot, err := c.a.Bootstrap(ctx, "admin@example.com", "correct horse battery")
	if err != nil {
		t.Fatal(err)
	}
	var acct *btk.Account
	if err := dbA.Read(ctx, func(tx btk.Tx) (err error) {
		acct, err = tx.AccountByEmail(ctx, "admin@example.com")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	c.owner = &btk.Actor{AccountID: acct.ID, Email: acct.Email, SessionID: "s", WorkspaceID: boot.Workspace.ID, Role: btk.RoleOwner, Elevated: true}
	c.admin = &btk.Actor{AccountID: acct.ID, Email: acct.Email, SessionID: "s", PlatformAdmin: true}
	return c
}

// instance starts one more service on the cluster's database (a new
// instance, or one restarted) with the State st.
func (c *cluster) instance(t *testing.T, st *State) *btk.Service {
	t.Helper()
	return c.instanceOn(t, c.db, st)
}

// instanceOn is instance on the store db (an instance's own pool).
func (c *cluster) instanceOn(t *testing.T, db btk.Store, st *State) *btk.Service {
	t.Helper()
	return c.gated(t, db, st, st)
}

// gated is an instance on db whose KeyGate is gate (st, or a wrapper of
// it) and whose throttle is st's.
func (c *cluster) gated(t *testing.T, db btk.Store, st *State, gate btk.KeyGate) *btk.Service {
	t.Helper()
	if c.now != nil {
		st.UseClock(c.now)
	}
	svc, err := btk.NewService(context.Background(), db, []byte(strings.Repeat("s", 32)),
		btk.Config{Now: c.now, KeyGate: gate, Throttle: st.Throttle()})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

func (c *cluster) key(t *testing.T, name string) *btk.NewKeyResult {
	t.Helper()
	res, err := c.a.CreateKey(context.Background(), c.owner, btk.CreateKeyInput{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// acceptedKey creates a key on a and has b accept it (b caches it).
func (c *cluster) acceptedKey(t *testing.T, name string) *btk.NewKeyResult {
	t.Helper()
	k := c.key(t, name)
	if !accepts(t, c.b, k.Plaintext) {
		t.Fatalf("new key %s refused", name)
	}
	return k
}

// accepts reports whether svc accepts the key now.
func accepts(t *testing.T, svc *btk.Service, plaintext string) bool {
	t.Helper()
	_, _, err := svc.AuthenticateKey(context.Background(), plaintext)
	switch {
	case err == nil:
		return true
	case errors.Is(err, btk.ErrKeyRevokedOrExpired):
		return false
	}
	t.Fatalf("authenticate: %v", err)
	return false
}

// Revoke, rotate and revoke-all answered on one instance: the very next
// request with the old key fails on the other, which had it cached.
func TestRevocationAcrossInstances(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	steps := []struct {
		name   string
		revoke func(k *btk.NewKeyResult) error
	}{
		{"revoke", func(k *btk.NewKeyResult) error { _, err := c.a.RevokeKey(ctx, c.owner, k.Key.ID); return err }},
		{"rotate", func(k *btk.NewKeyResult) error {
			_, err := c.a.RotateKey(ctx, c.owner, k.Key.ID, btk.RotateKeyInput{})
			return err
		}},
		{"revoke-all", func(*btk.NewKeyResult) error { _, err := c.a.RevokeAllKeys(ctx, c.owner); return err }},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			k := c.key(t, st.name)
			other := c.key(t, st.name+"-other")
			for range 3 { // cached on b, and verified
				if !accepts(t, c.b, k.Plaintext) || !accepts(t, c.b, other.Plaintext) {
					t.Fatal("a new key is refused")
				}
			}
			if err := st.revoke(k); err != nil {
				t.Fatal(err)
			}
			if accepts(t, c.b, k.Plaintext) {
				t.Fatalf("%s on one instance: the old key is still accepted on the other", st.name)
			}
			if got := accepts(t, c.b, other.Plaintext); got != (st.name != "revoke-all") {
				t.Fatalf("another key of the workspace after %s: accepted=%v", st.name, got)
			}
		})
	}
}

// Redis loses its data after a revocation: the epoch makes the other
// instance read the key again instead of trusting its cache, and the day
// window starts from the stored day state, so nothing is accepted that one
// node would refuse.
func TestRedisLossFailsSafe(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	perDay := 3
	res, err := c.a.CreateKey(ctx, c.owner, btk.CreateKeyInput{Name: "k", RateLimitPerDay: &perDay})
	if err != nil {
		t.Fatal(err)
	}
	victim := c.acceptedKey(t, "victim")
	for i := range 3 {
		if !accepts(t, []*btk.Service{c.a, c.b}[i%2], res.Plaintext) {
			t.Fatal("refused within the day limit")
		}
	}
	if _, _, err := c.b.AuthenticateKey(ctx, res.Plaintext); !errors.Is(err, btk.ErrRateLimited) {
		t.Fatalf("over the day limit: %v", err)
	}
	for _, svc := range []*btk.Service{c.a, c.b} {
		if err := svc.FlushUsage(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.a.RevokeKey(ctx, c.owner, victim.Key.ID); err != nil {
		t.Fatal(err)
	}
	if err := wipe(ctx, c.sa); err != nil { // Redis restarted empty
		t.Fatal(err)
	}
	if accepts(t, c.b, victim.Plaintext) {
		t.Fatal("after Redis lost its data, a key revoked before is accepted from the cache")
	}
	for _, svc := range []*btk.Service{c.a, c.b} {
		if _, _, err := svc.AuthenticateKey(ctx, res.Plaintext); !errors.Is(err, btk.ErrRateLimited) {
			t.Fatalf("after Redis lost its data, the day window restarted: %v", err)
		}
	}
}

// A workspace's limits changed on one instance apply on the other's next
// request.
func TestLimitsAcrossInstances(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	// At 2 a minute, the accepted request holds the window for 30 s: at the
	// default limit it held 100 ms, after which GCRA forgets it, and a
	// loaded machine took longer than that to make the next request.
	two, one := 2, 1
	if _, err := c.a.SetWorkspaceRateLimits(ctx, c.admin, c.owner.WorkspaceID, &two, nil); err != nil {
		t.Fatal(err)
	}
	k := c.acceptedKey(t, "k")
	if _, err := c.a.SetWorkspaceRateLimits(ctx, c.admin, c.owner.WorkspaceID, &one, nil); err != nil {
		t.Fatal(err)
	}
	_, d, err := c.b.AuthenticateKey(ctx, k.Plaintext)
	if !errors.Is(err, btk.ErrRateLimited) || d.Limit != 1 {
		t.Fatalf("after lowering the minute limit to 1 elsewhere: %+v %v", d, err)
	}
}

// Redis unreachable: keys are refused UNAVAILABLE (503), never accepted.
func TestUnreachableFailsClosed(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	k := c.acceptedKey(t, "k")
	c.sb.Close() // its connections are gone for good
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, _, err := c.b.AuthenticateKey(cctx, k.Plaintext); btk.ErrorCode(err) != btk.CodeUnavailable {
		t.Fatalf("without Redis: %v", err)
	}
	if err := c.b.Ready(cctx); err == nil {
		t.Fatal("ready without Redis")
	}
}
