package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/server"
	"github.com/btk-project/btk/internal/store"
	"github.com/btk-project/btk/internal/store/postgres/pgtest"
	"github.com/btk-project/btk/internal/testclock"
)

const (
	adminEmail    = "admin@example.com"
	adminPassword = "correct-horse-battery"
)

// env is a real btk server: a SQLite file in a temp dir (or, under
// TestPostgres, a PostgreSQL schema of its own), the service and the HTTP
// handler behind httptest.
type env struct {
	t       testing.TB
	svc     *btk.Service
	db      btk.Store
	dbPath  string // the --db value: a file path or a postgres:// URL
	srv     *httptest.Server
	clock   *testclock.Clock
	logs    *bytes.Buffer
	logMu   *sync.Mutex
	adminWS string // the bootstrap workspace "Default"
}

type envOption func(*btk.Config)

func newEnv(t testing.TB, opts ...envOption) *env {
	t.Helper()
	return newWrappedEnv(t, nil, opts...)
}

// newAdminEnv is newEnv and the session of its bootstrap admin (OWNER of
// Default, platform admin): the opening of most tests.
func newAdminEnv(t testing.TB, opts ...envOption) (*env, cred) {
	t.Helper()
	e := newEnv(t, opts...)
	return e, e.admin()
}

// newWrappedEnv is newEnv with the service and handler on wrap(store): a
// store that fails at the boundary, for the error paths.
func newWrappedEnv(t testing.TB, wrap func(btk.Store) btk.Store, opts ...envOption) *env {
	t.Helper()
	path := filepath.Join(t.TempDir(), "btk.db")
	if onPostgres(t) || onRedis(t) {
		path = pgtest.URL(t)
	}
	return newEnvOn(t, path, wrap, opts...)
}

