package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/btk-project/btk/internal/btk"
)

// failingStore is the real SQLite store whose AddAuditEvent fails while
// fail is set: a change whose event is not written must not happen either.
type failingStore struct {
	btk.Store
	fail *atomic.Bool
}

type failingTx struct {
	btk.Tx
	fail *atomic.Bool
}

var errInjected = errors.New("injected audit failure")

func (t failingTx) AddAuditEvent(ctx context.Context, ev *btk.AuditEvent) error {
	if t.fail.Load() {
		return errInjected
	}
	return t.Tx.AddAuditEvent(ctx, ev)
}

func (s failingStore) Write(ctx context.Context, fn func(btk.Tx) error) error {
	return s.Store.Write(ctx, func(tx btk.Tx) error { return fn(failingTx{tx, s.fail}) })
}

// newEventsEnv is newEnv on a failingStore, and the switch that makes it
// fail.
func newEventsEnv(t *testing.T) (*env, *atomic.Bool) {
	t.Helper()
	fail := &atomic.Bool{}
	e := newWrappedEnv(t, func(db btk.Store) btk.Store { return failingStore{db, fail} })
	return e, fail
}

// events reads every audit_events row straight from the database: the
// server-wide chain, then each workspace's (oldest workspace first), each
// chain oldest first.
func events(t *testing.T, e *env) []*btk.AuditEvent {
	t.Helper()
	var all []*btk.AuditEvent
	err := e.db.Read(context.Background(), func(tx btk.Tx) error {
		filters := []btk.AuditFilter{{NoWorkspace: true}}
		wss, err := tx.Workspaces(context.Background())
		if err != nil {
			return err
		}
		for _, w := range wss {
			filters = append(filters, btk.AuditFilter{WorkspaceID: w.ID})
		}
		for _, f := range filters {
			f.First = 500
			evs, _, err := tx.AuditEvents(context.Background(), f)
			if err != nil {
				return err
			}
			slices.Reverse(evs) // newest first as read
			all = append(all, evs...)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return all
}

func countAction(evs []*btk.AuditEvent, action string) int {
	n := 0
	for _, ev := range evs {
		if ev.Action == action {
			n++
		}
	}
	return n
}

// docs/design.md#audit: each audited action writes its audit_events row, attributed
// to the actor (and the impersonator), in the transaction of the change: when
// the row cannot be written, the change does not happen; a failed login or
// elevation writes nothing.
func TestAuditEventsInTheChangesTransaction(t *testing.T) {
	t.Parallel()
	e, fail := newEventsEnv(t)
	admin := e.admin()
	var me struct{ Me struct{ ID string } }
	e.must(admin, `{me{id}}`, nil, &me)
	adminID := me.Me.ID

	// Each case runs the change with the audit write failing (the change must
	// not be visible), then succeeding (one row, attributed).
	type check func(t *testing.T) bool // reports whether the change is visible
	memberID := e.createAccount(admin, "member@example.com", "member-password", false)
	leaverID := e.createAccount(admin, "leaver@example.com", "leaver-password", false)
	disabled := func(t *testing.T) bool {
		var acct *btk.Account
		err := e.db.Read(context.Background(), func(tx btk.Tx) (err error) {
			acct, err = tx.Account(context.Background(), leaverID)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return acct.DisabledAt != nil
	}
	const newWorkspace = "the workspace made" // workspace.created is the first row of its own chain
	cases := []struct {
		action    string
		workspace string // "" for a server-wide event
		run       func() response
		changed   check
		target    string
	}{
		{
			action: btk.EventSessionLogin, workspace: e.adminWS,
			run: func() response {
				return e.do(cred{}, `mutation{login(email:"admin@example.com",password:"correct-horse-battery"){accessToken}}`, nil)
			},
		},
		{
			action: btk.EventSessionElevated, workspace: e.adminWS,
			run: func() response {
				return e.do(admin, `mutation{elevate(password:"correct-horse-battery"){token}}`, nil)
			},
		},
		{
			action: btk.EventMembershipChanged, workspace: e.adminWS, target: memberID,
			run: func() response {
				return e.do(admin, `mutation($w:ID!,$a:ID!){setMembership(workspaceId:$w,accountId:$a,role:ADMIN)}`,
					map[string]any{"w": e.adminWS, "a": memberID})
			},
			changed: func(t *testing.T) bool {
				var role btk.Role
				e.db.Read(context.Background(), func(tx btk.Tx) error {
					role, _ = tx.Role(context.Background(), e.adminWS, memberID)
					return nil
				})
				return role == btk.RoleAdmin
			},
		},
		{
			action: btk.EventWorkspacePlanChanged, workspace: e.adminWS, target: e.adminWS,
			run: func() response {
				return e.do(admin, `mutation($w:ID!){setWorkspacePlan(workspaceId:$w,plan:CLOUD_PRO){plan}}`, map[string]any{"w": e.adminWS})
			},
			changed: func(t *testing.T) bool { return e.workspace(t).Plan == btk.PlanCloudPro },
		},
		{
			action: btk.EventWorkspaceLimitsChanged, workspace: e.adminWS, target: e.adminWS,
			run: func() response {
				return e.do(admin, `mutation($w:ID!){setWorkspaceRateLimits(workspaceId:$w,perMinute:7){id}}`, map[string]any{"w": e.adminWS})
			},
			changed: func(t *testing.T) bool { return e.workspace(t).RateLimitPerMinute != nil },
		},
		{
			action: btk.EventAccountCreated,
			run: func() response {
				return e.do(admin, `mutation{createAccount(input:{email:"new@example.com",password:"new-password-1"}){id}}`, nil)
			},
			changed: func(t *testing.T) bool {
				err := e.db.Read(context.Background(), func(tx btk.Tx) error {
					_, err := tx.AccountByEmail(context.Background(), "new@example.com")
					return err
				})
				return err == nil
			},
		},
		{
			action: btk.EventWorkspaceCreated, workspace: newWorkspace,
			run: func() response {
				return e.do(admin, `mutation{createWorkspace(input:{name:"Acme",plan:CLOUD_PRO}){id}}`, nil)
			},
			changed: func(t *testing.T) bool {
				var wss []*btk.Workspace
				e.db.Read(context.Background(), func(tx btk.Tx) (err error) {
					wss, err = tx.Workspaces(context.Background())
					return err
				})
				return slices.ContainsFunc(wss, func(w *btk.Workspace) bool { return w.Name == "Acme" })
			},
		},
		{
			action: btk.EventWorkspaceKeyPolicyChanged, workspace: e.adminWS, target: e.adminWS,
			run: func() response {
				return e.do(admin, `mutation($w:ID!){setWorkspaceKeyPolicy(workspaceId:$w,maxLifetimeDays:90){id}}`, map[string]any{"w": e.adminWS})
			},
			changed: func(t *testing.T) bool { return e.workspace(t).KeyPolicy.MaxLifetimeDays != nil },
		},
		{
			action: btk.EventAccountDisabled, target: leaverID,
			run: func() response {
				return e.do(admin, `mutation($a:ID!){disableAccount(id:$a){id}}`, map[string]any{"a": leaverID})
			},
			changed: disabled,
		},
		{
			action: btk.EventAccountEnabled, target: leaverID,
			run: func() response {
				return e.do(admin, `mutation($a:ID!){enableAccount(id:$a){id}}`, map[string]any{"a": leaverID})
			},
			changed: func(t *testing.T) bool { return !disabled(t) },
		},
		{
			action: btk.EventSessionImpersonated, workspace: e.adminWS, target: "",
			run: func() response {
				return e.do(admin, `mutation($w:ID!){impersonate(workspaceId:$w){accessToken}}`, map[string]any{"w": e.adminWS})
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.action, func(t *testing.T) {
			seen := map[string]bool{}
			for _, ev := range events(t, e) {
				seen[ev.ID] = true
			}
			before := countAction(events(t, e), tc.action)
			fail.Store(true)
			r := tc.run()
			fail.Store(false)
			// The code is the error presenter's business (internal/graphql); here
			// it matters only that the operation failed.
			if len(r.Errors) == 0 {
				t.Fatalf("with the audit write failing: no error")
			}
			if tc.changed != nil && tc.changed(t) {
				t.Fatalf("the change happened although its audit event was not written")
			}
			if got := countAction(events(t, e), tc.action); got != before {
				t.Fatalf("%d %s events after a failed change, want %d", got, tc.action, before)
			}

			if r := tc.run(); len(r.Errors) != 0 {
				t.Fatalf("%+v", r.Errors)
			}
			if tc.changed != nil && !tc.changed(t) {
				t.Fatalf("the change did not happen")
			}
			evs := events(t, e)
			if got := countAction(evs, tc.action); got != before+1 {
				t.Fatalf("%d %s events, want %d", got, tc.action, before+1)
			}
			var ev *btk.AuditEvent
			for _, x := range evs {
				if x.Action == tc.action && !seen[x.ID] {
					ev = x // the one this change wrote
				}
			}
			if tc.workspace == newWorkspace {
				if ev.WorkspaceID == "" || ev.WorkspaceID == e.adminWS || ev.TargetID != ev.WorkspaceID {
					t.Errorf("event %+v: want the new workspace's chain, and it as the target", ev)
				}
				tc.workspace = ev.WorkspaceID
			}
			if ev.WorkspaceID != tc.workspace || ev.ActorID != adminID || ev.ActorEmail != adminEmail {
				t.Errorf("event %+v: want workspace %q, actor %s", ev, tc.workspace, adminID)
			}
			if tc.target != "" && ev.TargetID != tc.target {
				t.Errorf("event target %s, want %s", ev.TargetID, tc.target)
			}
			wantImp := ""
			if tc.action == btk.EventSessionImpersonated {
				wantImp = adminID
			}
			if ev.ImpersonatorID != wantImp {
				t.Errorf("impersonator %q, want %q", ev.ImpersonatorID, wantImp)
			}
			var meta map[string]any
			if err := json.Unmarshal([]byte(ev.Metadata), &meta); err != nil {
				t.Errorf("metadata %q: %v", ev.Metadata, err)
			}
		})
	}

	t.Run("a failed login or elevation writes nothing", func(t *testing.T) {
		before := len(events(t, e))
		r := e.do(cred{}, `mutation{login(email:"admin@example.com",password:"wrong-password"){accessToken}}`, nil)
		if r.Code() != "UNAUTHENTICATED" {
			t.Fatalf("wrong password: %q", r.Code())
		}
		r = e.do(cred{}, `mutation{login(email:"nobody@example.com",password:"wrong-password"){accessToken}}`, nil)
		if r.Code() != "UNAUTHENTICATED" {
			t.Fatalf("unknown email: %q", r.Code())
		}
		r = e.do(admin, `mutation{elevate(password:"wrong-password"){token}}`, nil)
		if r.Code() != "UNAUTHENTICATED" {
			t.Fatalf("wrong elevation password: %q", r.Code())
		}
		if after := len(events(t, e)); after != before {
			t.Fatalf("%d events after failed logins, want %d", after, before)
		}
	})

	t.Run("changes made while impersonating name the impersonator", func(t *testing.T) {
		imp := cred{Bearer: e.impersonate(admin, e.adminWS)}
		r := e.do(imp, `mutation($w:ID!){setWorkspaceRateLimits(workspaceId:$w){id}}`, map[string]any{"w": e.adminWS})
		if len(r.Errors) != 0 {
			t.Fatal(r.Errors)
		}
		var out struct {
			AuditEvents struct {
				Nodes []struct{ Action, ActorEmail, ImpersonatorID, ImpersonatorEmail string }
			}
		}
		e.must(imp, `{auditEvents(first:1,action:"workspace.limits_changed"){nodes{action actorEmail impersonatorId impersonatorEmail}}}`, nil, &out)
		if n := out.AuditEvents.Nodes; len(n) != 1 || n[0].ImpersonatorID != adminID || n[0].ImpersonatorEmail != adminEmail {
			t.Fatalf("%+v", out)
		}
	})

	t.Run("server-wide events are a platform admin's to read", func(t *testing.T) {
		var out struct {
			AuditEvents struct {
				Nodes []struct{ Action, WorkspaceID string }
			}
		}
		e.must(admin, `{auditEvents(serverWide:true){nodes{action workspaceId}}}`, nil, &out)
		n := out.AuditEvents.Nodes
		if !slices.ContainsFunc(n, func(ev struct{ Action, WorkspaceID string }) bool { return ev.Action == btk.EventAccountCreated }) {
			t.Fatalf("no account.created: %+v", out)
		}
		for _, ev := range n {
			if ev.WorkspaceID != "" {
				t.Fatalf("%+v", out)
			}
		}
		member := cred{Bearer: e.login("member@example.com", "member-password", "")}
		if r := e.do(member, `{auditEvents(serverWide:true){nodes{action}}}`, nil); r.Code() != "FORBIDDEN" {
			t.Fatalf("a member reading server-wide events: %q", r.Code())
		}
	})
}

// docs/design.md#bootstrap: the first start's account, workspace and
// membership are in the audit chains like a platform admin's, by "system":
// the server-wide chain starts with account.created, Default's with
// workspace.created and membership.changed, and both chains verify.
func TestBootstrapIsAudited(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	evs := events(t, e) // before the login's own event
	admin := e.admin()
	var me struct{ Me struct{ ID string } }
	e.must(admin, `{me{id}}`, nil, &me)
	var got []string
	for _, ev := range evs {
		if ev.ActorEmail != btk.SystemActorEmail || ev.ActorID != "" || ev.ImpersonatorID != "" {
			t.Errorf("%s by %q (%q), want %q", ev.Action, ev.ActorEmail, ev.ActorID, btk.SystemActorEmail)
		}
		got = append(got, ev.WorkspaceID+" "+ev.Action+" "+ev.TargetID)
	}
	want := []string{
		" " + btk.EventAccountCreated + " " + me.Me.ID,
		e.adminWS + " " + btk.EventWorkspaceCreated + " " + e.adminWS,
		e.adminWS + " " + btk.EventMembershipChanged + " " + me.Me.ID,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("bootstrap events:\n%q\nwant\n%q", got, want)
	}
	for _, args := range []string{`serverWide:true`, `workspaceId:"` + e.adminWS + `"`} {
		var out struct {
			VerifyAuditChain struct {
				Intact bool
				Count  int
			}
		}
		e.must(admin, `{verifyAuditChain(`+args+`){intact count}}`, nil, &out)
		if v := out.VerifyAuditChain; !v.Intact || v.Count == 0 {
			t.Errorf("%s: %+v", args, v)
		}
	}
}

func (e *env) workspace(t *testing.T) *btk.Workspace {
	var w *btk.Workspace
	err := e.db.Read(context.Background(), func(tx btk.Tx) (err error) {
		w, err = tx.Workspace(context.Background(), e.adminWS)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// Login with several memberships and no workspace named lists them in the
// error (after the password check); a workspace name chooses among them.
func TestLoginChoosesAmongMemberships(t *testing.T) {
	t.Parallel()
	e, admin := newAdminEnv(t)
	acme := e.createWorkspace(admin, "Acme", "CLOUD_PRO")
	id := e.createAccount(admin, "two@example.com", "two-password-1", false)
	e.setMember(admin, e.adminWS, id, "ADMIN")
	e.setMember(admin, acme, id, "OWNER")

	r := e.do(cred{}, `mutation{login(email:"two@example.com",password:"two-password-1"){accessToken}}`, nil)
	if r.Code() != "BAD_USER_INPUT" || len(r.Errors) != 1 {
		t.Fatalf("%+v", r.Errors)
	}
	ws, _ := json.Marshal(r.Errors[0].Extensions["workspaces"])
	if !strings.Contains(string(ws), `"workspaceName":"Acme"`) || !strings.Contains(string(ws), `"role":"OWNER"`) {
		t.Fatalf("extensions.workspaces = %s", ws)
	}
	r = e.do(cred{}, `mutation{login(email:"two@example.com",password:"wrong-password"){accessToken}}`, nil)
	if r.Code() != "UNAUTHENTICATED" || r.Errors[0].Extensions["workspaces"] != nil {
		t.Fatalf("a wrong password must not tell the workspaces: %+v", r.Errors)
	}
	var out struct {
		Login struct {
			Workspace struct{ Name string }
			Account   struct {
				Role        string
				Memberships []struct{ WorkspaceName, Role string }
			}
		}
	}
	e.must(cred{}, `mutation{login(email:"two@example.com",password:"two-password-1",workspaceName:"acme"){workspace{name} account{role memberships{workspaceName role}}}}`, nil, &out)
	if out.Login.Workspace.Name != "Acme" || out.Login.Account.Role != "OWNER" || len(out.Login.Account.Memberships) != 2 {
		t.Fatalf("%+v", out)
	}
	if r := e.do(cred{}, `mutation{login(email:"two@example.com",password:"two-password-1",workspaceName:"Nope"){accessToken}}`, nil); r.Code() != "NOT_FOUND" {
		t.Fatalf("unknown workspace name: %q", r.Code())
	}
}

// apiKeyAuditLog(apiKeyId) follows the rotation chain both ways.
func TestKeyHistoryAcrossRotations(t *testing.T) {
	t.Parallel()
	e, admin := newAdminEnv(t)
	k1 := e.createKey(admin, "payments")
	el := e.elevated(admin, adminPassword)
	var rot struct {
		RotateApiKey struct{ ApiKey struct{ ID string } }
	}
	e.must(el, `mutation($id:ID!){rotateApiKey(id:$id,input:{name:"payments-2"}){apiKey{id}}}`, map[string]any{"id": k1.ID}, &rot)
	k2 := rot.RotateApiKey.ApiKey.ID
	e.must(el, `mutation($id:ID!){rotateApiKey(id:$id){apiKey{id}}}`, map[string]any{"id": k2}, &rot)
	k3 := rot.RotateApiKey.ApiKey.ID
	var revoked any
	e.must(admin, `mutation($id:ID!){revokeApiKey(id:$id){id}}`, map[string]any{"id": k3}, &revoked)
	e.createKey(admin, "unrelated")

	for _, id := range []string{k1.ID, k2, k3} {
		var out struct {
			ApiKeyAuditLog struct {
				Nodes         []struct{ Action, ApiKeyName string }
				RotationChain struct {
					Keys                     int
					OldestKeyId, NewestKeyId string
					OlderCut, NewerCut       bool
				}
			}
		}
		e.must(admin, `query($id:ID!){apiKeyAuditLog(apiKeyId:$id){nodes{action apiKeyName}
			rotationChain{keys oldestKeyId newestKeyId olderCut newerCut}}}`, map[string]any{"id": id}, &out)
		if c := out.ApiKeyAuditLog.RotationChain; c.Keys != 3 || c.OldestKeyId != k1.ID || c.NewestKeyId != k3 || c.OlderCut || c.NewerCut {
			t.Errorf("chain by %s: %+v; want the 3 keys, whole", id, c)
		}
		var got []string
		for _, n := range out.ApiKeyAuditLog.Nodes {
			got = append(got, n.Action+":"+n.ApiKeyName)
		}
		want := "REVOKED:payments-2,ROTATED:payments-2,ROTATED:payments,CREATED:payments"
		if strings.Join(got, ",") != want {
			t.Errorf("history by %s: %v, want %s", id, got, want)
		}
	}
}
