package server_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

type pageOut struct {
	ids       []string
	hasNext   bool
	endCursor *string
}

// page fetches one page of a connection field. args, if any, ends with a comma.
func (e *env) page(c cred, field, args string, first int, after *string) pageOut {
	e.t.Helper()
	q := `query($first:Int,$after:String){c:` + field + `(` + args + `first:$first,after:$after){nodes{id} pageInfo{hasNextPage endCursor}}}`
	var out struct {
		C struct {
			Nodes    []struct{ ID string }
			PageInfo struct {
				HasNextPage bool
				EndCursor   *string
			}
		}
	}
	vars := map[string]any{"first": first}
	if after != nil {
		vars["after"] = *after
	}
	e.must(c, q, vars, &out)
	p := pageOut{hasNext: out.C.PageInfo.HasNextPage, endCursor: out.C.PageInfo.EndCursor}
	for _, n := range out.C.Nodes {
		p.ids = append(p.ids, n.ID)
	}
	return p
}

// walk pages through a connection size at a time, calling between after
// every page but the last, and checks the page shapes.
func walk(t *testing.T, e *env, c cred, field, args string, size int, between func()) []string {
	t.Helper()
	var all []string
	var after *string
	for range 100 {
		p := e.page(c, field, args, size, after)
		all = append(all, p.ids...)
		if !p.hasNext {
			if len(p.ids) > size {
				t.Fatalf("%s: last page of %d for first:%d", field, len(p.ids), size)
			}
			return all
		}
		if len(p.ids) != size || p.endCursor == nil || *p.endCursor == "" {
			t.Fatalf("%s: a page with a next page has %d nodes (first:%d) and endCursor %v", field, len(p.ids), size, p.endCursor)
		}
		after = p.endCursor
		if between != nil {
			between()
		}
	}
	t.Fatalf("%s: more than 100 pages", field)
	return nil
}

func reversed(s []string) []string {
	out := slices.Clone(s)
	slices.Reverse(out)
	return out
}

func noDuplicates(t *testing.T, what string, ids []string) {
	t.Helper()
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			t.Fatalf("%s: %s appears twice in %v", what, id, ids)
		}
		seen[id] = true
	}
}

