package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/graphql"
)

// Regression tests of the bounds on a request (docs/security.md#bounds-on-a-request),
// one per finding of a hardening review, through HTTP.

// fragmentBomb is the exponential fragment document: fragment Fi spreads F(i+1)
// twice, depth levels deep (1 KB for 22 levels; 2^22 fields expanded).
func fragmentBomb(depth int) string {
	var b strings.Builder
	b.WriteString("{...F0}")
	for i := range depth {
		next := "__typename"
		if i+1 < depth {
			next = fmt.Sprintf("...F%d ...F%d", i+1, i+1)
		}
		fmt.Fprintf(&b, " fragment F%d on Query{__typename %s}", i, next)
	}
	return b.String()
}

// The exponential fragment document is refused for its cost
// (computed once per fragment; BenchmarkCostliestAnonymousRequests measures
// what refusing it costs).
func TestFragmentBombRefused(t *testing.T) {
	e := newEnv(t)
	for _, depth := range []int{9, 22, 64} {
		r := e.do(cred{}, fragmentBomb(depth), nil)
		if r.Code() != "COMPLEXITY_LIMIT_EXCEEDED" || r.Data != nil {
			t.Fatalf("depth %d: HTTP %d %q data=%s %+v", depth, r.Status, r.Code(), r.Data, r.Errors)
		}
	}
	// A reasonable use of fragments still works.
	var out struct{ TenantInfo struct{ ID string } }
	e.must(e.admin(), `{tenantInfo{...T ...T}} fragment T on Tenant{id name}`, nil, &out)
	if out.TenantInfo.ID == "" {
		t.Fatal("no tenantInfo")
	}
}

// postRaw posts body to /graphql with the given Accept header and returns
// the status and the decoded top-level object.
func (e *env) postRaw(body []byte, accept string, c cred) (int, map[string]json.RawMessage) {
	e.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/graphql", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	if c.Bearer != "" {
		req.Header.Set("Authorization", "Bearer "+c.Bearer)
	}
	res, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	var out map[string]json.RawMessage
	if err := json.Unmarshal(raw, &out); err != nil {
		e.t.Fatalf("HTTP %d: not JSON: %s", res.StatusCode, raw)
	}
	return res.StatusCode, out
}

func firstCode(t *testing.T, out map[string]json.RawMessage) string {
	t.Helper()
	var errs []gqlError
	json.Unmarshal(out["errors"], &errs)
	if len(errs) == 0 {
		t.Fatalf("no errors in %v", out)
	}
	c, _ := errs[0].Extensions["code"].(string)
	return c
}

// A list variable is bounded before it is coerced, and a body
// is bounded to 64 KiB: the 1 MiB body of 200,000 scopes is refused unread,
// and a list of 10,000 that fits the body is refused before coercion.
func TestHugeListsRefused(t *testing.T) {
	e := newEnv(t)
	const q = `mutation($s:[String!]){createApiKey(input:{name:"x",scopes:$s}){plaintextKey}}`
	body := func(n int) []byte {
		scopes := make([]string, n)
		for i := range scopes {
			scopes[i] = "ab"
		}
		b, _ := json.Marshal(map[string]any{"query": q, "variables": map[string]any{"s": scopes}})
		return b
	}
	big := body(200_000)
	if len(big) < 1_000_000 || len(big) > 1<<20 {
		t.Fatalf("the body is %d bytes", len(big))
	}
	status, out := e.postRaw(big, "", cred{})
	if status != http.StatusRequestEntityTooLarge || firstCode(t, out) != "BAD_USER_INPUT" {
		t.Fatalf("200,000 scopes: HTTP %d %v", status, out)
	}
	for _, accept := range []string{"application/json", "application/graphql-response+json"} {
		status, out = e.postRaw(body(10_000), accept, cred{})
		want := http.StatusOK
		if accept != "application/json" {
			want = http.StatusBadRequest
		}
		if status != want || firstCode(t, out) != "BAD_USER_INPUT" || out["data"] != nil {
			t.Fatalf("10,000 scopes, Accept %s: HTTP %d %v", accept, status, out)
		}
	}
	// The bound counts elements, not the commas or brackets inside strings,
	// at any depth.
	tricky := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = `a,"b],[\",{`
		}
		return out
	}
	for _, tc := range []struct {
		vars map[string]any
		want string
	}{
		{map[string]any{"s": tricky(100)}, "at most 32 scopes"},
		{map[string]any{"s": tricky(101)}, "longer than 100 items"},
		{map[string]any{"s": []string{"a"}, "o": map[string]any{"x": []any{tricky(101)}}}, "longer than 100 items"},
		{map[string]any{"s": []string{"a"}, "o": map[string]any{"x": []any{tricky(100), tricky(100)}}}, ""},
	} {
		r := e.do(e.admin(), q, tc.vars)
		msg := ""
		if len(r.Errors) > 0 {
			msg = r.Errors[0].Message
		}
		if tc.want == "" && r.Code() != "" || !strings.Contains(msg, tc.want) {
			t.Fatalf("%d-element lists: %q %q, want %q", len(tc.vars["s"].([]string)), r.Code(), msg, tc.want)
		}
	}
	// 33 scopes pass the bound and meet the domain's rule, with its message.
	owner := e.admin()
	r := e.do(owner, q, map[string]any{"s": strings.Split(strings.Repeat("a,", 32)+"a", ",")})
	if r.Code() != "BAD_USER_INPUT" || !strings.Contains(r.Errors[0].Message, "at most 32 scopes") {
		t.Fatalf("33 scopes: %q %+v", r.Code(), r.Errors)
	}
}

