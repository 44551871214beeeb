package redisstate

import (
	"context"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/ratelimit"
)

// BenchmarkAllow is one key check (one script call) on BTK_TEST_REDIS.
func BenchmarkAllow(b *testing.B) {
	url := testURL(b)
	s := open(b, url, testPrefix(b, url))
	c := btk.KeyCheck{KeyID: "k", WorkspacePrefix: "01234567", Limits: ratelimit.Limits{PerMinute: 1_000_000, PerDay: 100_000_000}, Now: time.Now()}
	v, err := s.Allow(context.Background(), c)
	if err != nil {
		b.Fatal(err)
	}
	c.Seen = v.Current
	b.ReportAllocs()
	for b.Loop() {
		if v, err := s.Allow(context.Background(), c); err != nil || !v.Allowed {
			b.Fatal(v, err)
		}
	}
}