// docs/design.md#graphql: connections page newest first with first/after; no row is
// handed out twice, also when rows are added between pages.
func TestCursorPaging(t *testing.T) {
	t.Parallel()
	e, owner := newAdminEnv(t)
	var created []string // oldest first
	for i := range 7 {
		created = append(created, e.createKey(owner, fmt.Sprintf("k%d", i)).ID)
	}
	e.must(owner, `mutation($id:ID!){revokeApiKey(id:$id){id}}`, map[string]any{"id": created[2]}, &struct{}{})
	var exp struct {
		CreateApiKey struct{ ApiKey struct{ ID string } }
	}
	e.must(owner, `mutation($x:Time){createApiKey(input:{name:"expiring",expiresAt:$x}){apiKey{id}}}`,
		map[string]any{"x": e.clock.Now().Add(time.Minute).Format(time.RFC3339)}, &exp)
	created = append(created, exp.CreateApiKey.ApiKey.ID)
	e.clock.Advance(2 * time.Minute) // "expiring" is now EXPIRED, still listed

	allKeys := reversed(created)
	active := slices.DeleteFunc(slices.Clone(allKeys), func(id string) bool { return id == created[2] })

	t.Run("apiKeys", func(t *testing.T) {
		for _, size := range []int{1, 3, 7, 8, 500} {
			if got := walk(t, e, owner, "apiKeys", "", size, nil); !slices.Equal(got, active) {
				t.Errorf("first:%d: %v, want (newest first, without the revoked key) %v", size, got, active)
			}
			if got := walk(t, e, owner, "apiKeys", "includeRevoked:true,", size, nil); !slices.Equal(got, allKeys) {
				t.Errorf("first:%d includeRevoked: %v, want %v", size, got, allKeys)
			}
		}
		var list struct {
			ApiKeys struct{ Nodes []struct{ ID, Status string } }
		}
		e.must(owner, `{apiKeys{nodes{id status}}}`, nil, &list)
		if n := list.ApiKeys.Nodes[0]; n.ID != exp.CreateApiKey.ApiKey.ID || n.Status != "EXPIRED" {
			t.Errorf("newest key %+v, want the expired key listed as EXPIRED", n)
		}
	})

	t.Run("rows added between pages", func(t *testing.T) {
		i := 0
		got := walk(t, e, owner, "apiKeys", "includeRevoked:true,", 3, func() {
			i++
			e.createKey(owner, fmt.Sprintf("late%d", i))
		})
		noDuplicates(t, "apiKeys", got)
		if !slices.Equal(got, allKeys) {
			t.Errorf("%v, want the keys as they were at the first page %v", got, allKeys)
		}
	})

	t.Run("audit lists", func(t *testing.T) {
		for _, field := range []string{"apiKeyAuditLog", "auditEvents"} {
			full := e.allIDs(owner, field, "")
			if len(full) < 10 {
				t.Fatalf("%s has %d rows, want at least 10", field, len(full))
			}
			noDuplicates(t, field, full)
			for _, size := range []int{1, 4, len(full), len(full) + 1} {
				if got := walk(t, e, owner, field, "", size, nil); !slices.Equal(got, full) {
					t.Errorf("%s first:%d: %v, want %v", field, size, got, full)
				}
			}
			i := 0
			got := walk(t, e, owner, field, "", 4, func() {
				i++
				e.createKey(owner, fmt.Sprintf("%s-late-%d", field, i))
			})
			noDuplicates(t, field, got)
			if !slices.Equal(got, full) {
				t.Errorf("%s with rows added between pages: %v, want %v", field, got, full)
			}
		}
	})

	t.Run("bad cursors", func(t *testing.T) {
		keyCursor := *e.page(owner, "apiKeys", "", 1, nil).endCursor
		auditCursor := *e.page(owner, "apiKeyAuditLog", "", 1, nil).endCursor
		for _, tc := range []struct{ field, after string }{
			{"apiKeys", "garbage"},
			{"apiKeyAuditLog", keyCursor},
			{"auditEvents", auditCursor},
			{"apiKeys", auditCursor},
		} {
			r := e.do(owner, `query($after:String){c:`+tc.field+`(after:$after){nodes{id}}}`, map[string]any{"after": tc.after})
			if r.Code() != "BAD_USER_INPUT" {
				t.Errorf("%s after:%q: %q %+v, want BAD_USER_INPUT", tc.field, tc.after, r.Code(), r.Errors)
			}
		}
	})

	t.Run("first out of range", func(t *testing.T) {
		for _, field := range []string{"apiKeys", "apiKeyAuditLog", "auditEvents"} {
			for _, first := range []int{0, -1, 501, 1 << 30} {
				r := e.do(owner, `query($first:Int){c:`+field+`(first:$first){nodes{id}}}`, map[string]any{"first": first})
				if r.Code() != "BAD_USER_INPUT" {
					t.Errorf("%s first:%d: %q %+v, want BAD_USER_INPUT", field, first, r.Code(), r.Errors)
				}
			}
			for _, first := range []int{1, 500} {
				if r := e.do(owner, `query($first:Int){c:`+field+`(first:$first){nodes{id}}}`, map[string]any{"first": first}); r.Code() != "" {
					t.Errorf("%s first:%d: %+v", field, first, r.Errors)
				}
			}
		}
	})
}

type auditRow struct {
	Action         string
	ApiKeyId       *string
	NewApiKeyId    *string
	RevokedCount   *int
	ActorId        string
	ImpersonatorId *string
	CreatedAt      time.Time
}

func (r auditRow) String() string {
	s := r.Action
	if r.ApiKeyId != nil {
		s += " " + (*r.ApiKeyId)[:8]
	}
	return s
}

func rowsString(rows []auditRow) string {
	var parts []string
	for _, r := range rows {
		parts = append(parts, r.String())
	}
	return strings.Join(parts, ", ")
}

