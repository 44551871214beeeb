package server_test

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

const keyFields = `id name status expiresAt scopes rateLimitPerMinute rateLimitPerDay rotatedFromId replacedById revokedAt displayPrefix hint`

type keyJSON struct {
	ID                 string
	Name               string
	Status             string
	ExpiresAt          *time.Time
	Scopes             []string
	RateLimitPerMinute *int
	RateLimitPerDay    *int
	RotatedFromId      *string
	ReplacedById       *string
	RevokedAt          *time.Time
	DisplayPrefix      string
	Hint               string
}

// createKeyFull creates a key with input (createApiKey's input fields)
// and returns its plaintext and its record.
func (e *env) createKeyFull(c cred, input string) (string, keyJSON) {
	e.t.Helper()
	var out struct {
		CreateApiKey struct {
			PlaintextKey string
			ApiKey       keyJSON
		}
	}
	e.must(c, `mutation{createApiKey(input:{`+input+`}){plaintextKey apiKey{`+keyFields+`}}}`, nil, &out)
	return out.CreateApiKey.PlaintextKey, out.CreateApiKey.ApiKey
}

// docs/design.md#key-lifecycle: (none) --createApiKey--> active, plaintext once, two audit entries.
func TestCreateKeyAuthenticatesAndIsAudited(t *testing.T) {
	e, owner := newAdminEnv(t)
	plain, k := e.createKeyFull(owner, `name:" ci-deploy ",rateLimitPerMinute:10,rateLimitPerDay:1000,scopes:["keys:read"],expiresAt:"2099-01-01T00:00:00Z"`)
	prefix := "btk_" + e.adminWS[:8] + "_"
	if !strings.HasPrefix(plain, prefix) || len(plain) != 56 {
		t.Fatalf("plaintext %q: want %s + 43 characters", plain, prefix)
	}
	if k.Name != "ci-deploy" || k.Status != "ACTIVE" || k.DisplayPrefix != plain[:12] || k.Hint != plain[52:] ||
		*k.RateLimitPerMinute != 10 || *k.RateLimitPerDay != 1000 || k.Scopes[0] != "keys:read" || k.ExpiresAt.Year() != 2099 {
		t.Fatalf("key record %+v", k)
	}

	var info struct{ TenantInfo struct{ ID, Name string } }
	r := e.do(cred{Key: plain}, probe, nil)
	r.decode(t, &info)
	if info.TenantInfo.ID != e.adminWS || info.TenantInfo.Name != "Default" {
		t.Fatalf("tenantInfo with key: %+v", info)
	}

	// The plaintext is never returned again.
	var list struct {
		ApiKeys struct{ Nodes []map[string]any }
	}
	e.must(owner, `{apiKeys{nodes{`+keyFields+`}}}`, nil, &list)
	for _, n := range list.ApiKeys.Nodes {
		for f, v := range n {
			if s, _ := v.(string); s == plain {
				t.Fatalf("field %s returns the plaintext", f)
			}
		}
	}
	assertAudit(t, e, owner, []string{"CREATED"}, []string{"api_key.created"})
}