// The body limit leaves room for the largest real operations of the API.
func TestLargestOperationFits(t *testing.T) {
	e, owner := newAdminEnv(t)
	scopes := make([]string, btk.MaxScopes)
	for i := range scopes {
		scopes[i] = fmt.Sprintf("%02d", i) + strings.Repeat("s", btk.MaxScopeLen-2)
	}
	name := strings.Repeat("\U0001F511", btk.MaxNameLen) // 64 four-byte characters
	vars := map[string]any{"n": name, "s": scopes, "m": 1000, "d": 100000, "x": time.Now().Add(time.Hour).Format(time.RFC3339)}
	const create = `mutation CreateApiKey($n:String!,$m:Int,$d:Int,$x:Time,$s:[String!]){createApiKey(input:{name:$n,rateLimitPerMinute:$m,rateLimitPerDay:$d,expiresAt:$x,scopes:$s}){apiKey{id name displayPrefix hint status rateLimitPerMinute rateLimitPerDay expiresAt scopes createdAt lastUsedAt revokedAt rotatedFromId replacedById} plaintextKey}}`
	b, _ := json.Marshal(map[string]any{"query": create, "variables": vars})
	var out struct{ CreateApiKey struct{ PlaintextKey string } }
	e.must(owner, create, vars, &out)
	// A 1,024-byte password of control characters, each escaped as \u00XX.
	pw := strings.Repeat("\x01", 1024)
	lb, _ := json.Marshal(map[string]any{"query": `mutation($e:String!,$p:String!){login(email:$e,password:$p){accessToken}}`,
		"variables": map[string]any{"e": adminEmail, "p": pw}})
	t.Logf("largest createApiKey body: %d bytes; largest login body: %d bytes", len(b), len(lb))
	// Under the bytes of a body never counted against the bodies being
	// read together: stalled large bodies never refuse a real operation.
	if len(b) >= graphql.FreeBodyBytes || len(lb) >= graphql.FreeBodyBytes {
		t.Fatalf("a real operation is %d KiB or more (%d, %d): revisit maxBodyBytes and graphql.FreeBodyBytes", graphql.FreeBodyBytes>>10, len(b), len(lb))
	}
}