// newEnvOn is newWrappedEnv on the database path names: a file or a
// postgres:// URL.
func newEnvOn(t testing.TB, path string, wrap func(btk.Store) btk.Store, opts ...envOption) *env {
	t.Helper()
	ctx := context.Background()
	clk := testclock.Stopped()
	cfg := btk.Config{Now: clk.Now}
	for _, o := range opts {
		o(&cfg)
	}
	if onRedis(t) {
		useRedis(t, &cfg, clk.Now)
	}
	// With shared state (Redis), other instances may open the database too.
	db, err := store.Open(ctx, path, cfg.KeyGate != nil)
	if err != nil {
		t.Fatal(err)
	}
	var st btk.Store = db
	if wrap != nil {
		st = wrap(db)
	}
	svc, err := btk.NewService(ctx, st, nil, cfg)
	if err != nil {
		t.Fatal(err)
	}
	boot, err := svc.Bootstrap(ctx, adminEmail, adminPassword)
	if err != nil || !boot.Created {
		t.Fatalf("bootstrap: %v %+v", err, boot)
	}
	e := &env{t: t, svc: svc, db: db, dbPath: path, clock: clk, logs: &bytes.Buffer{}, logMu: &sync.Mutex{}, adminWS: boot.Workspace.ID}
	log := slog.New(slog.NewTextHandler(lockedWriter{e.logMu, e.logs}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e.srv = httptest.NewServer(server.New(svc, st, log))
	e.srv.Client().Timeout = time.Minute // every wait in the tests is bounded
	t.Cleanup(func() {
		e.srv.Close()
		db.Close()
	})
	return e
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// cred is what a request presents.
type cred struct {
	Bearer    string
	Key       string
	Elevation string
	Header    map[string]string
}

type gqlError struct {
	Message    string         `json:"message"`
	Extensions map[string]any `json:"extensions"`
}

type response struct {
	Status int
	Header http.Header
	Data   json.RawMessage `json:"data"`
	Errors []gqlError      `json:"errors"`
}

// Code is the extensions.code of the first error, or "".
func (r response) Code() string {
	if len(r.Errors) == 0 {
		return ""
	}
	c, _ := r.Errors[0].Extensions["code"].(string)
	return c
}

// decode unmarshals data into v, failing the test if the response has errors.
func (r response) decode(t testing.TB, v any) {
	t.Helper()
	if len(r.Errors) > 0 {
		t.Fatalf("unexpected errors (HTTP %d): %+v", r.Status, r.Errors)
	}
	if err := json.Unmarshal(r.Data, v); err != nil {
		t.Fatalf("decode %s: %v", r.Data, err)
	}
}

// do posts a GraphQL request and returns the response; safe for concurrent use.
func (e *env) do(c cred, query string, vars map[string]any) response {
	return e.doWith(e.srv.Client(), c, query, vars)
}

// doWith is do through client (e.g. one dialing from another address).
func (e *env) doWith(client *http.Client, c cred, query string, vars map[string]any) response {
	body, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
	req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/graphql", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if c.Bearer != "" {
		req.Header.Set("Authorization", "Bearer "+c.Bearer)
	}
	if c.Key != "" {
		req.Header.Set("X-Api-Key", c.Key)
	}
	if c.Elevation != "" {
		req.Header.Set("X-Elevation", c.Elevation)
	}
	for k, v := range c.Header {
		req.Header.Set(k, v)
	}
	res, err := client.Do(req)
	if err != nil {
		e.t.Errorf("POST /graphql: %v", err)
		return response{}
	}
	defer res.Body.Close()
	out := response{Status: res.StatusCode, Header: res.Header}
	raw, _ := io.ReadAll(res.Body)
	if err := json.Unmarshal(raw, &out); err != nil {
		e.t.Errorf("response is not JSON (HTTP %d): %s", res.StatusCode, raw)
	}
	return out
}

// must runs a request that must succeed and decodes its data into v.
func (e *env) must(c cred, query string, vars map[string]any, v any) {
	e.t.Helper()
	r := e.do(c, query, vars)
	if r.Status != http.StatusOK {
		e.t.Fatalf("HTTP %d: %+v", r.Status, r.Errors)
	}
	r.decode(e.t, v)
}

// login returns a session token for the account.
func (e *env) login(email, password, workspaceID string) string {
	e.t.Helper()
	vars := map[string]any{"email": email, "password": password}
	if workspaceID != "" {
		vars["ws"] = workspaceID
	}
	var out struct{ Login struct{ AccessToken string } }
	e.must(cred{}, `mutation($email:String!,$password:String!,$ws:ID){login(email:$email,password:$password,workspaceId:$ws){accessToken}}`, vars, &out)
	return out.Login.AccessToken
}

// admin returns the bootstrap admin's session (OWNER of Default, platform admin).
func (e *env) admin() cred { return cred{Bearer: e.login(adminEmail, adminPassword, "")} }

// elevated returns c with a fresh elevation token.
func (e *env) elevated(c cred, password string) cred {
	e.t.Helper()
	var out struct{ Elevate struct{ Token string } }
	e.must(c, `mutation($p:String!){elevate(password:$p){token}}`, map[string]any{"p": password}, &out)
	c.Elevation = out.Elevate.Token
	return c
}

func (e *env) createWorkspace(admin cred, name, plan string) string {
	e.t.Helper()
	var out struct{ CreateWorkspace struct{ ID string } }
	e.must(admin, `mutation($n:String!,$p:Plan){createWorkspace(input:{name:$n,plan:$p}){id}}`, map[string]any{"n": name, "p": plan}, &out)
	return out.CreateWorkspace.ID
}

func (e *env) createAccount(admin cred, email, password string, platformAdmin bool) string {
	e.t.Helper()
	var out struct{ CreateAccount struct{ ID string } }
	e.must(admin, `mutation($e:String!,$p:String!,$a:Boolean){createAccount(input:{email:$e,password:$p,platformAdmin:$a}){id}}`,
		map[string]any{"e": email, "p": password, "a": platformAdmin}, &out)
	return out.CreateAccount.ID
}

func (e *env) setMember(admin cred, ws, account, role string) {
	e.t.Helper()
	var out struct{ SetMembership bool }
	e.must(admin, `mutation($w:ID!,$a:ID!,$r:Role){setMembership(workspaceId:$w,accountId:$a,role:$r)}`,
		map[string]any{"w": ws, "a": account, "r": role}, &out)
}

// newKey is a key as createApiKey returned it.
type newKey struct {
	ID        string
	Plaintext string
}

func (e *env) createKey(c cred, name string) newKey {
	e.t.Helper()
	return e.createKeyWith(c, name, "")
}

// serveGraphQL posts a GraphQL request body to h in the process, as who
// (cred{} for an anonymous caller), and returns the answer.
func serveGraphQL(h http.Handler, body []byte, who cred) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/graphql", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if who.Bearer != "" {
		req.Header.Set("Authorization", "Bearer "+who.Bearer)
	}
	if who.Key != "" {
		req.Header.Set("X-Api-Key", who.Key)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// probe is the workspace-identity probe of docs/design.md#graphql.
const probe = `{tenantInfo{id name}}`

// flush writes collected last_used_at times now instead of waiting a second.
func (e *env) flush() {
	e.t.Helper()
	if err := e.svc.FlushUsage(context.Background()); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) logText() string {
	e.logMu.Lock()
	defer e.logMu.Unlock()
	return e.logs.String()
}

// probeStatus sends the workspace-identity probe with an API key and returns
// the HTTP status: 200 while the key works, 401 once it is revoked.
func (e *env) probeStatus(key string) int {
	e.t.Helper()
	return e.do(cred{Key: key}, probe, nil).Status
}

// allIDs follows every page of a connection field (500 at a time) and returns
// the node ids in order. args, if any, ends with a comma:
// e.allIDs(c, "apiKeys", "includeRevoked:true,").
func (e *env) allIDs(c cred, field, args string) []string {
	e.t.Helper()
	var ids []string
	var after *string
	for {
		p := e.page(c, field, args, 500, after)
		ids = append(ids, p.ids...)
		if !p.hasNext {
			return ids
		}
		after = p.endCursor
	}
}
