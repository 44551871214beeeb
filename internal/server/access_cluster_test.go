package server_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/redisstate/redistest"
	"github.com/btk-project/btk/internal/server"
	"github.com/btk-project/btk/internal/store"
	"github.com/btk-project/btk/internal/store/postgres/pgtest"
	"github.com/btk-project/btk/internal/testclock"
)

// twoInstances starts instances A and B as `btk serve --db postgres://…
// --redis …` runs them, on one PostgreSQL schema and one Redis prefix, with
// one clock, and returns an env sending requests to each; wrapB wraps B's
// store, and opts change both instances' configuration. The test is
// skipped without PostgreSQL and Redis.
func twoInstances(t *testing.T, wrapB func(btk.Store) btk.Store, opts ...envOption) (a, b *env) {
	t.Helper()
	if os.Getenv(pgtest.Env) == "" || os.Getenv("BTK_TEST_REDIS") == "" {
		t.Skip(pgtest.Env + " or BTK_TEST_REDIS is not set: skipping the two-instance test on PostgreSQL + Redis")
	}
	t.Parallel()
	dbURL := pgtest.URL(t)
	prefix := redistest.Prefix()
	clk := testclock.Stopped()
	a = startInstance(t, dbURL, prefix, clk, func(db btk.Store) btk.Store { return db }, opts...)
	b = startInstance(t, dbURL, prefix, clk, wrapB, opts...)
	return a, b
}

