package server_test

import (
	"bytes"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
)

// raw sends a request and returns its status, headers and body.
func (e *env) raw(method, path, contentType string, body io.Reader, header map[string]string) (int, http.Header, string) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header, string(b)
}

// docs/design.md#http: GraphQL is served over POST with a JSON body
// only; every other transport is refused without running the operation.
func TestOnlyPOSTJSONTransport(t *testing.T) {
	t.Parallel()
	e, owner := newAdminEnv(t)
	k := e.createKey(owner, "k")
	key := map[string]string{"X-Api-Key": k.Plaintext}
	query := `{tenantInfo{id}}`

	// The positive control: the same query over POST JSON answers.
	if s, _, body := e.raw(http.MethodPost, "/graphql", "application/json; charset=utf-8", strings.NewReader(`{"query":"`+query+`"}`), key); s != http.StatusOK || !strings.Contains(body, e.adminWS) {
		t.Fatalf("POST application/json; charset=utf-8: HTTP %d %s", s, body)
	}

	var mp bytes.Buffer
	mw := multipart.NewWriter(&mp)
	mw.WriteField("operations", `{"query":"`+query+`"}`)
	mw.WriteField("map", `{}`)
	mw.Close()

	for _, tc := range []struct {
		name, method, path, contentType string
		body                            string
		header                          map[string]string
		want                            int // 0: any 4xx
	}{
		{"GET with query string", http.MethodGet, "/graphql?query=" + url.QueryEscape(query), "", "", nil, 0},
		{"GET with JSON body", http.MethodGet, "/graphql", "application/json", `{"query":"` + query + `"}`, nil, 0},
		{"PUT", http.MethodPut, "/graphql", "application/json", `{"query":"` + query + `"}`, nil, 0},
		// A POST that is not JSON: 415, with an error that says what to send.
		{"form POST", http.MethodPost, "/graphql", "application/x-www-form-urlencoded", "query=" + url.QueryEscape(query), nil, http.StatusUnsupportedMediaType},
		{"multipart POST", http.MethodPost, "/graphql", mw.FormDataContentType(), mp.String(), nil, http.StatusUnsupportedMediaType},
		{"application/graphql POST", http.MethodPost, "/graphql", "application/graphql", query, nil, http.StatusUnsupportedMediaType},
		{"text/plain POST with a JSON body", http.MethodPost, "/graphql", "text/plain", `{"query":"` + query + `"}`, nil, http.StatusUnsupportedMediaType},
		{"POST without content type", http.MethodPost, "/graphql", "", `{"query":"` + query + `"}`, nil, http.StatusUnsupportedMediaType},
		{"POST with an upgrade", http.MethodPost, "/graphql", "application/json", `{"query":"` + query + `"}`, map[string]string{
			"Connection": "Upgrade", "Upgrade": "websocket"}, http.StatusBadRequest},
		{"websocket upgrade", http.MethodGet, "/graphql", "", "", map[string]string{
			"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
			"Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Protocol": "graphql-transport-ws",
		}, 0},
		// A request-level failure answers with its HTTP status (docs/design.md#credentials).
		{"body over 1 MiB", http.MethodPost, "/graphql", "application/json", `{"query":"` + query + `","variables":{"pad":"` + strings.Repeat("x", 2<<20) + `"}}`, nil, http.StatusRequestEntityTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := map[string]string{"X-Api-Key": k.Plaintext}
			for k, v := range tc.header {
				h[k] = v
			}
			s, _, body := e.raw(tc.method, tc.path, tc.contentType, strings.NewReader(tc.body), h)
			if tc.want != 0 && s != tc.want || s < 400 || s > 499 {
				t.Errorf("HTTP %d, want a 4xx refusal (%d): %.300s", s, tc.want, body)
			}
			if strings.Contains(body, e.adminWS) {
				t.Errorf("the operation ran: %.300s", body)
			}
			if tc.method != http.MethodPost {
				return // the mux's 405, not /graphql's answer
			}
			// Every refusal of /graphql's is a GraphQL error with a code.
			var out struct {
				Errors []struct {
					Message    string
					Extensions struct{ Code string }
				}
			}
			if err := json.Unmarshal([]byte(body), &out); err != nil || len(out.Errors) != 1 ||
				out.Errors[0].Extensions.Code != "BAD_USER_INPUT" || out.Errors[0].Message == "" {
				t.Errorf("want one BAD_USER_INPUT error in JSON: %.300s", body)
			}
		})
	}
}