// docs/design.md#rotation: active --rotate--> revoked; new key inherits; old key fails at once.
func TestRotateInheritsAndRevokesOldKeyAtOnce(t *testing.T) {
	e, owner := newAdminEnv(t)
	prevPlain, old := e.createKeyFull(owner, `name:"batch",rateLimitPerMinute:5,rateLimitPerDay:50,scopes:["a","b"],expiresAt:"2099-01-01T00:00:00Z"`)

	tests := []struct {
		name      string
		input     string
		wantName  string
		wantYear  int // 0: no expiry
		oldKeyArg func() string
	}{
		{"inherit everything", ``, "batch", 2099, nil},
		{"override name and expiry", `,input:{name:"batch-2",expiresAt:"2098-06-01T00:00:00Z"}`, "batch-2", 2098, nil},
		{"explicit null clears expiry", `,input:{expiresAt:null}`, "batch-2", 0, nil},
	}
	prevID := old.ID
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out struct {
				RotateApiKey struct {
					PlaintextKey  string
					ApiKey        keyJSON
					RevokedApiKey keyJSON
				}
			}
			e.must(e.elevated(owner, adminPassword), `mutation($id:ID!){rotateApiKey(id:$id`+tc.input+`){plaintextKey apiKey{`+keyFields+`} revokedApiKey{`+keyFields+`}}}`,
				map[string]any{"id": prevID}, &out)
			n, o := out.RotateApiKey.ApiKey, out.RotateApiKey.RevokedApiKey
			if n.Name != tc.wantName || *n.RateLimitPerMinute != 5 || *n.RateLimitPerDay != 50 || len(n.Scopes) != 2 || n.Status != "ACTIVE" {
				t.Errorf("new key %+v", n)
			}
			if (tc.wantYear == 0) != (n.ExpiresAt == nil) || n.ExpiresAt != nil && n.ExpiresAt.Year() != tc.wantYear {
				t.Errorf("new key expiresAt %v, want year %d", n.ExpiresAt, tc.wantYear)
			}
			if o.ID != prevID || o.Status != "REVOKED" || *o.ReplacedById != n.ID || *n.RotatedFromId != prevID {
				t.Errorf("links: old %+v new %+v", o, n)
			}
			if r := e.do(cred{Key: prevPlain}, probe, nil); r.Status != http.StatusUnauthorized || r.Errors[0].Message != "API key is revoked or expired" {
				t.Errorf("old key after rotation: HTTP %d %+v", r.Status, r.Errors)
			}
			if r := e.do(cred{Key: out.RotateApiKey.PlaintextKey}, probe, nil); r.Status != http.StatusOK || r.Errors != nil {
				t.Errorf("new key: HTTP %d %+v", r.Status, r.Errors)
			}
			prevID, prevPlain = n.ID, out.RotateApiKey.PlaintextKey
		})
	}
	assertAudit(t, e, owner, []string{"CREATED", "ROTATED", "ROTATED", "ROTATED"}, nil)
}

func TestRotateRefusals(t *testing.T) {
	e, owner := newAdminEnv(t)
	k := e.createKey(owner, "k")
	other := e.login(adminEmail, adminPassword, "") // a second session of the same account
	const rotate = `mutation($id:ID!){rotateApiKey(id:$id){plaintextKey}}`
	vars := map[string]any{"id": k.ID}

	tests := []struct {
		name string
		c    cred
		want string
	}{
		{"no elevation", owner, "ELEVATION_REQUIRED"},
		{"garbage elevation", cred{Bearer: owner.Bearer, Elevation: "nope"}, "ELEVATION_REQUIRED"},
		{"elevation of another session", cred{Bearer: owner.Bearer, Elevation: e.elevated(cred{Bearer: other}, adminPassword).Elevation}, "ELEVATION_REQUIRED"},
		{"session token as elevation", cred{Bearer: owner.Bearer, Elevation: owner.Bearer}, "ELEVATION_REQUIRED"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if r := e.do(tc.c, rotate, vars); r.Code() != tc.want {
				t.Fatalf("got %q %+v, want %s", r.Code(), r.Errors, tc.want)
			}
		})
	}

	t.Run("elevation token as session", func(t *testing.T) {
		el := e.elevated(owner, adminPassword).Elevation
		if r := e.do(cred{Bearer: el}, probe, nil); r.Status != http.StatusUnauthorized || r.Errors[0].Message != "invalid or expired session" {
			t.Fatalf("HTTP %d %+v", r.Status, r.Errors)
		}
	})
	t.Run("elevation expires after 5 minutes", func(t *testing.T) {
		c := e.elevated(owner, adminPassword)
		e.clock.Advance(5*time.Minute + time.Second)
		if r := e.do(c, rotate, vars); r.Code() != "ELEVATION_REQUIRED" {
			t.Fatalf("got %q", r.Code())
		}
	})
	t.Run("wrong password", func(t *testing.T) {
		r := e.do(owner, `mutation{elevate(password:"wrong-password"){token}}`, nil)
		if r.Code() != "UNAUTHENTICATED" {
			t.Fatalf("got %q", r.Code())
		}
	})
	t.Run("revoked key", func(t *testing.T) {
		e.must(owner, `mutation($id:ID!){revokeApiKey(id:$id){id}}`, vars, &struct{}{})
		if r := e.do(e.elevated(owner, adminPassword), rotate, vars); r.Code() != "KEY_REVOKED" {
			t.Fatalf("got %q", r.Code())
		}
	})
	t.Run("expired key needs a new expiry", func(t *testing.T) {
		var out struct {
			CreateApiKey struct{ ApiKey struct{ ID string } }
		}
		exp := e.clock.Now().Add(time.Hour).Format(time.RFC3339)
		e.must(owner, `mutation($x:Time){createApiKey(input:{name:"short",expiresAt:$x}){apiKey{id}}}`, map[string]any{"x": exp}, &out)
		e.clock.Advance(2 * time.Hour)
		id := map[string]any{"id": out.CreateApiKey.ApiKey.ID}
		if r := e.do(e.elevated(owner, adminPassword), rotate, id); r.Code() != "BAD_USER_INPUT" {
			t.Fatalf("got %q", r.Code())
		}
		r := e.do(e.elevated(owner, adminPassword), `mutation($id:ID!){rotateApiKey(id:$id,input:{expiresAt:null}){apiKey{status expiresAt}}}`, id)
		if r.Code() != "" {
			t.Fatalf("rotate with new expiry: %+v", r.Errors)
		}
	})
}