// docs/design.md#graphql: apiKeyAuditLog filters by key, action and time (since
// inclusive, until exclusive); auditEvents by time.
func TestAuditFilters(t *testing.T) {
	t.Parallel()
	e, owner := newAdminEnv(t)
	t0 := e.clock.Now()
	k1 := e.createKey(owner, "one")
	e.clock.Advance(time.Hour)
	t1 := e.clock.Now()
	var rot struct {
		RotateApiKey struct{ ApiKey struct{ ID string } }
	}
	e.must(e.elevated(owner, adminPassword), `mutation($id:ID!){rotateApiKey(id:$id){apiKey{id}}}`, map[string]any{"id": k1.ID}, &rot)
	k2 := rot.RotateApiKey.ApiKey.ID
	e.clock.Advance(time.Hour)
	t2 := e.clock.Now()
	k3 := e.createKey(owner, "three")
	e.must(owner, `mutation($id:ID!){revokeApiKey(id:$id){id}}`, map[string]any{"id": k3.ID}, &struct{}{})
	e.clock.Advance(time.Hour)
	t3 := e.clock.Now()
	e.must(owner, `mutation{revokeAllApiKeys{revokedCount}}`, nil, &struct{}{})

	const q = `query($key:ID,$action:ApiKeyAuditAction,$since:Time,$until:Time){apiKeyAuditLog(apiKeyId:$key,action:$action,since:$since,until:$until){nodes{action apiKeyId newApiKeyId revokedCount actorId impersonatorId createdAt}}}`
	ts := func(t time.Time) string { return t.Format(time.RFC3339) }
	type row struct {
		action string
		key    *string
	}
	tests := []struct {
		name string
		vars map[string]any
		want []row // newest first
	}{
		{"no filter", nil, []row{{"REVOKED_ALL", nil}, {"REVOKED", &k3.ID}, {"CREATED", &k3.ID}, {"ROTATED", &k1.ID}, {"CREATED", &k1.ID}}},
		// The chain's newest key (k2) was revoked by the revoke-all: its
		// entry is part of the chain's history (docs/design.md#audit).
		{"apiKeyId of a rotated key", map[string]any{"key": k1.ID}, []row{{"REVOKED_ALL", nil}, {"ROTATED", &k1.ID}, {"CREATED", &k1.ID}}},
		{"apiKeyId of a revoked key", map[string]any{"key": k3.ID}, []row{{"REVOKED", &k3.ID}, {"CREATED", &k3.ID}}},
		{"action CREATED", map[string]any{"action": "CREATED"}, []row{{"CREATED", &k3.ID}, {"CREATED", &k1.ID}}},
		{"action REVOKED", map[string]any{"action": "REVOKED"}, []row{{"REVOKED", &k3.ID}}},
		{"action REVOKED_ALL", map[string]any{"action": "REVOKED_ALL"}, []row{{"REVOKED_ALL", nil}}},
		{"key and action", map[string]any{"key": k3.ID, "action": "CREATED"}, []row{{"CREATED", &k3.ID}}},
		{"since is inclusive", map[string]any{"since": ts(t1)}, []row{{"REVOKED_ALL", nil}, {"REVOKED", &k3.ID}, {"CREATED", &k3.ID}, {"ROTATED", &k1.ID}}},
		{"until is exclusive", map[string]any{"until": ts(t1)}, []row{{"CREATED", &k1.ID}}},
		{"since and until", map[string]any{"since": ts(t1), "until": ts(t2)}, []row{{"ROTATED", &k1.ID}}},
		{"since after everything", map[string]any{"since": ts(t3.Add(time.Second))}, nil},
		{"until before everything", map[string]any{"until": ts(t0)}, nil},
		{"an unknown key", map[string]any{"key": "00000000-0000-4000-8000-000000000000"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out struct{ ApiKeyAuditLog struct{ Nodes []auditRow } }
			e.must(owner, q, tc.vars, &out)
			got := out.ApiKeyAuditLog.Nodes
			ok := len(got) == len(tc.want)
			for i := 0; ok && i < len(got); i++ {
				ok = got[i].Action == tc.want[i].action && (tc.want[i].key == nil) == (got[i].ApiKeyId == nil) &&
					(tc.want[i].key == nil || *tc.want[i].key == *got[i].ApiKeyId)
			}
			if !ok {
				var want []auditRow
				for _, w := range tc.want {
					want = append(want, auditRow{Action: w.action, ApiKeyId: w.key})
				}
				t.Errorf("got [%s], want [%s]", rowsString(got), rowsString(want))
			}
		})
	}

	t.Run("rotation and revoke-all details", func(t *testing.T) {
		var out struct{ ApiKeyAuditLog struct{ Nodes []auditRow } }
		e.must(owner, `{apiKeyAuditLog{nodes{action apiKeyId newApiKeyId revokedCount actorId impersonatorId createdAt}}}`, nil, &out)
		byAction := map[string]auditRow{}
		for _, n := range out.ApiKeyAuditLog.Nodes {
			byAction[n.Action] = n
			if n.ImpersonatorId != nil {
				t.Errorf("%s by the owner has impersonatorId %s", n.Action, *n.ImpersonatorId)
			}
		}
		if r := byAction["ROTATED"]; r.NewApiKeyId == nil || *r.NewApiKeyId != k2 || !r.CreatedAt.Equal(t1) {
			t.Errorf("ROTATED row %+v, want newApiKeyId %s at %v", r, k2, t1)
		}
		if r := byAction["REVOKED_ALL"]; r.RevokedCount == nil || *r.RevokedCount != 1 || !r.CreatedAt.Equal(t3) {
			t.Errorf("REVOKED_ALL row %+v, want revokedCount 1 (the rotated-in key) at %v", r, t3)
		}
	})

	t.Run("auditEvents since and until", func(t *testing.T) {
		const eq = `query($since:Time,$until:Time){auditEvents(since:$since,until:$until){nodes{action}}}`
		for _, tc := range []struct {
			vars map[string]any
			want string
		}{
			{map[string]any{"since": ts(t2)}, "api_key.revoked_all,api_key.revoked,api_key.created"},
			{map[string]any{"until": ts(t1)}, "api_key.created"},
			{map[string]any{"since": ts(t1), "until": ts(t2)}, "api_key.rotated"},
		} {
			var out struct {
				AuditEvents struct{ Nodes []struct{ Action string } }
			}
			e.must(owner, eq, tc.vars, &out)
			var got []string
			for _, n := range out.AuditEvents.Nodes {
				if strings.HasPrefix(n.Action, "api_key.") { // not session.login and the like
					got = append(got, n.Action)
				}
			}
			if strings.Join(got, ",") != tc.want {
				t.Errorf("%v: %v, want %s", tc.vars, got, tc.want)
			}
		}
	})

	t.Run("bad filters", func(t *testing.T) {
		for _, vars := range []map[string]any{
			{"since": ts(t1), "until": ts(t1)},
			{"since": ts(t2), "until": ts(t1)},
		} {
			if r := e.do(owner, q, vars); r.Code() != "BAD_USER_INPUT" {
				t.Errorf("apiKeyAuditLog %v: %q, want BAD_USER_INPUT", vars, r.Code())
			}
			if r := e.do(owner, `query($since:Time,$until:Time){auditEvents(since:$since,until:$until){nodes{id}}}`, vars); r.Code() != "BAD_USER_INPUT" {
				t.Errorf("auditEvents %v: %q, want BAD_USER_INPUT", vars, r.Code())
			}
		}
		if r := e.do(owner, `{apiKeyAuditLog(action:DELETED){nodes{id}}}`, nil); r.Status != 200 && r.Status != 422 || len(r.Errors) == 0 {
			t.Errorf("unknown action: HTTP %d %+v", r.Status, r.Errors)
		}
	})
}

