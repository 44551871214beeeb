package web_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/server"
	"github.com/btk-project/btk/internal/store/sqlite"
	"github.com/btk-project/btk/internal/testclock"
	"github.com/btk-project/btk/internal/web"
)

const (
	ownerEmail    = "owner@example.com"
	ownerPassword = "correct-horse-battery"
	adminEmail    = "admin@example.com" // role ADMIN in the owner's workspace
	memberEmail   = "member@example.com"
	userPassword  = "staple-gun-orbit"
)

// env is a real btk server with the dashboard mounted as `btk serve` does:
// a SQLite file in a temp dir, the service, server.New + web.New behind
// httptest, and the log captured.
type env struct {
	t     testing.TB
	svc   *btk.Service
	srv   *httptest.Server
	h     http.Handler
	clock *testclock.Clock
	// ownerActor is the cached actor of owner().
	ownerActor *btk.Actor
	ws         *btk.Workspace // "Default", owned by ownerEmail (also platform admin)
	logMu      sync.Mutex
	logs       bytes.Buffer
}

func newEnv(t testing.TB) *env {
	t.Helper()
	return newWrappedEnv(t, nil)
}

// newWrappedEnv is newEnv with the service and handler on wrap(store): a
// store that fails at will, for the error paths.
func newWrappedEnv(t testing.TB, wrap func(btk.Store) btk.Store) *env {
	t.Helper()
	ctx := context.Background()
	db, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "btk.db"))
	if err != nil {
		t.Fatal(err)
	}
	var st btk.Store = db
	if wrap != nil {
		st = wrap(db)
	}
	clk := &testclock.Clock{} // runs until a test freezes it
	svc, err := btk.NewService(ctx, st, nil, btk.Config{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	boot, err := svc.Bootstrap(ctx, ownerEmail, ownerPassword)
	if err != nil || !boot.Created {
		t.Fatalf("bootstrap: %v", err)
	}
	e := &env{t: t, svc: svc, ws: boot.Workspace, clock: clk}
	log := slog.New(slog.NewTextHandler(logWriter{e}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h := server.New(svc, st, log)
	h.Mount(web.New(svc, log, h.ClientIP), web.Patterns...)
	e.h = h
	e.srv = httptest.NewServer(h)
	t.Cleanup(func() {
		e.srv.Close()
		db.Close()
	})
	return e
}

type logWriter struct{ e *env }

func (w logWriter) Write(p []byte) (int, error) {
	w.e.logMu.Lock()
	defer w.e.logMu.Unlock()
	return w.e.logs.Write(p)
}

func (e *env) logText() string {
	e.logMu.Lock()
	defer e.logMu.Unlock()
	return e.logs.String()
}

// actor returns a domain actor for a login, for setting up state directly.
func (e *env) actor(email, password, workspaceID string) *btk.Actor {
	e.t.Helper()
	ctx := context.Background()
	info, err := e.svc.Login(ctx, email, password, workspaceID)
	if err != nil {
		e.t.Fatalf("login %s: %v", email, err)
	}
	a, err := e.svc.ResolveSession(ctx, info.Token)
	if err != nil {
		e.t.Fatal(err)
	}
	return a
}

// owner is the bootstrap account's actor (OWNER of Default, platform admin),
// logged in once: each password check is an argon2id hash.
func (e *env) owner() *btk.Actor {
	if e.ownerActor == nil {
		e.ownerActor = e.actor(ownerEmail, ownerPassword, e.ws.ID)
	}
	return e.ownerActor
}

// addUser creates an account with a role in a workspace.
func (e *env) addUser(email string, ws string, role btk.Role) {
	e.t.Helper()
	ctx := context.Background()
	op := e.owner()
	acct, err := e.svc.CreateAccount(ctx, op, email, userPassword, false)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.svc.SetMembership(ctx, op, ws, acct.ID, role); err != nil {
		e.t.Fatal(err)
	}
}

// workspace creates a workspace on a plan, as the platform admin.
func (e *env) workspace(name string, plan btk.Plan) *btk.Workspace {
	e.t.Helper()
	w, err := e.svc.CreateWorkspace(context.Background(), e.owner(), name, plan)
	if err != nil {
		e.t.Fatal(err)
	}
	return w
}

// createKey issues a key directly through the service.
func (e *env) createKey(a *btk.Actor, name string) *btk.NewKeyResult {
	e.t.Helper()
	res, err := e.svc.CreateKey(context.Background(), a, btk.CreateKeyInput{Name: name})
	if err != nil {
		e.t.Fatal(err)
	}
	return res
}

// tenantInfo calls /graphql with an API key and returns the HTTP status.
func (e *env) tenantInfo(key string) int {
	e.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/graphql", strings.NewReader(`{"query":"{ tenantInfo { id name } }"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Api-Key", key)
	c := &http.Client{Timeout: 10 * time.Second}
	res, err := c.Do(req)
	if err != nil {
		e.t.Fatalf("POST /graphql: %v", err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode == http.StatusOK {
		var out struct {
			Data struct{ TenantInfo struct{ ID string } }
		}
		if err := json.Unmarshal(body, &out); err != nil || out.Data.TenantInfo.ID == "" {
			e.t.Errorf("tenantInfo answered 200 without the workspace: %s", body)
		}
	}
	return res.StatusCode
}

// browser is an HTTP client that behaves like a browser on the dashboard: it
// keeps cookies, does not follow redirects (tests look at them), and sends
// Sec-Fetch-Site: same-origin on its posts as a browser does.
type browser struct {
	e      *env
	c      *http.Client
	origin string
	// seen records every response, for checks across a whole flow.
	seen []*resp
}

type resp struct {
	Method, Path string
	Status       int
	Header       http.Header
	Body         string
}

func (e *env) browser() *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{e: e, origin: e.srv.URL, c: &http.Client{
		Jar: jar, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

func (b *browser) do(req *http.Request) *resp {
	b.e.t.Helper()
	res, err := b.c.Do(req)
	if err != nil {
		b.e.t.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	r := &resp{Method: req.Method, Path: req.URL.RequestURI(), Status: res.StatusCode, Header: res.Header, Body: string(body)}
	b.seen = append(b.seen, r)
	return r
}

func (b *browser) get(path string) *resp {
	b.e.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, b.e.srv.URL+path, nil)
	return b.do(req)
}

func (b *browser) post(path string, form url.Values) *resp {
	b.e.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, b.e.srv.URL+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", b.origin)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	return b.do(req)
}

// login logs in through the form and fails the test unless it worked.
func (b *browser) login(email, password string) {
	b.e.t.Helper()
	r := b.post("/login", url.Values{"email": {email}, "password": {password}})
	if r.Status != http.StatusSeeOther || r.Header.Get("Location") != "/keys" {
		b.e.t.Fatalf("login %s: %d %s %s", email, r.Status, r.Header.Get("Location"), r.Body)
	}
}

// loggedIn is a new browser logged in as email.
func (e *env) loggedIn(email, password string) *browser {
	e.t.Helper()
	b := e.browser()
	b.login(email, password)
	return b
}

// newKey reads the plaintext shown once on a page.
func newKey(body string) string {
	const open = `<code id="new-key" class="secret" tabindex="0" autofocus aria-describedby="newkey-warn">`
	i := strings.Index(body, open)
	if i < 0 {
		return ""
	}
	rest := body[i+len(open):]
	return rest[:strings.Index(rest, "<")]
}