// docs/design.md#key-lifecycle: active --revoke--> revoked; idempotent; no way back.
func TestRevoke(t *testing.T) {
	e, owner := newAdminEnv(t)
	k := e.createKey(owner, "leaky")
	const revoke = `mutation($id:ID!){revokeApiKey(id:$id){id status revokedAt}}`
	var out struct{ RevokeApiKey keyJSON }
	e.must(owner, revoke, map[string]any{"id": k.ID}, &out)
	if out.RevokeApiKey.Status != "REVOKED" || out.RevokeApiKey.RevokedAt == nil {
		t.Fatalf("%+v", out)
	}
	if r := e.do(cred{Key: k.Plaintext}, probe, nil); r.Status != http.StatusUnauthorized || r.Errors[0].Message != "API key is revoked or expired" {
		t.Fatalf("revoked key: HTTP %d %+v", r.Status, r.Errors)
	}
	first := *out.RevokeApiKey.RevokedAt
	e.clock.Advance(time.Minute)
	e.must(owner, revoke, map[string]any{"id": k.ID}, &out)
	if !out.RevokeApiKey.RevokedAt.Equal(first) {
		t.Fatalf("second revoke changed revokedAt: %v → %v", first, out.RevokeApiKey.RevokedAt)
	}
	// The name is free again; the old key stays revoked.
	e.createKey(owner, "leaky")
	if r := e.do(cred{Key: k.Plaintext}, probe, nil); r.Status != http.StatusUnauthorized {
		t.Fatalf("old key came back: HTTP %d", r.Status)
	}
	assertAudit(t, e, owner, []string{"CREATED", "REVOKED", "CREATED"}, []string{"api_key.created", "api_key.revoked", "api_key.created"})
}

