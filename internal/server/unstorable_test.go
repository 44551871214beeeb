package server_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/btk-project/btk/internal/server"
	"github.com/btk-project/btk/internal/web"
)

// Input the stores cannot hold is the caller's, the same answer on SQLite
// and PostgreSQL (docs/security.md#errors-tell-the-truth): a NUL character
// (PostgreSQL's text holds none; it answered INTERNAL with an ERROR line,
// and an anonymous login with one was never throttled) and a time outside
// the years 1678-2262 (a usage range in year 1 became the zero time: INTERNAL
// on both stores). Filters answer BAD_USER_INPUT, lookups by a malformed
// name or id answer as for an unknown one, a login as a wrong password,
// charged to the throttles. Nothing changes, nothing is logged at ERROR.
func TestUnstorableInputIsTheCallers(t *testing.T) {
	e, admin := newAdminEnv(t)
	key := e.createKey(admin, "probe")
	dash := e.dashboard()
	if r := dash.post("/login", url.Values{"email": {adminEmail}, "password": {adminPassword}}); r.StatusCode != http.StatusSeeOther {
		t.Fatalf("dashboard login: %d", r.StatusCode)
	}
	var tenant struct {
		TenantInfo struct{ PublicClientKey string }
	}
	e.must(admin, `{tenantInfo{publicClientKey}}`, nil, &tenant)
	state := func() string {
		var out struct {
			W, S     struct{ Hash string }
			Accounts []struct{ Disabled bool }
			APIKeys  struct{ Nodes []struct{ ID string } }
		}
		e.must(admin, `{w:auditHead{hash} s:auditHead(serverWide:true){hash} accounts{disabled} apiKeys{nodes{id}}}`, nil, &out)
		return fmt.Sprint(out)
	}
	before := state()

	const nul = "a\x00b@example.com"
	for _, c := range []struct {
		who  cred
		q    string
		s    string // $s
		code string // "" when the answer is null, as for an unknown name
	}{
		{cred{}, `query($s:String!){workspaceBranding(publicKey:$s){name}}`, "bpk_x\x00", ""},
		{cred{}, `query($s:String!){workspaceBranding(publicKey:$s){name}}`, tenant.TenantInfo.PublicClientKey + "\x00", ""},
		{admin, `query($s:String){auditEvents(actorEmail:$s){nodes{id}}}`, nul, "BAD_USER_INPUT"},
		{admin, `query($s:String){auditEvents(serverWide:true,actorEmail:$s){nodes{id}}}`, nul, "BAD_USER_INPUT"},
		{admin, `query($s:String){auditEvents(action:$s){nodes{id}}}`, "api_key.created\x00", "BAD_USER_INPUT"},
		{admin, `query($s:String){apiKeyAuditLog(actorEmail:$s){nodes{id}}}`, nul, "BAD_USER_INPUT"},
		{admin, `query($s:ID){apiKeyAuditLog(apiKeyId:$s){nodes{id}}}`, key.ID + "\x00", "BAD_USER_INPUT"},
		{admin, `query($s:ID){auditHead(workspaceId:$s){hash}}`, e.adminWS + "\x00", "NOT_FOUND"},
		{admin, `query($s:ID){verifyAuditChain(workspaceId:$s){intact}}`, e.adminWS + "\x00", "NOT_FOUND"},
		{admin, `mutation($s:String){disableAccount(email:$s){id}}`, adminEmail + "\x00", "NOT_FOUND"},
		{admin, `mutation($s:String){enableAccount(email:$s){id}}`, nul, "NOT_FOUND"},
		// Times the stores cannot hold: year 1 (the zero time once
		// truncated to the period) and past 2262.
		{admin, `query($s:Time){workspaceUsage(since:$s,until:"0001-01-03T00:00:00Z"){points{start}}}`, "0001-01-01T05:00:00Z", "BAD_USER_INPUT"},
		{admin, `query($s:Time){workspaceUsage(since:$s,until:"0001-01-01T05:00:00Z",granularity:HOUR){topKeys{accepted}}}`, "0001-01-01T00:30:00Z", "BAD_USER_INPUT"},
		{admin, `query($s:Time){apiKeys{nodes{usage(since:$s,until:"0001-01-02T00:00:00Z"){start}}}}`, "0001-01-01T00:00:00Z", "BAD_USER_INPUT"},
		{admin, `query($s:Time){apiKey(id:"` + key.ID + `"){usage(since:$s,until:"0001-01-02T00:00:00Z",granularity:HOUR){start}}}`, "0001-01-01T00:00:00Z", "BAD_USER_INPUT"},
		{admin, `query($s:Time){workspaceUsage(until:$s){points{start}}}`, "9999-01-01T00:00:00Z", "BAD_USER_INPUT"},
		{admin, `query($s:Time){auditEvents(since:$s){nodes{id}}}`, "9999-01-01T00:00:00Z", "BAD_USER_INPUT"},
		{admin, `query($s:Time){apiKeyAuditLog(until:$s){nodes{id}}}`, "0001-01-01T00:00:00Z", "BAD_USER_INPUT"},
		{admin, `mutation($s:Time){createApiKey(input:{name:"old",expiresAt:$s}){apiKey{id}}}`, "0001-01-01T00:00:00Z", "BAD_USER_INPUT"},
		{admin, `mutation($s:Time){createApiKey(input:{name:"late",expiresAt:$s}){apiKey{id}}}`, "9999-01-01T00:00:00Z", "BAD_USER_INPUT"},
	} {
		r := e.do(c.who, c.q, map[string]any{"s": c.s})
		if r.Code() != c.code || (c.code == "" && !strings.HasSuffix(string(r.Data), ":null}")) {
			t.Errorf("%s with %q: HTTP %d %q, want %q: %s %+v", c.q, c.s, r.Status, r.Code(), c.code, r.Data, r.Errors)
		}
	}

	// The dashboard: its login form (a NUL, invalid UTF-8) and the audit
	// log's filters.
	for _, email := range []string{nul, "\xff@example.com"} {
		r := dash.post("/login", url.Values{"email": {email}, "password": {"wrong-password"}})
		if r.StatusCode != http.StatusUnauthorized || !strings.Contains(r.body, "Invalid email or password.") {
			t.Errorf("dashboard login as %q: %d", email, r.StatusCode)
		}
	}
	for _, q := range []string{"actor=a%00b", "action=%00", "actor=%FF", "to=0001-01-01", "from=9999-01-01"} {
		if r := dash.get("/audit?" + q); r.StatusCode != http.StatusBadRequest {
			t.Errorf("dashboard /audit?%s: %d", q, r.StatusCode)
		}
	}

	if after := state(); after != before {
		t.Errorf("something changed:\n%s\n%s", before, after)
	}
	if logs := e.logText(); strings.Contains(logs, "level=ERROR") {
		t.Fatalf("an ERROR line:\n%s", logs)
	}

	// A login with a NUL in its email is a wrong password: charged to the
	// address's budget (30 a minute), then refused like any other.
	from := clientFrom(t, 41)
	login := `mutation($e:String!,$p:String!){login(email:$e,password:$p){accessToken}}`
	for i := range 30 {
		r := e.doWith(from, cred{}, login, map[string]any{"e": fmt.Sprintf("a\x00%d@example.com", i), "p": "wrong-password"})
		if r.Code() != "UNAUTHENTICATED" || r.Errors[0].Extensions["reason"] != "BAD_CREDENTIALS" {
			t.Fatalf("attempt %d: %q %+v", i+1, r.Code(), r.Errors)
		}
	}
	for _, email := range []string{"a\x00b@example.com", adminEmail} {
		if r := e.doWith(from, cred{}, login, map[string]any{"e": email, "p": adminPassword}); r.Code() != "RATE_LIMITED" {
			t.Fatalf("attempt 31 as %q: %q %+v", email, r.Code(), r.Errors)
		}
	}
}