const introspectionQuery = `query IntrospectionQuery {
  __schema {
    queryType { name } mutationType { name } subscriptionType { name }
    types { ...FullType }
    directives { name description locations isRepeatable args(includeDeprecated: true) { ...InputValue } }
  }
}
fragment FullType on __Type {
  kind name description specifiedByURL
  fields(includeDeprecated: true) { name description args(includeDeprecated: true) { ...InputValue } type { ...TypeRef } isDeprecated deprecationReason }
  inputFields(includeDeprecated: true) { ...InputValue }
  interfaces { ...TypeRef }
  enumValues(includeDeprecated: true) { name description isDeprecated deprecationReason }
  possibleTypes { ...TypeRef }
}
fragment InputValue on __InputValue { name description type { ...TypeRef } defaultValue isDeprecated deprecationReason }
fragment TypeRef on __Type { kind name ofType { kind name ofType { kind name ofType { kind name ofType { kind name ofType { kind name ofType { kind name ofType { kind name ofType { kind name } } } } } } } } }`

// Introspection and "did you mean" suggestions are for logged-in
// users; introspection fields count towards the cost.
func TestIntrospectionForUsersOnly(t *testing.T) {
	e, owner := newAdminEnv(t)
	key := e.createKey(owner, "k")
	for _, c := range []cred{{}, {Key: key.Plaintext}} {
		for _, q := range []string{`{__schema{queryType{name}}}`, `{__type(name:"Query"){name}}`, `{t:tenantInfo{id} ...S} fragment S on Query{__schema{types{name}}}`} {
			if r := e.do(c, q, nil); r.Code() != "UNAUTHENTICATED" || r.Data != nil {
				t.Fatalf("%q with key=%v: %q %+v", q, c.Key != "", r.Code(), r.Errors)
			}
		}
	}
	// __typename is not introspection.
	if r := e.do(cred{}, `{__typename}`, nil); r.Code() != "" {
		t.Fatalf("__typename: %+v", r.Errors)
	}
	// A logged-in user introspects: the full GraphiQL query fits the cost.
	var schema struct {
		Schema struct{ Types []struct{ Name string } } `json:"__schema"`
	}
	e.must(owner, introspectionQuery, nil, &schema)
	if len(schema.Schema.Types) < 10 {
		t.Fatalf("introspection: %d types", len(schema.Schema.Types))
	}
	// 140 aliased introspections (a 7 KB query, a 1.75 MB answer) are over the cost.
	if r := e.do(owner, aliasQuery(140, "__schema{types{description fields{description}}}"), nil); r.Code() != "COMPLEXITY_LIMIT_EXCEEDED" {
		t.Fatalf("140 introspections: %q", r.Code())
	}
	// Suggestions: for users only.
	if r := e.do(cred{}, `{tenantInf{id}}`, nil); r.Code() != "GRAPHQL_VALIDATION_FAILED" || strings.Contains(r.Errors[0].Message, "Did you mean") {
		t.Fatalf("anonymous typo: %+v", r.Errors)
	}
	if r := e.do(cred{Key: key.Plaintext}, `{tenantInf{id}}`, nil); strings.Contains(r.Errors[0].Message, "Did you mean") {
		t.Fatalf("key typo: %+v", r.Errors)
	}
	if r := e.do(owner, `{tenantInf{id}}`, nil); !strings.Contains(r.Errors[0].Message, "Did you mean \"tenantInfo\"") {
		t.Fatalf("user typo: %+v", r.Errors)
	}
}

// brokenStore is the real store whose transactions fail on the audit
// list: errFail for auditEvents, a busy database for apiKeyAuditLog.
type brokenStore struct{ btk.Store }

var errFail = errors.New("disk I/O error at /var/lib/btk/secret-path (SQLITE_IOERR)")

func (s brokenStore) Read(ctx context.Context, fn func(btk.Tx) error) error {
	return s.Store.Read(ctx, func(tx btk.Tx) error { return fn(brokenTx{tx}) })
}

type brokenTx struct{ btk.Tx }

func (brokenTx) AuditEvents(context.Context, btk.AuditFilter) ([]*btk.AuditEvent, string, error) {
	return nil, "", fmt.Errorf("store: audit events: %w", errFail)
}

func (brokenTx) AuditEntries(context.Context, btk.AuditFilter) ([]*btk.AuditEntry, string, error) {
	return nil, "", fmt.Errorf("store: audit entries: %w: %w", btk.ErrUnavailable, errors.New("database is locked (5) (SQLITE_BUSY)"))
}