// docs/design.md#http: /healthz answers while the process is up, /readyz while the
// database answers.
func TestHealthEndpoints(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, path := range []string{"/healthz", "/readyz"} {
		if s, _, body := e.raw(http.MethodGet, path, "", nil, nil); s != http.StatusOK {
			t.Errorf("GET %s: HTTP %d %s", path, s, body)
		}
		if s, _, _ := e.raw(http.MethodPost, path, "", nil, nil); s != http.StatusMethodNotAllowed {
			t.Errorf("POST %s: HTTP %d, want 405", path, s)
		}
	}
	if s, _, _ := e.raw(http.MethodGet, "/nope", "", nil, nil); s != http.StatusNotFound {
		t.Errorf("GET /nope: HTTP %d", s)
	}
	e.db.Close()
	if s, _, _ := e.raw(http.MethodGet, "/readyz", "", nil, nil); s != http.StatusServiceUnavailable {
		t.Errorf("GET /readyz with the database closed: HTTP %d, want 503", s)
	}
	if s, _, _ := e.raw(http.MethodGet, "/healthz", "", nil, nil); s != http.StatusOK {
		t.Errorf("GET /healthz with the database closed: HTTP %d, want 200", s)
	}
}

// docs/design.md#workspaces-and-plans: the public client key identifies its
// workspace on workspaceBranding (public) and grants nothing else.
func TestPublicClientKey(t *testing.T) {
	t.Parallel()
	e, admin := newAdminEnv(t)
	other := e.createWorkspace(admin, "Other Shop", "CLOUD_STARTER")
	k := e.createKey(admin, "k")
	pub := map[string]string{}
	var ws struct {
		Workspaces []struct{ ID, Name, PublicClientKey string }
	}
	e.must(admin, `{workspaces{id name publicClientKey}}`, nil, &ws)
	for _, w := range ws.Workspaces {
		if !strings.HasPrefix(w.PublicClientKey, "bpk_"+w.ID[:8]+"_") || len(w.PublicClientKey) != len("bpk_12345678_")+22 {
			t.Errorf("workspace %s public client key %q", w.Name, w.PublicClientKey)
		}
		pub[w.ID] = w.PublicClientKey
	}

	const branding = `query($p:String!){workspaceBranding(publicKey:$p){workspaceId name}}`
	for _, c := range []struct {
		name string
		c    cred
	}{{"anonymous", cred{}}, {"API key", cred{Key: k.Plaintext}}, {"session", admin}} {
		for id, name := range map[string]string{e.adminWS: "Default", other: "Other Shop"} {
			var out struct {
				WorkspaceBranding *struct{ WorkspaceId, Name string }
			}
			e.must(c.c, branding, map[string]any{"p": pub[id]}, &out)
			if out.WorkspaceBranding == nil || out.WorkspaceBranding.WorkspaceId != id || out.WorkspaceBranding.Name != name {
				t.Errorf("%s: branding of %s: %+v", c.name, name, out.WorkspaceBranding)
			}
		}
	}
	for name, p := range map[string]string{
		"unknown public key": pub[e.adminWS][:13] + strings.Repeat("A", 22),
		"secret key":         k.Plaintext,
		"empty":              "",
	} {
		r := e.do(cred{}, branding, map[string]any{"p": p})
		if r.Code() != "" || !dataIsNull(r) {
			t.Errorf("%s: %s %+v, want null", name, r.Data, r.Errors)
		}
	}

	// As X-Api-Key it is refused at the request level, for public and
	// private operations alike, and even beside the probe.
	for _, q := range []string{probe, `query($p:String!){workspaceBranding(publicKey:$p){name}}`, `{apiKeys{nodes{id}}}`} {
		r := e.do(cred{Key: pub[e.adminWS]}, q, map[string]any{"p": pub[e.adminWS]})
		if r.Status != http.StatusUnauthorized || len(r.Errors) != 1 || r.Errors[0].Message != "invalid API key" || r.Code() != "UNAUTHENTICATED" {
			t.Errorf("bpk_ key as X-Api-Key on %s: HTTP %d %+v", q, r.Status, r.Errors)
		}
	}
}

