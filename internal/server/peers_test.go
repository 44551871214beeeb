package server_test

import (
	"bytes"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/gateway"
	"github.com/btk-project/btk/internal/server"
	"github.com/btk-project/btk/internal/testproc"
)

// These tests run Debian's nginx and caddy with the documented configs
// (docs/gateway/, included verbatim in docs/gateway.md) in front of a test
// upstream, btk's real handler deciding. Only the ports (and, for nginx's
// listen, the loopback address) are templated; the global settings a test
// needs (temp paths, no admin endpoint) live in a wrapper that includes the
// config unchanged.

// peerConfig reads a config of docs/gateway and replaces each old string
// (which must occur) with its new one.
func peerConfig(t *testing.T, name string, replace ...string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "docs", "gateway", name))
	if err != nil {
		t.Fatal(err)
	}
	s := string(raw)
	for i := 0; i < len(replace); i += 2 {
		if !strings.Contains(s, replace[i]) {
			t.Fatalf("%s does not contain %q any more: update the test's templating", name, replace[i])
		}
		s = strings.ReplaceAll(s, replace[i], replace[i+1])
	}
	return s
}

// peerSetup is btk (e), the upstream that records what reached it, and the
// address the peer will listen on. The peer asks btk at btkAddr: e's
// service started with --trusted-proxies 127.0.0.1, the peer's address.
type peerSetup struct {
	e        *env
	rec      *recorder
	upstream *httptest.Server
	btkAddr  string
	peerAddr string
}

// The clients of the peer connect from 127.0.0.2 (clientFrom), not the
// peer's own address, so that btk can tell the two apart.
const peerClient, peerClientAddr = 2, "127.0.0.2"

