package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"

	"github.com/btk-project/btk/internal/btk"
)

// The callers of the role × operation × workspace matrix. Workspace A is the
// one acted on; B is another workspace.
const (
	cAnonymous     = iota
	cAPIKey        // an API key of A
	cMember        // MEMBER of A
	cAdmin         // ADMIN of A
	cOwner         // OWNER of A
	cPlatformAdmin // a platform admin with no membership, not impersonating: its session has no workspace
	cImpersonating // that platform admin impersonating A
	cOtherOwner    // OWNER of B
	// a platform admin that is an ADMIN of A, not impersonating: its role in
	// A decides the key operations; being a platform admin is not owner tier
	cAdminPlatformAdmin
	nCallers
)

var callerNames = [nCallers]string{"anonymous", "apiKey", "MEMBER", "ADMIN", "OWNER", "platformAdmin", "impersonating", "otherOwner", "platformAdminAsADMIN"}

// Expected outcomes: "" is success.
const (
	wOK  = ""
	wU   = "UNAUTHENTICATED"
	wF   = "FORBIDDEN"
	wNF  = "NOT_FOUND"
	mpwd = "matrix-password-1"
)

type matrix struct {
	e        *env
	root     cred // bootstrap admin: platform admin, OWNER of Default (neither A nor B)
	wsA, wsB string
	users    [nCallers]cred // sessions of the user callers, each with a valid elevation
	emails   [nCallers]string
	ids      [nCallers]string // account ids
	ownerA   cred             // observers
	ownerB   cred
	seq      int
	spareID  string // a MEMBER of A whose role setMembership changes (operator matrix only)
	spare    cred
	targetID string // a MEMBER of A that disableAccount and enableAccount act on (operator matrix only)
}

func newMatrix(t *testing.T) *matrix {
	e, root := newAdminEnv(t)
	m := &matrix{e: e, root: root}
	m.wsA = e.createWorkspace(root, "A", "CLOUD_PRO")
	m.wsB = e.createWorkspace(root, "B", "CLOUD_PRO")
	for _, a := range []struct {
		caller   int
		email    string
		pa       bool
		ws, role string
	}{
		{cMember, "member@a.example", false, m.wsA, "MEMBER"},
		{cAdmin, "admin@a.example", false, m.wsA, "ADMIN"},
		{cOwner, "owner@a.example", false, m.wsA, "OWNER"},
		{cPlatformAdmin, "operator@example.com", true, "", ""},
		{cOtherOwner, "owner@b.example", false, m.wsB, "OWNER"},
		{cAdminPlatformAdmin, "operator-admin@a.example", true, m.wsA, "ADMIN"},
	} {
		m.ids[a.caller] = e.createAccount(root, a.email, mpwd, a.pa)
		if a.ws != "" {
			e.setMember(root, a.ws, m.ids[a.caller], a.role)
		}
		m.emails[a.caller] = a.email
		m.users[a.caller] = e.elevated(cred{Bearer: e.login(a.email, mpwd, "")}, mpwd)
	}
	var me struct{ Me struct{ Role *string } }
	e.must(m.users[cPlatformAdmin], `{me{role}}`, nil, &me)
	if me.Me.Role != nil {
		t.Fatalf("the platform admin's session has role %v; want a session without workspace", *me.Me.Role)
	}
	m.ids[cImpersonating], m.emails[cImpersonating] = m.ids[cPlatformAdmin], m.emails[cPlatformAdmin]
	m.users[cImpersonating] = e.elevated(cred{Bearer: e.impersonate(m.users[cPlatformAdmin], m.wsA)}, mpwd)
	m.ownerA = cred{Bearer: m.users[cOwner].Bearer}
	m.ownerB = cred{Bearer: m.users[cOtherOwner].Bearer}
	return m
}

func (m *matrix) name(prefix string) string {
	m.seq++
	return fmt.Sprintf("%s-%d", prefix, m.seq)
}

// actedWS is the workspace a caller's own-workspace operation acts in.
func (m *matrix) actedWS(who int) string {
	if who == cOtherOwner {
		return m.wsB
	}
	return m.wsA
}

