package redisstate

import (
	"context"
	"net"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/btk-project/btk/internal/btk"
)

// counter counts the script calls a client makes: each is one round trip,
// or a share of one when the automatic pipeline sends several together
// (the connection's own setup — HELLO, CLIENT SETINFO, INFO — is not
// counted).
type counter struct{ n atomic.Int64 }

func (c *counter) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := cmd.Name(); n == "evalsha" || n == "eval" {
			c.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if n := cmd.Name(); n == "evalsha" || n == "eval" {
				c.n.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}

// roundTrips counts the round trips n sees over requests key checks of
// plaintext at svc, each of which must accept.
func roundTrips(t *testing.T, n *counter, svc *btk.Service, plaintext string, requests int) int64 {
	t.Helper()
	n.n.Store(0)
	for range requests {
		if !accepts(t, svc, plaintext) {
			t.Fatal("refused")
		}
	}
	return n.n.Load()
}

// A key-authenticated request whose key is cached costs one round trip to
// Redis (docs/clusters.md#what-a-key-check-costs); the first one on an instance, and the
// first after a change elsewhere, cost one more (the stale answer).
func TestOneRoundTripPerRequest(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	var n counter
	c.sb.Client().AddHook(&n)
	k := c.acceptedKey(t, "k")
	if got := n.n.Load(); got != 2 {
		t.Fatalf("first request on an instance: %d round trips, want 2 (stale, then decided)", got)
	}
	if got := roundTrips(t, &n, c.b, k.Plaintext, 100); got != 100 {
		t.Fatalf("100 requests: %d round trips", got)
	}
	// A change on the other instance: one stale answer, then one per request.
	if _, err := c.a.RevokeKey(ctx, c.owner, c.key(t, "other").Key.ID); err != nil {
		t.Fatal(err)
	}
	if got := roundTrips(t, &n, c.b, k.Plaintext, 10); got != 11 {
		t.Fatalf("10 requests after a change elsewhere: %d round trips, want 11", got)
	}
}