// docs/design.md#credentials: with both credentials the bearer token decides.
func TestBearerBeatsKey(t *testing.T) {
	t.Parallel()
	e, admin := newAdminEnv(t)
	other := e.createWorkspace(admin, "Other", "CLOUD_PRO")
	k := e.createKey(cred{Bearer: e.impersonate(admin, other)}, "other-key")
	var out struct {
		TenantInfo struct{ ID string }
		Me         struct{ Email string }
	}
	r := e.do(cred{Bearer: admin.Bearer, Key: k.Plaintext}, `{tenantInfo{id} me{email}}`, nil)
	r.decode(t, &out)
	if out.TenantInfo.ID != e.adminWS || out.Me.Email != adminEmail {
		t.Fatalf("with a session and another workspace's key: %+v", out)
	}
	if r.Header.Get("RateLimit-Limit") != "" {
		t.Errorf("a session request carries key rate-limit headers")
	}
	// A key request carries them.
	if r := e.do(cred{Key: k.Plaintext}, probe, nil); r.Header.Get("RateLimit-Limit") == "" || r.Header.Get("RateLimit-Remaining") == "" || r.Header.Get("RateLimit-Reset") == "" {
		t.Errorf("key request without RateLimit-* headers: %v", r.Header)
	}
}

// docs/design.md#sessions-and-elevation: a session lives 12 hours.
func TestSessionExpiry(t *testing.T) {
	t.Parallel()
	e, owner := newAdminEnv(t)
	e.clock.Advance(12*time.Hour - time.Second)
	if r := e.do(owner, `{me{id}}`, nil); r.Status != http.StatusOK || r.Code() != "" {
		t.Fatalf("just before 12 h: HTTP %d %+v", r.Status, r.Errors)
	}
	e.clock.Advance(time.Second)
	if r := e.do(owner, `{me{id}}`, nil); r.Status != http.StatusUnauthorized || r.Errors[0].Message != "invalid or expired session" {
		t.Fatalf("at 12 h: HTTP %d %+v", r.Status, r.Errors)
	}
}

// What a client puts in a path is not written to the access log (DEBUG):
// the main listener names the route, not the path (an unmatched GET
// /QSECRET5/x was logged path=/QSECRET5/x, and a secret that is not a btk_
// key with it); the proxy's names the path with a key cut to its display
// prefix.
func TestAccessLogRedactsKeysInPaths(t *testing.T) {
	t.Parallel()
	e, owner := newAdminEnv(t)
	k := e.createKey(owner, "pasted")
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()
	p := e.proxyFor(up.URL)
	e.raw("GET", "/"+k.Plaintext+"/x", "", nil, nil)
	e.raw("GET", "/QSECRET5/x", "", nil, nil)
	e.raw("GET", "/healthz", "", nil, nil)
	res, err := http.Get(p.URL + "/docs/" + k.Plaintext)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	logs := e.logText()
	if strings.Contains(logs, k.Plaintext[btk.DisplayPrefixLen:]) || strings.Contains(logs, "QSECRET5") {
		t.Errorf("the access log holds what a client put in a path:\n%s", logs)
	}
	for _, want := range []string{
		"method=GET route=(none) status=404",
		`method=GET route="GET /healthz" status=200`,
		"path=/docs/" + k.Plaintext[:btk.DisplayPrefixLen] + "… status=401",
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("the access log lacks %q:\n%s", want, logs)
		}
	}
}