// snapshot is the newest key and audit rows of both workspaces (lists are
// newest first): an operation that writes nothing leaves it unchanged, one
// that writes a row puts exactly one row in front of it. It is read from the
// store in one transaction, which keeps the matrix fast.
type snapshot struct{ keysA, keysB, auditA, auditB, eventsA, eventsB []string }

func (m *matrix) snapshot() snapshot {
	ctx := context.Background()
	var s snapshot
	err := m.e.db.Read(ctx, func(tx btk.Tx) error {
		for _, w := range []struct {
			id                  string
			keys, audit, events *[]string
		}{{m.wsA, &s.keysA, &s.auditA, &s.eventsA}, {m.wsB, &s.keysB, &s.auditB, &s.eventsB}} {
			page := btk.Page{First: 2}
			keys, _, err := tx.APIKeys(ctx, btk.KeyFilter{WorkspaceID: w.id, IncludeRevoked: true, Page: page})
			if err != nil {
				return err
			}
			for _, k := range keys {
				*w.keys = append(*w.keys, k.ID)
			}
			entries, _, err := tx.AuditEntries(ctx, btk.AuditFilter{WorkspaceID: w.id, Page: page})
			if err != nil {
				return err
			}
			for _, x := range entries {
				*w.audit = append(*w.audit, x.ID)
			}
			events, _, err := tx.AuditEvents(ctx, btk.AuditFilter{WorkspaceID: w.id, Page: page})
			if err != nil {
				return err
			}
			for _, x := range events {
				*w.events = append(*w.events, x.ID)
			}
		}
		return nil
	})
	if err != nil {
		m.e.t.Fatal(err)
	}
	return s
}

// compareRows checks that after has exactly added rows in front of before.
func compareRows(t *testing.T, what string, before, after []string, added int) {
	t.Helper()
	if len(before) == 0 || len(after) == 0 {
		t.Fatalf("%s: the setup should have written rows (before %v, after %v)", what, before, after)
	}
	if added == 0 && after[0] != before[0] || added == 1 && (after[0] == before[0] || len(after) < 2 || after[1] != before[0]) {
		t.Errorf("%s: newest rows %v, before %v: want %d new row(s)", what, after, before, added)
	}
}

// matrixCase is the state one cell of the matrix starts from.
type matrixCase struct {
	who       int
	target    newKey // an active key of A the operation names
	keyB      newKey // an active key of B
	callerKey newKey // the key of the apiKey caller
	caller    cred
}

// keyWorks fails the test unless the key's probe answers want (200 or 401).
func (m *matrix) keyWorks(t *testing.T, what string, k newKey, want bool) {
	t.Helper()
	r := m.e.do(cred{Key: k.Plaintext}, probe, nil)
	switch {
	case want && r.Status != http.StatusOK:
		t.Errorf("%s should still authenticate: HTTP %d %+v", what, r.Status, r.Errors)
	case !want && (r.Status != http.StatusUnauthorized || len(r.Errors) == 0 || r.Errors[0].Message != "API key is revoked or expired"):
		t.Errorf("%s should be rejected as revoked: HTTP %d %+v", what, r.Status, r.Errors)
	}
}

// tenantOf returns the workspace a key authenticates as.
func (m *matrix) tenantOf(t *testing.T, plaintext string) string {
	t.Helper()
	var out struct{ TenantInfo struct{ ID string } }
	m.e.do(cred{Key: plaintext}, probe, nil).decode(t, &out)
	return out.TenantInfo.ID
}

// doCell sends a cell's request and checks its answer: HTTP 200 with the
// code want, and no data unless the call succeeded.
func (m *matrix) doCell(t *testing.T, caller cred, query string, vars map[string]any, want string) response {
	t.Helper()
	r := m.e.do(caller, query, vars)
	if r.Code() != want || r.Status != http.StatusOK {
		t.Fatalf("HTTP %d code %q %+v; want HTTP 200 code %q", r.Status, r.Code(), r.Errors, want)
	}
	if want != wOK && !dataIsNull(r) {
		t.Errorf("a refused call returned data: %s", r.Data)
	}
	return r
}

