package server_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/redisstate/redistest"
	"github.com/btk-project/btk/internal/server"
	"github.com/btk-project/btk/internal/store"
	"github.com/btk-project/btk/internal/store/postgres/pgtest"
)

// instance is one of two btk instances on one PostgreSQL schema and one
// Redis prefix, as `btk serve --db postgres://… --redis …` runs them.
type instance struct {
	svc *btk.Service
	srv *httptest.Server
}

func startInstance(t *testing.T, dbURL, prefix string, clk *clock) *instance {
	t.Helper()
	ctx := context.Background()
	db, err := store.Open(ctx, dbURL, true)
	if err != nil {
		t.Fatal(err)
	}
	st := redisStateAt(t, prefix)
	st.UseClock(clk.Now)
	svc, err := btk.NewService(ctx, db, nil, btk.Config{Now: clk.Now, KeyGate: st, Throttle: st.Throttle()})
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
	return &instance{svc: svc, srv: srv}
}

// TestAccessAcrossInstances: an updateApiKey or a key policy made on one
// instance applies to the next request on the other, widening as well as
// narrowing, at every entry point; and two instances sweeping unused keys
// at once revoke (and audit) each exactly once.
func TestAccessAcrossInstances(t *testing.T) {
	if os.Getenv(pgtest.Env) == "" || os.Getenv("BTK_TEST_REDIS") == "" {
		t.Skip(pgtest.Env + " or BTK_TEST_REDIS is not set: skipping the two-instance test on PostgreSQL + Redis")
	}
	t.Parallel()
	dbURL := pgtest.URL(t)
	prefix := redistest.Prefix()
	clk := &clock{t: time.Now().UTC().Truncate(time.Second)}
	a := startInstance(t, dbURL, prefix, clk)
	bi := startInstance(t, dbURL, prefix, clk)
	bi.svc.SetAccessRules(mustRules(t, accessRules))
	a.svc.SetAccessRules(mustRules(t, accessRules))

	// Requests go to A (changes) and B (uses) through the harness's env.
	ea := &env{t: t, svc: a.svc, srv: a.srv, clock: clk}
	eb := &env{t: t, svc: bi.svc, srv: bi.srv, clock: clk}
	owner := ea.admin()
	k := ea.createKeyWith(owner, "shared", `allowedCidrs:["10.0.0.0/8"]`)
	pb := &entryPoints{e: eb}
	rec := &recorder{}
	up := httptest.NewServer(rec)
	defer up.Close()
	proxyB := httptest.NewServer(server.New(bi.svc, nil, slog.New(slog.DiscardHandler)).Proxy(mustURL(t, up.URL)))
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
	clk.Advance(25 * time.Hour)
	if status("used")[0] != 200 { // k is in use: it stays
		t.Fatal("the key in use was refused")
	}
	ea.flush()
	eb.flush()
	var n [2]int
	var errs [2]error
	var wg sync.WaitGroup
	for i, svc := range []*btk.Service{a.svc, bi.svc} {
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
	_ = http.StatusOK
}

func mustURL(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
