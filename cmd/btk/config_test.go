package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"
)

// settings resolves the client settings as the list command would see them.
func settings(t *testing.T, args ...string) (server, token, output string) {
	t.Helper()
	s, _, _ := testStreams(pipe, "")
	f := &factory{io: s, v: viper.New(), version: "test", getenv: os.Getenv, now: time.Now}
	root := newRootCmd(f)
	cmd, rest, err := root.Find(append([]string{"list"}, args...))
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.ParseFlags(rest); err != nil {
		t.Fatal(err)
	}
	if server, err = f.server(cmd); err != nil {
		t.Fatal(err)
	}
	return server, f.v.GetString(keyToken), f.v.GetString(keyOutput)
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestConfigPrecedence(t *testing.T) {
	cfg := isolate(t)

	// Missing file: defaults.
	if server, token, output := settings(t); server != defaultServer || token != "" || output != "table" {
		t.Errorf("defaults: %q %q %q", server, token, output)
	}

	writeFile(t, cfg, "server: http://file:1\ntoken: file-token\noutput: json\n")
	if server, token, output := settings(t); server != "http://file:1" || token != "file-token" || output != "json" {
		t.Errorf("file: %q %q %q", server, token, output)
	}

	t.Setenv("BTK_SERVER", "http://env:2")
	t.Setenv("BTK_TOKEN", "env-token")
	if server, token, output := settings(t); server != "http://env:2" || token != "env-token" || output != "json" {
		t.Errorf("env over file: %q %q %q", server, token, output)
	}

	if server, token, output := settings(t, "--server", "http://flag:3", "--token", "flag-token", "-o", "plain"); server != "http://flag:3" || token != "flag-token" || output != "plain" {
		t.Errorf("flags over env: %q %q %q", server, token, output)
	}
}

func TestConfigPath(t *testing.T) {
	home := isolate(t)
	home = filepath.Dir(filepath.Dir(filepath.Dir(home)))
	other := filepath.Join(home, "other.yaml")
	writeFile(t, other, "server: http://other:4\n")

	t.Setenv("BTK_CONFIG", other)
	if server, _, _ := settings(t); server != "http://other:4" {
		t.Errorf("BTK_CONFIG not read: %q", server)
	}
	t.Setenv("BTK_CONFIG", "")
	if server, _, _ := settings(t, "--config", other); server != "http://other:4" {
		t.Errorf("--config not read: %q", server)
	}

	t.Setenv("XDG_CONFIG_HOME", "")
	writeFile(t, filepath.Join(home, ".config", "btk", "config.yaml"), "server: http://home:5\n")
	if server, _, _ := settings(t); server != "http://home:5" {
		t.Errorf("~/.config/btk/config.yaml not read without XDG_CONFIG_HOME: %q", server)
	}
}

func TestLoginWritesPrivateConfig(t *testing.T) {
	cfg := isolate(t)
	// A config file that is also the server's, as before the two were
	// apart: login must leave it as it is, comments and all.
	const serverConfig = "# the server's settings\noutput: table\nsecret: 0123456789abcdef0123456789abcdef # keep\n"
	writeFile(t, cfg, serverConfig)
	cred := filepath.Join(filepath.Dir(cfg), "credentials.yaml")
	srv := newFakeServer(t, map[string]string{
		"Login": `{"data":{"login":{"accessToken":"session-jwt","expiresAt":"2026-11-22T10:00:00Z",
			"account":{"id":"a1","email":"owner@example.com","platformAdmin":false,"role":"OWNER"},"workspace":` + tenantJSON + `}}}`,
		"Me":         `{"data":{"me":{"id":"a1","email":"owner@example.com","platformAdmin":false,"role":"OWNER"}}}`,
		"TenantInfo": `{"data":{"tenantInfo":` + tenantJSON + `}}`,
		"Logout":     `{"data":{"logout":true}}`,
	})
	t.Setenv("BTK_SERVER", srv.URL)

	s, out, errOut := testStreams(pipe, "hunter2-password\n")
	if code := btkRun(s, "login", "--email", "owner@example.com", "--password-stdin"); code != 0 {
		t.Fatalf("login: exit %d: %s", code, errOut)
	}
	if v := srv.last("Login").Variables; v["password"] != "hunter2-password" || v["email"] != "owner@example.com" {
		t.Errorf("login variables: %v", v)
	}
	if h := srv.last("Login").Header.Get("Authorization"); h != "" {
		t.Errorf("login sent a credential: %q", h)
	}
	if out.Len() != 0 {
		t.Errorf("login wrote data to stdout: %q", out)
	}
	if b, _ := os.ReadFile(cfg); string(b) != serverConfig {
		t.Errorf("login rewrote the config file:\n%s", b)
	}
	b, err := os.ReadFile(cred)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(b); !strings.Contains(got, "token: session-jwt") || !strings.Contains(got, "server: "+srv.URL) {
		t.Errorf("credentials after login:\n%s", got)
	}
	if strings.Contains(string(b), "hunter2") {
		t.Errorf("password written to the credentials")
	}
	if !strings.Contains(errOut.String(), "session saved to "+cred) {
		t.Errorf("login does not say where the session went: %s", errOut)
	}
	for path, want := range map[string]os.FileMode{cred: 0o600, filepath.Dir(cred): 0o700} {
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v (%v)", path, fi.Mode().Perm(), want, err)
		}
	}

	// The saved session is used, as a bearer token.
	s, out, errOut = testStreams(pipe, "")
	if code := btkRun(s, "whoami"); code != 0 {
		t.Fatalf("whoami: exit %d: %s", code, errOut)
	}
	if h := srv.last("Me").Header.Get("Authorization"); h != "Bearer session-jwt" {
		t.Errorf("Authorization = %q", h)
	}
	if !strings.Contains(out.String(), "owner@example.com") || !strings.Contains(out.String(), "Default") {
		t.Errorf("whoami:\n%s", out)
	}

	s, _, errOut = testStreams(pipe, "")
	if code := btkRun(s, "logout"); code != 0 {
		t.Fatalf("logout: exit %d: %s", code, errOut)
	}
	if b, _ := os.ReadFile(cred); strings.Contains(string(b), "token") || !strings.Contains(string(b), "server:") {
		t.Errorf("credentials after logout:\n%s", b)
	}
	if b, _ := os.ReadFile(cfg); string(b) != serverConfig {
		t.Errorf("logout rewrote the config file:\n%s", b)
	}
}