// dataIsNull reports whether a response carries no data: null, or only null fields.
func dataIsNull(r response) bool {
	if len(r.Data) == 0 || string(r.Data) == "null" {
		return true
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(r.Data, &fields) != nil {
		return false
	}
	for _, v := range fields {
		if string(v) != "null" {
			return false
		}
	}
	return true
}

type keyOp struct {
	name     string
	query    string
	vars     func(m *matrix, c *matrixCase) map[string]any
	mutation bool // a success writes one pair of audit rows
	newKey   bool // a success adds a key
	want     [nCallers]string
	// check asserts the effect of the call (or its absence when it failed).
	check func(t *testing.T, m *matrix, c *matrixCase, r response)
}

func idVar(m *matrix, c *matrixCase) map[string]any { return map[string]any{"id": c.target.ID} }

var keyOps = []keyOp{
	{
		name:  "apiKeys",
		query: `{apiKeys(includeRevoked:true,first:500){nodes{id}}}`,
		//            anon key member admin owner PA  imp  otherOwner PA+ADMIN
		want: [nCallers]string{wU, wU, wF, wOK, wOK, wNF, wOK, wOK, wOK},
		check: func(t *testing.T, m *matrix, c *matrixCase, r response) {
			if r.Code() != wOK {
				return
			}
			var out struct {
				ApiKeys struct{ Nodes []struct{ ID string } }
			}
			r.decode(t, &out)
			var ids []string
			for _, n := range out.ApiKeys.Nodes {
				ids = append(ids, n.ID)
			}
			if c.who == cOtherOwner {
				if slices.Contains(ids, c.target.ID) || !slices.Contains(ids, c.keyB.ID) {
					t.Errorf("owner of B lists %v: must see B's key %s and not A's %s", ids, c.keyB.ID, c.target.ID)
				}
			} else if !slices.Contains(ids, c.target.ID) || slices.Contains(ids, c.keyB.ID) {
				t.Errorf("list %v: must hold A's key %s and not B's %s", ids, c.target.ID, c.keyB.ID)
			}
		},
	},
	{
		name:  "apiKey(id)",
		query: `query($id:ID!){apiKey(id:$id){id}}`,
		vars:  idVar,
		// apiKey is nullable: another workspace's key reads as null (no error).
		want: [nCallers]string{wU, wU, wF, wOK, wOK, wNF, wOK, wOK, wOK},
		check: func(t *testing.T, m *matrix, c *matrixCase, r response) {
			if r.Code() != wOK {
				return
			}
			var out struct{ ApiKey *struct{ ID string } }
			r.decode(t, &out)
			if c.who == cOtherOwner {
				if out.ApiKey != nil {
					t.Errorf("owner of B reads A's key: %+v", out.ApiKey)
				}
			} else if out.ApiKey == nil || out.ApiKey.ID != c.target.ID {
				t.Errorf("apiKey(%s) = %+v", c.target.ID, out.ApiKey)
			}
		},
	},
	{
		name:     "createApiKey",
		query:    `mutation($n:String!){createApiKey(input:{name:$n}){plaintextKey apiKey{id}}}`,
		vars:     func(m *matrix, c *matrixCase) map[string]any { return map[string]any{"n": m.name("created")} },
		mutation: true, newKey: true,
		// The owner of B creates in B: createApiKey has no workspace argument.
		want: [nCallers]string{wU, wU, wF, wF, wOK, wNF, wOK, wOK, wF},
		check: func(t *testing.T, m *matrix, c *matrixCase, r response) {
			if r.Code() != wOK {
				return
			}
			var out struct{ CreateApiKey struct{ PlaintextKey string } }
			r.decode(t, &out)
			if ws := m.tenantOf(t, out.CreateApiKey.PlaintextKey); ws != m.actedWS(c.who) {
				t.Errorf("the new key belongs to %s, want %s", ws, m.actedWS(c.who))
			}
		},
	},
	{
		name:     "rotateApiKey",
		query:    `mutation($id:ID!){rotateApiKey(id:$id){plaintextKey apiKey{id}}}`,
		vars:     idVar,
		mutation: true, newKey: true,
		want: [nCallers]string{wU, wU, wF, wF, wOK, wNF, wOK, wNF, wF},
		check: func(t *testing.T, m *matrix, c *matrixCase, r response) {
			if r.Code() != wOK {
				m.keyWorks(t, "the key a refused rotation named", c.target, true)
				return
			}
			var out struct{ RotateApiKey struct{ PlaintextKey string } }
			r.decode(t, &out)
			m.keyWorks(t, "the rotated key", c.target, false)
			if ws := m.tenantOf(t, out.RotateApiKey.PlaintextKey); ws != m.wsA {
				t.Errorf("the replacement belongs to %s, want A %s", ws, m.wsA)
			}
		},
	},
	{
		name:     "revokeApiKey",
		query:    `mutation($id:ID!){revokeApiKey(id:$id){id status}}`,
		vars:     idVar,
		mutation: true,
		want:     [nCallers]string{wU, wU, wF, wF, wOK, wNF, wOK, wNF, wF},
		check: func(t *testing.T, m *matrix, c *matrixCase, r response) {
			m.keyWorks(t, "A's key", c.target, r.Code() != wOK)
		},
	},
	{
		name:     "revokeAllApiKeys",
		query:    `mutation{revokeAllApiKeys{revokedCount}}`,
		mutation: true,
		// The owner of B revokes B's keys, never A's.
		want: [nCallers]string{wU, wU, wF, wF, wOK, wNF, wOK, wOK, wF},
		check: func(t *testing.T, m *matrix, c *matrixCase, r response) {
			success := r.Code() == wOK
			m.keyWorks(t, "A's key", c.target, !success || c.who == cOtherOwner)
			m.keyWorks(t, "B's key", c.keyB, !success || c.who != cOtherOwner)
		},
	},
	{
		name:  "apiKeyAuditLog",
		query: `{apiKeyAuditLog(first:500){nodes{workspaceId}}}`,
		want:  [nCallers]string{wU, wU, wF, wF, wOK, wNF, wOK, wOK, wF},
		check: checkAuditWorkspace("ApiKeyAuditLog"),
	},
	{
		name:  "apiKeyAuditLog(workspaceId:A)",
		query: `query($ws:ID!){apiKeyAuditLog(workspaceId:$ws,first:500){nodes{workspaceId}}}`,
		vars:  func(m *matrix, c *matrixCase) map[string]any { return map[string]any{"ws": m.wsA} },
		// A platform admin reads any workspace's log; the owner of B gets NOT_FOUND.
		want: [nCallers]string{wU, wU, wF, wF, wOK, wOK, wOK, wNF, wOK},
		check: func(t *testing.T, m *matrix, c *matrixCase, r response) {
			if r.Code() == wOK {
				checkAuditNodes(t, r, "ApiKeyAuditLog", m.wsA)
			}
		},
	},
	{
		name:  "auditEvents",
		query: `{auditEvents(first:500){nodes{workspaceId}}}`,
		want:  [nCallers]string{wU, wU, wF, wF, wOK, wNF, wOK, wOK, wF},
		check: checkAuditWorkspace("AuditEvents"),
	},
	{
		name:  "tenantInfo",
		query: `{tenantInfo{id}}`,
		want:  [nCallers]string{wU, wOK, wOK, wOK, wOK, wNF, wOK, wOK, wOK},
		check: func(t *testing.T, m *matrix, c *matrixCase, r response) {
			if r.Code() != wOK {
				return
			}
			var out struct{ TenantInfo struct{ ID string } }
			r.decode(t, &out)
			if out.TenantInfo.ID != m.actedWS(c.who) {
				t.Errorf("tenantInfo %s, want %s", out.TenantInfo.ID, m.actedWS(c.who))
			}
		},
	},
	{
		name:  "me",
		query: `{me{email}}`,
		want:  [nCallers]string{wU, wU, wOK, wOK, wOK, wOK, wOK, wOK, wOK},
		check: func(t *testing.T, m *matrix, c *matrixCase, r response) {
			if r.Code() != wOK {
				return
			}
			var out struct{ Me struct{ Email string } }
			r.decode(t, &out)
			if out.Me.Email != m.emails[c.who] {
				t.Errorf("me %s, want %s", out.Me.Email, m.emails[c.who])
			}
		},
	},
}

// checkAuditWorkspace checks that an audit list holds only, and some, rows of
// the caller's own workspace.
func checkAuditWorkspace(field string) func(t *testing.T, m *matrix, c *matrixCase, r response) {
	return func(t *testing.T, m *matrix, c *matrixCase, r response) {
		if r.Code() == wOK {
			checkAuditNodes(t, r, field, m.actedWS(c.who))
		}
	}
}

func checkAuditNodes(t *testing.T, r response, field, ws string) {
	t.Helper()
	var out map[string]struct {
		Nodes []struct{ WorkspaceId string }
	}
	r.decode(t, &out)
	var nodes []struct{ WorkspaceId string }
	for _, v := range out {
		nodes = v.Nodes
	}
	if len(nodes) == 0 {
		t.Errorf("%s is empty; the setup wrote rows", field)
	}
	for _, n := range nodes {
		if n.WorkspaceId != ws {
			t.Fatalf("%s holds a row of workspace %s, want only %s", field, n.WorkspaceId, ws)
		}
	}
}

// TestRoleMatrix: every operation × every kind of caller, the code of
// docs/design.md#error-codes and docs/design.md#graphql, and the effect (or its absence). The callers are set up once (their
// passwords cost an argon2id each); the operator part resets what it changes.
func TestRoleMatrix(t *testing.T) {
	t.Parallel()
	m := newMatrix(t)
	t.Run("keys", func(t *testing.T) { keyOperationMatrix(t, m) })
	t.Run("operators", func(t *testing.T) { operatorOperationMatrix(t, m) })
	t.Run("escalation", func(t *testing.T) { checkMembershipEscalation(t, m) })
}

// keyOperationMatrix: the key operations; the effect is checked on keys and
// both audit trails.
func keyOperationMatrix(t *testing.T, m *matrix) {
	e := m.e
	for _, op := range keyOps {
		// The state a cell starts from; failed calls change nothing, so it
		// is made anew only after a successful change.
		var shared *matrixCase
		var before snapshot
		for who := range nCallers {
			t.Run(op.name+"/"+callerNames[who], func(t *testing.T) {
				if shared == nil {
					shared = &matrixCase{
						target:    e.createKey(m.ownerA, m.name("target")),
						keyB:      e.createKey(m.ownerB, m.name("b")),
						callerKey: e.createKey(m.ownerA, m.name("caller")),
					}
					before = m.snapshot()
				}
				// A cell that stops early leaves shared nil: the next one
				// starts from a fresh state instead of failing in cascade.
				c := shared
				shared = nil
				c.who = who
				switch who {
				case cAnonymous:
					c.caller = cred{}
				case cAPIKey:
					c.caller = cred{Key: c.callerKey.Plaintext}
				default:
					c.caller = m.users[who]
				}
				var vars map[string]any
				if op.vars != nil {
					vars = op.vars(m, c)
				}

				want := op.want[who]
				r := m.doCell(t, c.caller, op.query, vars, want)
				op.check(t, m, c, r)

				// Failed operations write nothing; a change writes one key
				// audit row and one audit event, in the workspace acted in.
				var rowsA, rowsB, keysA, keysB int
				if want == wOK && op.mutation {
					if c.who == cOtherOwner {
						rowsB = 1
					} else {
						rowsA = 1
					}
				}
				if want == wOK && op.newKey {
					if c.who == cOtherOwner {
						keysB = 1
					} else {
						keysA = 1
					}
				}
				after := m.snapshot()
				compareRows(t, "keys of A", before.keysA, after.keysA, keysA)
				compareRows(t, "keys of B", before.keysB, after.keysB, keysB)
				compareRows(t, "key audit of A", before.auditA, after.auditA, rowsA)
				compareRows(t, "key audit of B", before.auditB, after.auditB, rowsB)
				compareRows(t, "audit events of A", before.eventsA, after.eventsA, rowsA)
				compareRows(t, "audit events of B", before.eventsB, after.eventsB, rowsB)
				before = after
				if want != wOK || !op.mutation && !op.newKey {
					shared = c
				}
			})
		}
	}
}

type operatorOp struct {
	name  string
	query string
	vars  func(m *matrix) map[string]any
	reset func(m *matrix) // undoes a success, before each cell
	want  [nCallers]string
	// check asserts the effect, or its absence; it is called after reset.
	check func(t *testing.T, m *matrix, vars map[string]any, success bool)
}

var operatorOps = []operatorOp{
	{
		name:  "createWorkspace",
		query: `mutation($n:String!){createWorkspace(input:{name:$n,plan:CLOUD_PRO}){id}}`,
		vars:  func(m *matrix) map[string]any { return map[string]any{"n": m.name("ws")} },
		//            anon key member admin owner PA  imp  otherOwner PA+ADMIN
		want: [nCallers]string{wU, wU, wF, wF, wF, wOK, wOK, wF, wOK},
		check: func(t *testing.T, m *matrix, vars map[string]any, success bool) {
			var out struct{ Workspaces []struct{ Name string } }
			m.e.must(m.root, `{workspaces{name}}`, nil, &out)
			found := slices.ContainsFunc(out.Workspaces, func(w struct{ Name string }) bool { return w.Name == vars["n"] })
			if found != success {
				t.Errorf("workspace %v exists: %v, want %v", vars["n"], found, success)
			}
		},
	},
	{
		name:  "createAccount",
		query: `mutation($e:String!){createAccount(input:{email:$e,password:"another-password-1",platformAdmin:true}){id}}`,
		vars:  func(m *matrix) map[string]any { return map[string]any{"e": m.name("acct") + "@example.com"} },
		want:  [nCallers]string{wU, wU, wF, wF, wF, wOK, wOK, wF, wOK},
		check: func(t *testing.T, m *matrix, vars map[string]any, success bool) {
			// The email is taken exactly when the account was created.
			r := m.e.do(m.root, `mutation($e:String!){createAccount(input:{email:$e,password:"another-password-1"}){id}}`, vars)
			if taken := r.Code() == "BAD_USER_INPUT"; taken != success {
				t.Errorf("account %v exists: %v (%+v), want %v", vars["e"], taken, r.Errors, success)
			}
		},
	},
	{
		name:  "workspaces",
		query: `{workspaces{id}}`,
		want:  [nCallers]string{wU, wU, wF, wF, wF, wOK, wOK, wF, wOK},
	},
	{
		name:  "setWorkspacePlan",
		query: `mutation($ws:ID!){setWorkspacePlan(workspaceId:$ws,plan:CLOUD_ENTERPRISE){plan}}`,
		vars:  func(m *matrix) map[string]any { return map[string]any{"ws": m.wsA} },
		reset: func(m *matrix) {
			m.e.must(m.root, `mutation($ws:ID!){setWorkspacePlan(workspaceId:$ws,plan:CLOUD_PRO){plan}}`, map[string]any{"ws": m.wsA}, &struct{}{})
		},
		want: [nCallers]string{wU, wU, wF, wF, wF, wOK, wOK, wF, wOK},
		check: func(t *testing.T, m *matrix, vars map[string]any, success bool) {
			var out struct{ TenantInfo struct{ Plan string } }
			m.e.must(m.ownerA, `{tenantInfo{plan}}`, nil, &out)
			if want := map[bool]string{true: "CLOUD_ENTERPRISE", false: "CLOUD_PRO"}[success]; out.TenantInfo.Plan != want {
				t.Errorf("plan of A %s, want %s", out.TenantInfo.Plan, want)
			}
		},
	},
	{
		name:  "impersonate",
		query: `mutation($ws:ID!){impersonate(workspaceId:$ws){accessToken}}`,
		vars:  func(m *matrix) map[string]any { return map[string]any{"ws": m.wsA} },
		want:  [nCallers]string{wU, wU, wF, wF, wF, wOK, wOK, wF, wOK},
	},
	{
		name:  "setMembership",
		query: `mutation($ws:ID!,$a:ID!){setMembership(workspaceId:$ws,accountId:$a,role:ADMIN)}`,
		vars:  func(m *matrix) map[string]any { return map[string]any{"ws": m.wsA, "a": m.spareID} },
		reset: func(m *matrix) { m.e.setMember(m.root, m.wsA, m.spareID, "MEMBER") },
		// An OWNER of A may; the owner of B is told A does not exist.
		want: [nCallers]string{wU, wU, wF, wF, wOK, wOK, wOK, wNF, wOK},
		check: func(t *testing.T, m *matrix, vars map[string]any, success bool) {
			// The role is read on every request of the spare's session.
			var out struct{ Me struct{ Role string } }
			m.e.must(m.spare, `{me{role}}`, nil, &out)
			if want := map[bool]string{true: "ADMIN", false: "MEMBER"}[success]; out.Me.Role != want {
				t.Errorf("spare's role in A %s, want %s", out.Me.Role, want)
			}
		},
	},
	{
		name:  "setWorkspaceRateLimits",
		query: `mutation($ws:ID!){setWorkspaceRateLimits(workspaceId:$ws,perMinute:1234,perDay:56789){defaultRateLimitPerMinute}}`,
		vars:  func(m *matrix) map[string]any { return map[string]any{"ws": m.wsA} },
		reset: func(m *matrix) {
			m.e.must(m.root, `mutation($ws:ID!){setWorkspaceRateLimits(workspaceId:$ws,perMinute:null,perDay:null){id}}`, map[string]any{"ws": m.wsA}, &struct{}{})
		},
		want: [nCallers]string{wU, wU, wF, wF, wOK, wOK, wOK, wNF, wOK},
		check: func(t *testing.T, m *matrix, vars map[string]any, success bool) {
			var out struct {
				TenantInfo struct{ DefaultRateLimitPerMinute, DefaultRateLimitPerDay int }
			}
			m.e.must(m.ownerA, `{tenantInfo{defaultRateLimitPerMinute defaultRateLimitPerDay}}`, nil, &out)
			want := [2]int{600, 100_000}
			if success {
				want = [2]int{1234, 56789}
			}
			if got := [2]int{out.TenantInfo.DefaultRateLimitPerMinute, out.TenantInfo.DefaultRateLimitPerDay}; got != want {
				t.Errorf("limits of A %v, want %v", got, want)
			}
		},
	},
	{
		name:  "disableAccount",
		query: `mutation($id:ID){disableAccount(id:$id){disabled}}`,
		vars:  func(m *matrix) map[string]any { return map[string]any{"id": m.targetID} },
		reset: func(m *matrix) { m.setTargetDisabled("enableAccount") },
		want:  [nCallers]string{wU, wU, wF, wF, wF, wOK, wOK, wF, wOK},
		check: func(t *testing.T, m *matrix, _ map[string]any, success bool) {
			if got := m.accountDisabled(t); got != success {
				t.Errorf("target disabled %v, want %v", got, success)
			}
		},
	},
	{
		name:  "enableAccount",
		query: `mutation($id:ID){enableAccount(id:$id){disabled}}`,
		vars:  func(m *matrix) map[string]any { return map[string]any{"id": m.targetID} },
		reset: func(m *matrix) { m.setTargetDisabled("disableAccount") },
		want:  [nCallers]string{wU, wU, wF, wF, wF, wOK, wOK, wF, wOK},
		check: func(t *testing.T, m *matrix, _ map[string]any, success bool) {
			if got := m.accountDisabled(t); got == success {
				t.Errorf("target disabled %v, want %v", got, !success)
			}
		},
	},
}

// accountDisabled reads, as the bootstrap admin, whether the matrix's target
// account is disabled.
func (m *matrix) accountDisabled(t *testing.T) bool {
	var out struct {
		Accounts []struct {
			ID       string
			Disabled bool
		}
	}
	m.e.must(m.root, `{accounts{id disabled}}`, nil, &out)
	for _, a := range out.Accounts {
		if a.ID == m.targetID {
			return a.Disabled
		}
	}
	t.Fatalf("target account %s not listed", m.targetID)
	return false
}

// setTargetDisabled disables or enables the target account as the bootstrap admin.
func (m *matrix) setTargetDisabled(op string) {
	m.e.must(m.root, `mutation($id:ID){`+op+`(id:$id){id}}`, map[string]any{"id": m.targetID}, &struct{}{})
}

// operatorOperationMatrix: operator mutations are platform admin only;
// setMembership also an OWNER of that workspace, setWorkspaceRateLimits also
// owner tier.
func operatorOperationMatrix(t *testing.T, m *matrix) {
	e := m.e
	m.spareID = e.createAccount(m.root, "spare@a.example", mpwd, false)
	e.setMember(m.root, m.wsA, m.spareID, "MEMBER")
	m.spare = cred{Bearer: e.login("spare@a.example", mpwd, "")}
	m.targetID = e.createAccount(m.root, "target@a.example", mpwd, false)
	e.setMember(m.root, m.wsA, m.targetID, "MEMBER")
	for _, op := range operatorOps {
		for who := range nCallers {
			t.Run(op.name+"/"+callerNames[who], func(t *testing.T) {
				if op.reset != nil {
					op.reset(m)
				}
				var caller cred
				switch who {
				case cAnonymous:
				case cAPIKey:
					caller = cred{Key: e.createKey(m.ownerA, m.name("caller")).Plaintext}
				default:
					caller = m.users[who]
				}
				var vars map[string]any
				if op.vars != nil {
					vars = op.vars(m)
				}

				want := op.want[who]
				m.doCell(t, caller, op.query, vars, want)
				if op.check != nil {
					op.check(t, m, vars, want == wOK)
				}
			})
		}
	}
}

// An ADMIN cannot promote itself, and an OWNER of A cannot touch B's members.
func checkMembershipEscalation(t *testing.T, m *matrix) {
	e := m.e
	set := `mutation($ws:ID!,$a:ID!,$r:Role){setMembership(workspaceId:$ws,accountId:$a,role:$r)}`
	if r := e.do(m.users[cAdmin], set, map[string]any{"ws": m.wsA, "a": m.ids[cAdmin], "r": "OWNER"}); r.Code() != wF {
		t.Fatalf("ADMIN promoting itself: %q %+v", r.Code(), r.Errors)
	}
	var me struct{ Me struct{ Role string } }
	e.must(m.users[cAdmin], `{me{role}}`, nil, &me)
	if me.Me.Role != "ADMIN" {
		t.Fatalf("role after refused promotion: %s", me.Me.Role)
	}
	if r := e.do(m.users[cOwner], set, map[string]any{"ws": m.wsB, "a": m.ids[cOwner], "r": "OWNER"}); r.Code() != wNF {
		t.Fatalf("OWNER of A making itself OWNER of B: %q %+v", r.Code(), r.Errors)
	}
	r := e.do(cred{}, `mutation($e:String!,$p:String!,$ws:ID){login(email:$e,password:$p,workspaceId:$ws){accessToken}}`,
		map[string]any{"e": m.emails[cOwner], "p": mpwd, "ws": m.wsB})
	if r.Code() != wNF {
		t.Fatalf("owner of A logging in to B after the refused change: %q %+v", r.Code(), r.Errors)
	}
	// The OWNER of A may remove a member of A; the member's session ends at once.
	e.must(m.users[cOwner], set, map[string]any{"ws": m.wsA, "a": m.ids[cMember], "r": nil}, &struct{}{})
	if r := e.do(m.users[cMember], probe, nil); r.Status != http.StatusUnauthorized {
		t.Fatalf("removed member's session: HTTP %d %+v", r.Status, r.Errors)
	}
	// The OWNER cannot add it back (adding is for platform admins)...
	if r := e.do(m.users[cOwner], set, map[string]any{"ws": m.wsA, "a": m.ids[cMember], "r": "MEMBER"}); r.Code() != wF {
		t.Fatalf("OWNER adding a non-member: %q %+v", r.Code(), r.Errors)
	}
	// ...and a platform admin adding it back does not revive the old
	// (perhaps stolen) token.
	e.must(m.root, set, map[string]any{"ws": m.wsA, "a": m.ids[cMember], "r": "MEMBER"}, &struct{}{})
	if r := e.do(m.users[cMember], probe, nil); r.Status != http.StatusUnauthorized {
		t.Fatalf("a removed member's old session works again after re-adding: HTTP %d %+v", r.Status, r.Errors)
	}
}