// docs/design.md#key-lifecycle: revokeAllApiKeys revokes every key of the workspace, and only it.
func TestRevokeAll(t *testing.T) {
	e, owner := newAdminEnv(t)
	a, b := e.createKey(owner, "a"), e.createKey(owner, "b")
	otherWS := e.createWorkspace(owner, "Other", "CLOUD_PRO")
	otherOwner := cred{Bearer: e.impersonate(owner, otherWS)}
	c := e.createKey(otherOwner, "c")

	var out struct{ RevokeAllApiKeys struct{ RevokedCount int } }
	e.must(owner, `mutation{revokeAllApiKeys{revokedCount}}`, nil, &out)
	if out.RevokeAllApiKeys.RevokedCount != 2 {
		t.Fatalf("revokedCount %d", out.RevokeAllApiKeys.RevokedCount)
	}
	for _, k := range []newKey{a, b} {
		if r := e.do(cred{Key: k.Plaintext}, probe, nil); r.Status != http.StatusUnauthorized {
			t.Fatalf("key survived revoke-all: HTTP %d", r.Status)
		}
	}
	if r := e.do(cred{Key: c.Plaintext}, probe, nil); r.Status != http.StatusOK {
		t.Fatalf("another workspace's key was revoked: HTTP %d", r.Status)
	}
	// Nothing left: still one pair of audit rows.
	e.must(owner, `mutation{revokeAllApiKeys{revokedCount}}`, nil, &out)
	if out.RevokeAllApiKeys.RevokedCount != 0 {
		t.Fatalf("second revokedCount %d", out.RevokeAllApiKeys.RevokedCount)
	}
	assertAudit(t, e, owner, []string{"CREATED", "CREATED", "REVOKED_ALL", "REVOKED_ALL"}, []string{"api_key.created", "api_key.created", "api_key.revoked_all", "api_key.revoked_all"})
}

// docs/design.md#workspaces-and-plans: plan gating for issuing; revoke works and keys keep working on every plan.
func TestPlanGating(t *testing.T) {
	e, admin := newAdminEnv(t)
	ws := e.createWorkspace(admin, "Shop", "CLOUD_PRO")
	owner := cred{Bearer: e.impersonate(admin, ws)}
	k := e.createKey(owner, "k")
	k2 := e.createKey(owner, "k2")

	e.must(admin, `mutation($w:ID!){setWorkspacePlan(workspaceId:$w,plan:CLOUD_STARTER){plan}}`, map[string]any{"w": ws}, &struct{}{})
	if r := e.do(owner, `mutation{createApiKey(input:{name:"new"}){plaintextKey}}`, nil); r.Code() != "PLAN_UPGRADE_REQUIRED" {
		t.Fatalf("create on starter: %q", r.Code())
	}
	if r := e.do(e.elevated(owner, adminPassword), `mutation($id:ID!){rotateApiKey(id:$id){plaintextKey}}`, map[string]any{"id": k.ID}); r.Code() != "PLAN_UPGRADE_REQUIRED" {
		t.Fatalf("rotate on starter: %q", r.Code())
	}
	if r := e.do(cred{Key: k.Plaintext}, probe, nil); r.Status != http.StatusOK {
		t.Fatalf("issued key stopped authenticating after downgrade: HTTP %d", r.Status)
	}
	e.must(owner, `mutation($id:ID!){revokeApiKey(id:$id){id}}`, map[string]any{"id": k.ID}, &struct{}{})
	e.must(owner, `mutation{revokeAllApiKeys{revokedCount}}`, nil, &struct{}{})
	if r := e.do(cred{Key: k2.Plaintext}, probe, nil); r.Status != http.StatusUnauthorized {
		t.Fatalf("revoke-all on starter: key still works")
	}
	// Failed operations write no audit rows.
	assertAudit(t, e, owner, []string{"CREATED", "CREATED", "REVOKED", "REVOKED_ALL"}, nil)
}