// A config file from before the credentials file existed still logs in
// with its token, until the first login or logout writes the credentials.
func TestCredentialsMigration(t *testing.T) {
	cfg := isolate(t)
	writeFile(t, cfg, "server: http://old:1\ntoken: old-token\n")
	if server, token, _ := settings(t); server != "http://old:1" || token != "old-token" {
		t.Errorf("old combined file: %q %q", server, token)
	}
	cred := filepath.Join(filepath.Dir(cfg), "credentials.yaml")
	writeFile(t, cred, "server: http://new:2\ntoken: new-token\n")
	if server, token, _ := settings(t); server != "http://new:2" || token != "new-token" {
		t.Errorf("credentials over the config file: %q %q", server, token)
	}
	writeFile(t, cred, "server: http://new:2\n")
	if _, token, _ := settings(t); token != "" {
		t.Errorf("after logout the old file's token came back: %q", token)
	}
	// Each explicit config file has its own credentials beside it.
	other := filepath.Join(filepath.Dir(cfg), "two.yaml")
	writeFile(t, other, "output: json\n")
	writeFile(t, filepath.Join(filepath.Dir(cfg), "two.credentials.yaml"), "token: two-token\n")
	if _, token, output := settings(t, "--config", other); token != "two-token" || output != "json" {
		t.Errorf("--config two.yaml: token %q output %q", token, output)
	}
}

func TestLoginNeedsPasswordSource(t *testing.T) {
	isolate(t)
	s, _, errOut := testStreams(pipe, "")
	if code := btkRun(s, "login", "--email", "a@example.com"); code != exitUsage {
		t.Errorf("login without a terminal or --password-stdin: exit %d, want %d", code, exitUsage)
	}
	if !strings.Contains(errOut.String(), "--password-stdin") {
		t.Errorf("stderr: %s", errOut)
	}
	s, _, _ = testStreams(pipe, "")
	if code := btkRun(s, "login", "--password-stdin"); code != exitUsage {
		t.Errorf("login without --email off a terminal: exit %d, want %d", code, exitUsage)
	}
}