// An internal failure is INTERNAL "internal error", logged at
// ERROR with the operation name and the detail, which the answer does not
// carry; a busy store is UNAVAILABLE. gqlgen's own coercion errors keep
// their message and BAD_USER_INPUT.
func TestErrorsTellTheTruth(t *testing.T) {
	e := newWrappedEnv(t, func(s btk.Store) btk.Store { return brokenStore{s} })
	owner := e.admin()
	r := e.do(owner, `query AuditPage{auditEvents{nodes{id}}}`, nil)
	if r.Status != http.StatusOK || r.Code() != "INTERNAL" || r.Errors[0].Message != "internal error" {
		t.Fatalf("failing store: HTTP %d %q %+v", r.Status, r.Code(), r.Errors)
	}
	raw, _ := json.Marshal(r.Errors)
	if strings.Contains(string(raw), "secret-path") || strings.Contains(string(raw), "SQLITE") {
		t.Fatalf("the answer carries the detail: %s", raw)
	}
	logs := e.logText()
	var line string
	for l := range strings.SplitSeq(logs, "\n") {
		if strings.Contains(l, "internal error") {
			line = l
		}
	}
	if !strings.Contains(line, "level=ERROR") || !strings.Contains(line, "operation=AuditPage") || !strings.Contains(line, "secret-path") {
		t.Fatalf("log line: %q\n%s", line, logs)
	}
	if strings.Contains(logs, owner.Bearer) || strings.Contains(logs, adminPassword) {
		t.Fatal("the log holds a secret")
	}
	// The operation's name and the aliases of the error's path are the
	// client's: a key in them is cut to its display prefix.
	secret := strings.Repeat("S", 43)
	pasted := "btk_abcdefgh_" + secret
	e.do(owner, `query `+pasted+`{`+pasted+`:auditEvents{nodes{id}}}`, nil)
	if logs := e.logText(); strings.Contains(logs, secret) || !strings.Contains(logs, "operation=btk_abcdefgh… path=btk_abcdefgh…") {
		t.Fatalf("a key in the operation's name or path:\n%s", logs)
	}

	r = e.do(owner, `{apiKeyAuditLog{nodes{id}}}`, nil)
	if r.Code() != "UNAVAILABLE" || strings.Contains(r.Errors[0].Message, "SQLITE") {
		t.Fatalf("busy store: %q %+v", r.Code(), r.Errors)
	}
	if !strings.Contains(e.logText(), "level=WARN msg=\"dependency unavailable\" operation=query") {
		t.Fatalf("no WARN line for the busy store:\n%s", e.logText())
	}

	// The zero time is no bound, not an internal error.
	e2 := newEnv(t)
	var out struct {
		AuditEvents struct{ Nodes []struct{ ID string } }
	}
	e2.must(e2.admin(), `{auditEvents(since:"0001-01-01T00:00:00Z"){nodes{id}}}`, nil, &out)
	// Coercion errors stay the caller's.
	if r := e2.do(e2.admin(), `{auditEvents(since:"yesterday"){nodes{id}}}`, nil); r.Code() != "BAD_USER_INPUT" {
		t.Fatalf("bad time: %q %+v", r.Code(), r.Errors)
	}
}