// startInstance starts one instance, its service's store wrapped by wrap.
func startInstance(t *testing.T, dbURL, prefix string, clk *testclock.Clock, wrap func(btk.Store) btk.Store, opts ...envOption) *env {
	t.Helper()
	ctx := context.Background()
	db, err := store.Open(ctx, dbURL, true)
	if err != nil {
		t.Fatal(err)
	}
	st := redisStateAt(t, prefix)
	st.UseClock(clk.Now)
	cfg := btk.Config{Now: clk.Now, KeyGate: st, Throttle: st.Throttle()}
	for _, o := range opts {
		o(&cfg)
	}
	svc, err := btk.NewService(ctx, wrap(db), nil, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Bootstrap(ctx, adminEmail, adminPassword); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(server.New(svc, db, slog.New(slog.DiscardHandler)))
	srv.Client().Timeout = time.Minute
	t.Cleanup(func() {
		srv.Close()
		db.Close()
	})
	return &env{t: t, svc: svc, srv: srv, clock: clk}
}

// TestAccessAcrossInstances: an updateApiKey or a key policy made on one
// instance applies to the next request on the other, widening as well as
// narrowing, at every entry point; two instances sweeping unused keys at
// once revoke (and audit) each exactly once; and requests one instance
// refuses for a restriction use none of the limits both share.
func TestAccessAcrossInstances(t *testing.T) {
	// Requests go to A (changes) and B (uses).
	ea, eb := twoInstances(t, func(db btk.Store) btk.Store { return db })
	eb.svc.SetAccessRules(mustRules(t, accessRules))
	ea.svc.SetAccessRules(mustRules(t, accessRules))
	owner := ea.admin()
	k := ea.createKeyWith(owner, "shared", `allowedCidrs:["10.0.0.0/8"]`)
	pb := &entryPoints{e: eb}
	rec := &recorder{}
	up := httptest.NewServer(rec)
	defer up.Close()
	proxyB := httptest.NewServer(server.New(eb.svc, nil, slog.New(slog.DiscardHandler)).Proxy(mustURL(t, up.URL)))
	defer proxyB.Close()
	pb.proxy = proxyB
	status := func(what string) [3]int {
		return [3]int{pb.graphql(k.Plaintext).Status, pb.authorize(k.Plaintext, "GET", "/orders/1").Status, pb.proxied(k.Plaintext, "GET", "/orders/1").Status}
	}
	if got := status("other network"); got != [3]int{403, 403, 403} {
		t.Fatalf("B, key of another network: %v", got)
	}
	// Widening on A applies on B at once (B cached the refusing record).
	updateKey(t, ea, owner, k.ID, `allowedCidrs:null`).decode(t, &struct{}{})
	if got := status("any network"); got != [3]int{200, 200, 200} {
		t.Fatalf("B after A cleared the networks: %v", got)
	}
	// Narrowing by scope: B's cached record was unscoped.
	updateKey(t, ea, owner, k.ID, `scopes:["invoices:read"]`).decode(t, &struct{}{})
	if got := status("wrong scope"); got != [3]int{200, 403, 403} {
		t.Fatalf("B after A gave the key a scope the rules do not open: %v (graphql needs no scope)", got)
	}
	updateKey(t, ea, owner, k.ID, `scopes:["orders:read"]`).decode(t, &struct{}{})
	if got := status("right scope"); got != [3]int{200, 200, 200} {
		t.Fatalf("B after A gave the key orders:read: %v", got)
	}
	r := pb.authorize(k.Plaintext, "GET", "/orders/1")
	if r.Header.Get("X-Api-Key-Scopes") != "orders:read" {
		t.Errorf("B's X-Api-Key-Scopes %q", r.Header.Get("X-Api-Key-Scopes"))
	}
	// Narrowing by network.
	updateKey(t, ea, owner, k.ID, `allowedCidrs:["192.0.2.0/24"]`).decode(t, &struct{}{})
	if got := status("narrowed"); got != [3]int{403, 403, 403} {
		t.Fatalf("B after A narrowed the networks: %v", got)
	}
	updateKey(t, ea, owner, k.ID, `allowedCidrs:["127.0.0.1"]`).decode(t, &struct{}{})

	// The maximum lifetime, set on A, refuses the old key on B; off again,
	// B accepts it.
	ea.clock.Advance(2 * 24 * time.Hour)
	owner = ea.admin()
	var ws struct{ TenantInfo struct{ ID string } }
	ea.must(owner, `{tenantInfo{id}}`, nil, &ws)
	setPolicy := func(max any) {
		var out struct{ SetWorkspaceKeyPolicy struct{ ID string } }
		ea.must(owner, `mutation($w:ID!,$m:Int){setWorkspaceKeyPolicy(workspaceId:$w,maxLifetimeDays:$m){id}}`, map[string]any{"w": ws.TenantInfo.ID, "m": max}, &out)
	}
	if got := status("before policy"); got != [3]int{200, 200, 200} {
		t.Fatalf("B before the policy: %v", got)
	}
	setPolicy(1)
	if got := status("policy"); got != [3]int{401, 401, 401} {
		t.Fatalf("B after A set a 1-day lifetime on a 2-day-old key: %v", got)
	}
	setPolicy(nil)
	if got := status("policy off"); got != [3]int{200, 200, 200} {
		t.Fatalf("B after A turned the policy off: %v", got)
	}

	// Unused keys, swept by both instances at once: each revoked once.
	var idle []string
	for i := range 6 {
		idle = append(idle, ea.createKey(owner, "idle-"+string(rune('a'+i))).ID)
	}
	var out struct{ SetWorkspaceKeyPolicy struct{ ID string } }
	ea.must(owner, `mutation($w:ID!){setWorkspaceKeyPolicy(workspaceId:$w,revokeUnusedAfterDays:1){id}}`, map[string]any{"w": ws.TenantInfo.ID}, &out)
	ea.flush()
	eb.flush()
	ea.clock.Advance(25 * time.Hour)
	if status("used")[0] != 200 { // k is in use: it stays
		t.Fatal("the key in use was refused")
	}
	ea.flush()
	eb.flush()
	var n [2]int
	var errs [2]error
	var wg sync.WaitGroup
	for i, svc := range []*btk.Service{ea.svc, eb.svc} {
		wg.Go(func() { n[i], errs[i] = svc.SweepUnusedKeys(context.Background()) })
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil || n[0]+n[1] != len(idle) {
		t.Fatalf("sweeps revoked %d + %d keys (%v, %v), want %d in all", n[0], n[1], errs[0], errs[1], len(idle))
	}
	owner = ea.admin()
	var log struct {
		ApiKeyAuditLog struct {
			Nodes []struct{ ApiKeyID, ActorEmail string }
		}
	}
	ea.must(owner, `{apiKeyAuditLog(action:REVOKED){nodes{apiKeyId actorEmail}}}`, nil, &log)
	seen := map[string]int{}
	for _, e := range log.ApiKeyAuditLog.Nodes {
		if e.ActorEmail != btk.SystemActorEmail {
			t.Errorf("REVOKED by %q", e.ActorEmail)
		}
		seen[e.ApiKeyID]++
	}
	for _, id := range idle {
		if seen[id] != 1 {
			t.Errorf("idle key %s has %d REVOKED entries", id, seen[id])
		}
	}
	if len(seen) != len(idle) {
		t.Errorf("REVOKED entries for %d keys, want %d", len(seen), len(idle))
	}
	if status("after sweep")[0] != 200 {
		t.Error("the sweep revoked the key in use")
	}

	// Requests B refuses for the network count nothing of the limits the
	// instances share in Redis: A then has all of them.
	tight := ea.createKeyWith(owner, "tight", `rateLimitPerMinute:2,rateLimitPerDay:2,allowedCidrs:["10.0.0.0/8"]`)
	for range 5 {
		if r := pb.authorize(tight.Plaintext, "GET", "/orders/1"); r.Status != 403 {
			t.Fatalf("B, key of another network: HTTP %d", r.Status)
		}
	}
	updateKey(t, ea, owner, tight.ID, `allowedCidrs:null`).decode(t, &struct{}{})
	pa := &entryPoints{e: ea}
	for i := range 2 {
		if r := pa.authorize(tight.Plaintext, "", ""); r.Status != 200 || remaining(t, r) != 1-i {
			t.Fatalf("A, request %d after B's refusals: HTTP %d, remaining %s", i+1, r.Status, r.Header.Get("RateLimit-Remaining"))
		}
	}
	if r := pb.authorize(tight.Plaintext, "", ""); r.Status != 429 {
		t.Errorf("B, third request of a limit of 2: HTTP %d, want 429", r.Status)
	}
	_ = http.StatusOK
}

// keyReadCounter counts the key lookups a service makes in its store.
type keyReadCounter struct {
	btk.Store
	reads atomic.Int64
}

func (s *keyReadCounter) Read(ctx context.Context, fn func(btk.Tx) error) error {
	return s.Store.Read(ctx, func(tx btk.Tx) error { return fn(keyReadCountingTx{tx, s}) })
}

type keyReadCountingTx struct {
	btk.Tx
	s *keyReadCounter
}

func (tx keyReadCountingTx) APIKeyByHash(ctx context.Context, hash []byte) (*btk.APIKey, error) {
	tx.s.reads.Add(1)
	return tx.Tx.APIKeyByHash(ctx, hash)
}

// TestRefusalsReadNoDatabase: on a cluster, requests refused by a key's
// networks or scopes cost no database read once the key is cached — a
// refusal counts nothing against the limits, so they were one PostgreSQL
// read each, unthrottled — and a widening updateApiKey on A still applies
// at B's next request (one read), with none of the key's limit spent by
// the refusals.
func TestRefusalsReadNoDatabase(t *testing.T) {
	counter := &keyReadCounter{}
	ea, eb := twoInstances(t, func(db btk.Store) btk.Store { counter.Store = db; return counter })
	eb.svc.SetAccessRules(mustRules(t, accessRules))
	pb := &entryPoints{e: eb}
	owner := ea.admin()
	k := ea.createKeyWith(owner, "restricted", `rateLimitPerMinute:2,allowedCidrs:["10.0.0.0/8"]`)

	refuse := func(what string) {
		t.Helper()
		if got := [2]int{pb.graphql(k.Plaintext).Status, pb.authorize(k.Plaintext, "GET", "/orders/1").Status}; got != [2]int{403, 403} {
			t.Fatalf("B, %s from another network: %v, want 403s", what, got)
		}
	}
	// The first requests read: the cold miss, and again once B learns the
	// workspace's revision and meets the Redis server (a new epoch).
	for range 3 {
		refuse("a first request")
	}
	if n := counter.reads.Load(); n > 3 {
		t.Fatalf("B's first 6 requests read the key %d times, want at most 3", n)
	}
	const refused = 200
	before := counter.reads.Load()
	for range refused {
		refuse("a request")
	}
	if n := counter.reads.Load() - before; n != 0 {
		t.Fatalf("%d refused requests on B read the key %d times, want 0", 2*refused, n)
	}
	before = counter.reads.Load()
	updateKey(t, ea, owner, k.ID, `allowedCidrs:null`).decode(t, &struct{}{})
	if got := [2]int{pb.graphql(k.Plaintext).Status, pb.authorize(k.Plaintext, "GET", "/orders/1").Status}; got != [2]int{200, 200} {
		t.Fatalf("B after A cleared the networks: %v, want 200s (the refusals spent none of the 2 a minute)", got)
	}
	if n := counter.reads.Load() - before; n != 1 {
		t.Errorf("the widening cost B %d key reads, want 1", n)
	}
	if r := pb.graphql(k.Plaintext); r.Status != 429 {
		t.Errorf("B, third request within the minute: %d, want 429", r.Status)
	}

	// Narrowed by scope on A: B refuses at its next request, and again
	// without reading.
	updateKey(t, ea, owner, k.ID, `scopes:["invoices:read"]`).decode(t, &struct{}{})
	before = counter.reads.Load()
	for range refused {
		if r := pb.authorize(k.Plaintext, "GET", "/orders/1"); r.Status != 403 {
			t.Fatalf("B after A gave the key a scope the rules do not open: %d, want 403", r.Status)
		}
	}
	if n := counter.reads.Load() - before; n != 1 {
		t.Errorf("%d requests refused by scope after the change read the key %d times, want 1", refused, n)
	}
}

func mustURL(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
