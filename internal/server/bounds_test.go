package server_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/store/storetest"
)

// Stored client strings are bounded (docs/security.md#what-a-client-can-make-the-server-hold):
// a caller's User-Agent is stored cut to 256 bytes, so
// twenty elevations with a 60 KB User-Agent cannot grow the audit (or the
// owner's audit page) by megabytes.
func TestClientStringsTruncatedBeforeStored(t *testing.T) {
	e, admin := newAdminEnv(t)
	admin.Header = map[string]string{"User-Agent": strings.Repeat("é", 30_000)} // 60 KB, two-byte characters
	for range 20 {
		e.elevated(admin, adminPassword)
	}
	var out struct {
		AuditEvents struct {
			Nodes []struct{ Action, Metadata string }
		}
	}
	admin.Header = nil
	e.must(admin, `{auditEvents(first:50, action:"session.elevated"){nodes{action metadata}}}`, nil, &out)
	if len(out.AuditEvents.Nodes) != 20 {
		t.Fatalf("%d session.elevated events, want 20", len(out.AuditEvents.Nodes))
	}
	total := 0
	for _, n := range out.AuditEvents.Nodes {
		var m struct{ UserAgent string }
		if err := json.Unmarshal([]byte(n.Metadata), &m); err != nil {
			t.Fatal(err)
		}
		if len(m.UserAgent) > 256 || !strings.HasPrefix(m.UserAgent, "éé") || strings.ContainsRune(m.UserAgent, '\uFFFD') {
			t.Fatalf("stored user agent of %d bytes: %.40q…", len(m.UserAgent), m.UserAgent)
		}
		total += len(n.Metadata)
	}
	if total > 20*512 {
		t.Fatalf("20 events' metadata take %d bytes", total)
	}
}

// Fields sharing one response name, and the errors of one answer, are bounded
// (docs/security.md#bounds-on-a-request): conflicting aliases made the validator report
// one error per conflicting pair: a logged-in member's 3.6 KB query got
// 27,225 errors (7 MB), an anonymous one 1,089. An answer now carries at
// most 100 errors and one saying how many were left out, and stays under
// 64 KiB, for every caller kind.
func TestConflictingAliasesErrorsBounded(t *testing.T) {
	e, admin := newAdminEnv(t)
	id := e.createAccount(admin, "member@example.com", "member-password-1", false)
	e.setMember(admin, e.adminWS, id, "MEMBER")
	member := cred{Bearer: e.login("member@example.com", "member-password-1", "")}
	key := cred{Key: e.createKey(admin, "aliases").Plaintext}
	for _, c := range []struct {
		name  string
		who   cred
		query string
	}{
		{"member", member, alternate(64, "me{id}", "__typename")},
		{"anonymous", cred{}, alternate(64, "workspaceBranding(publicKey:\"x\"){name}", "__typename")},
		{"key", key, alternate(64, "tenantInfo{name}", "__typename")},
		// Messages quote the alias: a 2,500-byte one is cut.
		{"member, long alias", member, alternateAs(strings.Repeat("b", 2500), 24, "me{id}", "__typename")},
	} {
		for _, accept := range []string{"application/json", "application/graphql-response+json"} {
			body, _ := json.Marshal(map[string]any{"query": c.query})
			status, out := e.postRaw(body, accept, c.who)
			raw, _ := json.Marshal(out)
			var errs []gqlError
			json.Unmarshal(out["errors"], &errs)
			if len(raw) > 64<<10 || len(errs) > 101 || len(errs) < 2 {
				t.Fatalf("%s (%s): HTTP %d, %d errors, %d bytes", c.name, accept, status, len(errs), len(raw))
			}
			last := errs[len(errs)-1].Message
			if !strings.Contains(last, "more errors were left out") || errs[0].Extensions["code"] != "GRAPHQL_VALIDATION_FAILED" {
				t.Fatalf("%s: the last error %q, the first %+v", c.name, last, errs[0])
			}
			t.Logf("%s: %d bytes sent, %d errors, %d bytes answered; %s", c.name, len(body), len(errs), len(raw), last)
		}
	}
	// More than 64 fields sharing a name are refused before validation,
	// which would compare each pair (320: 34 ms of CPU, 30 MB allocated).
	body, _ := json.Marshal(map[string]any{"query": alternate(320, "me{id}", "__typename")})
	if _, out := e.postRaw(body, "application/json", member); firstCode(t, out) != "COMPLEXITY_LIMIT_EXCEEDED" {
		t.Fatalf("320 fields named a: %s", out["errors"])
	}
}