// A password change ends the account's other sessions, and
// disabling an account ends all of them, impersonation included: the next
// request with an old token is 401. A disabled account cannot log in.
func TestCompromisedAccountIsCutOff(t *testing.T) {
	e, root := newAdminEnv(t)
	const pw, pw2 = "user-password-1", "user-password-2"
	userID := e.createAccount(root, "user@example.com", pw, false)
	e.setMember(root, e.adminWS, userID, "OWNER")
	s1 := cred{Bearer: e.login("user@example.com", pw, "")}
	s2 := cred{Bearer: e.login("user@example.com", pw, "")}

	const change = `mutation($c:String!,$n:String!){changePassword(currentPassword:$c,newPassword:$n)}`
	if r := e.do(s1, change, map[string]any{"c": "wrong-password", "n": pw2}); r.Code() != "UNAUTHENTICATED" {
		t.Fatalf("wrong current password: %q", r.Code())
	}
	if r := e.do(s1, change, map[string]any{"c": pw, "n": "short"}); r.Code() != "BAD_USER_INPUT" {
		t.Fatalf("short new password: %q", r.Code())
	}
	var ok struct{ ChangePassword bool }
	e.must(s1, change, map[string]any{"c": pw, "n": pw2}, &ok)
	if r := e.do(s2, probe, nil); r.Status != http.StatusUnauthorized {
		t.Fatalf("other session after the password change: HTTP %d", r.Status)
	}
	if r := e.do(s1, probe, nil); r.Status != http.StatusOK {
		t.Fatalf("own session after the password change: HTTP %d %+v", r.Status, r.Errors)
	}
	if r := e.do(cred{}, `mutation{login(email:"user@example.com",password:"`+pw+`"){accessToken}}`, nil); r.Code() != "UNAUTHENTICATED" {
		t.Fatalf("old password: %q", r.Code())
	}
	s3 := cred{Bearer: e.login("user@example.com", pw2, "")}

	// A second platform admin impersonating: disabling it ends that too.
	opID := e.createAccount(root, "op@example.com", pw, true)
	op := cred{Bearer: e.login("op@example.com", pw, "")}
	imp := cred{Bearer: e.impersonate(op, e.adminWS)}
	if r := e.do(imp, probe, nil); r.Status != http.StatusOK {
		t.Fatalf("impersonation: HTTP %d", r.Status)
	}

	const disable = `mutation($id:ID,$e:String){disableAccount(id:$id,email:$e){id disabled}}`
	const enable = `mutation($id:ID,$e:String){enableAccount(id:$id,email:$e){id disabled}}`
	if r := e.do(s3, disable, map[string]any{"id": opID}); r.Code() != "FORBIDDEN" {
		t.Fatalf("an OWNER disabling: %q", r.Code())
	}
	var d struct{ DisableAccount struct{ Disabled bool } }
	e.must(root, disable, map[string]any{"e": "USER@example.com"}, &d)
	e.must(root, disable, map[string]any{"id": opID}, &d)
	if !d.DisableAccount.Disabled {
		t.Fatal("not disabled")
	}
	for name, c := range map[string]cred{"s1": s1, "s3": s3, "op": op, "impersonation": imp} {
		if r := e.do(c, probe, nil); r.Status != http.StatusUnauthorized {
			t.Fatalf("%s after disable: HTTP %d", name, r.Status)
		}
	}
	if r := e.do(cred{}, `mutation{login(email:"user@example.com",password:"`+pw2+`"){accessToken}}`, nil); r.Code() != "UNAUTHENTICATED" ||
		!strings.Contains(r.Errors[0].Message, "disabled") {
		t.Fatalf("disabled login: %q %+v", r.Code(), r.Errors)
	}
	if r := e.do(root, disable, map[string]any{"e": adminEmail}); r.Code() != "BAD_USER_INPUT" {
		t.Fatalf("disabling oneself: %q", r.Code())
	}
	if r := e.do(root, disable, map[string]any{"id": userID, "e": adminEmail}); r.Code() != "BAD_USER_INPUT" {
		t.Fatalf("id and email: %q", r.Code())
	}
	if r := e.do(root, disable, map[string]any{"e": "nobody@example.com"}); r.Code() != "NOT_FOUND" {
		t.Fatalf("unknown: %q", r.Code())
	}
	var en struct{ EnableAccount struct{ Disabled bool } }
	e.must(root, enable, map[string]any{"id": userID}, &en)
	if en.EnableAccount.Disabled {
		t.Fatal("still disabled")
	}
	if r := e.do(s3, probe, nil); r.Status != http.StatusUnauthorized {
		t.Fatalf("an old session after enable: HTTP %d", r.Status)
	}
	e.login("user@example.com", pw2, "")

	// Each change is in the server-wide audit log (accounts belong to no
	// workspace), attributed to the actor.
	var ev struct {
		AuditEvents struct {
			Nodes []struct{ Action, ActorEmail, TargetID string }
		}
	}
	e.must(root, `{auditEvents(serverWide:true){nodes{action actorEmail targetId}}}`, nil, &ev)
	var got []string
	for _, n := range ev.AuditEvents.Nodes {
		if strings.HasPrefix(n.Action, "account.") && n.Action != "account.created" {
			got = append(got, n.Action+" by "+n.ActorEmail)
		}
	}
	want := []string{"account.enabled by " + adminEmail, "account.disabled by " + adminEmail, "account.disabled by " + adminEmail,
		"account.password_changed by user@example.com"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("account events: %v, want %v", got, want)
	}
}