// docs/design.md#error-codes: the rows not covered above.
func TestErrorsOfSpec(t *testing.T) {
	e, owner := newAdminEnv(t)
	k := e.createKey(owner, "dup")

	t.Run("duplicate active name", func(t *testing.T) {
		if r := e.do(owner, `mutation{createApiKey(input:{name:"dup"}){plaintextKey}}`, nil); r.Code() != "NAME_TAKEN" {
			t.Fatalf("got %q", r.Code())
		}
	})
	t.Run("user resolver with a key", func(t *testing.T) {
		for _, q := range []string{`{me{id}}`, `mutation{elevate(password:"x"){token}}`, `mutation{createApiKey(input:{name:"x"}){plaintextKey}}`, `mutation{revokeAllApiKeys{revokedCount}}`, `{apiKeys{nodes{id}}}`} {
			if r := e.do(cred{Key: k.Plaintext}, q, nil); r.Code() != "UNAUTHENTICATED" || r.Status != http.StatusOK {
				t.Errorf("%s with a key: HTTP %d %q", q, r.Status, r.Code())
			}
		}
	})
	t.Run("expired key", func(t *testing.T) {
		var out struct{ CreateApiKey struct{ PlaintextKey string } }
		exp := e.clock.Now().Add(time.Minute).Format(time.RFC3339)
		e.must(owner, `mutation($x:Time){createApiKey(input:{name:"soon",expiresAt:$x}){plaintextKey}}`, map[string]any{"x": exp}, &out)
		if r := e.do(cred{Key: out.CreateApiKey.PlaintextKey}, probe, nil); r.Status != http.StatusOK {
			t.Fatalf("before expiry: HTTP %d", r.Status)
		}
		e.clock.Advance(time.Minute)
		r := e.do(cred{Key: out.CreateApiKey.PlaintextKey}, probe, nil)
		if r.Status != http.StatusUnauthorized || r.Errors[0].Message != "API key is revoked or expired" {
			t.Fatalf("after expiry: HTTP %d %+v", r.Status, r.Errors)
		}
	})
	t.Run("invalid keys", func(t *testing.T) {
		var ti struct {
			TenantInfo struct{ PublicClientKey string }
		}
		e.must(owner, `{tenantInfo{publicClientKey}}`, nil, &ti)
		unknown := k.Plaintext[:13] + strings.Repeat("A", 43)
		for name, key := range map[string]string{
			"public client key": ti.TenantInfo.PublicClientKey,
			"unknown":           unknown,
			"truncated":         k.Plaintext[:55],
			"too long":          k.Plaintext + "A",
			"wrong prefix":      "btx_" + k.Plaintext[4:],
			"bad character":     k.Plaintext[:20] + "!" + k.Plaintext[21:],
		} {
			r := e.do(cred{Key: key}, probe, nil)
			if r.Status != http.StatusUnauthorized || len(r.Errors) != 1 || r.Errors[0].Message != "invalid API key" || r.Code() != "UNAUTHENTICATED" {
				t.Errorf("%s: HTTP %d %+v", name, r.Status, r.Errors)
			}
		}
	})
	t.Run("bad bearer", func(t *testing.T) {
		for _, h := range []string{"Bearer nope", "Basic abc", "Bearer " + owner.Bearer + "x"} {
			r := e.do(cred{Header: map[string]string{"Authorization": h}, Key: k.Plaintext}, probe, nil)
			if r.Status != http.StatusUnauthorized || r.Errors[0].Message != "invalid or expired session" {
				t.Errorf("%q: HTTP %d %+v (the bearer decides even with a valid key)", h, r.Status, r.Errors)
			}
		}
	})
	t.Run("no credentials", func(t *testing.T) {
		if r := e.do(cred{}, probe, nil); r.Code() != "UNAUTHENTICATED" {
			t.Fatalf("got %q", r.Code())
		}
	})
	t.Run("bad input", func(t *testing.T) {
		for _, in := range []string{
			`{name:""}`, `{name:"   "}`, `{name:"` + strings.Repeat("x", 65) + `"}`, `{name:"a\u0007b"}`, `{name:"evil\u202egpj.exe"}`, `{name:"zero\u200bwidth"}`,
			`{name:"x",rateLimitPerMinute:0}`, `{name:"x",rateLimitPerDay:100000001}`, `{name:"x",rateLimitPerMinute:10,rateLimitPerDay:5}`,
			`{name:"x",expiresAt:"2000-01-01T00:00:00Z"}`, `{name:"x",scopes:["UPPER"]}`,
		} {
			if r := e.do(owner, `mutation{createApiKey(input:`+in+`){plaintextKey}}`, nil); r.Code() != "BAD_USER_INPUT" {
				t.Errorf("%s: got %q %+v", in, r.Code(), r.Errors)
			}
		}
	})
}