// page is a dashboard answer.
type page struct {
	StatusCode int
	body       string
}

// dashboardClient is a browser on a dashboard served like btk serve's.
type dashboardClient struct {
	t   testing.TB
	srv *httptest.Server
	c   *http.Client
}

// dashboard serves the dashboard beside e's GraphQL endpoint, on e's
// service and store (SQLite or PostgreSQL), logging into e's log, and
// returns a browser for it.
func (e *env) dashboard() *dashboardClient {
	log := slog.New(slog.NewTextHandler(lockedWriter{e.logMu, e.logs}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h := server.New(e.svc, e.db, log)
	h.Mount(web.New(e.svc, log, h.ClientIP), web.Patterns...)
	srv := httptest.NewServer(h)
	e.t.Cleanup(srv.Close)
	jar, _ := cookiejar.New(nil)
	return &dashboardClient{t: e.t, srv: srv, c: &http.Client{
		Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

func (d *dashboardClient) do(req *http.Request) page {
	d.t.Helper()
	res, err := d.c.Do(req)
	if err != nil {
		d.t.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return page{res.StatusCode, string(body)}
}

func (d *dashboardClient) get(path string) page {
	req, _ := http.NewRequest(http.MethodGet, d.srv.URL+path, nil)
	return d.do(req)
}

func (d *dashboardClient) post(path string, form url.Values) page {
	req, _ := http.NewRequest(http.MethodPost, d.srv.URL+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", d.srv.URL)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	return d.do(req)
}