// membershipAnswer is what setMembership answers c: "ok", or
// "CODE/REASON: message".
func (e *env) membershipAnswer(c cred, ws, account string, role any) string {
	r := e.do(c, `mutation($w:ID!,$a:ID!,$r:Role){setMembership(workspaceId:$w,accountId:$a,role:$r)}`,
		map[string]any{"w": ws, "a": account, "r": role})
	if len(r.Errors) == 0 {
		return "ok"
	}
	reason, _ := r.Errors[0].Extensions["reason"].(string)
	return r.Code() + "/" + reason + ": " + r.Errors[0].Message
}

// An OWNER changes and removes existing members only; adding an
// account is for platform admins, and the answer is the same whether the
// account exists or not.
func TestOwnerCannotAddNonMember(t *testing.T) {
	e, root := newAdminEnv(t)
	ws := e.createWorkspace(root, "Acme", "CLOUD_PRO")
	ownerID := e.createAccount(root, "owner@acme.example", "owner-password", false)
	memberID := e.createAccount(root, "member@acme.example", "member-password", false)
	outsiderID := e.createAccount(root, "outsider@example.com", "outsider-password", false)
	e.setMember(root, ws, ownerID, "OWNER")
	e.setMember(root, ws, memberID, "MEMBER")
	owner := cred{Bearer: e.login("owner@acme.example", "owner-password", "")}
	answer := func(account string, role any) string { return e.membershipAnswer(owner, ws, account, role) }
	const unknown = "6f1c1c8e-1111-4222-8333-944444444444"
	for _, role := range []any{"MEMBER", "OWNER", nil} {
		a, b := answer(outsiderID, role), answer(unknown, role)
		if a != b || a == "ok" {
			t.Fatalf("role %v: existing outsider %q, unknown %q", role, a, b)
		}
	}
	if a := answer(outsiderID, "MEMBER"); !strings.HasPrefix(a, "FORBIDDEN") {
		t.Fatalf("adding: %q", a)
	}
	// The outsider's login still finds one workspace at most.
	if a := answer(memberID, "ADMIN"); a != "ok" {
		t.Fatalf("changing a member's role: %q", a)
	}
	if a := answer(memberID, nil); a != "ok" {
		t.Fatalf("removing a member: %q", a)
	}
	// A platform admin adds.
	e.setMember(root, ws, outsiderID, "MEMBER")
}

