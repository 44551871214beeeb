package redisstate

import (
	"context"
	"errors"
	"net/netip"
	"net/url"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/store/storetest"
	"github.com/btk-project/btk/internal/testclock"
	"github.com/btk-project/btk/internal/testproc"
)

// cutCluster is a cluster whose instance a reaches Redis through a relay
// the test cuts (a network between a and Redis that fails) while b, on its
// own connections, keeps serving from its cache; clk is both instances'
// clock. a's budgets (a workspace's changes) are on a connection the test
// does not cut: with them cut too, a change is refused UNAVAILABLE before it
// commits, and these tests are about the changes that committed and could
// not tell, as when Redis fails between the budget and the tell.
func cutCluster(t *testing.T) (*cluster, *testproc.Relay, *testclock.Clock) {
	t.Helper()
	c, px, clk, direct := cutOffCluster(t)
	c.a = c.gated(t, c.db, direct, c.sa)
	return c, px, clk
}

// cutOffCluster is a cluster whose instance a reaches Redis only through
// the relay returned, budgets included; direct is a state of a's that
// does not go through it.
func cutOffCluster(t *testing.T) (*cluster, *testproc.Relay, *testclock.Clock, *State) {
	t.Helper()
	u, err := url.Parse(testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	prefix := testPrefix(t, u.String())
	px := testproc.NewRelay(t, u.Host)
	direct := u.String()
	u.Host = px.Addr
	clk := testclock.Stopped()
	c := clusterOf(t, open(t, u.String(), prefix), open(t, direct, prefix), clk.Now)
	return c, px, clk, open(t, direct, prefix)
}

// A workspace's change budget is in Redis, shared by the instances: an
// instance cut off from it refuses the changes the budget counts,
// UNAVAILABLE and writing nothing, as it refuses logins (fail closed); a
// revocation, which the budget never refuses, still commits, and answers
// UNAVAILABLE until it is told (docs/clusters.md#shared-state-in-redis).
func TestChangesFailClosedWithoutTheBudget(t *testing.T) {
	c, px, _, _ := cutOffCluster(t)
	ctx := context.Background()
	k := c.key(t, "k")
	px.Cut()
	if _, err := c.a.CreateKey(ctx, c.owner, btk.CreateKeyInput{Name: "during"}); btk.ErrorCode(err) != btk.CodeUnavailable {
		t.Fatalf("create with the budget unreachable: %v, want UNAVAILABLE", err)
	}
	if _, err := c.a.RotateKey(ctx, c.owner, k.Key.ID, btk.RotateKeyInput{}); btk.ErrorCode(err) != btk.CodeUnavailable {
		t.Fatalf("rotate with the budget unreachable: %v, want UNAVAILABLE", err)
	}
	if _, err := c.a.RevokeKey(ctx, c.owner, k.Key.ID); btk.ErrorCode(err) != btk.CodeUnavailable {
		t.Fatalf("revoke with Redis unreachable: %v, want UNAVAILABLE (committed, untold)", err)
	}
	px.Restore()
	keys, _, err := c.a.ListKeys(ctx, c.owner, true, btk.Page{First: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 || keys[0].ID != k.Key.ID || keys[0].RevokedAt == nil {
		t.Fatalf("keys after the outage: %d, want the one key, revoked", len(keys))
	}
}

// from reports whether svc accepts the key for a request from addr.
func from(t *testing.T, svc *btk.Service, plaintext, addr string) bool {
	t.Helper()
	_, _, err := svc.AuthenticateRequest(context.Background(), plaintext, &btk.KeyRequest{Addr: netip.MustParseAddr(addr)})
	switch {
	case err == nil:
		return true
	case errors.Is(err, btk.ErrKeyNetwork), errors.Is(err, btk.ErrKeyRevokedOrExpired):
		return false
	}
	t.Fatalf("authenticate: %v", err)
	return false
}

// An updateApiKey that committed but could not tell Redis answers
// UNAVAILABLE; repeating it, as the answer says, finds nothing left to
// change in the database and must still tell: the other instance, which
// had the key cached, then refuses the network the update shut out
// (docs/clusters.md#shared-state-in-redis).
func TestRepeatedUpdateTellsTheOtherInstances(t *testing.T) {
	c, px, _ := cutCluster(t)
	ctx := context.Background()
	k := c.key(t, "k")
	const outside = "198.51.100.7"
	if !from(t, c.b, k.Plaintext, outside) { // cached on b
		t.Fatal("a key without networks is refused")
	}
	nets := []string{"192.0.2.0/24"}
	in := btk.UpdateKeyInput{AllowedCIDRs: btk.Change[[]string]{Set: true, Value: &nets}}
	px.Cut()
	if _, err := c.a.UpdateKey(ctx, c.owner, k.Key.ID, in); btk.ErrorCode(err) != btk.CodeUnavailable {
		t.Fatalf("update with Redis cut off from a: %v, want UNAVAILABLE", err)
	}
	px.Restore()
	if _, err := c.a.UpdateKey(ctx, c.owner, k.Key.ID, in); err != nil {
		t.Fatalf("the update repeated: %v", err)
	}
	if from(t, c.b, k.Plaintext, outside) {
		t.Fatal("after the repeated update answered, the other instance still accepts the key from the network it shut out")
	}
	if !from(t, c.b, k.Plaintext, "192.0.2.1") {
		t.Fatal("the key is refused from its own network")
	}
}

// The unused-key sweep revokes a key but cannot tell Redis (its instance
// is cut off from it). No caller is there to repeat anything: the next
// sweep run, of any instance (here one started after the sweeping one
// stopped), tells; the other instance, which had the key cached, then
// refuses it. A run with nothing left to tell changes no token.
func TestSweepTellsWhatAFailedSweepDidNot(t *testing.T) {
	c, px, clk := cutCluster(t)
	ctx := context.Background()
	days := 1
	if _, err := c.a.SetWorkspaceKeyPolicy(ctx, c.owner, c.owner.WorkspaceID, nil, &days); err != nil {
		t.Fatal(err)
	}
	k := c.acceptedKey(t, "idle") // cached on b
	clk.Advance(49 * time.Hour)
	px.Cut()
	n, err := c.a.SweepUnusedKeys(ctx)
	if n != 1 || btk.ErrorCode(err) != btk.CodeUnavailable {
		t.Fatalf("sweep with Redis cut off: %d keys, %v; want 1, UNAVAILABLE", n, err)
	}
	px.Restore()
	next := c.restarted(t) // the sweeping instance stopped; another sweeps
	if n, err := next.SweepUnusedKeys(ctx); n != 0 || err != nil {
		t.Fatalf("the next sweep: %d keys, %v", n, err)
	}
	if accepts(t, c.b, k.Plaintext) {
		t.Fatal("after the next sweep run, the other instance still accepts the key the failed sweep revoked")
	}
	c.sweepMovesNoToken(t, next)
}

// A leak report revokes a key but its instance cannot tell Redis: the
// report answers UNAVAILABLE, and should the scanner never send it again,
// the next sweep run of any instance tells, as for the sweep's own
// revocations.
func TestSweepTellsWhatAFailedLeakReportDidNot(t *testing.T) {
	c, px, _ := cutCluster(t)
	ctx := context.Background()
	k := c.acceptedKey(t, "leaked") // cached on b
	px.Cut()
	report := []btk.LeakReport{{Token: k.Plaintext, URL: "https://example.com/leak", Source: "content"}}
	if _, err := c.a.ReportLeaks(ctx, btk.Reporter{Actor: c.admin}, report); btk.ErrorCode(err) != btk.CodeUnavailable {
		t.Fatalf("leak report with Redis cut off: %v, want UNAVAILABLE", err)
	}
	px.Restore()
	next := c.restarted(t)
	if _, err := next.SweepUnusedKeys(ctx); err != nil {
		t.Fatalf("the next sweep: %v", err)
	}
	if accepts(t, c.b, k.Plaintext) {
		t.Fatal("after the next sweep run, the other instance still accepts the key the leak report revoked")
	}
	c.sweepMovesNoToken(t, next)
}

// An owner's change that committed but could not tell Redis answers
// UNAVAILABLE, and its caller may never repeat it (a browser closed, a CI
// job that gave up): the change is listed in its own transaction, so the
// next sweep run of any instance tells, and the other instance, which had
// the key cached and kept accepting it meanwhile, then refuses it.
func TestSweepTellsWhatAnUnrepeatedChangeDidNot(t *testing.T) {
	const outside = "198.51.100.7"
	nets := []string{"192.0.2.0/24"}
	for _, ch := range []struct {
		name   string
		change func(c *cluster, id string) error
	}{
		{"revokeApiKey", func(c *cluster, id string) error {
			_, err := c.a.RevokeKey(context.Background(), c.owner, id)
			return err
		}},
		{"rotateApiKey", func(c *cluster, id string) error {
			_, err := c.a.RotateKey(context.Background(), c.owner, id, btk.RotateKeyInput{})
			return err
		}},
		{"revokeAllApiKeys", func(c *cluster, _ string) error {
			_, err := c.a.RevokeAllKeys(context.Background(), c.owner)
			return err
		}},
		{"updateApiKey", func(c *cluster, id string) error {
			in := btk.UpdateKeyInput{AllowedCIDRs: btk.Change[[]string]{Set: true, Value: &nets}}
			_, err := c.a.UpdateKey(context.Background(), c.owner, id, in)
			return err
		}},
	} {
		t.Run(ch.name, func(t *testing.T) {
			c, px, _ := cutCluster(t)
			k := c.key(t, "k")
			if !from(t, c.b, k.Plaintext, outside) { // cached on b
				t.Fatal("a new key is refused")
			}
			px.Cut()
			if err := ch.change(c, k.Key.ID); btk.ErrorCode(err) != btk.CodeUnavailable {
				t.Fatalf("%s with Redis cut off from its instance: %v, want UNAVAILABLE", ch.name, err)
			}
			if !from(t, c.b, k.Plaintext, outside) {
				t.Fatal("the untold instance refuses the key already: the test shows nothing")
			}
			px.Restore()
			next := c.restarted(t) // the instance that committed stopped; another sweeps
			if _, err := next.SweepUnusedKeys(context.Background()); err != nil {
				t.Fatalf("the next sweep: %v", err)
			}
			if from(t, c.b, k.Plaintext, outside) {
				t.Fatalf("after the next sweep run, the other instance still accepts the key as before the %s", ch.name)
			}
			c.sweepMovesNoToken(t, next)
		})
	}
}

// The same for a change to the workspace rather than to one key: its
// limits lowered on an instance cut off from Redis, never repeated. The
// other instance keeps the workspace's old limits from its cache until the
// next sweep run of any instance tells it; then it counts the key against
// the new limit.
func TestSweepTellsAnUnrepeatedWorkspaceChange(t *testing.T) {
	c, px, _ := cutCluster(t)
	ctx := context.Background()
	ws := c.owner.WorkspaceID
	k := c.acceptedKey(t, "k") // one use this minute, cached on b with the workspace
	one := 1
	px.Cut()
	if _, err := c.a.SetWorkspaceRateLimits(ctx, c.owner, ws, &one, nil); btk.ErrorCode(err) != btk.CodeUnavailable {
		t.Fatalf("limits lowered with Redis cut off from their instance: %v, want UNAVAILABLE", err)
	}
	if u := storetest.Untold(t, c.db); u[ws] == "" {
		t.Fatalf("listed %v, want the workspace %s", u, ws)
	}
	if !accepts(t, c.b, k.Plaintext) {
		t.Fatal("the untold instance applies the new limit already: the test shows nothing")
	}
	px.Restore()
	if _, err := c.restarted(t).SweepUnusedKeys(ctx); err != nil {
		t.Fatalf("the next sweep: %v", err)
	}
	if u := storetest.Untold(t, c.db); len(u) != 0 {
		t.Fatalf("after the sweep run told: still listed %v", u)
	}
	if _, _, err := c.b.AuthenticateKey(ctx, k.Plaintext); btk.ErrorCode(err) != btk.CodeRateLimited {
		t.Fatalf("third use in a minute under a limit of 1 a minute, after the sweep told: %v, want RATE_LIMITED", err)
	}
}

// restarted is another instance on the cluster's database and Redis
// prefix (the one that swept, restarted; or any other).
func (c *cluster) restarted(t *testing.T) *btk.Service {
	t.Helper()
	return c.instance(t, open(t, testURL(t), c.sa.prefix))
}

// sweepMovesNoToken: once told, a sweep with nothing to revoke or tell
// leaves the workspace's token alone (the other instances keep their
// records).
func (c *cluster) sweepMovesNoToken(t *testing.T, svc *btk.Service) {
	t.Helper()
	ctx := context.Background()
	prefix := c.owner.WorkspaceID[:btk.WorkspacePrefixLen]
	before, err := c.sb.Current(ctx, prefix)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.SweepUnusedKeys(ctx); err != nil {
		t.Fatal(err)
	}
	if after, err := c.sb.Current(ctx, prefix); err != nil || after != before {
		t.Fatalf("a sweep with nothing left to tell moved the token: %v → %v %v", before, after, err)
	}
}
