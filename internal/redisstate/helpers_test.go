package redisstate

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/redisstate/redistest"
)

// testURL returns BTK_TEST_REDIS, patient (redistest.Patient: these tests
// check what is decided, not how soon a stalled Redis is given up on), or
// skips.
func testURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv("BTK_TEST_REDIS")
	if u == "" {
		t.Skip("BTK_TEST_REDIS is not set (a redis:// URL); skipping the Redis tests")
	}
	return redistest.Patient(u)
}

// testPrefix returns a key prefix of the test's own and deletes its keys at
// the end: tests share the machine's Redis.
func testPrefix(t testing.TB, url string) string {
	t.Helper()
	prefix := redistest.Prefix()
	t.Cleanup(func() {
		s, err := Open(url, prefix)
		if err != nil {
			return
		}
		defer s.Close()
		wipe(context.Background(), s)
	})
	return prefix
}

// open returns a State on the test's prefix (one per simulated instance).
func open(t testing.TB, url, prefix string) *State {
	t.Helper()
	s, err := Open(url, prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Redis at %s does not answer: %v", url, err)
	}
	return s
}

// instances returns two States on one prefix of its own: two btk servers
// sharing Redis.
func instances(t testing.TB) (a, b *State) {
	t.Helper()
	url := testURL(t)
	prefix := testPrefix(t, url)
	return open(t, url, prefix), open(t, url, prefix)
}

// ws is the workspace of the tests' key checks and changes.
const ws = "0123abcd-0000-4000-8000-000000000000"

// wipe: see State.Wipe.
func wipe(ctx context.Context, s *State) error { return s.Wipe(ctx) }