// Attacker pass: a page cost the same whatever its size, so an owner's 45
// aliases of auditEvents(first: 100) read 4,500 rows into a 1.8 MB answer
// (113 ms of CPU). A page now costs its rows: that is refused, and the
// CLI's largest page (500 keys) still fits.
func TestPagesCostTheirRows(t *testing.T) {
	e, owner := newAdminEnv(t)
	if r := e.do(owner, aliasQuery(45, "auditEvents(first:100){nodes{id action metadata createdAt}}"), nil); r.Code() != "COMPLEXITY_LIMIT_EXCEEDED" {
		t.Fatalf("45 pages of 100 events: %q %+v", r.Code(), r.Errors)
	}
	var out struct {
		ApiKeys struct{ Nodes []struct{ ID string } }
	}
	e.must(owner, `{apiKeys(first:500){nodes{id name displayPrefix hint status rateLimitPerMinute rateLimitPerDay expiresAt lastUsedAt createdAt}}}`, nil, &out)
}

// Attacker pass: the query cache and the remembered operation costs kept
// any valid document with its source, so distinct 60 KB documents (a
// comment fills them) from an anonymous caller stayed in memory, 1,000 of
// them at a time (64 MB). Only small documents are kept now.
func TestQueryCacheHoldsOnlySmallDocuments(t *testing.T) {
	e := newEnv(t)
	heap := func() int64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return int64(m.HeapAlloc)
	}
	pad := strings.Repeat("x", 60_000)
	before := heap()
	for i := range 200 {
		r := e.do(cred{}, fmt.Sprintf("{__typename} #%d %s", i, pad), nil)
		if r.Status != http.StatusOK || len(r.Errors) > 0 {
			t.Fatalf("document %d: HTTP %d %+v", i, r.Status, r.Errors)
		}
	}
	if grew := heap() - before; grew > 4<<20 {
		t.Fatalf("200 documents of 60 KB left %d MB in memory", grew>>20)
	}
}

