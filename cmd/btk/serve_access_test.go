package main

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// docs/access.md: a bad --access-rules file stops btk serve at start with
// the line and the reason (before the database is touched); on SIGHUP a bad
// file keeps the rules in use and says why, a good one applies.
func TestServeAccessRules(t *testing.T) {
	skipIfShort(t, "starts btk serve")
	t.Parallel()
	dir := t.TempDir()
	rules := filepath.Join(dir, "rules.yaml")
	db := filepath.Join(dir, "btk.db")
	os.WriteFile(rules, []byte("rules:\n  - path: /a\n    scope: [x:read]\n"), 0o644)
	var out bytes.Buffer
	code := run(context.Background(), []string{"serve", "--addr", "127.0.0.1:0", "--db", db, "--access-rules", rules}, strings.NewReader(""), &out, &out)
	if code != exitUsage || !strings.Contains(out.String(), `rules.yaml:3: unknown field "scope"`) {
		t.Fatalf("bad rules file: exit %d, %q", code, out.String())
	}
	if _, err := os.Stat(db); err == nil {
		t.Error("a bad rules file still created the database")
	}

	os.WriteFile(rules, []byte("rules:\n  - path: /a\n    scopes: [x:read]\n"), 0o644)
	p := startServe(t, db, "--access-rules", rules)
	token := p.login()
	var created struct{ CreateApiKey struct{ PlaintextKey string } }
	p.must(token, `mutation{createApiKey(input:{name:"scoped",scopes:["x:read"]}){plaintextKey}}`, nil, &created)
	key := created.CreateApiKey.PlaintextKey
	authorize := func(path string) int {
		req, _ := http.NewRequest("GET", p.url+"/v1/authorize", nil)
		req.Header.Set("X-Api-Key", key)
		req.Header.Set("X-Forwarded-Method", "GET")
		req.Header.Set("X-Forwarded-Uri", path)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if a, b := authorize("/a"), authorize("/b"); a != 200 || b != 403 {
		t.Fatalf("at start: /a %d, /b %d", a, b)
	}
	hup := func(logLine string) {
		t.Helper()
		before := strings.Count(p.Out.String(), logLine)
		p.Cmd.Process.Signal(syscall.SIGHUP)
		for deadline := time.Now().Add(10 * time.Second); strings.Count(p.Out.String(), logLine) == before; {
			if time.Now().After(deadline) {
				t.Fatalf("no %q after SIGHUP:\n%s", logLine, p.Out.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	os.WriteFile(rules, []byte("rules:\n  - path: /b\n    methods: [get]\n"), 0o644)
	hup("access rules not reloaded")
	if !strings.Contains(p.Out.String(), `rules.yaml:3: method \"get\"`) && !strings.Contains(p.Out.String(), `rules.yaml:3: method "get"`) {
		t.Errorf("the log does not say why:\n%s", p.Out.String())
	}
	if a, b := authorize("/a"), authorize("/b"); a != 200 || b != 403 {
		t.Fatalf("after a bad file: /a %d, /b %d (the old rules must stay)", a, b)
	}
	os.WriteFile(rules, []byte("rules:\n  - path: /b\n    scopes: [x:read]\n"), 0o644)
	hup("access rules reloaded")
	if a, b := authorize("/a"), authorize("/b"); a != 403 || b != 200 {
		t.Fatalf("after a good file: /a %d, /b %d", a, b)
	}
}
