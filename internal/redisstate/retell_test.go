package redisstate

import (
	"context"
	"errors"
	"net/netip"
	"net/url"
	"testing"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/testclock"
	"github.com/btk-project/btk/internal/testproc"
)

// cutCluster is a cluster whose instance a reaches Redis through a relay
// the test cuts (a network between a and Redis that fails) while b, on its
// own connections, keeps serving from its cache; clk is both instances'
// clock.
func cutCluster(t *testing.T) (*cluster, *testproc.Relay, *testclock.Clock) {
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
	return clusterOf(t, open(t, u.String(), prefix), open(t, direct, prefix), clk.Now), px, clk
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