// A workspace's keys that are not revoked are bounded
// (docs/security.md#what-a-client-can-make-the-server-hold): an owner could
// create keys without end, each a row that revoke-all then updates in one
// transaction. At the bound a create is BAD_USER_INPUT, as the webhook
// bound is, and writes nothing; concurrent creates cannot overshoot it;
// revoked keys do not count; rotation (one revoked, one issued) still works,
// and revoking a key makes room.
func TestKeysPerWorkspaceBounded(t *testing.T) {
	// A bound of the test's own (btk.Config.MaxKeysPerWorkspace; the
	// default, btk.DefaultMaxKeysPerWorkspace, is 100,000 rows to write).
	const bound = 200
	e, admin := newAdminEnv(t, func(c *btk.Config) { c.MaxKeysPerWorkspace = bound })
	ws := e.createWorkspace(admin, "Full", "CLOUD_PRO")
	owner := cred{Bearer: e.impersonate(admin, ws)}
	// The rows below the bound are written straight to the store: as many
	// creates through GraphQL would each wait for their own commit.
	ctx := context.Background()
	err := e.db.Write(ctx, func(tx btk.Tx) error {
		w, err := tx.Workspace(ctx, ws)
		if err != nil {
			return err
		}
		gone := storetest.Key(w, "gone")
		if err := tx.CreateAPIKey(ctx, gone); err != nil {
			return err
		}
		if err := tx.RevokeAPIKey(ctx, gone.ID, e.clock.Now(), "", ""); err != nil {
			return err
		}
		for i := range bound - 2 {
			if err := tx.CreateAPIKey(ctx, storetest.Key(w, fmt.Sprintf("filler %d", i))); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// Eight creates at once with two places left: two win.
	const create = `mutation($n:String!,$c:Boolean){createApiKey(input:{name:$n,canary:$c}){apiKey{id}}}`
	results := make([]response, 8)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() {
			<-start
			results[i] = e.do(owner, create, map[string]any{"n": fmt.Sprintf("racer %d", i)})
		})
	}
	close(start)
	wg.Wait()
	var won []string
	for i, r := range results {
		switch r.Code() {
		case "":
			var out struct {
				CreateApiKey struct{ ApiKey struct{ ID string } }
			}
			r.decode(t, &out)
			won = append(won, out.CreateApiKey.ApiKey.ID)
		case "BAD_USER_INPUT":
			if msg := r.Errors[0].Message; !strings.Contains(msg, fmt.Sprintf("at most %d keys", bound)) {
				t.Errorf("create %d refused with %q", i, msg)
			}
		default:
			t.Errorf("create %d: %+v", i, r.Errors)
		}
	}
	if len(won) != 2 {
		t.Fatalf("%d concurrent creates passed with 2 places left", len(won))
	}
	for _, canary := range []bool{false, true} {
		if r := e.do(owner, create, map[string]any{"n": "one more", "c": canary}); r.Code() != "BAD_USER_INPUT" {
			t.Errorf("create (canary %v) past the bound: %q", canary, r.Code())
		}
	}
	var out struct {
		RotateApiKey struct{ ApiKey struct{ ID string } }
	}
	e.must(e.elevated(owner, adminPassword), `mutation($id:ID!){rotateApiKey(id:$id){apiKey{id}}}`, map[string]any{"id": won[0]}, &out)
	e.must(owner, `mutation($id:ID!){revokeApiKey(id:$id){id}}`, map[string]any{"id": out.RotateApiKey.ApiKey.ID}, &struct{}{})
	e.must(owner, create, map[string]any{"n": "room again"}, &struct{}{})
	if r := e.do(owner, create, map[string]any{"n": "one more"}); r.Code() != "BAD_USER_INPUT" {
		t.Errorf("create past the bound after one made room: %q", r.Code())
	}
	// Refused creates write no audit rows.
	assertAudit(t, e, owner, []string{"CREATED", "CREATED", "ROTATED", "REVOKED", "CREATED"}, nil)
}

// Expired sessions are deleted (docs/security.md#what-a-client-can-make-the-server-hold):
// every login adds a session row, and they stayed for ever. The hourly
// retention run deletes those that expired; a live session is untouched,
// an expired token is refused as before, and the session.login events stay.
func TestExpiredSessionsPruned(t *testing.T) {
	e, admin := newAdminEnv(t)
	ctx := context.Background()
	sessionID := func(token string) string {
		t.Helper()
		parts := strings.Split(token, ".")
		if len(parts) != 3 {
			t.Fatalf("not a JWT: %q", token)
		}
		raw, err := base64.RawURLEncoding.DecodeString(parts[1])
		var claims struct {
			JTI string `json:"jti"` // the session id
		}
		if err == nil {
			err = json.Unmarshal(raw, &claims)
		}
		if err != nil || claims.JTI == "" {
			t.Fatalf("JWT claims %s: %v", raw, err)
		}
		return claims.JTI
	}
	stored := func(token string) bool {
		t.Helper()
		err := e.db.Read(ctx, func(tx btk.Tx) error {
			_, err := tx.Session(ctx, sessionID(token))
			return err
		})
		if err != nil && !errors.Is(err, btk.ErrNotFound) {
			t.Fatal(err)
		}
		return err == nil
	}
	logins := func() int {
		t.Helper()
		var out struct {
			AuditEvents struct{ Nodes []struct{ ID string } }
		}
		e.must(admin, `{auditEvents(first:500, action:"session.login"){nodes{id}}}`, nil, &out)
		return len(out.AuditEvents.Nodes)
	}

	old := e.login(adminEmail, adminPassword, "")
	if err := e.svc.FlushDueUsage(ctx); err != nil { // the first run prunes at once
		t.Fatal(err)
	}
	if !stored(old) || !stored(admin.Bearer) {
		t.Fatal("a live session was deleted")
	}
	e.clock.Advance(btk.SessionTTL / 2)
	admin.Bearer = e.login(adminEmail, adminPassword, "")
	before := logins()
	e.clock.Advance(btk.SessionTTL/2 + time.Second)
	if err := e.svc.FlushDueUsage(ctx); err != nil {
		t.Fatal(err)
	}
	if stored(old) {
		t.Error("an expired session is still stored after the retention run")
	}
	if !stored(admin.Bearer) {
		t.Error("a live session was deleted")
	}
	if r := e.do(cred{Bearer: old}, `{me{id}}`, nil); r.Code() != "UNAUTHENTICATED" {
		t.Errorf("an expired session's token: %q", r.Code())
	}
	if after := logins(); after != before || after < 3 {
		t.Errorf("session.login events: %d before the run, %d after", before, after)
	}
}

// The stored strings a platform admin gives are bounded too
// (docs/security.md#what-a-client-can-make-the-server-hold): a workspace
// name of at most 100 characters, an email of at most 254 bytes; one more
// is BAD_USER_INPUT and stores nothing.
func TestAdminStringsBounded(t *testing.T) {
	t.Parallel()
	e, admin := newAdminEnv(t)
	const createWS = `mutation($n:String!){createWorkspace(input:{name:$n}){id}}`
	e.must(admin, createWS, map[string]any{"n": strings.Repeat("é", 100)}, &struct{}{})
	if r := e.do(admin, createWS, map[string]any{"n": strings.Repeat("é", 101)}); r.Code() != "BAD_USER_INPUT" {
		t.Errorf("a workspace name of 101 characters: %q", r.Code())
	}
	const createAcct = `mutation($e:String!){createAccount(input:{email:$e,password:"a long enough password"}){id}}`
	email := func(n int) string { // n bytes: labels of at most 63
		local := strings.Repeat("a", 64) + "@"
		domain := ".example"
		var mid []string
		for rest := n - len(local) - len(domain); rest > 0; {
			l := min(rest, 62) // a label and the dot after it, but the last
			if rest <= 63 {
				l = rest
			}
			mid = append(mid, strings.Repeat("b", l))
			rest -= l + 1
		}
		s := local + strings.Join(mid, ".") + domain
		if len(s) != n {
			t.Fatalf("email of %d bytes, want %d", len(s), n)
		}
		return s
	}
	e.must(admin, createAcct, map[string]any{"e": email(254)}, &struct{}{})
	if r := e.do(admin, createAcct, map[string]any{"e": email(255)}); r.Code() != "BAD_USER_INPUT" {
		t.Errorf("an email of 255 bytes: %q", r.Code())
	}
	var out struct{ Workspaces, Accounts []struct{ ID string } }
	e.must(admin, `{workspaces{id} accounts{id}}`, nil, &out)
	if len(out.Workspaces) != 2 || len(out.Accounts) != 2 {
		t.Errorf("%d workspaces, %d accounts stored; want 2 and 2", len(out.Workspaces), len(out.Accounts))
	}
}

// Attacker pass: each alias of a top-level field that reads the database is
// a read transaction of its own, and me cost 1: a MEMBER's 249 aliases of
// me{id} cost 50-110 ms of CPU (290 ms for an account in 21 workspaces,
// whose memberships were read one workspace at a time on every alias). Such
// a field now costs a tenth of an operation; me reads memberships only when
// they are asked for, in one query.
func TestTopLevelReadsCostTheirReads(t *testing.T) {
	t.Parallel()
	e, admin := newAdminEnv(t)
	id := e.createAccount(admin, "member@example.com", "member-password-1", false)
	e.setMember(admin, e.adminWS, id, "MEMBER")
	for i := range 3 {
		ws := e.createWorkspace(admin, fmt.Sprintf("Other %d", i), "CLOUD_PRO")
		e.setMember(admin, ws, id, "MEMBER")
	}
	member := cred{Bearer: e.login("member@example.com", "member-password-1", e.adminWS)}
	key := cred{Key: e.createKey(admin, "reads").Plaintext}
	var branding struct {
		WorkspaceBranding struct{ PublicClientKey string }
	}
	e.must(admin, `{workspaceBranding:tenantInfo{publicClientKey}}`, nil, &branding)
	for _, c := range []struct {
		name, field string
		who         cred
	}{
		{"member, me", "me{id}", member},
		{"member, me with memberships", "me{memberships{workspaceId workspaceName role}}", member},
		{"anonymous, workspaceBranding", fmt.Sprintf("workspaceBranding(publicKey:%q){name}", branding.WorkspaceBranding.PublicClientKey), cred{}},
		{"key, tenantInfo", "tenantInfo{id}", key},
		{"owner, members", fmt.Sprintf("members(workspaceId:%q){email}", e.adminWS), admin},
		{"owner, webhooks", "webhooks{id}", admin},
		{"admin, workspaces", "workspaces{id}", admin},
		{"admin, accounts", "accounts{id}", admin},
	} {
		if r := e.do(c.who, aliasQuery(2, c.field), nil); len(r.Errors) > 0 {
			t.Errorf("%s: two aliases: %+v", c.name, r.Errors)
		}
		if r := e.do(c.who, aliasQuery(10, c.field), nil); r.Code() != "COMPLEXITY_LIMIT_EXCEEDED" {
			t.Errorf("%s: 10 aliases: %q %+v; want COMPLEXITY_LIMIT_EXCEEDED", c.name, r.Code(), r.Errors)
		}
	}
	// me names the account's workspaces, from one query.
	var me struct {
		Me struct {
			Memberships []struct{ WorkspaceName, Role string }
		}
	}
	e.must(member, `{me{memberships{workspaceName role}}}`, nil, &me)
	if got := len(me.Me.Memberships); got != 4 || me.Me.Memberships[1].WorkspaceName != "Other 0" || me.Me.Memberships[3].Role != "MEMBER" {
		t.Errorf("memberships: %+v", me.Me.Memberships)
	}
}
