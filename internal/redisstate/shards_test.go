package redisstate

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/ratelimit"
	"github.com/btk-project/btk/internal/redisstate/redistest"
)

// On a three-master Redis Cluster, the keys of 1,000 workspaces (revision
// token and a key's windows, one hash slot per workspace) spread over the
// shards with none above 1.5 times the mean, and each workspace's check
// runs as one script on its shard.
func TestWorkspacesSpreadOverShards(t *testing.T) {
	g := redistest.Cluster(t)
	s := openAt(t, g.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const n = 1000
	for i := range n {
		b := make([]byte, 4)
		rand.Read(b)
		ws := hex.EncodeToString(b) + "-0000-4000-8000-000000000000"
		if err := s.Changed(ctx, ws); err != nil {
			t.Fatal(err)
		}
		c := btk.KeyCheck{KeyID: "key" + ws[:8], WorkspacePrefix: ws[:8], Limits: ratelimit.Limits{PerMinute: 10, PerDay: 10}, Now: time.Now()}
		v, err := s.Allow(ctx, c)
		if err != nil || !v.Stale {
			t.Fatalf("workspace %d, first check: %+v %v", i, v, err)
		}
		c.Seen = v.Current
		if v, err = s.Allow(ctx, c); err != nil || !v.Allowed || v.Remaining != 9 {
			t.Fatalf("workspace %d: %+v %v", i, v, err)
		}
	}
	var counts []int64
	var total int64
	for _, node := range g.Nodes {
		k, err := node.Client().DBSize(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		counts = append(counts, k)
		total += k
	}
	if total != 2*n {
		t.Fatalf("%d keys over the shards, want %d", total, 2*n)
	}
	mean := float64(total) / float64(len(counts))
	for i, k := range counts {
		if float64(k) > 1.5*mean {
			t.Fatalf("shard %d holds %d keys, over 1.5 × the mean %.0f (all: %v)", i, k, mean, counts)
		}
	}
	t.Logf("keys per shard: %v (mean %.0f)", counts, mean)
}