// The saved session and device token are sent only to the server they were
// saved with: another --server or BTK_SERVER (a typo, a staging variable)
// got a live session of the first. A token given with --token or BTK_TOKEN
// goes where it is told.
func TestSavedSessionStaysWithItsServer(t *testing.T) {
	isolate(t)
	login := `{"data":{"login":{"accessToken":"session-of-a","deviceToken":"btkd_device-of-a","expiresAt":"2026-11-22T10:00:00Z",
		"account":{"id":"a1","email":"owner@example.com","platformAdmin":false,"role":"OWNER"},"workspace":` + tenantJSON + `}}}`
	me := `{"data":{"me":{"id":"a1","email":"owner@example.com","platformAdmin":false,"role":"OWNER"}}}`
	a := newFakeServer(t, map[string]string{"Login": login, "Me": me, "TenantInfo": `{"data":{"tenantInfo":` + tenantJSON + `}}`})
	b := newFakeServer(t, map[string]string{"Login": login, "Me": me, "TenantInfo": `{"data":{"tenantInfo":` + tenantJSON + `}}`})
	s, _, errOut := testStreams(pipe, "hunter2-password\n")
	if code := btkRun(s, "login", "--server", a.URL, "--email", "owner@example.com", "--password-stdin"); code != 0 {
		t.Fatalf("login to A: exit %d: %s", code, errOut)
	}

	t.Setenv("BTK_SERVER", b.URL)
	s, _, errOut = testStreams(pipe, "")
	if code := btkRun(s, "whoami"); code != exitAuth || !strings.Contains(errOut.String(), "not logged in to "+b.URL) {
		t.Errorf("whoami at B with A's session: exit %d: %s", code, errOut)
	}
	if n := len(b.ops()); n != 0 {
		t.Errorf("B got %d requests with A's session", n)
	}
	s, _, errOut = testStreams(pipe, "")
	if code := btkRun(s, "whoami", "--token", "given-token"); code != 0 || b.last("Me").Header.Get("Authorization") != "Bearer given-token" {
		t.Errorf("an explicit token at B: exit %d: %s", code, errOut)
	}
	s, _, errOut = testStreams(pipe, "hunter2-password\n")
	if code := btkRun(s, "login", "--email", "owner@example.com", "--password-stdin"); code != 0 {
		t.Fatalf("login to B: exit %d: %s", code, errOut)
	}
	if d := b.last("Login").Variables["deviceToken"]; d != nil {
		t.Errorf("login to B sent A's device token %v", d)
	}
	t.Setenv("BTK_SERVER", a.URL)
	s, _, errOut = testStreams(pipe, "")
	if code := btkRun(s, "whoami"); code != exitAuth {
		t.Errorf("whoami at A with B's session: exit %d: %s", code, errOut)
	}
}

// A 200 answer without data (a proxy or another service at --server) is a
// failure: login saved an empty session over the good one, and create
// printed no key and exited 0.
func TestAnswerWithoutDataFails(t *testing.T) {
	cfg := isolate(t)
	cred := filepath.Join(filepath.Dir(cfg), "credentials.yaml")
	writeFile(t, cred, "server: http://127.0.0.1:1\ntoken: good-session\n")
	srv := newFakeServer(t, map[string]string{"Login": `{"data":null}`, "CreateApiKey": `{"data":null}`})
	s, _, errOut := testStreams(pipe, "hunter2-password\n")
	if code := btkRun(s, "login", "--server", srv.URL, "--email", "owner@example.com", "--password-stdin"); code != exitError || !strings.Contains(errOut.String(), "no data") {
		t.Errorf("login answered no data: exit %d: %s", code, errOut)
	}
	if b, _ := os.ReadFile(cred); !strings.Contains(string(b), "token: good-session") {
		t.Errorf("the session was replaced:\n%s", b)
	}
	s, out, errOut := testStreams(pipe, "")
	if code := btkRun(s, "create", "ci-deploy", "-o", "plain", "--server", srv.URL, "--token", "t"); code == 0 || out.Len() != 0 {
		t.Errorf("create answered no data: exit %d, printed %q: %s", code, out, errOut)
	}
}

// A key of the config file that neither the CLI nor btk serve reads stops a
// client command with exit 2, naming the line and the key it resembles: a
// mistyped "sever:" sent commands to the default server. The file may be
// the server's too, so its keys are accepted, and btk serve accepts the
// CLI's (cacert included).
func TestConfigUnknownKeyRefused(t *testing.T) {
	cfg := isolate(t)
	writeFile(t, cfg, "output: json\nsever: http://prod:1\n")
	s, _, errOut := testStreams(pipe, "")
	if code := btkRun(s, "list"); code != exitUsage || !strings.Contains(errOut.String(), `line 2: unknown key "sever" (did you mean "server"?)`) {
		t.Errorf("typo: exit %d, %q", code, errOut.String())
	}

	writeFile(t, cfg, "server: http://file:1\ncacert: /nonexistent.pem\naddr: 127.0.0.1:0\ndb: btk.db\nrate-per-minute: 100\n")
	s, _, errOut = testStreams(pipe, "")
	code := btkRun(s, "list")
	if code == exitUsage || strings.Contains(errOut.String(), "unknown key") {
		t.Errorf("a file shared with btk serve: exit %d, %q", code, errOut.String())
	}
	c := &cobra.Command{}
	c.Flags().String("config", "", "")
	if err := c.Flags().Set("config", cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := loadServeConfig(c, func(string) string { return "" }); err != nil {
		t.Errorf("btk serve on the same file: %v", err)
	}
}