// A workspace keeps its last OWNER, whoever asks (docs/security.md#accounts):
// demoting or removing it is refused and changes nothing, and two OWNERs
// demoting each other at once leave one of them OWNER.
func TestLastOwnerStays(t *testing.T) {
	e, root := newAdminEnv(t)
	ws := e.createWorkspace(root, "Acme", "CLOUD_PRO")
	first := e.createAccount(root, "first@acme.example", "first-password", false)
	second := e.createAccount(root, "second@acme.example", "second-password", false)
	e.setMember(root, ws, first, "OWNER")
	e.setMember(root, ws, second, "OWNER")
	owner := cred{Bearer: e.login("first@acme.example", "first-password", "")}
	answer := func(c cred, account string, role any) string {
		a, _, _ := strings.Cut(e.membershipAnswer(c, ws, account, role), ":") // code/reason
		return a
	}
	roles := func() map[string]string {
		var out struct {
			Members []struct{ AccountID, Role string }
		}
		e.must(root, `query($w:ID!){members(workspaceId:$w){accountId role}}`, map[string]any{"w": ws}, &out)
		m := map[string]string{}
		for _, mb := range out.Members {
			m[mb.AccountID] = mb.Role
		}
		return m
	}

	if a := answer(owner, second, "ADMIN"); a != "ok" {
		t.Fatalf("demoting the other of two OWNERs: %q", a)
	}
	const refused = "BAD_USER_INPUT/LAST_OWNER"
	for _, tc := range []struct {
		who  string
		c    cred
		role any
	}{
		{"the last OWNER demoting itself", owner, "ADMIN"},
		{"the last OWNER demoting itself to MEMBER", owner, "MEMBER"},
		{"the last OWNER leaving", owner, nil},
		{"a platform admin demoting the last OWNER", root, "MEMBER"},
		{"a platform admin removing the last OWNER", root, nil},
	} {
		if a := answer(tc.c, first, tc.role); a != refused {
			t.Fatalf("%s: %q, want %s", tc.who, a, refused)
		}
	}
	if got := roles(); got[first] != "OWNER" || got[second] != "ADMIN" {
		t.Fatalf("roles after the refusals: %v", got)
	}
	// Setting OWNER on the last OWNER is no change and is allowed.
	if a := answer(owner, first, "OWNER"); a != "ok" {
		t.Fatalf("the last OWNER keeping OWNER: %q", a)
	}
	// With another OWNER, the first may leave.
	if a := answer(owner, second, "OWNER"); a != "ok" {
		t.Fatalf("promoting a second OWNER: %q", a)
	}
	if a := answer(owner, first, nil); a != "ok" {
		t.Fatalf("an OWNER leaving beside another: %q", a)
	}

	// Two OWNERs each demoting the other at once, many times: one stays.
	e.setMember(root, ws, first, "OWNER")
	ownerA := cred{Bearer: e.login("first@acme.example", "first-password", "")}
	ownerB := cred{Bearer: e.login("second@acme.example", "second-password", "")}
	for round := 0; round < 20; round++ {
		e.setMember(root, ws, first, "OWNER")
		e.setMember(root, ws, second, "OWNER")
		var wg sync.WaitGroup
		answers := make([]string, 2)
		for i, c := range []struct {
			by     cred
			target string
		}{{ownerA, second}, {ownerB, first}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				answers[i] = answer(c.by, c.target, "ADMIN")
			}()
		}
		wg.Wait()
		got := roles()
		owners := 0
		for _, id := range []string{first, second} {
			if got[id] == "OWNER" {
				owners++
			}
		}
		if owners != 1 {
			t.Fatalf("round %d: answers %v left roles %v: want exactly one OWNER", round, answers, got)
		}
	}

	// A disabled OWNER does not count: it cannot log in to revoke the
	// workspace's keys. Disabling one is never refused.
	e.setMember(root, ws, first, "OWNER")
	e.setMember(root, ws, second, "OWNER")
	e.must(root, `mutation($a:ID!){disableAccount(id:$a){id}}`, map[string]any{"a": second}, &struct{}{})
	owner = cred{Bearer: e.login("first@acme.example", "first-password", "")}
	if a := answer(owner, first, "MEMBER"); a != refused {
		t.Fatalf("the last enabled OWNER demoting itself beside a disabled one: %q, want %s", a, refused)
	}
	e.must(root, `mutation($a:ID!){enableAccount(id:$a){id}}`, map[string]any{"a": second}, &struct{}{})
	if a := answer(owner, first, "MEMBER"); a != "ok" {
		t.Fatalf("demoting itself once the other OWNER is enabled again: %q", a)
	}
}

