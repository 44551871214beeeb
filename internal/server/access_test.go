package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/access"
	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/gateway"
	"github.com/btk-project/btk/internal/server"
)

// Least privilege (docs/access.md): a key's networks and scopes, decided
// the same way at /graphql, /v1/authorize and the reverse proxy.

const accessRules = `rules:
  - path: /orders/**
    methods: [GET, HEAD]
    scopes: [orders:read]
  - path: /orders/**
    methods: [POST]
    scopes: [orders:write]
  - path: /admin/**
    deny: true
`

func mustRules(t testing.TB, doc string) *access.Rules {
	t.Helper()
	r, err := access.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// entryPoints sends one request with key to each entry point and returns
// the answers: /graphql (the identity probe), /v1/authorize (naming the
// original request with X-Forwarded-Method / -Uri, unless method is ""),
// and the proxy (method path).
type entryPoints struct {
	e     *env
	proxy *httptest.Server
	rec   *recorder
}

func newEntryPoints(e *env) *entryPoints {
	rec := &recorder{}
	up := httptest.NewServer(rec)
	e.t.Cleanup(up.Close)
	return &entryPoints{e: e, proxy: e.proxyFor(up.URL), rec: rec}
}

// newAccessEnv is newAdminEnv under accessRules, with its entry points.
func newAccessEnv(t *testing.T) (*env, cred, *entryPoints) {
	t.Helper()
	e := newEnv(t)
	e.svc.SetAccessRules(mustRules(t, accessRules))
	return e, e.admin(), newEntryPoints(e)
}

func (p *entryPoints) graphql(key string) authResponse {
	r := p.e.do(cred{Key: key}, probe, nil)
	out := authResponse{Status: r.Status, Header: r.Header}
	if len(r.Errors) > 0 {
		b, _ := json.Marshal(map[string]any{"errors": r.Errors})
		out.Body = string(b)
	}
	return out
}

// authorize asks /v1/authorize for key, with the client's extra headers
// (which a gateway forwards).
func (p *entryPoints) authorize(key, method, uri string, extra ...map[string]string) authResponse {
	h := withHeaders(map[string]string{"X-Api-Key": key}, extra)
	if method != "" {
		h["X-Forwarded-Method"], h["X-Forwarded-Uri"] = method, uri
	}
	return p.e.authorize("GET", h)
}

func (p *entryPoints) proxied(key, method, path string, extra ...map[string]string) authResponse {
	return send(p.e.t, p.proxy.Client(), method, p.proxy.URL+path, withHeaders(map[string]string{"X-Api-Key": key}, extra), nil)
}

// refusedAtBoth: key's request, with the client's extra headers, is refused
// (403, msg) at forward-auth and at the proxy, and never reaches the upstream.
func (p *entryPoints) refusedAtBoth(t *testing.T, key, method, path string, h map[string]string, msg string) {
	t.Helper()
	what := fmt.Sprintf("%s %s %v", method, path, h)
	seen := p.rec.count()
	wantRefused(t, "authorize "+what, p.authorize(key, method, path, h), 403, "FORBIDDEN", msg)
	wantRefused(t, "proxy "+what, p.proxied(key, method, path, h), 403, "FORBIDDEN", msg)
	if p.rec.count() != seen {
		t.Errorf("%s reached the upstream", what)
	}
}

// acceptedAtBoth: key's request, with the client's extra headers, is
// accepted at forward-auth and at the proxy, and the headers reach the
// upstream as sent.
func (p *entryPoints) acceptedAtBoth(t *testing.T, key, method, path string, h map[string]string) {
	t.Helper()
	what := fmt.Sprintf("%s %s %v", method, path, h)
	wantAccepted(t, "authorize "+what, p.authorize(key, method, path, h))
	wantAccepted(t, "proxy "+what, p.proxied(key, method, path, h))
	for k, v := range h {
		if got := p.rec.last(t).Get(k); got != v {
			t.Errorf("%s: the upstream saw %s %q", what, k, got)
		}
	}
}

// withHeaders is h with the headers of extra added.
func withHeaders(h map[string]string, extra []map[string]string) map[string]string {
	for _, x := range extra {
		maps.Copy(h, x)
	}
	return h
}

func wantRefused(t *testing.T, what string, r authResponse, status int, code, msg string) {
	t.Helper()
	gotMsg, gotCode := r.message(t)
	if r.Status != status || gotCode != code || gotMsg != msg {
		t.Errorf("%s: HTTP %d %q (%s), want %d %q (%s)", what, r.Status, gotMsg, gotCode, status, msg, code)
	}
}

func wantAccepted(t *testing.T, what string, r authResponse) {
	t.Helper()
	if r.Status != http.StatusOK {
		t.Errorf("%s: HTTP %d %s, want 200", what, r.Status, r.Body)
	}
}

const notFromHere = "API key not allowed from this address"

func TestKeyNetworksAtEveryEntryPoint(t *testing.T) {
	t.Parallel()
	e, owner := newAdminEnv(t)
	p := newEntryPoints(e)
	far := e.createKeyWith(owner, "far", `allowedCidrs:["10.0.0.0/8","2001:db8::/32"]`)
	near := e.createKeyWith(owner, "near", `allowedCidrs:["127.0.0.1","::1"]`)

	wantRefused(t, "graphql, other network", p.graphql(far.Plaintext), 403, "FORBIDDEN", notFromHere)
	wantRefused(t, "authorize, other network", p.authorize(far.Plaintext, "", ""), 403, "FORBIDDEN", notFromHere)
	wantRefused(t, "proxy, other network", p.proxied(far.Plaintext, "GET", "/x"), 403, "FORBIDDEN", notFromHere)
	if p.rec.count() != 0 {
		t.Errorf("a refused request reached the upstream")
	}
	wantAccepted(t, "graphql, own network", p.graphql(near.Plaintext))
	wantAccepted(t, "authorize, own network", p.authorize(near.Plaintext, "", ""))
	wantAccepted(t, "proxy, own network", p.proxied(near.Plaintext, "GET", "/x"))

	// The client address is the peer's, or X-Forwarded-For's nearest
	// untrusted entry when the peer is a trusted proxy.
	for _, tc := range []struct {
		trusted, xff string
		key          newKey
		want         int
	}{
		{"", "10.1.2.3", far, 403},                       // not believed
		{"127.0.0.0/8", "10.1.2.3", far, 200},            // believed
		{"127.0.0.0/8", "10.1.2.3, 127.0.0.9", far, 200}, // nearest untrusted
		{"127.0.0.0/8", "10.1.2.3, 192.0.2.1", far, 403}, // 192.0.2.1 is the client
		{"127.0.0.0/8", "10.1.2.3", near, 403},           // the proxy's own address is not the client's
		{"127.0.0.0/8", "10.1.2.3, unix:", near, 403},    // a hop that names no address: the client is unknown
		{"127.0.0.0/8", "unknown", near, 403},
		{"127.0.0.0/8", "unknown", e.createKey(owner, "anywhere"), 200},
	} {
		tp, err := gateway.ParseTrustedProxies(tc.trusted)
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(server.New(e.svc, e.db, slog.New(slog.DiscardHandler), server.WithTrustedProxies(tp)))
		r := send(t, srv.Client(), "GET", srv.URL+"/v1/authorize", map[string]string{"X-Api-Key": tc.key.Plaintext, "X-Forwarded-For": tc.xff}, nil)
		srv.Close()
		if r.Status != tc.want {
			t.Errorf("trusted %q, X-Forwarded-For %q: HTTP %d, want %d", tc.trusted, tc.xff, r.Status, tc.want)
		}
	}
}

func TestAccessRulesAtEveryEntryPoint(t *testing.T) {
	t.Parallel()
	e, owner, p := newAccessEnv(t)
	reader := e.createKeyWith(owner, "reader", `scopes:["orders:read"]`)
	plain := e.createKey(owner, "plain")

	// Forward-auth.
	r := p.authorize(reader.Plaintext, "GET", "/orders/42?x=1")
	wantAccepted(t, "authorize GET /orders/42", r)
	if got := r.Header.Get("X-Api-Key-Scopes"); got != "orders:read" {
		t.Errorf("X-Api-Key-Scopes %q", got)
	}
	if r.Header.Get("X-Tenant-Id") != e.adminWS {
		t.Errorf("X-Tenant-Id %q", r.Header.Get("X-Tenant-Id"))
	}
	wantRefused(t, "authorize POST /orders/42", p.authorize(reader.Plaintext, "POST", "/orders/42"), 403, "FORBIDDEN", "API key lacks scope orders:write")
	wantRefused(t, "authorize /admin", p.authorize(reader.Plaintext, "GET", "/admin/users"), 403, "FORBIDDEN", "API key may not call this path")
	wantRefused(t, "authorize, no rule", p.authorize(reader.Plaintext, "GET", "/invoices"), 403, "FORBIDDEN", "API key may not call this path")
	wantRefused(t, "authorize, dot segments", p.authorize(reader.Plaintext, "GET", "/orders/%2e%2e/admin/x"), 403, "FORBIDDEN", "API key may not call this path")
	wantRefused(t, "authorize, bad escape", p.authorize(reader.Plaintext, "GET", "/orders/%zz"), 403, "FORBIDDEN", "API key may not call this path")
	wantRefused(t, "authorize, no original request", p.authorize(reader.Plaintext, "", ""), 403, "FORBIDDEN", "API key may not call this path")
	// A key without scopes passes every rule but deny, also without the
	// original request.
	r = p.authorize(plain.Plaintext, "", "")
	wantAccepted(t, "unscoped, no original request", r)
	if v, ok := r.Header["X-Api-Key-Scopes"]; !ok || len(v) != 1 || v[0] != "" {
		t.Errorf("unscoped X-Api-Key-Scopes %q (present %v), want empty", v, ok)
	}
	wantAccepted(t, "unscoped POST /orders", p.authorize(plain.Plaintext, "POST", "/orders/1"))
	wantAccepted(t, "unscoped, no rule", p.authorize(plain.Plaintext, "GET", "/invoices"))
	wantRefused(t, "unscoped /admin", p.authorize(plain.Plaintext, "DELETE", "/orders/../admin"), 403, "FORBIDDEN", "API key may not call this path")

	// The proxy decides on the request itself.
	r = send(t, p.proxy.Client(), "GET", p.proxy.URL+"/orders/7", map[string]string{"X-Api-Key": reader.Plaintext, "X-Api-Key-Scopes": "admin", "X_Api_Key_Scopes": "admin"}, nil)
	wantAccepted(t, "proxy GET /orders/7", r)
	if h := p.rec.last(t); len(h.Values("X-Api-Key-Scopes")) != 1 || h.Get("X-Api-Key-Scopes") != "orders:read" || h.Get("X_Api_Key_Scopes") != "" {
		t.Errorf("upstream saw X-Api-Key-Scopes %q / X_Api_Key_Scopes %q", h.Values("X-Api-Key-Scopes"), h.Values("X_Api_Key_Scopes"))
	}
	seen := p.rec.count()
	wantRefused(t, "proxy POST /orders/7", p.proxied(reader.Plaintext, "POST", "/orders/7"), 403, "FORBIDDEN", "API key lacks scope orders:write")
	wantRefused(t, "proxy /admin", p.proxied(reader.Plaintext, "GET", "/admin"), 403, "FORBIDDEN", "API key may not call this path")
	wantRefused(t, "proxy unscoped /admin", p.proxied(plain.Plaintext, "GET", "/admin/x"), 403, "FORBIDDEN", "API key may not call this path")
	wantRefused(t, "proxy, no rule", p.proxied(reader.Plaintext, "GET", "/invoices"), 403, "FORBIDDEN", "API key may not call this path")
	if p.rec.count() != seen {
		t.Errorf("%d refused requests reached the upstream", p.rec.count()-seen)
	}
	wantAccepted(t, "proxy unscoped POST", p.proxied(plain.Plaintext, "POST", "/orders/7"))

	// /graphql applies the network rule only: its operations need no scope.
	wantAccepted(t, "graphql, scoped key", p.graphql(reader.Plaintext))

	// New rules apply to the next request.
	e.svc.SetAccessRules(mustRules(t, "rules:\n  - path: /invoices\n    scopes: [orders:read]\n"))
	wantAccepted(t, "after reload, /invoices", p.authorize(reader.Plaintext, "GET", "/invoices"))
	wantRefused(t, "after reload, /orders", p.authorize(reader.Plaintext, "GET", "/orders/1"), 403, "FORBIDDEN", "API key may not call this path")
}

// TestAccessRulesHoldForEveryReading: upstreams do not all read a path as
// RFC 3986 does (nginx and Tomcat merge "//" before removing dot segments,
// Tomcat drops ";parameters", IIS takes "\" for "/" and drops trailing dots
// and spaces, servers that parse a decoded path again cut it at "?" or "#",
// Django upper-cases the method); a request that some upstream would serve as a refused path is
// refused at both entry points, and never reaches the upstream
// (docs/access.md#paths).
func TestAccessRulesHoldForEveryReading(t *testing.T) {
	t.Parallel()
	e, owner, p := newAccessEnv(t)
	e.svc.SetAccessRules(mustRules(t, accessRules+"  - path: /reports/**\n    methods: [DELETE]\n    deny: true\n  - path: /exports/**\n    methods: [GET]\n    deny: true\n  - path: /internal\n    deny: true\n  - path: /status\n    scopes: [ops]\n  - path: /status/*\n    scopes: [orders:read]\n  - path: /ping\n    methods: [HEAD]\n    scopes: [orders:read]\n  - path: /backstage/\n    deny: true\n"))
	reader := e.createKeyWith(owner, "reader", `scopes:["orders:read"]`)
	plain := e.createKey(owner, "plain")
	const mayNot = "API key may not call this path"
	for _, tc := range []struct {
		key          newKey
		method, path string
	}{
		{plain, "GET", "//admin/x"},            // nginx: /admin/x
		{plain, "GET", "/%2Fadmin/x"},          // the same, encoded
		{reader, "GET", "/orders//../admin/x"}, // nginx, Apache, Tomcat: /admin/x; RFC: /orders/admin/x
		{reader, "GET", "/orders/..;/admin/x"}, // Tomcat, Jetty: /admin/x
		{plain, "GET", "/admin;jsessionid=1/x"},
		{reader, "GET", "/orders/..%5Cadmin"},        // IIS: /admin
		{plain, "GET", "/orders/%252e%252e/admin/x"}, // decoded twice: /admin/x
		{plain, "GET", "/%2561dmin/x%25"},            // decoded twice leniently (PHP, Python): /admin/x%
		{plain, "delete", "/reports/1"},              // Django: DELETE
		{plain, "HEAD", "/exports/1"},                // the GET handler answers it
		{plain, "GET", "/internal/"},                 // Express, Spring: /internal
		{plain, "GET", "/internal//"},
		{plain, "GET", "/ADMIN/x"},   // Express, ASP.NET Core, IIS: /admin/x
		{plain, "GET", "/Internal/"}, // both
		{plain, "GET", "/backstage"}, // Express: /backstage/
		{plain, "GET", "/Backstage"},
		{plain, "GET", "/admin./x"},       // IIS (Windows drops trailing dots and spaces): /admin/x
		{plain, "GET", "/admin%20/x"},     // the same
		{plain, "GET", "/admin.%20./x"},   // the same
		{reader, "GET", "/admin%2E/x"},    // the same
		{plain, "GET", "/admin.%5Cx"},     // IIS: "\" is "/" too
		{plain, "GET", "/ADMIN.;v=1/x"},   // with the other readings
		{plain, "GET", "/admin%3F.css"},   // decoded, then cut at "?": /admin
		{plain, "GET", "/admin%23.css"},   // the same at "#"
		{plain, "GET", "/admin%253F.css"}, // decoded twice, then cut
		{reader, "GET", "/admin/x%3F/../../orders/1"},
	} {
		seen := p.rec.count()
		wantRefused(t, "authorize "+tc.method+" "+tc.path, p.authorize(tc.key.Plaintext, tc.method, tc.path), 403, "FORBIDDEN", mayNot)
		if r := p.proxied(tc.key.Plaintext, tc.method, tc.path); tc.method == "HEAD" {
			if r.Status != 403 { // an answer to HEAD has no body
				t.Errorf("proxy HEAD %s: HTTP %d, want 403", tc.path, r.Status)
			}
		} else {
			wantRefused(t, "proxy "+tc.method+" "+tc.path, r, 403, "FORBIDDEN", mayNot)
		}
		if p.rec.count() != seen {
			t.Errorf("%s %s reached the upstream", tc.method, tc.path)
		}
	}
	// A request line has no fragment: "#" in X-Forwarded-Uri is a
	// character of the path to an upstream that does not cut there.
	wantRefused(t, "authorize /orders/1#/../../admin/x", p.authorize(plain.Plaintext, "GET", "/orders/1#/../../admin/x"), 403, "FORBIDDEN", mayNot)
	wantRefused(t, "authorize http://example.com/orders/1#/../../admin/x", p.authorize(plain.Plaintext, "GET", "http://example.com/orders/1#/../../admin/x"), 403, "FORBIDDEN", mayNot)
	// A path past access.MaxPathLen is refused where rules apply: its
	// readings would cost milliseconds, and refusals count against no limit.
	long := "/orders/" + strings.Repeat("a/", access.MaxPathLen/2)
	if r := p.authorize(plain.Plaintext, "GET", long); r.Status != 403 {
		t.Errorf("authorize, a %d-byte path: HTTP %d, want 403", len(long), r.Status)
	}
	if r := p.proxied(plain.Plaintext, "GET", long); r.Status != 403 {
		t.Errorf("proxy, a %d-byte path: HTTP %d, want 403", len(long), r.Status)
	}
	// Readings that the rules allow are no reason to refuse.
	for _, path := range []string{"/orders/7;v=2", "/orders//7", "/orders/7/..;/8", "/orders/7.json", "/orders/7.", "/orders/7%20", "/orders/v1.2/lines", "/orders/7%3F", "/orders/a%3Fb", "/orders/a%23b", "/orders/../orders/7"} {
		wantAccepted(t, "authorize GET "+path, p.authorize(reader.Plaintext, "GET", path))
		wantAccepted(t, "proxy GET "+path, p.proxied(reader.Plaintext, "GET", path))
	}
	wantAccepted(t, "unscoped delete /orders/1", p.proxied(plain.Plaintext, "delete", "/orders/1"))
	wantAccepted(t, "scoped GET /orders/", p.proxied(reader.Plaintext, "GET", "/orders/"))
	// A rule written for HEAD alone is not overruled by GET having none.
	wantAccepted(t, "scoped HEAD /ping", p.authorize(reader.Plaintext, "HEAD", "/ping"))
	wantAccepted(t, "unscoped GET /Orders/1", p.proxied(plain.Plaintext, "GET", "/Orders/1"))
	// "/status/" is "/status/*" to the rules, "/status" to Express: the
	// scope of the rule of "/status" is needed too.
	wantRefused(t, "scoped GET /status/", p.authorize(reader.Plaintext, "GET", "/status/"), 403, "FORBIDDEN", "API key lacks scope ops")
}

// TestMethodOverrideHeadersMeetTheRules: Rails, Express's method-override,
// ASP.NET Core, Symfony and Laravel serve a POST carrying
// X-HTTP-Method-Override: DELETE as a DELETE; it passed a deny on DELETE.
// Each override header's value is decided as the request's method too, at
// forward-auth (where the gateway forwards the client's headers) and at
// the proxy, and a refused request never reaches the upstream
// (docs/access.md#method-override-headers).
func TestMethodOverrideHeadersMeetTheRules(t *testing.T) {
	t.Parallel()
	e, owner, p := newAccessEnv(t)
	e.svc.SetAccessRules(mustRules(t, accessRules+"  - path: /reports/**\n    methods: [DELETE]\n    deny: true\n  - path: /orders/**\n    methods: [PATCH]\n    scopes: [orders:write]\n"))
	plain := e.createKey(owner, "plain")
	writer := e.createKeyWith(owner, "writer", `scopes:["orders:write"]`)
	const mayNot = "API key may not call this path"
	for _, tc := range []struct {
		key    newKey
		path   string
		header map[string]string
	}{
		{plain, "/reports/1", map[string]string{"X-HTTP-Method-Override": "DELETE"}},
		{plain, "/reports/1", map[string]string{"X-HTTP-Method": "DELETE"}},
		{plain, "/reports/1", map[string]string{"X-Method-Override": "DELETE"}},
		{plain, "/reports/1", map[string]string{"x-http-method-override": "delete"}},
		{plain, "/reports/1", map[string]string{"X_HTTP_Method_Override": "DELETE"}}, // Rack, PHP: the same variable
		{plain, "/reports/1", map[string]string{"X-HTTP-Method-Override": "PATCH", "X-HTTP-Method": "DELETE"}},
		{plain, "//reports/1", map[string]string{"X-HTTP-Method-Override": "DELETE"}},
		// Symfony and Laravel read "_method" from the query too.
		{plain, "/reports/1?_method=DELETE", nil},
		{plain, "/reports/1?a=1&%5Fmethod=delete", nil},
		{plain, "/reports/1?.method=DELETE", nil},
		// PHP ends a parameter's name at a NUL: "_method" to Symfony and Laravel.
		{plain, "/reports/1?_method%00=DELETE", nil},
		{plain, "/reports/1?_method%00x=DELETE", nil},
		{plain, "/reports/1?_method%00%5b%5d=DELETE", nil},
		// No method: refused, not guessed at (Express reads the first of a list).
		{plain, "/orders/1", map[string]string{"X-HTTP-Method-Override": "DELETE, GET"}},
		// A scoped key may POST; it may not DELETE, which no rule allows.
		{writer, "/orders/1", map[string]string{"X-HTTP-Method-Override": "DELETE"}},
		// More than 8 values, every one of them allowed: refused for its cost.
		{plain, "/orders/1?" + strings.Repeat("_method=GET&", 9), nil},
	} {
		p.refusedAtBoth(t, tc.key.Plaintext, "POST", tc.path, tc.header, mayNot)
	}
	// X-Forwarded-Method is held to the same: a gateway names a method
	// token (nginx, Traefik and Caddy forward the request line's).
	wantRefused(t, "authorize, X-Forwarded-Method DELETE, GET", p.authorize(plain.Plaintext, "DELETE, GET", "/orders/1", nil), 403, "FORBIDDEN", mayNot)
	// An override the rules allow passes, and reaches the upstream as sent.
	for _, tc := range []struct {
		key    newKey
		path   string
		header map[string]string
	}{
		{plain, "/reports/1", map[string]string{"X-HTTP-Method-Override": "GET"}},
		{plain, "/orders/1", map[string]string{"X-HTTP-Method-Override": "DELETE"}},
		{writer, "/orders/1", map[string]string{"X-HTTP-Method-Override": "PATCH"}},
		{writer, "/orders/1", map[string]string{"X-HTTP-Method-Override": "post"}},
		{writer, "/orders/1", map[string]string{"X-HTTP-Method-Override": ""}}, // overrides nothing
		{writer, "/orders/1?_method=PATCH", nil},
	} {
		p.acceptedAtBoth(t, tc.key.Plaintext, "POST", tc.path, tc.header)
	}
	// A key without scopes on a server without rules is decided without
	// them, overrides included.
	e.svc.SetAccessRules(nil)
	wantAccepted(t, "no rules", p.authorize(plain.Plaintext, "POST", "/reports/1", map[string]string{"X-HTTP-Method-Override": "DELETE, GET"}))
}

// TestURLOverrideHeadersMeetTheRules: Symfony (before CVE-2018-14773's
// fix), zend-diactoros and applications behind IIS's URL Rewrite serve the
// path X-Original-URL or X-Rewrite-URL names; a key allowed on /orders
// reached /admin with one. Each value is decided as the request's path
// too, at forward-auth and at the proxy
// (docs/access.md#url-override-headers).
func TestURLOverrideHeadersMeetTheRules(t *testing.T) {
	t.Parallel()
	e, owner, p := newAccessEnv(t)
	plain := e.createKey(owner, "plain")
	reader := e.createKeyWith(owner, "reader", `scopes:["orders:read"]`)
	const mayNot = "API key may not call this path"
	for _, tc := range []struct {
		key    newKey
		header map[string]string
		msg    string
	}{
		{plain, map[string]string{"X-Original-URL": "/admin/users"}, mayNot},
		{plain, map[string]string{"X-Rewrite-URL": "/admin/users?x=1"}, mayNot},
		{plain, map[string]string{"x_original_url": "/admin/users"}, mayNot}, // PHP: the same variable
		{plain, map[string]string{"X-Original-URL": "/orders/../admin/users"}, mayNot},
		{plain, map[string]string{"X-Original-URL": "/%61dmin/users"}, mayNot},
		{plain, map[string]string{"X-Original-URL": "//admin/users"}, mayNot}, // a reading of it: nginx merges "//"
		{plain, map[string]string{"X-Original-URL": "admin"}, mayNot},         // no path: refused, not guessed at
		// A scoped key: what no rule allows, a method its scope lacks
		// (the override's own "_method"), and the root an empty one names.
		{reader, map[string]string{"X-Original-URL": "/reports/1"}, mayNot},
		{reader, map[string]string{"X-Rewrite-URL": "/orders/1?_method=POST"}, "API key lacks scope orders:write"},
		{reader, map[string]string{"X-Original-URL": ""}, mayNot},
		// More values than any client sends, each allowed: refused for their cost.
		{reader, map[string]string{"X-Original-URL": "/orders/1", "X-Rewrite-URL": "/orders/2", "X_Original_URL": "/orders/3", "X_Rewrite_URL": "/orders/4", "X-Original_URL": "/orders/5"}, mayNot},
		// Within each bound, but 3 paths times 3 method overrides: refused
		// for their cost (each pair is decided against every reading).
		{reader, map[string]string{"X-Original-URL": "/orders/1", "X-Rewrite-URL": "/orders/2",
			"X-HTTP-Method-Override": "GET", "X-HTTP-Method": "GET", "X-Method-Override": "GET"}, mayNot},
	} {
		p.refusedAtBoth(t, tc.key.Plaintext, "GET", "/orders/1", tc.header, tc.msg)
	}
	// One the rules allow passes, and reaches the upstream as sent.
	for _, h := range []map[string]string{{"X-Original-URL": "/orders/2"}, {"X-Rewrite-URL": "/orders/2?page=3"},
		{"X-Original-URL": "/orders/2", "X-HTTP-Method-Override": "GET", "X-HTTP-Method": "GET"}} { // 2 paths × 2 methods
		p.acceptedAtBoth(t, reader.Plaintext, "GET", "/orders/1", h)
	}
	// Where the rules are not consulted, neither is the header.
	e.svc.SetAccessRules(nil)
	wantAccepted(t, "no rules", p.authorize(plain.Plaintext, "GET", "/orders/1", map[string]string{"X-Original-URL": "admin"}))
}

// TestAuthorizeTwoOriginalRequests: a gateway that adds X-Forwarded-Uri
// beside the client's own (rather than replacing it) sends two; btk believed
// the first, which the client wrote. Neither is believed: the request is
// refused where the rules apply, also for a key without scopes.
func TestAuthorizeTwoOriginalRequests(t *testing.T) {
	t.Parallel()
	e, owner, _ := newAccessEnv(t)
	plain := e.createKey(owner, "plain")
	for _, h := range []http.Header{
		{"X-Forwarded-Method": {"GET"}, "X-Forwarded-Uri": {"/orders/1", "/admin/x"}},
		{"X-Forwarded-Method": {"GET", "DELETE"}, "X-Forwarded-Uri": {"/orders/1"}},
	} {
		req, err := http.NewRequest("GET", e.srv.URL+"/v1/authorize", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header = h
		req.Header.Set("X-Api-Key", plain.Plaintext)
		res, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusForbidden {
			t.Errorf("authorize with %v: HTTP %d, want 403", h, res.StatusCode)
		}
	}
}

// TestProxyConnectMeetsTheRules: an authority-form CONNECT reaches the
// upstream as a request for "/"; it is decided as one, not as a request
// nobody named (which a key without scopes passes), so a closing deny on
// /** holds for it too (docs/access.md#paths).
func TestProxyConnectMeetsTheRules(t *testing.T) {
	t.Parallel()
	e, owner, p := newAccessEnv(t)
	e.svc.SetAccessRules(mustRules(t, "rules:\n  - path: /health\n  - path: /**\n    deny: true\n"))
	plain := e.createKey(owner, "plain")
	status := func(requestLine string) string {
		c, err := net.Dial("tcp", strings.TrimPrefix(p.proxy.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "%s\r\nHost: example.com\r\nX-Api-Key: %s\r\n\r\n", requestLine, plain.Plaintext)
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			t.Fatalf("%s: %v", requestLine, err)
		}
		return strings.TrimSpace(line)
	}
	if got := status("GET /health HTTP/1.1"); got != "HTTP/1.1 200 OK" {
		t.Fatalf("GET /health: %s", got)
	}
	seen := p.rec.count()
	if got := status("CONNECT example.com:443 HTTP/1.1"); got != "HTTP/1.1 403 Forbidden" {
		t.Errorf("CONNECT example.com:443 under a deny on /**: %s, want 403", got)
	}
	if p.rec.count() != seen {
		t.Error("the CONNECT reached the upstream")
	}
}

// remaining is RateLimit-Remaining of an answer.
func remaining(t *testing.T, r authResponse) int {
	t.Helper()
	n, err := strconv.Atoi(r.Header.Get("RateLimit-Remaining"))
	if err != nil {
		t.Fatalf("RateLimit-Remaining %q (HTTP %d)", r.Header.Get("RateLimit-Remaining"), r.Status)
	}
	return n
}

// TestRestrictionRefusalsCountNothing: requests refused by a network or a
// scope are decided before the limits, so they use none of them.
func TestRestrictionRefusalsCountNothing(t *testing.T) {
	t.Parallel()
	e, owner, p := newAccessEnv(t)
	k := e.createKeyWith(owner, "tight", `rateLimitPerMinute:3,rateLimitPerDay:3,allowedCidrs:["10.0.0.0/8"],scopes:["orders:read"]`)
	for range 10 {
		if r := p.authorize(k.Plaintext, "GET", "/orders/1"); r.Status != 403 || r.Header.Get("RateLimit-Remaining") != "" {
			t.Fatalf("network refusal: HTTP %d, RateLimit-Remaining %q", r.Status, r.Header.Get("RateLimit-Remaining"))
		}
		if r := p.graphql(k.Plaintext); r.Status != 403 {
			t.Fatalf("network refusal at /graphql: HTTP %d", r.Status)
		}
		if r := p.proxied(k.Plaintext, "GET", "/orders/1"); r.Status != 403 {
			t.Fatalf("network refusal at the proxy: HTTP %d", r.Status)
		}
	}
	updateKey(t, e, owner, k.ID, `allowedCidrs:null`)
	for range 10 {
		if r := p.authorize(k.Plaintext, "POST", "/orders/1"); r.Status != 403 {
			t.Fatalf("scope refusal: HTTP %d", r.Status)
		}
		if r := p.proxied(k.Plaintext, "GET", "/admin"); r.Status != 403 {
			t.Fatalf("deny refusal: HTTP %d", r.Status)
		}
		// The method an override header names is decided too
		// (docs/access.md#method-override-headers).
		override := map[string]string{"X-Api-Key": k.Plaintext, "X-HTTP-Method-Override": "DELETE"}
		if r := send(t, p.proxy.Client(), "GET", p.proxy.URL+"/orders/1", override, nil); r.Status != 403 {
			t.Fatalf("override refusal at the proxy: HTTP %d", r.Status)
		}
		override["X-Forwarded-Method"], override["X-Forwarded-Uri"] = "GET", "/orders/1"
		if r := e.authorize("GET", override); r.Status != 403 {
			t.Fatalf("override refusal at /v1/authorize: HTTP %d", r.Status)
		}
	}
	// All three requests of the limit are still there.
	for i := range 3 {
		r := p.authorize(k.Plaintext, "GET", "/orders/1")
		if r.Status != 200 || remaining(t, r) != 2-i {
			t.Fatalf("request %d after the refusals: HTTP %d, remaining %s", i+1, r.Status, r.Header.Get("RateLimit-Remaining"))
		}
	}
	if r := p.authorize(k.Plaintext, "GET", "/orders/1"); r.Status != 429 {
		t.Fatalf("fourth: HTTP %d, want 429", r.Status)
	}
}

// updateKey runs updateApiKey with the input fields given (GraphQL syntax).
func updateKey(t *testing.T, e *env, c cred, id, input string) response {
	t.Helper()
	r := e.do(c, `mutation($id:ID!){updateApiKey(id:$id,input:{`+input+`}){id name rateLimitPerMinute rateLimitPerDay scopes allowedCidrs status}}`,
		map[string]any{"id": id})
	return r
}

type keyView struct {
	ID                 string
	Name               string
	RateLimitPerMinute *int
	RateLimitPerDay    *int
	Scopes             []string
	AllowedCidrs       []string
}

func TestUpdateAPIKey(t *testing.T) {
	t.Parallel()
	e, owner := newAdminEnv(t)
	k := e.createKeyWith(owner, "svc", `rateLimitPerMinute:10,scopes:["a:read"],allowedCidrs:["192.0.2.0/24"]`)
	e.createKey(owner, "taken")

	var out struct{ UpdateApiKey keyView }
	r := updateKey(t, e, owner, k.ID, `name:"svc2",scopes:["b:write","b:write"],allowedCidrs:["10.0.0.1","2001:db8::/32","::ffff:10.0.0.0/104"]`)
	r.decode(t, &out)
	got := out.UpdateApiKey
	if got.Name != "svc2" || got.RateLimitPerMinute == nil || *got.RateLimitPerMinute != 10 ||
		strings.Join(got.Scopes, ",") != "b:write" || strings.Join(got.AllowedCidrs, ",") != "10.0.0.1,2001:db8::/32,10.0.0.0/8" {
		t.Fatalf("after update: %+v", got)
	}
	// null clears; absent leaves alone.
	updateKey(t, e, owner, k.ID, `rateLimitPerMinute:null,scopes:null`).decode(t, &out)
	if got := out.UpdateApiKey; got.RateLimitPerMinute != nil || len(got.Scopes) != 0 || len(got.AllowedCidrs) != 3 || got.Name != "svc2" {
		t.Fatalf("after clearing: %+v", got)
	}

	// Bad input: a clear error, nothing changed, nothing audited.
	many := make([]string, 33)
	for i := range many {
		many[i] = `"10.0.0.` + strconv.Itoa(i) + `"`
	}
	for _, tc := range []struct{ input, code, msg string }{
		{`allowedCidrs:["10.0.0.0/33"]`, "BAD_USER_INPUT", `network "10.0.0.0/33" must be an IPv4 or IPv6 address or CIDR range`},
		{`allowedCidrs:["example.com"]`, "BAD_USER_INPUT", `network "example.com"`},
		{`allowedCidrs:[` + strings.Join(many, ",") + `]`, "BAD_USER_INPUT", "at most 32 networks"},
		{`scopes:["Orders:Read"]`, "BAD_USER_INPUT", `scope "Orders:Read" must match`},
		{`rateLimitPerMinute:0`, "BAD_USER_INPUT", "rate limit per minute"},
		{`rateLimitPerMinute:1000,rateLimitPerDay:10`, "BAD_USER_INPUT", "must not exceed"},
		{`name:null`, "BAD_USER_INPUT", "name cannot be cleared"},
		{`name:"taken"`, "NAME_TAKEN", ""},
	} {
		r := updateKey(t, e, owner, k.ID, tc.input)
		if r.Code() != tc.code || len(r.Errors) == 0 || !strings.Contains(r.Errors[0].Message, tc.msg) {
			t.Errorf("update %s: %s %+v, want %s %q", tc.input, r.Code(), r.Errors, tc.code, tc.msg)
		}
	}
	// The same networks in another order, and the same name: a key's
	// networks and scopes are sets, so nothing changes and nothing is audited.
	if r := updateKey(t, e, owner, k.ID, `name:"svc2",allowedCidrs:["10.0.0.0/8","2001:db8::/32","10.0.0.1"]`); len(r.Errors) > 0 {
		t.Errorf("update reordering the networks: %+v", r.Errors)
	}
	var after struct{ ApiKey keyView }
	e.must(owner, `query($id:ID!){apiKey(id:$id){id name rateLimitPerMinute scopes allowedCidrs}}`, map[string]any{"id": k.ID}, &after)
	if after.ApiKey.Name != "svc2" || len(after.ApiKey.AllowedCidrs) != 3 || len(after.ApiKey.Scopes) != 0 {
		t.Errorf("bad input changed the key: %+v", after.ApiKey)
	}

	// The audit pair, with what changed; exactly two updates were made.
	var log struct {
		ApiKeyAuditLog struct {
			Nodes []struct{ Action, ApiKeyID, ActorEmail string }
		}
		AuditEvents struct {
			Nodes []struct{ Action, TargetID, Metadata string }
		}
	}
	e.must(owner, `query($id:ID!){apiKeyAuditLog(apiKeyId:$id,action:UPDATED){nodes{action apiKeyId actorEmail}} auditEvents{nodes{action targetId metadata}}}`,
		map[string]any{"id": k.ID}, &log)
	if n := len(log.ApiKeyAuditLog.Nodes); n != 2 || log.ApiKeyAuditLog.Nodes[0].ActorEmail != adminEmail {
		t.Errorf("UPDATED entries: %+v", log.ApiKeyAuditLog.Nodes)
	}
	var updated []string
	for _, ev := range log.AuditEvents.Nodes {
		if ev.Action == "api_key.updated" && ev.TargetID == k.ID {
			updated = append(updated, ev.Metadata)
		}
	}
	if len(updated) != 2 || !strings.Contains(updated[1], `"allowedCidrs"`) || !strings.Contains(updated[1], `"svc2"`) ||
		!strings.Contains(updated[0], `"rateLimitPerMinute"`) || strings.Contains(updated[0], "btk_") {
		t.Errorf("api_key.updated events: %q", updated)
	}

	// An update applies to the next request (the key was cached).
	if s := e.probeStatus(k.Plaintext); s != 403 {
		t.Errorf("key limited to other networks: HTTP %d", s)
	}
	updateKey(t, e, owner, k.ID, `allowedCidrs:["127.0.0.0/8"]`).decode(t, &out)
	if s := e.probeStatus(k.Plaintext); s != 200 {
		t.Errorf("after allowing loopback: HTTP %d", s)
	}
	updateKey(t, e, owner, k.ID, `allowedCidrs:["10.0.0.0/8"]`).decode(t, &out)
	if s := e.probeStatus(k.Plaintext); s != 403 {
		t.Errorf("after narrowing again: HTTP %d", s)
	}

	// A revoked key: KEY_REVOKED. An ADMIN reads but does not edit.
	e.must(owner, `mutation($id:ID!){revokeApiKey(id:$id){id}}`, map[string]any{"id": k.ID}, &struct{}{})
	if r := updateKey(t, e, owner, k.ID, `name:"again"`); r.Code() != "KEY_REVOKED" {
		t.Errorf("update of a revoked key: %s %+v", r.Code(), r.Errors)
	}
	if r := updateKey(t, e, cred{Key: k.Plaintext}, k.ID, `name:"x"`); r.Status == 200 && r.Code() == "" {
		t.Errorf("a key updated a key")
	}
}

// TestCreateKeyRestrictionsValidated: createApiKey with a bad network or
// scope gets a clear error, creates nothing and audits nothing.
func TestCreateKeyRestrictionsValidated(t *testing.T) {
	t.Parallel()
	e, owner := newAdminEnv(t)
	many := make([]string, 33)
	for i := range many {
		many[i] = `"10.0.0.` + strconv.Itoa(i) + `"`
	}
	for _, tc := range []struct{ input, msg string }{
		{`allowedCidrs:["10.0.0.0/33"]`, `network "10.0.0.0/33" must be an IPv4 or IPv6 address or CIDR range`},
		{`allowedCidrs:["10.0.0.1/8x"]`, `network "10.0.0.1/8x"`},
		{`allowedCidrs:["example.com"]`, `network "example.com"`},
		{`allowedCidrs:[` + strings.Join(many, ",") + `]`, "at most 32 networks"},
		{`scopes:["Orders:Read"]`, `scope "Orders:Read" must match`},
		{`scopes:["orders read"]`, `scope "orders read" must match`},
		{`scopes:[""]`, `scope "" must match`},
	} {
		r := e.do(owner, `mutation{createApiKey(input:{name:"bad",`+tc.input+`}){plaintextKey}}`, nil)
		if r.Code() != "BAD_USER_INPUT" || len(r.Errors) == 0 || !strings.Contains(r.Errors[0].Message, tc.msg) {
			t.Errorf("create with %.60s: %s %+v, want BAD_USER_INPUT %q", tc.input, r.Code(), r.Errors, tc.msg)
		}
	}
	var out struct {
		ApiKeys     struct{ Nodes []struct{ ID string } }
		AuditEvents struct{ Nodes []struct{ Action string } }
	}
	e.must(owner, `{apiKeys{nodes{id}} auditEvents{nodes{action}}}`, nil, &out)
	if len(out.ApiKeys.Nodes) != 0 {
		t.Errorf("bad input created %d keys", len(out.ApiKeys.Nodes))
	}
	for _, ev := range out.AuditEvents.Nodes {
		if strings.HasPrefix(ev.Action, "api_key.") {
			t.Errorf("bad input audited %s", ev.Action)
		}
	}
}

func TestWorkspaceKeyPolicy(t *testing.T) {
	t.Parallel()
	e, owner := newAdminEnv(t)
	old := e.createKey(owner, "old")
	set := func(max, unused any) response {
		return e.do(owner, `mutation($w:ID!,$m:Int,$u:Int){setWorkspaceKeyPolicy(workspaceId:$w,maxLifetimeDays:$m,revokeUnusedAfterDays:$u){keyPolicy{maxLifetimeDays revokeUnusedAfterDays}}}`,
			map[string]any{"w": e.adminWS, "m": max, "u": unused})
	}
	for _, bad := range [][2]any{{0, nil}, {3651, nil}, {nil, 0}, {nil, -5}, {30, 4000}} {
		if r := set(bad[0], bad[1]); r.Code() != "BAD_USER_INPUT" || !strings.Contains(r.Errors[0].Message, "1-3650 days") {
			t.Errorf("policy %v: %s %+v", bad, r.Code(), r.Errors)
		}
	}
	var pol struct {
		SetWorkspaceKeyPolicy struct {
			KeyPolicy struct{ MaxLifetimeDays, RevokeUnusedAfterDays *int }
		}
	}
	set(30, 60).decode(t, &pol)
	if p := pol.SetWorkspaceKeyPolicy.KeyPolicy; p.MaxLifetimeDays == nil || *p.MaxLifetimeDays != 30 || *p.RevokeUnusedAfterDays != 60 {
		t.Fatalf("policy: %+v", p)
	}
	// Issuing needs an expiry within the maximum.
	if r := e.do(owner, `mutation{createApiKey(input:{name:"forever"}){plaintextKey}}`, nil); r.Code() != "BAD_USER_INPUT" {
		t.Errorf("create without expiry under a 30-day policy: %s", r.Code())
	}
	late := e.clock.Now().Add(31 * 24 * time.Hour).Format(time.RFC3339)
	if r := e.do(owner, `mutation($t:Time){createApiKey(input:{name:"late",expiresAt:$t}){plaintextKey}}`, map[string]any{"t": late}); r.Code() != "BAD_USER_INPUT" {
		t.Errorf("create expiring after 31 days: %s", r.Code())
	}
	soon := e.clock.Now().Add(20 * 24 * time.Hour).Format(time.RFC3339)
	fresh := e.createKeyWith(owner, "fresh", `expiresAt:"`+soon+`"`)
	// effectiveExpiresAt is the earlier of expiresAt and the policy's end;
	// expiresAt stays what was given.
	expiry := func(id string) (given, effective *time.Time, created time.Time) {
		var got struct {
			APIKey struct {
				ExpiresAt, EffectiveExpiresAt *time.Time
				CreatedAt                     time.Time
			}
		}
		e.must(owner, `query($id:ID!){apiKey(id:$id){expiresAt effectiveExpiresAt createdAt}}`, map[string]any{"id": id}, &got)
		return got.APIKey.ExpiresAt, got.APIKey.EffectiveExpiresAt, got.APIKey.CreatedAt
	}
	if given, eff, created := expiry(old.ID); given != nil || eff == nil || !eff.Equal(created.Add(30*24*time.Hour)) {
		t.Errorf("key without expiry under a 30-day policy: expiresAt %v, effectiveExpiresAt %v, want createdAt %v + 30 days", given, eff, created)
	}
	if given, eff, _ := expiry(fresh.ID); given == nil || eff == nil || !eff.Equal(*given) || given.Format(time.RFC3339) != soon {
		t.Errorf("key expiring before the policy's end: expiresAt %v, effectiveExpiresAt %v, want both %s", given, eff, soon)
	}
	var list struct {
		ApiKeys struct {
			Nodes []struct{ ID, EffectiveExpiresAt string }
		}
	}
	e.must(owner, `{apiKeys{nodes{id effectiveExpiresAt}}}`, nil, &list)
	for _, n := range list.ApiKeys.Nodes {
		if n.EffectiveExpiresAt == "" {
			t.Errorf("apiKeys: key %s has no effectiveExpiresAt under a lifetime policy", n.ID)
		}
	}
	if r := e.do(e.elevated(owner, adminPassword), `mutation($id:ID!){rotateApiKey(id:$id){plaintextKey}}`, map[string]any{"id": old.ID}); r.Code() != "BAD_USER_INPUT" {
		t.Errorf("rotate inheriting no expiry: %s", r.Code())
	}

	// At use: a key older than the maximum is refused as expired, everywhere.
	p := newEntryPoints(e)
	wantAccepted(t, "old key within the lifetime", p.authorize(old.Plaintext, "", ""))
	e.clock.Advance(30*24*time.Hour + time.Second)
	expired := "API key is revoked or expired"
	wantRefused(t, "graphql, old key", p.graphql(old.Plaintext), 401, "UNAUTHENTICATED", expired)
	wantRefused(t, "authorize, old key", p.authorize(old.Plaintext, "", ""), 401, "UNAUTHENTICATED", expired)
	wantRefused(t, "proxy, old key", p.proxied(old.Plaintext, "GET", "/"), 401, "UNAUTHENTICATED", expired)
	wantRefused(t, "graphql, expired by expiresAt", p.graphql(fresh.Plaintext), 401, "UNAUTHENTICATED", expired)
	// What the owner sees says so: the key the check refuses is EXPIRED.
	owner = e.admin() // the session of a month ago has ended
	status := func() string {
		var got struct{ APIKey struct{ Status string } }
		e.must(owner, `query($id:ID!){apiKey(id:$id){status}}`, map[string]any{"id": old.ID}, &got)
		return got.APIKey.Status
	}
	if s := status(); s != "EXPIRED" {
		t.Errorf("a key past the maximum lifetime shows %s, want EXPIRED", s)
	}
	// Off again: the old key works at once, and is ACTIVE.
	set(nil, nil).decode(t, &pol)
	wantAccepted(t, "old key, policy off", p.authorize(old.Plaintext, "", ""))
	if s := status(); s != "ACTIVE" {
		t.Errorf("with the policy off the key shows %s, want ACTIVE", s)
	}
	if given, eff, _ := expiry(old.ID); given != nil || eff != nil {
		t.Errorf("with the policy off: expiresAt %v, effectiveExpiresAt %v, want both null", given, eff)
	}

	var evs struct {
		AuditEvents struct{ Nodes []struct{ Action string } }
	}
	e.must(owner, `{auditEvents{nodes{action}}}`, nil, &evs)
	n := 0
	for _, ev := range evs.AuditEvents.Nodes {
		if ev.Action == btk.EventWorkspaceKeyPolicyChanged {
			n++
		}
	}
	if n != 2 {
		t.Errorf("%d workspace.key_policy_changed events, want 2 (refused changes write none)", n)
	}
}

func TestRevokeUnusedSweep(t *testing.T) {
	t.Parallel()
	e, owner := newAdminEnv(t)
	used := e.createKey(owner, "used")
	idle := e.createKey(owner, "idle")
	// A canary is unused by design; revoked, it would record nothing
	// (docs/leaks.md#canary-keys): the sweep leaves it armed.
	canary := e.createKeyWith(owner, "trap", `canary:true`)
	var pol struct{ SetWorkspaceKeyPolicy struct{ ID string } }
	e.must(owner, `mutation($w:ID!){setWorkspaceKeyPolicy(workspaceId:$w,revokeUnusedAfterDays:5){id}}`, map[string]any{"w": e.adminWS}, &pol)
	ctx := context.Background()
	if n, err := e.svc.SweepUnusedKeys(ctx); n != 0 || err != nil {
		t.Fatalf("sweep of new keys: %d, %v", n, err)
	}
	e.clock.Advance(3 * 24 * time.Hour)
	if e.probeStatus(used.Plaintext) != 200 {
		t.Fatal("used key refused")
	}
	e.flush()
	e.clock.Advance(3 * 24 * time.Hour)
	if n, err := e.svc.SweepUnusedKeys(ctx); n != 1 || err != nil {
		t.Fatalf("sweep after 6 days: %d, %v", n, err)
	}
	if n, err := e.svc.SweepUnusedKeys(ctx); n != 0 || err != nil {
		t.Fatalf("second sweep: %d, %v", n, err)
	}
	if e.probeStatus(idle.Plaintext) != 401 || e.probeStatus(used.Plaintext) != 200 {
		t.Error("the sweep revoked the wrong key")
	}
	var ck struct{ ApiKey struct{ Status string } }
	e.must(e.admin(), `query($id:ID!){apiKey(id:$id){status}}`, map[string]any{"id": canary.ID}, &ck)
	if ck.ApiKey.Status != "ACTIVE" {
		t.Errorf("the canary is %s after the sweep, want ACTIVE", ck.ApiKey.Status)
	}
	var log struct {
		ApiKeyAuditLog struct {
			Nodes []struct{ Action, ApiKeyID, ActorEmail string }
		}
	}
	e.must(e.admin(), `{apiKeyAuditLog(action:REVOKED){nodes{action apiKeyId actorEmail}}}`, nil, &log)
	if n := log.ApiKeyAuditLog.Nodes; len(n) != 1 || n[0].ApiKeyID != idle.ID || n[0].ActorEmail != btk.SystemActorEmail {
		t.Errorf("REVOKED entries: %+v", n)
	}
}

// A request target with a scheme and no slash ("http:admin/x", "x:../a")
// has no path to Go, so the rules would have decided it as "/", while the
// upstream was sent "admin/x", which Werkzeug routes as /admin/x: past a
// deny rule and any base path. It is refused before the key check, and the
// upstream gets nothing (docs/gateway.md#btks-reverse-proxy).
func TestProxyRefusesOpaqueTargets(t *testing.T) {
	t.Parallel()
	e, owner, _ := newAccessEnv(t)
	k := e.createKey(owner, "opaque")
	// An upstream that records request lines as sent, as a lenient server
	// reads them (net/http's own would refuse a relative target).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	lines := make(chan string, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				br := bufio.NewReader(c)
				for {
					line, err := br.ReadString('\n')
					if err != nil {
						return
					}
					lines <- strings.TrimSpace(line)
					for { // the headers
						h, err := br.ReadString('\n')
						if err != nil || h == "\r\n" {
							break
						}
					}
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				}
			}()
		}
	}()
	for _, upstream := range []string{"http://" + ln.Addr().String(), "http://" + ln.Addr().String() + "/api/"} {
		p := e.proxyFor(upstream)
		send := func(target string) int {
			t.Helper()
			conn, err := net.DialTimeout("tcp", strings.TrimPrefix(p.URL, "http://"), 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(10 * time.Second))
			fmt.Fprintf(conn, "%s HTTP/1.1\r\nHost: x\r\nX-Api-Key: %s\r\nConnection: close\r\n\r\n", target, k.Plaintext)
			res, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			return res.StatusCode
		}
		for _, target := range []string{"GET http:admin/x", "DELETE x:admin/x", "GET http:../admin", "GET x:%2e%2e/admin"} {
			if code := send(target); code != http.StatusBadRequest {
				t.Errorf("%s via %s: HTTP %d, want 400", target, upstream, code)
			}
		}
		if code := send("GET /public"); code != http.StatusOK {
			t.Fatalf("GET /public via %s: HTTP %d", upstream, code)
		}
		if got := <-lines; got != "GET /public HTTP/1.1" && got != "GET /api/public HTTP/1.1" {
			t.Fatalf("the upstream got %q", got)
		}
		select {
		case got := <-lines:
			t.Fatalf("the upstream also got %q", got)
		default:
		}
	}
}