// docs/design.md#audit: changes made while impersonating name the platform admin as
// actor and impersonator; a platform admin reads any workspace's key audit
// log by workspaceId, an owner of another workspace gets NOT_FOUND.
func TestAuditAcrossWorkspaces(t *testing.T) {
	t.Parallel()
	e, admin := newAdminEnv(t)
	var me struct{ Me struct{ ID string } }
	e.must(admin, `{me{id}}`, nil, &me)
	ws := e.createWorkspace(admin, "Shop", "CLOUD_PRO")
	imp := cred{Bearer: e.impersonate(admin, ws)}
	k := e.createKey(imp, "shop-key")

	const fields = `nodes{workspaceId action apiKeyId actorId actorEmail impersonatorId}`
	type entry struct {
		WorkspaceId, Action, ApiKeyId, ActorId, ActorEmail string
		ImpersonatorId                                     *string
	}
	var out struct {
		ApiKeyAuditLog struct{ Nodes []entry }
		AuditEvents    struct {
			Nodes []struct {
				WorkspaceId, ActorId string
				ImpersonatorId       *string
			}
		}
	}
	e.must(imp, `{apiKeyAuditLog{`+fields+`} auditEvents(action:"api_key.created"){nodes{workspaceId actorId impersonatorId}}}`, nil, &out)
	if len(out.ApiKeyAuditLog.Nodes) != 1 || len(out.AuditEvents.Nodes) != 1 {
		t.Fatalf("audit of Shop: %+v", out)
	}
	n, ev := out.ApiKeyAuditLog.Nodes[0], out.AuditEvents.Nodes[0]
	if n.WorkspaceId != ws || n.ApiKeyId != k.ID || n.ActorId != me.Me.ID || n.ActorEmail != adminEmail || n.ImpersonatorId == nil || *n.ImpersonatorId != me.Me.ID {
		t.Errorf("key audit entry of an impersonated create: %+v", n)
	}
	if ev.WorkspaceId != ws || ev.ActorId != me.Me.ID || ev.ImpersonatorId == nil || *ev.ImpersonatorId != me.Me.ID {
		t.Errorf("audit event of an impersonated create: %+v", ev)
	}

	// The platform admin, in its own workspace (Default), reads Shop's log.
	var byID struct{ ApiKeyAuditLog struct{ Nodes []entry } }
	e.must(admin, `query($w:ID!){apiKeyAuditLog(workspaceId:$w){`+fields+`}}`, map[string]any{"w": ws}, &byID)
	if len(byID.ApiKeyAuditLog.Nodes) != 1 || byID.ApiKeyAuditLog.Nodes[0].ApiKeyId != k.ID {
		t.Errorf("platform admin reading Shop's log by workspaceId: %+v", byID)
	}
	// A workspace that does not exist is NOT_FOUND, as for impersonate and
	// setWorkspacePlan: an empty log would read as "no activity" to support
	// staff who mistyped the id.
	for _, w := range []string{"00000000-0000-4000-8000-000000000000", "not-a-uuid"} {
		if r := e.do(admin, `query($w:ID!){apiKeyAuditLog(workspaceId:$w){nodes{id}}}`, map[string]any{"w": w}); r.Code() != "NOT_FOUND" {
			t.Errorf("platform admin reading the log of unknown workspace %s: %q %s, want NOT_FOUND", w, r.Code(), r.Data)
		}
		if r := e.do(admin, `mutation($w:ID!){impersonate(workspaceId:$w){accessToken}}`, map[string]any{"w": w}); r.Code() != "NOT_FOUND" {
			t.Errorf("impersonating unknown workspace %s: %q", w, r.Code())
		}
	}
	// Its own workspace's log does not show Shop's rows.
	var own struct{ ApiKeyAuditLog struct{ Nodes []entry } }
	e.must(admin, `{apiKeyAuditLog{`+fields+`}}`, nil, &own)
	for _, n := range own.ApiKeyAuditLog.Nodes {
		if n.WorkspaceId != e.adminWS {
			t.Errorf("Default's log holds a row of %s", n.WorkspaceId)
		}
	}

	// An owner who is not a platform admin gets NOT_FOUND for Shop, and for
	// a workspace that does not exist.
	ownerID := e.createAccount(admin, "owner@default.example", "owner-password-1", false)
	e.setMember(admin, e.adminWS, ownerID, "OWNER")
	owner := cred{Bearer: e.login("owner@default.example", "owner-password-1", "")}
	for _, w := range []string{ws, "00000000-0000-4000-8000-000000000000", "not-a-uuid"} {
		if r := e.do(owner, `query($w:ID!){apiKeyAuditLog(workspaceId:$w){nodes{id}}}`, map[string]any{"w": w}); r.Code() != "NOT_FOUND" {
			t.Errorf("owner reading workspace %s's log: %q %+v, want NOT_FOUND", w, r.Code(), r.Errors)
		}
	}
	// Its own workspace by id is fine.
	if r := e.do(owner, `query($w:ID!){apiKeyAuditLog(workspaceId:$w){nodes{id}}}`, map[string]any{"w": e.adminWS}); r.Code() != "" {
		t.Errorf("owner reading its own log by id: %+v", r.Errors)
	}
}
