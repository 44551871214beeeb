package server_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/redisstate"
	"github.com/btk-project/btk/internal/redisstate/redistest"
	"github.com/btk-project/btk/internal/store/postgres/pgtest"
)

// onRedis reports whether t runs under TestPostgresRedis: newEnv then opens
// a PostgreSQL schema and keeps the shared state in Redis, under a key
// prefix of the test's own, as a cluster instance does.
func onRedis(t testing.TB) bool { return strings.HasPrefix(t.Name(), "TestPostgresRedis/") }

// useRedis puts cfg's shared state in BTK_TEST_REDIS, following the test's
// clock (the tests move time).
func useRedis(t testing.TB, cfg *btk.Config, now func() time.Time) {
	t.Helper()
	st := redisStateAt(t, redistest.Prefix())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := st.Ping(ctx); err != nil {
		t.Fatalf("BTK_TEST_REDIS: %v", err)
	}
	st.UseClock(now)
	cfg.KeyGate, cfg.Throttle = st, st.Throttle()
}

// redisStateAt opens the shared state of BTK_TEST_REDIS under prefix (one
// per simulated instance; instances of one cluster share the prefix), and at
// the test's end deletes its keys and closes it.
func redisStateAt(t testing.TB, prefix string) *redisstate.State {
	t.Helper()
	st, err := redisstate.Open(redistest.Patient(os.Getenv("BTK_TEST_REDIS")), prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st.Wipe(ctx)
		st.Close()
	})
	return st
}

// TestPostgresRedis runs the server's HTTP tests of what Redis holds
// (revocation, rate limits and their persisted day counts, usage, health,
// and the access checks that must decide before the Redis limits count)
// once more on the engines of a cluster instance: PostgreSQL for the data,
// Redis for the shared state. Same test functions; only newEnv differs. The
// rest runs on PostgreSQL alone (TestPostgres), to keep the race run short.
func TestPostgresRedis(t *testing.T) {
	if os.Getenv(pgtest.Env) == "" || os.Getenv("BTK_TEST_REDIS") == "" {
		t.Skip(pgtest.Env + " or BTK_TEST_REDIS is not set: skipping the HTTP tests on PostgreSQL + Redis")
	}
	runAll(t, sharedStateTests)
	runAll(t, []namedTest{
		{"TestNginxAuthRequest", TestNginxAuthRequest},
		{"TestCaddyForwardAuth", TestCaddyForwardAuth},
	})
}
