package redisstate

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/ratelimit"
	"github.com/btk-project/btk/internal/redisstate/redistest"
)

// fill writes junk into srv until even a small write is refused for want
// of memory (a large value is refused while its own bytes count against
// maxmemory: memory may remain for smaller writes after it).
func fill(t *testing.T, srv *redistest.Server) {
	t.Helper()
	c := srv.Client()
	ctx := context.Background()
	n := 0
	for _, size := range []int{16 << 10, 1 << 10, 16} {
		junk := strings.Repeat("x", size)
		for ; ; n++ {
			err := c.Set(ctx, "junk:"+strconv.Itoa(n), junk, 0).Err()
			if err != nil && strings.HasPrefix(err.Error(), "OOM") {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if n > 1e6 {
				t.Fatal("a million keys written and no OOM")
			}
		}
	}
}

// Redis out of memory (maxmemory with noeviction, as docs/clusters.md asks):
// the script's write is refused, so key checks and password throttles fail
// (503), never accept a request uncounted, and /readyz fails; once memory
// is freed, checks are counted again from where they were.
func TestOutOfMemoryFailsClosed(t *testing.T) {
	srv := redistest.Standalone(t, "maxmemory 2mb", "maxmemory-policy noeviction")
	s := openAt(t, srv.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := btk.KeyCheck{KeyID: "k", WorkspacePrefix: ws[:8], Limits: ratelimit.Limits{PerMinute: 3, PerDay: 100}, Now: time.Now()}
	c.Seen = current(t, s, c)
	if v, err := s.Allow(ctx, c); err != nil || !v.Allowed || v.Remaining != 2 {
		t.Fatalf("%+v %v", v, err)
	}
	if w, err := s.Warnings(ctx); err != nil || len(w) != 0 {
		t.Fatalf("noeviction: warnings %q %v", w, err)
	}
	for i := range 10 {
		// Filled again before each check: Redis's memory in use moves by
		// itself (client buffers freed), and a check that fits in what was
		// freed is counted, as it should be.
		fill(t, srv)
		if v, err := s.Allow(ctx, c); err == nil || !strings.Contains(err.Error(), "OOM") {
			t.Fatalf("check %d out of memory: %+v %v", i, v, err)
		}
		nc := c
		nc.KeyID = "new"
		if v, err := s.Allow(ctx, nc); err == nil {
			t.Fatalf("a new key's check out of memory: %+v", v)
		}
	}
	if ok, err := s.Throttle().Allow(ctx, "login:a@example.com", ratelimit.Limits{PerMinute: 5, PerDay: 5}, time.Now()); err == nil {
		t.Fatalf("a password throttle out of memory: %v", ok)
	}
	if err := s.Ready(ctx); err == nil || !strings.Contains(err.Error(), "OOM") {
		t.Fatalf("ready out of memory: %v", err)
	}
	if err := srv.Client().FlushDB(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// The token went with the flush: one stale answer, then counted anew.
	v, err := s.Allow(ctx, c)
	if err != nil || !v.Stale {
		t.Fatalf("after the flush: %+v %v", v, err)
	}
	c.Seen = v.Current
	if v, err := s.Allow(ctx, c); err != nil || !v.Allowed || v.Remaining != 2 {
		t.Fatalf("memory freed: %+v %v", v, err)
	}
}

// A maxmemory with an eviction policy is named at start (btk serve logs
// Warnings): when memory runs short, Redis would evict rate-limit windows
// (which then restart full) and revision tokens (which fail safe: every
// instance reads its records again).
func TestEvictionPolicyWarns(t *testing.T) {
	for _, policy := range []string{"allkeys-lru", "volatile-ttl"} {
		srv := redistest.Standalone(t, "maxmemory 8mb", "maxmemory-policy "+policy)
		s := openAt(t, srv.URL())
		w, err := s.Warnings(context.Background())
		if err != nil || len(w) != 1 || !strings.Contains(w[0], "maxmemory-policy "+policy) || !strings.Contains(w[0], "noeviction") {
			t.Fatalf("%s: %q %v", policy, w, err)
		}
	}
	// No maxmemory: nothing is ever evicted, whatever the policy.
	srv := redistest.Standalone(t, "maxmemory-policy allkeys-lru")
	if w, err := openAt(t, srv.URL()).Warnings(context.Background()); err != nil || len(w) != 0 {
		t.Fatalf("no maxmemory: %q %v", w, err)
	}
}

// A primary that can fail over without min-replicas-to-write is named at
// start: a replica promoted before its first sync ended holds no data, and
// every key's windows start over (found by an attack: 73 requests accepted
// against 40 a minute across a failover to a replica that had just joined).
func TestFailoverWithoutMinReplicasWarns(t *testing.T) {
	primary, _ := redistest.Pair(t)
	w, err := openAt(t, primary.URL()).Warnings(context.Background())
	if err != nil || len(w) != 1 || !strings.Contains(w[0], "set min-replicas-to-write 1") {
		t.Fatalf("a primary with a replica and no min-replicas-to-write: %q %v", w, err)
	}
	primary, _ = redistest.Pair(t, "min-replicas-to-write 1")
	primary.WaitGoodReplicas(t, 1)
	if w, err := openAt(t, primary.URL()).Warnings(context.Background()); err != nil || len(w) != 0 {
		t.Fatalf("with min-replicas-to-write 1: %q %v", w, err)
	}
}