func newPeerSetup(t *testing.T) *peerSetup {
	e := newEnv(t)
	rec := &recorder{}
	up := httptest.NewServer(rec)
	t.Cleanup(up.Close)
	tp, err := gateway.ParseTrustedProxies("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	behind := httptest.NewServer(server.New(e.svc, e.db, slog.New(slog.DiscardHandler), server.WithTrustedProxies(tp)))
	t.Cleanup(behind.Close)
	return &peerSetup{e: e, rec: rec, upstream: up, btkAddr: strings.TrimPrefix(behind.URL, "http://"), peerAddr: testproc.FreeAddr(t)}
}

// checkPeer runs the gateway's checks (docs/gateway.md) through a peer: accepted (the
// upstream sees X-Tenant-Id, never X-Api-Key), a bearer, revoked and no key
// (401 with the documented message), over the limit (429 with Retry-After).
func (p *peerSetup) check(t *testing.T, rateLimitHeaders bool) {
	e, rec := p.e, p.rec
	owner := e.admin()
	k := e.createKey(owner, "through-peer")
	client := &http.Client{Timeout: 10 * time.Second}
	url := "http://" + p.peerAddr + "/hello"

	r := send(t, client, "GET", url, map[string]string{"X-Api-Key": k.Plaintext, "X-Tenant-Id": "forged", "X-Api-Key-Id": "forged"}, nil)
	if r.Status != http.StatusOK || r.Body != "upstream says hi" {
		t.Fatalf("accepted key: HTTP %d %q", r.Status, r.Body)
	}
	h := rec.last(t)
	if v := h.Values("X-Tenant-Id"); len(v) != 1 || v[0] != e.adminWS {
		t.Errorf("upstream X-Tenant-Id %q, want only %s", v, e.adminWS)
	}
	if v := h.Values("X-Api-Key-Id"); len(v) != 1 || v[0] != k.ID {
		t.Errorf("upstream X-Api-Key-Id %q, want only %s", v, k.ID)
	}
	if v := h.Values("X-Api-Key"); len(v) != 0 {
		t.Errorf("the upstream saw X-Api-Key")
	}
	if rateLimitHeaders {
		checkRateLimitHeaders(t, r.Header, 600, 100000, "minute", 599, false)
	}

	r = send(t, client, "GET", url, map[string]string{"Authorization": "Bearer upstream-session", "X-Tenant-Id": e.adminWS}, nil)
	h = rec.last(t)
	if r.Status != http.StatusOK || h.Get("Authorization") != "Bearer upstream-session" || len(h.Values("X-Tenant-Id")) != 0 {
		t.Errorf("bearer: HTTP %d; upstream saw Authorization %q, X-Tenant-Id %q", r.Status, h.Get("Authorization"), h.Values("X-Tenant-Id"))
	}

	seen := rec.count()
	e.must(owner, `mutation($id:ID!){revokeApiKey(id:$id){id}}`, map[string]any{"id": k.ID}, &struct{}{})
	r = send(t, client, "GET", url, map[string]string{"X-Api-Key": k.Plaintext}, nil)
	if msg, code := r.message(t); r.Status != http.StatusUnauthorized || msg != "API key is revoked or expired" || code != "UNAUTHENTICATED" {
		t.Errorf("revoked: HTTP %d %q (%s)", r.Status, msg, code)
	}
	r = send(t, client, "POST", url, nil, strings.NewReader("body"))
	if msg, _ := r.message(t); r.Status != http.StatusUnauthorized || msg != "API key required" {
		t.Errorf("no key: HTTP %d %q", r.Status, msg)
	}

	tight := e.createKeyWith(owner, "tight", `rateLimitPerMinute:1,rateLimitPerDay:10`)
	if r = send(t, client, "GET", url, map[string]string{"X-Api-Key": tight.Plaintext}, nil); r.Status != http.StatusOK {
		t.Fatalf("tight key, first call: HTTP %d %s", r.Status, r.Body)
	}
	seen++
	r = send(t, client, "GET", url, map[string]string{"X-Api-Key": tight.Plaintext}, nil)
	msg, code := r.message(t)
	ra, err := strconv.Atoi(r.Header.Get("Retry-After"))
	if r.Status != http.StatusTooManyRequests || msg != "rate limit exceeded" || code != "RATE_LIMITED" || err != nil || ra < 1 || ra > 60 {
		t.Errorf("over the limit: HTTP %d %q (%s), Retry-After %q", r.Status, msg, code, r.Header.Get("Retry-After"))
	}
	if rateLimitHeaders {
		checkRateLimitHeaders(t, r.Header, 1, 10, "minute", 0, true)
	}
	if rec.count() != seen {
		t.Errorf("%d refused requests reached the upstream", rec.count()-seen)
	}
	p.checkScopes(t)
	p.checkNetworks(t)
	p.checkKeyPolicy(t) // last: it moves the clock
}

// checkNetworks runs a key's networks through the peer (docs/access.md#client-address):
// btk trusts the peer, so the client is the address the peer appended to
// X-Forwarded-For, not the peer's own, nor what the client wrote there.
func (p *peerSetup) checkNetworks(t *testing.T) {
	e, rec := p.e, p.rec
	owner := e.admin()
	client := clientFrom(t, peerClient)
	url := "http://" + p.peerAddr + "/hello"
	here := e.createKeyWith(owner, "client-network", `allowedCidrs:["`+peerClientAddr+`/32"]`)
	peer := e.createKeyWith(owner, "peer-network", `allowedCidrs:["127.0.0.1"]`)
	far := e.createKeyWith(owner, "far-network", `allowedCidrs:["10.0.0.0/8"]`)

	if r := send(t, client, "GET", url, map[string]string{"X-Api-Key": here.Plaintext}, nil); r.Status != http.StatusOK || r.Body != "upstream says hi" {
		t.Fatalf("key of the client's network: HTTP %d %s", r.Status, r.Body)
	}
	seen := rec.count()
	for _, tc := range []struct {
		what string
		key  newKey
		xff  string
	}{
		{"key of the peer's own address", peer, ""},
		{"key of another network", far, ""},
		{"key of another network, X-Forwarded-For forged", far, "10.1.2.3"},
	} {
		h := map[string]string{"X-Api-Key": tc.key.Plaintext}
		if tc.xff != "" {
			h["X-Forwarded-For"] = tc.xff
		}
		r := send(t, client, "GET", url, h, nil)
		if msg, code := r.message(t); r.Status != http.StatusForbidden || msg != notFromHere || code != "FORBIDDEN" {
			t.Errorf("%s: HTTP %d %q (%s), want 403 %q", tc.what, r.Status, msg, code, notFromHere)
		}
	}
	if rec.count() != seen {
		t.Errorf("%d refused requests reached the upstream", rec.count()-seen)
	}
}

// checkKeyPolicy runs the workspace's maximum key lifetime through the peer
// (docs/access.md): a key older than the maximum is refused as expired.
func (p *peerSetup) checkKeyPolicy(t *testing.T) {
	e, rec := p.e, p.rec
	owner := e.admin()
	client := clientFrom(t, peerClient)
	url := "http://" + p.peerAddr + "/hello"
	aging := e.createKey(owner, "aging-through-peer") // no expiresAt
	var out struct{ SetWorkspaceKeyPolicy struct{ ID string } }
	e.must(owner, `mutation($w:ID!){setWorkspaceKeyPolicy(workspaceId:$w,maxLifetimeDays:1){id}}`, map[string]any{"w": e.adminWS}, &out)
	if r := send(t, client, "GET", url, map[string]string{"X-Api-Key": aging.Plaintext}, nil); r.Status != http.StatusOK {
		t.Fatalf("key within the maximum lifetime: HTTP %d %s", r.Status, r.Body)
	}
	seen := rec.count()
	e.clock.Advance(24*time.Hour + time.Second)
	r := send(t, client, "GET", url, map[string]string{"X-Api-Key": aging.Plaintext}, nil)
	if msg, code := r.message(t); r.Status != http.StatusUnauthorized || msg != "API key is revoked or expired" || code != "UNAUTHENTICATED" {
		t.Errorf("key past the maximum lifetime: HTTP %d %q (%s), want 401", r.Status, msg, code)
	}
	if rec.count() != seen {
		t.Errorf("the expired key's request reached the upstream")
	}
}

// checkScopes runs the access rules through the peer (docs/access.md): a
// scoped key is accepted on the path its scope opens, with its scopes passed
// to the upstream, and refused with btk's 403 on another path, the original
// method and URI coming from the peer's X-Forwarded-Method / -Uri.
func (p *peerSetup) checkScopes(t *testing.T) {
	e, rec := p.e, p.rec
	e.svc.SetAccessRules(mustRules(t, "rules:\n  - path: /hello\n    methods: [GET]\n    scopes: [hello:read]\n  - path: /admin/**\n    deny: true\n"))
	defer e.svc.SetAccessRules(nil)
	owner := e.admin()
	scoped := e.createKeyWith(owner, "scoped-through-peer", `scopes:["hello:read"]`)
	client := &http.Client{Timeout: 10 * time.Second}
	base := "http://" + p.peerAddr
	r := send(t, client, "GET", base+"/hello?x=1", map[string]string{"X-Api-Key": scoped.Plaintext, "X-Api-Key-Scopes": "forged"}, nil)
	if r.Status != http.StatusOK {
		t.Fatalf("scoped key on its path: HTTP %d %s", r.Status, r.Body)
	}
	if v := rec.last(t).Values("X-Api-Key-Scopes"); len(v) != 1 || v[0] != "hello:read" {
		t.Errorf("upstream X-Api-Key-Scopes %q, want only hello:read", v)
	}
	seen := rec.count()
	for _, tc := range []struct{ method, path, msg string }{
		{"GET", "/other", "API key may not call this path"},
		{"POST", "/hello", "API key may not call this path"},
		{"GET", "/hello/../admin/x", "API key may not call this path"},
	} {
		r := send(t, client, tc.method, base+tc.path, map[string]string{"X-Api-Key": scoped.Plaintext}, nil)
		if msg, code := r.message(t); r.Status != http.StatusForbidden || msg != tc.msg || code != "FORBIDDEN" {
			t.Errorf("scoped key, %s %s: HTTP %d %q (%s)", tc.method, tc.path, r.Status, msg, code)
		}
	}
	if rec.count() != seen {
		t.Errorf("%d refused requests reached the upstream", rec.count()-seen)
	}
	// A key without scopes passes where no rule matches, and carries an
	// empty (or no) X-Api-Key-Scopes.
	plain := e.createKey(owner, "plain-through-peer")
	if r := send(t, client, "GET", base+"/other", map[string]string{"X-Api-Key": plain.Plaintext}, nil); r.Status != http.StatusOK {
		t.Errorf("unscoped key on /other: HTTP %d %s", r.Status, r.Body)
	} else if v := rec.last(t).Get("X-Api-Key-Scopes"); v != "" {
		t.Errorf("unscoped key: upstream X-Api-Key-Scopes %q", v)
	}
	// Paths an upstream may serve as /admin/x (docs/access.md#paths): the
	// peer passes them on as sent, and btk refuses them as the deny.
	seen = rec.count()
	for _, path := range []string{"//admin/x", "/hello/..;/admin/x", "/hello//../admin/x", "/ADMIN/x", "/%2561dmin/x"} {
		r := send(t, client, "GET", base+path, map[string]string{"X-Api-Key": plain.Plaintext}, nil)
		if msg, code := r.message(t); r.Status != http.StatusForbidden || msg != "API key may not call this path" || code != "FORBIDDEN" {
			t.Errorf("unscoped key, GET %s: HTTP %d %q (%s), want 403", path, r.Status, msg, code)
		}
	}
	if rec.count() != seen {
		t.Errorf("%d requests for /admin/x in other spellings reached the upstream", rec.count()-seen)
	}
}

func TestNginxAuthRequest(t *testing.T) {
	t.Parallel()
	bin := testproc.Need(t, "nginx", "nginx")
	p := newPeerSetup(t)
	site := peerConfig(t, "nginx.conf",
		"127.0.0.1:8080", p.btkAddr,
		"127.0.0.1:9000", strings.TrimPrefix(p.upstream.URL, "http://"),
		"listen 8000;", "listen "+p.peerAddr+";")
	testproc.Nginx(t, bin, t.TempDir(), site, p.peerAddr)
	p.check(t, true)
}

func TestCaddyForwardAuth(t *testing.T) {
	t.Parallel()
	bin := testproc.Need(t, "caddy", "caddy")
	p := newPeerSetup(t)
	dir := t.TempDir()
	_, port, _ := net.SplitHostPort(p.peerAddr)
	site := peerConfig(t, "Caddyfile",
		"127.0.0.1:8080", p.btkAddr,
		"127.0.0.1:9000", strings.TrimPrefix(p.upstream.URL, "http://"),
		":8000 {", ":"+port+" {")
	if err := os.WriteFile(filepath.Join(dir, "site.caddy"), []byte(site), 0o644); err != nil {
		t.Fatal(err)
	}
	// The wrapper: no admin endpoint, no certificates, loopback only.
	main := "{\n\tadmin off\n\tauto_https off\n\tdefault_bind 127.0.0.1\n\tstorage file_system " + dir + "/data\n}\n\nimport " + dir + "/site.caddy\n"
	if err := os.WriteFile(filepath.Join(dir, "Caddyfile"), []byte(main), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "run", "--config", filepath.Join(dir, "Caddyfile"), "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir+"/data", "XDG_CONFIG_HOME="+dir+"/config")
	testproc.Start(t, cmd, os.Interrupt).WaitListening(t, p.peerAddr)
	p.check(t, false)
}

// docs/gateway.md shows exactly the configs these tests run.
func TestGatewayDocShowsTestedConfigs(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "docs", "gateway.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"nginx.conf", "Caddyfile"} {
		conf, err := os.ReadFile(filepath.Join("..", "..", "docs", "gateway", name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(readme, append(append([]byte("\n"), conf...), "```"...)) {
			t.Errorf("docs/gateway.md does not show docs/gateway/%s verbatim", name)
		}
	}
}
