package web_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/web"
)

// htmlChecks are what no dashboard page may contain: inline script, inline
// event handlers or style attributes (the CSP would block them anyway).
var htmlChecks = []*regexp.Regexp{
	regexp.MustCompile(`<script(?:\s[^>]*)?>[^<]`),
	regexp.MustCompile(`<script(?:(?:\s+[a-z-]+(?:="[^"]*")?)*)>`), // matched below for src
	regexp.MustCompile(`\son[a-z]+=`),
	regexp.MustCompile(`\sstyle=`),
	regexp.MustCompile(`<style`),
}

var controlID = regexp.MustCompile(`<(?:input|select|textarea)\s[^>]*?id="([^"]+)"`)

func checkPage(t *testing.T, r *resp) {
	t.Helper()
	h := r.Header
	if got := h.Get("Content-Security-Policy"); got != "default-src 'self'; frame-ancestors 'none'" {
		t.Errorf("%s %s: Content-Security-Policy %q", r.Method, r.Path, got)
	}
	for k, want := range map[string]string{"X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff", "Cache-Control": "no-store"} {
		if got := h.Get(k); got != want {
			t.Errorf("%s %s: %s %q, want %q", r.Method, r.Path, k, got, want)
		}
	}
	if !strings.HasPrefix(h.Get("Content-Type"), "text/html") {
		return
	}
	// Every form control is labelled.
	for _, m := range controlID.FindAllStringSubmatch(r.Body, -1) {
		if !strings.Contains(r.Body, `<label for="`+m[1]+`">`) {
			t.Errorf("%s %s: the control #%s has no label", r.Method, r.Path, m[1])
		}
	}
	for i, re := range htmlChecks {
		for _, m := range re.FindAllString(r.Body, -1) {
			if i == 1 && strings.Contains(m, ` src="/assets/`) {
				continue
			}
			t.Errorf("%s %s: inline code or style %q", r.Method, r.Path, m)
		}
	}
}

func keyID(t *testing.T, e *env, name string) string {
	t.Helper()
	keys, _, err := e.svc.ListKeys(context.Background(), e.owner(), true, btk.Page{First: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if k.Name == name && k.RevokedAt == nil {
			return k.ID
		}
	}
	t.Fatalf("no active key %q", name)
	return ""
}

// TestSecurityHeaders visits every page, as anonymous and logged in, and
// checks the headers and that no page carries inline script or style.
func TestSecurityHeaders(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.createKey(e.owner(), "web").Key.ID
	b := e.browser()
	for _, p := range []string{"/", "/login", "/keys", "/audit", "/workspaces", "/keys/nope"} {
		b.get(p)
	}
	b.login(ownerEmail, ownerPassword)
	for _, p := range []string{"/", "/login", "/keys", "/keys?status=all", "/audit", "/workspaces", "/keys/" + id + "/rotate", "/keys/" + id + "/revoke", "/keys/nope", "/keys/not-a-key/rotate"} {
		b.get(p)
	}
	b.post("/keys", url.Values{"name": {"second"}})
	b.post("/keys", url.Values{"name": {""}})
	b.post("/keys/"+id+"/rotate", url.Values{"password": {"wrong"}})
	b.post("/keys/"+id+"/rotate", url.Values{"password": {ownerPassword}})
	b.post("/logout", nil)
	if len(b.seen) < 20 {
		t.Fatalf("only %d pages visited", len(b.seen))
	}
	for _, r := range b.seen {
		checkPage(t, r)
	}
	// Assets are public and cacheable, but framed by the same policy.
	css := b.get("/assets/style.css")
	if css.Status != 200 || !strings.HasPrefix(css.Header.Get("Content-Type"), "text/css") || css.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("style.css: %d %v", css.Status, css.Header)
	}
	if r := b.get("/assets/"); r.Status != http.StatusNotFound {
		t.Errorf("/assets/ lists the directory: %d", r.Status)
	}
	if js := b.get("/assets/copy.js"); js.Status != 200 || !strings.Contains(js.Header.Get("Content-Type"), "javascript") {
		t.Errorf("copy.js: %d %v", js.Status, js.Header)
	}
	// The server's own endpoints are unchanged beside the dashboard.
	if r := b.get("/healthz"); r.Status != 200 {
		t.Errorf("/healthz: %d", r.Status)
	}
	if r := b.get("/graphql"); r.Status != http.StatusMethodNotAllowed {
		t.Errorf("GET /graphql: %d, want 405", r.Status)
	}
}