// Sessions: logout ends the session at once.
func TestLogout(t *testing.T) {
	e, owner := newAdminEnv(t)
	var out struct{ Logout bool }
	e.must(owner, `mutation{logout}`, nil, &out)
	if r := e.do(owner, probe, nil); r.Status != http.StatusUnauthorized {
		t.Fatalf("after logout: HTTP %d", r.Status)
	}
}

// The server sets X-Tenant-Id from the key; a client-sent one changes nothing.
func TestClientTenantHeaderIgnored(t *testing.T) {
	e, owner := newAdminEnv(t)
	other := e.createWorkspace(owner, "Other", "CLOUD_PRO")
	k := e.createKey(owner, "k")
	var info struct{ TenantInfo struct{ ID string } }
	e.do(cred{Key: k.Plaintext, Header: map[string]string{"X-Tenant-Id": other}}, probe, nil).decode(t, &info)
	if info.TenantInfo.ID != e.adminWS {
		t.Fatalf("tenant %s, want the key's %s", info.TenantInfo.ID, e.adminWS)
	}
}

func (e *env) impersonate(admin cred, ws string) string {
	e.t.Helper()
	var out struct{ Impersonate struct{ AccessToken string } }
	e.must(admin, `mutation($w:ID!){impersonate(workspaceId:$w){accessToken}}`, map[string]any{"w": ws}, &out)
	return out.Impersonate.AccessToken
}

// assertAudit checks both audit trails of the caller's workspace, oldest first.
func assertAudit(t *testing.T, e *env, c cred, keyActions, eventActions []string) {
	t.Helper()
	var out struct {
		ApiKeyAuditLog struct {
			Nodes []struct{ Action, ActorEmail, IP, UserAgent string }
		}
		AuditEvents struct {
			Nodes []struct{ Action, ActorId string }
		}
	}
	e.must(c, `{apiKeyAuditLog(first:500){nodes{action actorEmail ip userAgent}} auditEvents(first:500){nodes{action actorId}}}`, nil, &out)
	// Only the key events pair with key audit rows (sessions, memberships
	// and the rest have events of their own: events_test.go).
	keyEvents := out.AuditEvents.Nodes[:0]
	for _, n := range out.AuditEvents.Nodes {
		if strings.HasPrefix(n.Action, "api_key.") {
			keyEvents = append(keyEvents, n)
		}
	}
	out.AuditEvents.Nodes = keyEvents
	var got []string
	for i := len(out.ApiKeyAuditLog.Nodes) - 1; i >= 0; i-- {
		n := out.ApiKeyAuditLog.Nodes[i]
		got = append(got, n.Action)
		if n.ActorEmail == "" || n.IP == "" || n.UserAgent == "" {
			t.Errorf("audit entry without actor or request: %+v", n)
		}
	}
	if strings.Join(got, ",") != strings.Join(keyActions, ",") {
		t.Errorf("key audit (oldest first) %v, want %v", got, keyActions)
	}
	if len(out.AuditEvents.Nodes) != len(out.ApiKeyAuditLog.Nodes) {
		t.Errorf("%d audit_events for %d key audit rows", len(out.AuditEvents.Nodes), len(out.ApiKeyAuditLog.Nodes))
	}
	if eventActions != nil {
		got = got[:0]
		for i := len(out.AuditEvents.Nodes) - 1; i >= 0; i-- {
			got = append(got, out.AuditEvents.Nodes[i].Action)
		}
		if strings.Join(got, ",") != strings.Join(eventActions, ",") {
			t.Errorf("audit_events (oldest first) %v, want %v", got, eventActions)
		}
	}
}