// Names are NFC-normalised before checks and uniqueness; names
// that look empty or hide characters are refused.
func TestNames(t *testing.T) {
	e, owner := newAdminEnv(t)
	const create = `mutation($n:String!){createApiKey(input:{name:$n}){apiKey{name}}}`
	for _, tc := range []struct {
		name, in, want string
	}{
		{"hangul filler alone", "\u3164", "BAD_USER_INPUT"},
		{"braille blank alone", "\u2800", "BAD_USER_INPUT"},
		{"hangul fillers and spaces", " \u115F\u1160 \uFFA0 ", "BAD_USER_INPUT"},
		{"line separator inside", "a\u2028b", "BAD_USER_INPUT"},
		{"paragraph separator inside", "a\u2029b", "BAD_USER_INPUT"},
		{"zero-width space", "a\u200Bb", "BAD_USER_INPUT"},
		{"soft hyphen", "pay\u00ADments", "BAD_USER_INPUT"},
		{"variation selector", "key\uFE0F", "BAD_USER_INPUT"},
		{"combining grapheme joiner", "a\u034Fb", "BAD_USER_INPUT"},
		{"tag character", "a\U000E0041", "BAD_USER_INPUT"},
		{"bidi override", "a\u202Eb", "BAD_USER_INPUT"},
		{"combining mark alone", "\u0301", "BAD_USER_INPUT"},
		{"spaces only", "   ", "BAD_USER_INPUT"},
		{"ideographic space only", "\u3000", "BAD_USER_INPUT"},
		{"café composed", "caf\u00e9", ""},
		{"café decomposed", "cafe\u0301", "NAME_TAKEN"},
		{"Ångström composed differently", "\u212Bngstr\u00f6m", ""},
		{"Ångström composed", "\u00C5ngstr\u00f6m", "NAME_TAKEN"},
		{"japanese", "日本語のキー", ""},
		{"emoji", "🔑 prod", ""},
		{"inner space", "ci deploy", ""},
	} {
		r := e.do(owner, create, map[string]any{"n": tc.in})
		if r.Code() != tc.want {
			t.Errorf("%s %+q: %q %+v, want %q", tc.name, tc.in, r.Code(), r.Errors, tc.want)
		}
	}
	// The stored name is the NFC form.
	var out struct {
		CreateApiKey struct{ ApiKey struct{ Name string } }
	}
	e.must(owner, create, map[string]any{"n": "re\u0301sume\u0301"}, &out)
	if out.CreateApiKey.ApiKey.Name != "r\u00e9sum\u00e9" {
		t.Fatalf("stored %+q", out.CreateApiKey.ApiKey.Name)
	}
	// Workspace names follow the same rules.
	const ws = `mutation($n:String!){createWorkspace(input:{name:$n}){name}}`
	if r := e.do(owner, ws, map[string]any{"n": "\u3164"}); r.Code() != "BAD_USER_INPUT" {
		t.Fatalf("workspace named U+3164: %q", r.Code())
	}
	var w struct{ CreateWorkspace struct{ Name string } }
	e.must(owner, ws, map[string]any{"n": "Cafe\u0301"}, &w)
	if w.CreateWorkspace.Name != "Caf\u00e9" {
		t.Fatalf("workspace name %+q", w.CreateWorkspace.Name)
	}
}

// GraphQL over HTTP. A document that does not parse or validate:
// 400 without data with application/graphql-response+json, 200 without data
// with application/json; a body without a query: 400.
func TestGraphQLOverHTTPStatuses(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		body   string
		accept string
		status int
	}{
		{`{"query":"{"}`, "application/graphql-response+json", 400},
		{`{"query":"{nope}"}`, "application/graphql-response+json", 400},
		{`{"query":"query($x:Int!){tenantInfo{id}}","variables":{"x":"a"}}`, "application/graphql-response+json", 400},
		{`{"query":"{"}`, "application/json", 200},
		{`{"query":"{nope}"}`, "application/json", 200},
		{`{"query":"query($x:Int!){tenantInfo{id}}","variables":{"x":"a"}}`, "application/json", 200},
		{`{"qeury":"{__typename}"}`, "application/json", 400},
		{`{"query":""}`, "application/graphql-response+json", 400},
	} {
		status, out := e.postRaw([]byte(tc.body), tc.accept, cred{})
		if status != tc.status {
			t.Errorf("%s (%s): HTTP %d, want %d", tc.body, tc.accept, status, tc.status)
		}
		if _, has := out["data"]; has {
			t.Errorf("%s (%s): a data entry: %s", tc.body, tc.accept, out["data"])
		}
		if _, has := out["errors"]; !has {
			t.Errorf("%s (%s): no errors", tc.body, tc.accept)
		}
	}
}