func sessionCookie(t *testing.T, r *resp) *http.Cookie {
	t.Helper()
	for _, c := range (&http.Response{Header: r.Header}).Cookies() {
		if c.Name == web.CookieName {
			return c
		}
	}
	t.Fatalf("%s %s set no %s cookie", r.Method, r.Path, web.CookieName)
	return nil
}

// TestCookieFlags checks the session cookie over plain HTTP and over TLS,
// and that logout ends the server-side session, not just the cookie.
func TestCookieFlags(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := e.browser()
	r := b.post("/login", url.Values{"email": {ownerEmail}, "password": {ownerPassword}})
	c := sessionCookie(t, r)
	if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" || c.Secure {
		t.Errorf("cookie over HTTP: %s", r.Header.Get("Set-Cookie"))
	}
	if _, err := e.svc.ResolveSession(context.Background(), c.Value); err != nil {
		t.Fatalf("the cookie is not a session: %v", err)
	}

	tlsSrv := httptest.NewTLSServer(e.h)
	defer tlsSrv.Close()
	jar, _ := cookiejar.New(nil)
	tb := &browser{e: e, origin: tlsSrv.URL, c: tlsSrv.Client()}
	tb.c.Jar = jar
	tb.c.Timeout = 10 * time.Second
	tb.c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	tb.c.Transport.(*http.Transport).TLSClientConfig.MinVersion = tls.VersionTLS12
	req, _ := http.NewRequest(http.MethodPost, tlsSrv.URL+"/login", strings.NewReader(url.Values{"email": {ownerEmail}, "password": {ownerPassword}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	tr := tb.do(req)
	if tc := sessionCookie(t, tr); !tc.Secure || !tc.HttpOnly || tc.SameSite != http.SameSiteStrictMode {
		t.Errorf("cookie over TLS: %s", tr.Header.Get("Set-Cookie"))
	}

	out := b.post("/logout", nil)
	if out.Status != http.StatusSeeOther || out.Header.Get("Location") != "/login" {
		t.Errorf("logout: %d %s", out.Status, out.Header.Get("Location"))
	}
	if cleared := sessionCookie(t, out); cleared.MaxAge >= 0 || cleared.Value != "" {
		t.Errorf("logout did not clear the cookie: %s", out.Header.Get("Set-Cookie"))
	}
	if _, err := e.svc.ResolveSession(context.Background(), c.Value); btk.ErrorCode(err) != btk.CodeUnauthenticated {
		t.Errorf("the session still works after logout: %v", err)
	}
	// A stale cookie sends the browser back to the login page.
	stale := e.browser()
	u, _ := url.Parse(e.srv.URL)
	stale.c.Jar.SetCookies(u, []*http.Cookie{{Name: web.CookieName, Value: c.Value}})
	if r := stale.get("/keys"); r.Status != http.StatusSeeOther || r.Header.Get("Location") != "/login" {
		t.Errorf("stale cookie on /keys: %d %s", r.Status, r.Header.Get("Location"))
	}
}

// TestCrossOriginPostRefused sends the dashboard's forms from another site,
// with a valid session cookie: every one is refused and nothing changes.
func TestCrossOriginPostRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	k := e.createKey(e.owner(), "target")
	b := e.loggedIn(ownerEmail, ownerPassword)
	posts := []struct {
		path string
		form url.Values
	}{
		{"/keys", url.Values{"name": {"planted"}}},
		{"/keys/" + k.Key.ID + "/revoke", nil},
		{"/keys/" + k.Key.ID + "/rotate", url.Values{"password": {ownerPassword}}},
		{"/logout", nil},
		{"/login", url.Values{"email": {ownerEmail}, "password": {ownerPassword}}},
	}
	for _, p := range posts {
		for _, hdr := range []map[string]string{
			{"Sec-Fetch-Site": "cross-site"},
			{"Origin": "https://evil.example"}, // an older browser: no Sec-Fetch-Site
		} {
			req, _ := http.NewRequest(http.MethodPost, e.srv.URL+p.path, strings.NewReader(p.form.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			for k, v := range hdr {
				req.Header.Set(k, v)
			}
			r := b.do(req)
			if r.Status != http.StatusForbidden {
				t.Errorf("cross-origin POST %s (%v): %d, want 403", p.path, hdr, r.Status)
			}
			if len(r.Header.Values("Set-Cookie")) > 0 {
				t.Errorf("cross-origin POST %s set a cookie", p.path)
			}
		}
	}
	if got := e.tenantInfo(k.Plaintext); got != 200 {
		t.Errorf("the key after cross-origin posts: HTTP %d, want 200", got)
	}
	keys, _, _ := e.svc.ListKeys(context.Background(), e.owner(), true, btk.Page{First: 10})
	if len(keys) != 1 {
		t.Errorf("%d keys after cross-origin posts, want 1", len(keys))
	}
	if r := b.get("/keys"); r.Status != 200 {
		t.Errorf("the session ended by a cross-origin logout: %d", r.Status)
	}
}

// TestPlaintextShownOnceInBody runs create, rotate and revoke and looks at
// every response and log line: the plaintext is in the body of the answer to
// the create or rotate form only, that answer is no-store, and nothing else
// (a Location, a cookie, a later page, the log) ever carries it.
func TestPlaintextShownOnceInBody(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := e.loggedIn(ownerEmail, ownerPassword)
	b.get("/keys")
	created := b.post("/keys", url.Values{"name": {"ci"}, "per_minute": {"60"}, "per_day": {"1,000"}})
	first := newKey(created.Body)
	if created.Status != 200 || !btk.WellFormedKey(first) {
		t.Fatalf("create: %d, key %q\n%s", created.Status, first, created.Body)
	}
	if !strings.Contains(created.Body, "only time it is shown") {
		t.Error("the create page does not warn that the key is shown once")
	}
	if e.tenantInfo(first) != 200 {
		t.Fatal("the created key does not work")
	}
	id := keyID(t, e, "ci")
	k, _ := e.svc.Key(context.Background(), e.owner(), id)
	if *k.RateLimitPerMinute != 60 || *k.RateLimitPerDay != 1000 {
		t.Errorf("limits %d/%d, want 60/1000", *k.RateLimitPerMinute, *k.RateLimitPerDay)
	}
	after := b.get("/keys")
	if strings.Contains(after.Body, first) || newKey(after.Body) != "" {
		t.Fatal("the keys page shows the plaintext again")
	}
	b.get("/keys/" + id + "/rotate")
	rotated := b.post("/keys/"+id+"/rotate", url.Values{"password": {ownerPassword}})
	second := newKey(rotated.Body)
	if rotated.Status != 200 || !btk.WellFormedKey(second) || second == first {
		t.Fatalf("rotate: %d, key %q", rotated.Status, second)
	}
	if e.tenantInfo(first) != 401 || e.tenantInfo(second) != 200 {
		t.Fatal("rotation did not replace the key")
	}
	newID := keyID(t, e, "ci")
	b.get("/keys/" + newID + "/revoke")
	revoked := b.post("/keys/"+newID+"/revoke", nil)
	if revoked.Status != http.StatusSeeOther || e.tenantInfo(second) != 401 {
		t.Fatalf("revoke: %d %s", revoked.Status, revoked.Header.Get("Location"))
	}
	b.get(revoked.Header.Get("Location"))
	if r := b.get("/keys/" + newID + "/rotate"); !strings.Contains(r.Body, "cannot be rotated") || strings.Contains(r.Body, `name="password"`) {
		t.Errorf("the rotate page of a revoked key offers rotation:\n%s", r.Body)
	}
	b.get("/audit")
	b.post("/logout", nil)

	for _, r := range b.seen {
		checkPage(t, r)
		for _, key := range []string{first, second} {
			for name, vals := range r.Header {
				for _, v := range vals {
					if strings.Contains(v, key) || strings.Contains(v, url.QueryEscape(key)) {
						t.Errorf("%s %s: the plaintext is in the %s header", r.Method, r.Path, name)
					}
				}
			}
			if strings.Contains(r.Path, key) {
				t.Errorf("the plaintext is in a URL: %s", r.Path)
			}
			if strings.Contains(r.Body, key) && r != created && r != rotated {
				t.Errorf("%s %s: the plaintext is in the body", r.Method, r.Path)
			}
		}
	}
	logs := e.logText()
	if !strings.Contains(logs, `route="GET /keys`) {
		t.Errorf("the request log is not on; the check below would prove nothing:\n%s", logs)
	}
	for _, secret := range []string{first, second, first[len(first)-20:], second[len(second)-20:], ownerPassword} {
		if strings.Contains(logs, secret) {
			t.Errorf("a secret is in the log:\n%s", logs)
		}
	}
}

// TestRoleGating: an ADMIN reads the keys without controls and cannot
// change them by posting the forms anyway; a MEMBER sees no keys.
func TestRoleGating(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	k := e.createKey(e.owner(), "prod-backend")
	e.addUser(adminEmail, e.ws.ID, btk.RoleAdmin)
	e.addUser(memberEmail, e.ws.ID, btk.RoleMember)

	admin := e.loggedIn(adminEmail, userPassword)
	page := admin.get("/keys")
	if page.Status != 200 || !strings.Contains(page.Body, "prod-backend") {
		t.Fatalf("ADMIN /keys: %d\n%s", page.Status, page.Body)
	}
	for _, control := range []string{`action="/keys"`, "/rotate", "/revoke", "Create key"} {
		if strings.Contains(page.Body, control) {
			t.Errorf("ADMIN sees the control %q", control)
		}
	}
	if r := admin.post("/keys", url.Values{"name": {"sneaky"}}); r.Status != http.StatusForbidden || newKey(r.Body) != "" {
		t.Errorf("ADMIN create: %d", r.Status)
	}
	if r := admin.get("/keys/" + k.Key.ID + "/revoke"); r.Status != http.StatusForbidden {
		t.Errorf("ADMIN revoke page: %d", r.Status)
	}
	if r := admin.post("/keys/"+k.Key.ID+"/revoke", nil); r.Status != http.StatusForbidden {
		t.Errorf("ADMIN revoke: %d", r.Status)
	}
	if r := admin.post("/keys/"+k.Key.ID+"/rotate", url.Values{"password": {userPassword}}); r.Status != http.StatusForbidden || newKey(r.Body) != "" {
		t.Errorf("ADMIN rotate: %d", r.Status)
	}
	if e.tenantInfo(k.Plaintext) != 200 {
		t.Error("the ADMIN changed the key")
	}
	if r := admin.get("/audit"); r.Status != 200 || !strings.Contains(r.Body, "for workspace owners") || strings.Contains(r.Body, "api_key.created") {
		t.Errorf("ADMIN /audit: %d", r.Status)
	}
	if r := admin.get("/workspaces"); !strings.Contains(r.Body, "Only platform admins") {
		t.Errorf("ADMIN /workspaces: %d", r.Status)
	}

	member := e.loggedIn(memberEmail, userPassword)
	page = member.get("/keys")
	if page.Status != 200 || strings.Contains(page.Body, "prod-backend") || !strings.Contains(page.Body, "managed by workspace owners") {
		t.Errorf("MEMBER /keys: %d\n%s", page.Status, page.Body)
	}
	if r := member.post("/keys", url.Values{"name": {"sneaky"}}); r.Status != http.StatusForbidden {
		t.Errorf("MEMBER create: %d", r.Status)
	}
	for _, b := range []*browser{admin, member} {
		for _, r := range b.seen {
			checkPage(t, r)
		}
	}
}

// TestPlanGating: on CLOUD_STARTER the owner is told why keys cannot be
// created or rotated, the forms are refused, and revoking still works.
func TestPlanGating(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	starter := e.workspace("Starter Co", btk.PlanCloudPro)
	e.addUser("starter@example.com", starter.ID, btk.RoleOwner)
	so := e.actor("starter@example.com", userPassword, "")
	k := e.createKey(so, "legacy")
	if _, err := e.svc.SetWorkspacePlan(context.Background(), e.owner(), starter.ID, btk.PlanCloudStarter); err != nil {
		t.Fatal(err)
	}
	b := e.loggedIn("starter@example.com", userPassword)
	page := b.get("/keys")
	if !strings.Contains(page.Body, `id="plan-note"`) || strings.Contains(page.Body, `action="/keys"`) || !strings.Contains(page.Body, "Cloud Starter") {
		t.Errorf("CLOUD_STARTER /keys lacks the plan note or shows the form:\n%s", page.Body)
	}
	if !strings.Contains(page.Body, "legacy") {
		t.Error("the existing key is not listed")
	}
	rot := b.get("/keys/" + k.Key.ID + "/rotate")
	if !strings.Contains(rot.Body, `id="plan-note"`) || strings.Contains(rot.Body, `name="password"`) {
		t.Errorf("CLOUD_STARTER rotate page:\n%s", rot.Body)
	}
	if r := b.post("/keys", url.Values{"name": {"new"}}); r.Status != http.StatusForbidden || newKey(r.Body) != "" {
		t.Errorf("CLOUD_STARTER create: %d", r.Status)
	}
	if r := b.post("/keys/"+k.Key.ID+"/rotate", url.Values{"password": {userPassword}}); r.Status != http.StatusForbidden || !strings.Contains(r.Body, "plan") || newKey(r.Body) != "" {
		t.Errorf("CLOUD_STARTER rotate: %d", r.Status)
	}
	if e.tenantInfo(k.Plaintext) != 200 {
		t.Fatal("an issued key stopped working on CLOUD_STARTER")
	}
	if r := b.post("/keys/"+k.Key.ID+"/revoke", nil); r.Status != http.StatusSeeOther {
		t.Fatalf("CLOUD_STARTER revoke: %d", r.Status)
	}
	if e.tenantInfo(k.Plaintext) != 401 {
		t.Error("revoke on CLOUD_STARTER did not take")
	}
}

// TestLoginThrottledLikeGraphQL: the form's password attempts are counted by
// the same domain gate as GraphQL login, per account and per address.
func TestLoginThrottledLikeGraphQL(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.clock.Freeze()
	b := e.browser()
	var last *resp
	// 5 attempts a minute per account and address (docs/security.md#password-throttles).
	for i := range 6 {
		last = b.post("/login", url.Values{"email": {ownerEmail}, "password": {"wrong-password"}})
		if i < 5 && last.Status != http.StatusUnauthorized {
			t.Fatalf("wrong password %d: %d, want 401", i+1, last.Status)
		}
	}
	if last.Status != http.StatusTooManyRequests || !strings.Contains(last.Body, "Too many password attempts") {
		t.Fatalf("6th wrong password: %d\n%s", last.Status, last.Body)
	}
	if len(last.Header.Values("Set-Cookie")) > 0 {
		t.Error("a refused login set a cookie")
	}
	// The same budget: GraphQL login is refused too, even with the right password.
	body, _ := json.Marshal(map[string]any{
		"query":     `mutation($e: String!, $p: String!) { login(email: $e, password: $p) { accessToken } }`,
		"variables": map[string]string{"e": ownerEmail, "p": ownerPassword},
	})
	req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/graphql", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	r := b.do(req)
	if !strings.Contains(r.Body, "RATE_LIMITED") {
		t.Errorf("GraphQL login after the dashboard's attempts: %s", r.Body)
	}
	wrong := e.browser().post("/login", url.Values{"email": {"nobody@example.com"}, "password": {"x"}})
	if wrong.Status != http.StatusUnauthorized || !strings.Contains(wrong.Body, "Invalid email or password") {
		t.Errorf("unknown email: %d", wrong.Status)
	}
}

// TestLoginChoosesWorkspace: an account in several workspaces picks one.
func TestLoginChoosesWorkspace(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	acme := e.workspace("Acme", btk.PlanCloudPro)
	globex := e.workspace("Globex", btk.PlanCloudPro)
	e.addUser("two@example.com", acme.ID, btk.RoleOwner)
	if err := e.svc.SetMembership(context.Background(), e.owner(), globex.ID, e.actor("two@example.com", userPassword, acme.ID).AccountID, btk.RoleAdmin); err != nil {
		t.Fatal(err)
	}
	b := e.browser()
	// A wrong password learns nothing about the workspaces.
	r := b.post("/login", url.Values{"email": {"two@example.com"}, "password": {"wrong-password"}})
	if r.Status != http.StatusUnauthorized || strings.Contains(r.Body, "Globex") || strings.Contains(r.Body, "<select") {
		t.Errorf("wrong password for a two-workspace account: %d", r.Status)
	}
	// GraphQL login keeps its contract: BAD_USER_INPUT, asking for workspaceId.
	body, _ := json.Marshal(map[string]any{
		"query":     `mutation($e: String!, $p: String!) { login(email: $e, password: $p) { accessToken } }`,
		"variables": map[string]string{"e": "two@example.com", "p": userPassword},
	})
	req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/graphql", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if g := b.do(req); !strings.Contains(g.Body, `"code":"BAD_USER_INPUT"`) || !strings.Contains(g.Body, "belongs to 2 workspaces") {
		t.Errorf("GraphQL login without a workspace: %s", g.Body)
	}
	// One login, one password: the first workspace opens, the header's
	// switcher offers the others and switches without the password.
	r = b.post("/login", url.Values{"email": {"two@example.com"}, "password": {userPassword}})
	if r.Status != http.StatusSeeOther || r.Header.Get("Location") != "/keys" {
		t.Fatalf("login without a workspace: %d", r.Status)
	}
	page := b.get("/keys")
	for _, want := range []string{`<form method="post" action="/switch"`, `<option value="` + acme.ID + `" selected>Acme (owner)`, `<option value="` + globex.ID + `">Globex (admin)`} {
		if !strings.Contains(page.Body, want) {
			t.Errorf("the switcher lacks %q", want)
		}
	}
	if strings.Contains(page.Body, userPassword) {
		t.Error("the password is echoed into the page")
	}
	r = b.post("/switch", url.Values{"workspace": {globex.ID}})
	if r.Status != http.StatusSeeOther {
		t.Fatalf("switch: %d", r.Status)
	}
	if page := b.get("/keys"); !strings.Contains(page.Body, `<option value="`+globex.ID+`" selected>Globex (admin)`) || strings.Contains(page.Body, `href="/audit"`) {
		t.Error("the session is not in the chosen workspace, or an ADMIN is offered the audit log")
	}
	// A workspace the account is not a member of cannot be switched to.
	if r := b.post("/switch", url.Values{"workspace": {e.ws.ID}}); r.Status != http.StatusNotFound {
		t.Errorf("switch to a foreign workspace: %d", r.Status)
	}
	// Login naming a workspace still opens that one.
	r = e.browser().post("/login", url.Values{"email": {"two@example.com"}, "password": {userPassword}, "workspace": {globex.ID}})
	if r.Status != http.StatusSeeOther {
		t.Fatalf("login with a workspace: %d", r.Status)
	}
	// The bootstrap owner has one membership: no choice.
	e.browser().login(ownerEmail, ownerPassword)
}

// TestImpersonate: a platform admin picks a workspace and acts as its owner;
// everyone else is told the page is not for them.
func TestImpersonate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	acme := e.workspace("Acme", btk.PlanCloudPro)
	b := e.loggedIn(ownerEmail, ownerPassword) // platform admin and OWNER of Default
	before := sessionCookie(t, b.seen[0]).Value
	list := b.get("/workspaces")
	if !strings.Contains(list.Body, "Acme") || !strings.Contains(list.Body, `action="/workspaces/`+acme.ID+`/impersonate"`) {
		t.Fatalf("/workspaces:\n%s", list.Body)
	}
	r := b.post("/workspaces/"+acme.ID+"/impersonate", nil)
	if r.Status != http.StatusSeeOther || r.Header.Get("Location") != "/keys" {
		t.Fatalf("impersonate: %d %s", r.Status, r.Header.Get("Location"))
	}
	sessionCookie(t, r)
	page := b.get("/keys")
	if !strings.Contains(page.Body, `<span class="ws-name">Acme</span>`) || !strings.Contains(page.Body, "as a platform admin") {
		t.Fatalf("after impersonation:\n%s", page.Body)
	}
	created := b.post("/keys", url.Values{"name": {"support-fix"}})
	if !btk.WellFormedKey(newKey(created.Body)) {
		t.Fatalf("impersonating owner could not create a key: %d", created.Status)
	}
	if _, err := e.svc.ResolveSession(context.Background(), before); err == nil {
		t.Error("the session impersonation replaced is still alive")
	}
	audit := b.get("/audit")
	if !strings.Contains(audit.Body, `<span class="badge">as platform admin</span>`) || strings.Contains(audit.Body, "impersonated by") {
		t.Error("the audit log does not mark the impersonated change")
	}

	e.addUser(memberEmail, acme.ID, btk.RoleOwner)
	other := e.loggedIn(memberEmail, userPassword)
	if r := other.post("/workspaces/"+e.ws.ID+"/impersonate", nil); r.Status != http.StatusForbidden {
		t.Errorf("a non-admin impersonating: %d", r.Status)
	}
}

// TestAuditPaging: newest first, 25 a page, cursor links to older events.
func TestAuditPaging(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	owner := e.owner()
	for i := range 30 {
		e.createKey(owner, fmt.Sprintf("key-%02d", i))
	}
	b := e.loggedIn(ownerEmail, ownerPassword)
	// 30 keys created, and the logins that audit_events records too.
	all, _, err := e.svc.AuditEvents(context.Background(), owner, btk.AuditFilter{Page: btk.Page{First: 100}})
	if err != nil || len(all) < 31 || len(all) > 50 {
		t.Fatalf("%d events (%v)", len(all), err)
	}
	const row = `<td data-label="Time"`
	first := b.get("/audit")
	if rows := strings.Count(first.Body, row); rows != 25 {
		t.Fatalf("first page: %d rows, want 25", rows)
	}
	if !strings.Contains(first.Body, "Logged in") {
		t.Error("the login of this browser is not on the first page")
	}
	if i29, i10 := strings.Index(first.Body, "key-29"), strings.Index(first.Body, "key-10"); i29 < 0 || i10 < 0 || i29 > i10 {
		t.Error("the first page is not newest first")
	}
	m := regexp.MustCompile(`href="/audit\?after=([^"]+)"`).FindStringSubmatch(first.Body)
	if m == nil {
		t.Fatal("no link to older events")
	}
	older := b.get("/audit?after=" + m[1])
	if n := strings.Count(older.Body, row); n != len(all)-25 || !strings.Contains(older.Body, "key-00") || strings.Contains(older.Body, "after=") {
		t.Errorf("second page: %d rows, want %d", n, len(all)-25)
	}
	if !strings.Contains(older.Body, `href="/audit">← Newest`) {
		t.Error("no link back to the newest events")
	}
	if r := b.get("/audit?after=bogus"); r.Status != http.StatusBadRequest {
		t.Errorf("a bad cursor: %d", r.Status)
	}
}

// failingReads is a store whose reads fail while fail is set.
type failingReads struct {
	btk.Store
	fail *atomic.Bool
}

func (s failingReads) Read(ctx context.Context, fn func(btk.Tx) error) error {
	if s.fail.Load() {
		return errors.New("injected read failure")
	}
	return s.Store.Read(ctx, fn)
}

// A dashboard request that fails inside is logged at ERROR with its path,
// and a key pasted into the path is cut to its display prefix there
// (docs/security.md#storage-logs-and-revocation).
func TestFailedRequestLogRedactsKeys(t *testing.T) {
	fail := &atomic.Bool{}
	e := newWrappedEnv(t, func(s btk.Store) btk.Store { return failingReads{s, fail} })
	key := e.createKey(e.owner(), "pasted").Plaintext
	b := e.loggedIn(ownerEmail, ownerPassword)
	fail.Store(true)
	if r := b.get("/keys/" + key); r.Status != http.StatusInternalServerError {
		t.Fatalf("GET /keys/KEY on a failing store: HTTP %d", r.Status)
	}
	logs := e.logText()
	if strings.Contains(logs, key[btk.DisplayPrefixLen:]) {
		t.Fatalf("the log holds the key:\n%s", logs)
	}
	want := `level=ERROR msg="dashboard request failed" path=/keys/` + key[:btk.DisplayPrefixLen] + "…"
	if !strings.Contains(logs, want) {
		t.Fatalf("the log lacks %q:\n%s", want, logs)
	}
}

// The access log names a dashboard request's route, not its path: a secret
// pasted after /keys/ is not logged, whether the browser is logged in (404)
// or sent to the login page (303).
func TestAccessLogNamesDashboardRoutes(t *testing.T) {
	e := newEnv(t)
	e.browser().get("/keys/QSECRET5")
	b := e.loggedIn(ownerEmail, ownerPassword)
	if r := b.get("/keys/QSECRET6/rotate"); r.Status != http.StatusNotFound {
		t.Errorf("/keys/QSECRET6/rotate: %d", r.Status)
	}
	logs := e.logText()
	if strings.Contains(logs, "QSECRET") {
		t.Errorf("the log holds what was pasted into a path:\n%s", logs)
	}
	for _, want := range []string{`route="GET /keys/{id}" status=303`, `route="GET /keys/{id}/rotate" status=404`} {
		if !strings.Contains(logs, want) {
			t.Errorf("the log lacks %s:\n%s", want, logs)
		}
	}
}
