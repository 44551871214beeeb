package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/testproc"
)

// These tests run `btk serve` as a real process: the test binary re-executes
// itself with BTK_TEST_SERVE_PROCESS=1, which makes TestServeProcess call run
// with the arguments after "--" and exit, so no separate build is needed.

const (
	procEnv           = "BTK_TEST_SERVE_PROCESS"
	procAdminEmail    = "admin@example.com"
	procAdminPassword = "correct-horse-battery-staple"
	procWait          = 60 * time.Second // bound on start and exit; never reached when all is well
)

// TestServeProcess is not a test: it is the body of the re-executed process.
func TestServeProcess(t *testing.T) {
	if os.Getenv(procEnv) != "1" {
		t.Skip("the btk serve child process of TestServeKill* and TestServeGraceful*")
	}
	args := os.Args
	for i, a := range args {
		if a == "--" {
			args = args[i+1:]
			break
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, args, os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// serveProcess is one running `btk serve`.
type serveProcess struct {
	*testproc.Process
	t      *testing.T
	url    string
	client *http.Client // reaches url: testHTTP, or one trusting the test's CA
}

// startServe starts `btk serve` on db, with extra flags, and waits until
// /readyz answers.
func startServe(t *testing.T, db string, flags ...string) *serveProcess {
	t.Helper()
	p := launchServe(t, db, flags...)
	p.waitReady()
	return p
}

// launchServe starts `btk serve` without waiting for it to be ready.
func launchServe(t *testing.T, db string, flags ...string) *serveProcess {
	t.Helper()
	return launchServeWith(t, "http", testHTTP, db, flags...)
}

// launchServeWith is launchServe for a server reached at scheme://addr
// through client (https, when flags give it a certificate).
func launchServeWith(t *testing.T, scheme string, client *http.Client, db string, flags ...string) *serveProcess {
	t.Helper()
	addr := testproc.FreeAddr(t)
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^TestServeProcess$", "--", "serve", "--addr", addr, "--db", db}, flags...)...)
	cmd.Env = append(procEnviron(t.TempDir()),
		"BTK_BOOTSTRAP_EMAIL="+procAdminEmail,
		"BTK_BOOTSTRAP_PASSWORD="+procAdminPassword)
	cmd.WaitDelay = procWait // Wait returns even if the output pipe stays open
	return &serveProcess{Process: testproc.Start(t, cmd, os.Kill), t: t, url: scheme + "://" + addr, client: client}
}

// procEnviron is the whole environment of a btk process a test starts, with
// home as its HOME: a clean one, so that no BTK_* setting of the developer's
// leaks in.
func procEnviron(home string) []string {
	return []string{
		procEnv + "=1",
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + home,
		"XDG_CONFIG_HOME=" + filepath.Join(home, "config"),
		"TMPDIR=" + os.TempDir(),
		"GOCOVERDIR=" + os.Getenv("GOCOVERDIR"),
		"GODEBUG=" + os.Getenv("GODEBUG"), // inittrace: TestServeSurvivesSIGHUPAtStart
	}
}

// waitReady polls /readyz, bounded; it stops at once if the process dies.
func (p *serveProcess) waitReady() {
	p.t.Helper()
	p.WaitFor(p.t, "/readyz to answer 200", procWait, func() bool {
		res, err := p.client.Get(p.url + "/readyz")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	})
}

// kill ends the process with SIGKILL and waits for it to be gone.
func (p *serveProcess) kill() {
	p.t.Helper()
	if err := p.Cmd.Process.Kill(); err != nil {
		p.t.Fatal(err)
	}
	<-p.Exited()
}

// stop sends SIGTERM and returns the exit error (nil for status 0), failing
// the test if the process does not exit within the bound.
func (p *serveProcess) stop() error {
	p.t.Helper()
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		p.t.Fatal(err)
	}
	select {
	case <-p.Exited():
		return p.Err()
	case <-time.After(procWait):
		p.t.Fatalf("btk serve did not exit within %v of SIGTERM:\n%s", procWait, p.Out)
		return nil
	}
}

type procResponse struct {
	status int
	Data   json.RawMessage
	Errors []struct {
		Message    string
		Extensions struct{ Code string }
	}
}

// gql posts a GraphQL request; bearer or key may be "".
func (p *serveProcess) gql(bearer, key, query string, vars map[string]any) procResponse {
	p.t.Helper()
	body, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
	req, _ := http.NewRequest(http.MethodPost, p.url+"/graphql", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	if key != "" {
		req.Header.Set("X-Api-Key", key)
	}
	res, err := testHTTP.Do(req)
	if err != nil {
		p.t.Fatalf("POST /graphql: %v\n%s", err, p.Out.String())
	}
	defer res.Body.Close()
	out := procResponse{status: res.StatusCode}
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
		p.t.Fatalf("response (HTTP %d) is not JSON: %v", res.StatusCode, err)
	}
	return out
}

// must runs a request that must succeed and decodes its data into v.
func (p *serveProcess) must(bearer, query string, vars map[string]any, v any) {
	p.t.Helper()
	r := p.gql(bearer, "", query, vars)
	if r.status != http.StatusOK || len(r.Errors) > 0 {
		p.t.Fatalf("%s: HTTP %d %+v", query, r.status, r.Errors)
	}
	if err := json.Unmarshal(r.Data, v); err != nil {
		p.t.Fatal(err)
	}
}

func (p *serveProcess) login() string {
	p.t.Helper()
	var out struct{ Login struct{ AccessToken string } }
	p.must("", `mutation($e:String!,$p:String!){login(email:$e,password:$p){accessToken}}`,
		map[string]any{"e": procAdminEmail, "p": procAdminPassword}, &out)
	return out.Login.AccessToken
}

type procKey struct{ ID, Plaintext string }

func (p *serveProcess) createKey(token, name string) procKey {
	p.t.Helper()
	var out struct {
		CreateApiKey struct {
			PlaintextKey string
			ApiKey       struct{ ID string }
		}
	}
	p.must(token, `mutation($n:String!){createApiKey(input:{name:$n}){plaintextKey apiKey{id}}}`, map[string]any{"n": name}, &out)
	return procKey{ID: out.CreateApiKey.ApiKey.ID, Plaintext: out.CreateApiKey.PlaintextKey}
}

// probe calls tenantInfo with a key and returns the HTTP status and the first error message.
func (p *serveProcess) probe(key string) (int, string) {
	p.t.Helper()
	r := p.gql("", key, `{tenantInfo{id name}}`, nil)
	if len(r.Errors) > 0 {
		return r.status, r.Errors[0].Message
	}
	return r.status, ""
}

// docs/design.md#key-lifecycle and docs/design.md#storage (synchronous=FULL):
// a revoke and a create that answered survive a SIGKILL right after, with
// their audit rows.
func TestServeKillAfterRevokeAndCreate(t *testing.T) {
	parallelUnlessShort(t, "starts btk serve processes")
	db := filepath.Join(t.TempDir(), "btk.db")
	p := startServe(t, db, "--log-level", "debug")
	first := p
	token := p.login()
	a := p.createKey(token, "a")
	b := p.createKey(token, "b")
	p.must(token, `mutation($id:ID!){revokeApiKey(id:$id){id}}`, map[string]any{"id": a.ID}, &struct{}{})
	c := p.createKey(token, "c")
	p.kill() // SIGKILL right after the last answer

	p = startServe(t, db, "--log-level", "debug", "--log-format", "json")
	if s, msg := p.probe(a.Plaintext); s != http.StatusUnauthorized || msg != "API key is revoked or expired" {
		t.Errorf("revoked key A after the crash: HTTP %d %q", s, msg)
	}
	for _, k := range []procKey{b, c} {
		if s, msg := p.probe(k.Plaintext); s != http.StatusOK {
			t.Errorf("key %s after the crash: HTTP %d %q", k.ID, s, msg)
		}
	}
	// The session survives the restart (the signing secret is in the database).
	if r := p.gql(token, "", `{me{email}}`, nil); r.status != http.StatusOK || len(r.Errors) > 0 {
		t.Errorf("session token after the restart: HTTP %d %+v", r.status, r.Errors)
		token = p.login()
	}

	var keys struct {
		ApiKeys struct {
			Nodes []struct{ ID, Name, Status string }
		}
	}
	p.must(token, `{apiKeys(includeRevoked:true){nodes{id name status}}}`, nil, &keys)
	got := map[string]string{}
	for _, n := range keys.ApiKeys.Nodes {
		got[n.ID] = n.Name + ":" + n.Status
	}
	want := map[string]string{a.ID: "a:REVOKED", b.ID: "b:ACTIVE", c.ID: "c:ACTIVE"}
	if len(got) != len(want) {
		t.Errorf("keys after the crash: %v, want %v", got, want)
	}
	for id, w := range want {
		if got[id] != w {
			t.Errorf("key %s after the crash: %q, want %q", id, got[id], w)
		}
	}

	var audit struct {
		ApiKeyAuditLog struct {
			Nodes []struct{ Action, ApiKeyId string }
		}
		AuditEvents struct {
			Nodes []struct{ Action, TargetId string }
		}
	}
	p.must(token, `{apiKeyAuditLog{nodes{action apiKeyId}} auditEvents{nodes{action targetId}}}`, nil, &audit)
	var keyRows, eventRows []string
	for i := len(audit.ApiKeyAuditLog.Nodes) - 1; i >= 0; i-- { // oldest first
		n := audit.ApiKeyAuditLog.Nodes[i]
		keyRows = append(keyRows, n.Action+" "+n.ApiKeyId)
	}
	for i := len(audit.AuditEvents.Nodes) - 1; i >= 0; i-- {
		n := audit.AuditEvents.Nodes[i]
		if strings.HasPrefix(n.Action, "api_key.") { // not the session.login
			eventRows = append(eventRows, n.Action+" "+n.TargetId)
		}
	}
	wantKeyRows := []string{"CREATED " + a.ID, "CREATED " + b.ID, "REVOKED " + a.ID, "CREATED " + c.ID}
	wantEventRows := []string{"api_key.created " + a.ID, "api_key.created " + b.ID, "api_key.revoked " + a.ID, "api_key.created " + c.ID}
	if strings.Join(keyRows, ",") != strings.Join(wantKeyRows, ",") {
		t.Errorf("key audit after the crash (oldest first):\n%v\nwant\n%v", keyRows, wantKeyRows)
	}
	if strings.Join(eventRows, ",") != strings.Join(wantEventRows, ",") {
		t.Errorf("audit events after the crash (oldest first):\n%v\nwant\n%v", eventRows, wantEventRows)
	}

	// Neither process wrote a key, the password or a token to its output,
	// debug access log included.
	for i, out := range []string{first.Out.String(), p.Out.String()} {
		if !strings.Contains(out, "/graphql") {
			t.Errorf("process %d logged no request at debug level:\n%s", i+1, out)
		}
		for name, secret := range map[string]string{
			"key A": a.Plaintext, "key B": b.Plaintext, "key C": c.Plaintext,
			"password": procAdminPassword, "session token": token,
		} {
			if strings.Contains(out, secret) {
				t.Errorf("the output of process %d contains %s", i+1, name)
			}
		}
	}
}

// docs/operating.md#running-the-server: on SIGTERM, btk serve drains, flushes last_used_at and exits 0.
func TestServeGracefulShutdownFlushesLastUsed(t *testing.T) {
	parallelUnlessShort(t, "starts btk serve processes")
	db := filepath.Join(t.TempDir(), "btk.db")
	p := startServe(t, db)
	token := p.login()
	k := p.createKey(token, "used-before-shutdown")
	if s, msg := p.probe(k.Plaintext); s != http.StatusOK {
		t.Fatalf("probe: HTTP %d %q", s, msg)
	}
	if err := p.stop(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("btk serve exited with status %d after SIGTERM, want 0:\n%s", ee.ExitCode(), p.Out.String())
		}
		t.Fatal(err)
	}

	p = startServe(t, db)
	var out struct {
		ApiKey *struct{ LastUsedAt *time.Time }
	}
	p.must(p.login(), `query($id:ID!){apiKey(id:$id){lastUsedAt}}`, map[string]any{"id": k.ID}, &out)
	if out.ApiKey == nil || out.ApiKey.LastUsedAt == nil {
		t.Fatalf("lastUsedAt after a graceful restart: %+v; the final flush is missing", out.ApiKey)
	}
}

// btk serve reads its settings from the config file too; a flag beats it.
func TestServeConfigFile(t *testing.T) {
	parallelUnlessShort(t, "starts btk serve processes")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "serve.yaml")
	if err := os.WriteFile(cfg, []byte("log-format: json\nrate-per-minute: 1000\nrate-per-day: 5000\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startServe(t, filepath.Join(dir, "btk.db"), "--config", cfg, "--rate-per-minute", "2")
	k := p.createKey(p.login(), "limited")
	var got []int
	for range 3 {
		s, _ := p.probe(k.Plaintext)
		got = append(got, s)
	}
	if got[0] != http.StatusOK || got[1] != http.StatusOK || got[2] != http.StatusTooManyRequests {
		t.Errorf("statuses %v: want 200 200 429 (the flag's 2/min beats the file's 1000)", got)
	}
	if !strings.Contains(p.Out.String(), `"msg":"btk serve listening"`) {
		t.Errorf("log-format from the config file not applied:\n%s", p.Out.String())
	}
}
