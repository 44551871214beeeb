//go:build unix

package server_test

import (
	"encoding/json"
	"fmt"
	"runtime"
	"testing"
	"time"
)

// BenchmarkCostliestRequestByCaller measures the costliest requests each
// kind of caller (anonymous, API key, MEMBER, ADMIN, OWNER) can construct after
// the bounds of docs/security.md#what-a-client-can-make-the-server-hold, through the real handler (SQLite store, no
// network). cpu-ns/op is the process's user+system CPU per request
// (getrusage, garbage collection included), alloc-B/op the bytes allocated
// (runtime.MemStats), answer-B the answer's size. docs/security.md lists
// the results.
//
//	go test ./internal/server -run '^$' -bench CostliestRequestByCaller -benchtime 20x
func BenchmarkCostliestRequestByCaller(b *testing.B) {
	e := newEnv(b)
	h := e.srv.Config.Handler
	owner := e.admin()
	id := e.createAccount(owner, "member@example.com", "member-password-1", false)
	e.setMember(owner, e.adminWS, id, "MEMBER")
	// A member of four workspaces: me's memberships name them all.
	for i := range 3 {
		e.setMember(owner, e.createWorkspace(owner, fmt.Sprintf("Other %d", i), "CLOUD_PRO"), id, "MEMBER")
	}
	member := cred{Bearer: e.login("member@example.com", "member-password-1", e.adminWS)}
	benchKey := e.createKey(owner, "bench")
	key := cred{Key: benchKey.Plaintext}
	var ws struct {
		TenantInfo struct{ PublicClientKey string }
	}
	e.must(owner, `{tenantInfo{publicClientKey}}`, nil, &ws)
	// An ADMIN of the workspace (a role below OWNER: reads keys, not the
	// audit).
	adminID := e.createAccount(owner, "keyadmin@example.com", "keyadmin-password-1", false)
	e.setMember(owner, e.adminWS, adminID, "ADMIN")
	keyAdmin := cred{Bearer: e.login("keyadmin@example.com", "keyadmin-password-1", e.adminWS)}
	// An owner's workspace at the largest page size: 500 keys, hundreds of
	// events, each key used once (its last client and usage recorded).
	for i := range 499 {
		k := e.createKey(owner, fmt.Sprintf("k%03d", i))
		if s := e.probeStatus(k.Plaintext); s != 200 {
			b.Fatalf("a new key's use: HTTP %d", s)
		}
	}
	e.flush()
	const keyFields = `{nodes{id name displayPrefix hint status rateLimitPerMinute rateLimitPerDay expiresAt lastUsedAt createdAt}}`
	const eventFields = `{nodes{id workspaceId action actorId actorEmail targetType targetId metadata createdAt}}`
	// Password checks: the throttles are refilled before each, so that the
	// check itself (argon2id) is measured, not a refusal. A minute refills
	// the per-minute budgets without ending the sessions; the day is
	// stepped over last.
	minute := func() { e.clock.Advance(time.Minute) }
	day := func() { e.clock.Advance(24 * time.Hour) }
	cases := []struct {
		caller, name string
		who          cred
		query        string
		before       func()
	}{
		{"anonymous", "64-conflicting-aliases", cred{}, alternate(64, `workspaceBranding(publicKey:"x"){name}`, "__typename"), nil},
		{"anonymous", "fragment-bomb-150-levels", cred{}, fragmentBomb(150), nil},
		{"key", "64-conflicting-aliases", key, alternate(64, "tenantInfo{name}", "__typename"), nil},
		{"key", "11-tenantInfo", key, aliasQuery(11, "tenantInfo{id name prefix plan publicClientKey defaultRateLimitPerMinute defaultRateLimitPerDay createdAt}"), nil},
		{"member", "elevate-wrong-password", member, `mutation{elevate(password:"not-the-password"){token}}`, minute},
		{"member", "64-conflicting-aliases", member, alternate(64, "me{id}", "__typename"), nil},
		{"anonymous", "9-workspaceBranding", cred{}, aliasQuery(9, fmt.Sprintf("workspaceBranding(publicKey:%q){name}", ws.TenantInfo.PublicClientKey)), nil},
		{"member", "8-me-with-memberships", member, aliasQuery(8, "me{id email memberships{workspaceId workspaceName role}}"), nil},
		{"member", "99-me-with-memberships", member, aliasQuery(99, "me{id email memberships{workspaceId workspaceName role}}"), nil},
		{"owner", "64-conflicting-aliases", owner, alternate(64, "me{id}", "__typename"), nil},
		{"owner", "9-pages-of-100-keys", owner, aliasQuery(9, "apiKeys(first:100)"+keyFields), nil},
		{"owner", "500-keys-page", owner, `{apiKeys(first:500)` + keyFields + `}`, nil},
		{"owner", "10-pages-of-100-events", owner, aliasQuery(10, "auditEvents(first:100)"+eventFields), nil},
		{"owner", "38-pages-of-100-keys", owner, aliasQuery(38, "apiKeys(first:100)"+keyFields), nil},
		{"owner", "45-pages-of-100-events", owner, aliasQuery(45, "auditEvents(first:100)"+eventFields), nil},
		// Fields of each row that read beyond the key: its last client, its
		// usage series (docs/security.md#bounds-on-a-request).
		{"admin", "6-pages-of-500-keys-last-client", keyAdmin, aliasQuery(6, "apiKeys(first:500){nodes{lastUsedIp lastUsedUserAgent}}"), nil},
		{"admin", "5-pages-of-500-keys-usage", keyAdmin, aliasQuery(5, "apiKeys(first:500){nodes{usage{accepted}}}"), nil},
		// The same rows without reads beyond the key; the usage budget
		// (20,000 points) spent on whole series.
		{"admin", "6-pages-of-500-keys-id-hint", keyAdmin, aliasQuery(6, "apiKeys(first:500){nodes{id hint}}"), nil},
		{"admin", "9-keys-89-days-of-hours", keyAdmin, aliasQuery(9, fmt.Sprintf("apiKey(id:%q){usage(granularity:HOUR,since:%q){accepted}}", benchKey.ID, e.clock.Now().Add(-89*24*time.Hour).Format(time.RFC3339))), nil},
		{"anonymous", "login-wrong-password", cred{}, `mutation{login(email:"admin@example.com",password:"not-the-password"){accessToken}}`, day},
	}
	for _, tc := range cases {
		b.Run(tc.caller+"/"+tc.name, func(b *testing.B) {
			bodies := make([][]byte, b.N)
			for i := range bodies {
				// A new document each time (a comment): the query cache
				// does not help.
				bodies[i], _ = json.Marshal(map[string]any{"query": fmt.Sprintf("%s #%d", tc.query, i)})
			}
			var m0, m1 runtime.MemStats
			answer := 0
			runtime.ReadMemStats(&m0)
			start := cpuTime()
			b.ResetTimer()
			for i := range b.N {
				if tc.before != nil {
					tc.before()
				}
				rec := serveGraphQL(h, bodies[i], tc.who)
				answer = rec.Body.Len()
				if i == 0 {
					b.Logf("HTTP %d, %d bytes: %.160s", rec.Code, answer, rec.Body)
				}
			}
			b.StopTimer()
			cpu := cpuTime() - start
			runtime.ReadMemStats(&m1)
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(m1.TotalAlloc-m0.TotalAlloc)/float64(b.N), "alloc-B/op")
			b.ReportMetric(float64(answer), "answer-B")
			b.ReportMetric(float64(len(bodies[0])), "body-B")
		})
	}
}
