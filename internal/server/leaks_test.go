package server_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/leaktest"
	"github.com/btk-project/btk/internal/server"
)

// leakServer is e's service behind a handler that accepts reports signed by s.
func leakServer(e *env, s *leaktest.Signer) *httptest.Server {
	keys, err := btk.ParseLeakReportKeys(s.PEM)
	if err != nil {
		e.t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(lockedWriter{e.logMu, e.logs}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv := httptest.NewServer(server.New(e.svc, e.db, log, server.WithLeakReportKeys(keys)))
	e.t.Cleanup(srv.Close)
	return srv
}

func reportBody(entries ...map[string]string) []byte {
	b, _ := json.Marshal(entries)
	return b
}

func postReport(t testing.TB, url string, body []byte, header map[string]string) authResponse {
	t.Helper()
	return send(t, http.DefaultClient, http.MethodPost, url+"/v1/leaks", header, bytes.NewReader(body))
}

// POST /v1/leaks (docs/leaks.md): a report signed by a listed key revokes
// the reported key at once and labels every token by its hash; a replay
// changes nothing and answers the same; a wrong, foreign or missing
// signature is 401; nothing of a token reaches the log.
func TestLeakReportSigned(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	signer := leaktest.NewSigner(t)
	srv := leakServer(e, signer)
	owner := e.admin()
	k := e.createKey(owner, "leaky")
	if e.probeStatus(k.Plaintext) != http.StatusOK {
		t.Fatal("the new key does not work")
	}
	body := reportBody(
		map[string]string{"token": k.Plaintext, "type": "btk_api_key", "url": "https://github.com/o/r/blob/abc/.env", "source": "content"},
		map[string]string{"token": "ghp_notours", "type": "btk_api_key", "url": "https://example.com", "source": "gist"},
	)
	signed := map[string]string{"Content-Type": "application/json",
		"Github-Public-Key-Identifier": signer.ID, "Github-Public-Key-Signature": signer.Sign(body)}

	other := leaktest.NewSigner(t)
	for name, h := range map[string]map[string]string{
		"no signature":        {"Content-Type": "application/json"},
		"signed by another":   {"Github-Public-Key-Identifier": signer.ID, "Github-Public-Key-Signature": other.Sign(body)},
		"unknown identifier":  {"Github-Public-Key-Identifier": other.ID, "Github-Public-Key-Signature": other.Sign(body)},
		"signature of other":  {"Github-Public-Key-Identifier": signer.ID, "Github-Public-Key-Signature": signer.Sign(append([]byte(" "), body...))},
		"signature garbage":   {"Github-Public-Key-Identifier": signer.ID, "Github-Public-Key-Signature": "bm90IGEgc2lnbmF0dXJl"},
		"an API key as token": {"Authorization": "Bearer " + k.Plaintext},
		"an owner's key":      {"X-Api-Key": k.Plaintext},
	} {
		r := postReport(t, srv.URL, body, h)
		if msg, code := r.message(t); r.Status != http.StatusUnauthorized || code != "UNAUTHENTICATED" {
			t.Errorf("%s: HTTP %d %s %s; want 401", name, r.Status, code, msg)
		}
	}
	if e.probeStatus(k.Plaintext) != http.StatusOK {
		t.Fatal("a refused report revoked the key")
	}

	want := []map[string]string{
		{"token_hash": leaktest.Hash(k.Plaintext), "token_type": "btk_api_key", "label": "true_positive"},
		{"token_hash": leaktest.Hash("ghp_notours"), "token_type": "btk_api_key", "label": "false_positive"},
	}
	var first string
	for round := range 2 {
		r := postReport(t, srv.URL, body, signed)
		var got []map[string]string
		if r.Status != http.StatusOK || json.Unmarshal([]byte(r.Body), &got) != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("round %d: HTTP %d %s; want %v", round, r.Status, r.Body, want)
		}
		if round == 0 {
			first = r.Body
			// Revoked at once: the very next request is refused.
			if s := e.probeStatus(k.Plaintext); s != http.StatusUnauthorized {
				t.Fatalf("the reported key answers %d after the report", s)
			}
		} else if r.Body != first {
			t.Errorf("the replay answered %s; first %s", r.Body, first)
		}
	}
	var audit struct {
		ApiKeyAuditLog struct {
			Nodes []struct{ Action, ActorEmail, ApiKeyId string }
		}
	}
	e.must(owner, `query($k:ID){apiKeyAuditLog(apiKeyId:$k,action:REVOKED){nodes{action actorEmail apiKeyId}}}`, map[string]any{"k": k.ID}, &audit)
	if n := audit.ApiKeyAuditLog.Nodes; len(n) != 1 || n[0].ActorEmail != "leak report" {
		t.Errorf("REVOKED entries after report and replay: %+v; want one by \"leak report\"", n)
	}
	var events struct {
		AuditEvents struct {
			Nodes []struct{ Action, Metadata, TargetId string }
		}
	}
	e.must(owner, `{auditEvents(action:"api_key.leaked"){nodes{action metadata targetId}}}`, nil, &events)
	if n := events.AuditEvents.Nodes; len(n) != 1 || n[0].TargetId != k.ID ||
		!strings.Contains(n[0].Metadata, `"url":"https://github.com/o/r/blob/abc/.env"`) || !strings.Contains(n[0].Metadata, `"source":"content"`) {
		t.Errorf("api_key.leaked events: %+v", n)
	}
	if strings.Contains(e.logText(), k.Plaintext) {
		t.Error("the log holds the reported plaintext")
	}
}

// A platform admin's bearer token is accepted without a signature; an owner
// who is not a platform admin is refused; malformed and oversized reports
// are refused; unsigned attempts are throttled per address.
func TestLeakReportBearerAndBounds(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	srv := leakServer(e, leaktest.NewSigner(t))
	admin := e.admin()
	k := e.createKey(admin, "leaky")
	ws := e.createWorkspace(admin, "Acme", "SELF_HOSTED")
	e.createAccount(admin, "owner@example.com", "owner-password-1", false)
	acct := e.createAccount(admin, "owner2@example.com", "owner-password-2", false)
	e.setMember(admin, ws, acct, "OWNER")
	ownerTok := e.login("owner2@example.com", "owner-password-2", ws)

	body := reportBody(map[string]string{"token": k.Plaintext, "type": "btk_api_key", "url": "u", "source": "content"})
	if r := postReport(t, srv.URL, body, map[string]string{"Authorization": "Bearer " + ownerTok}); r.Status != http.StatusUnauthorized {
		t.Errorf("an owner's bearer: HTTP %d %s", r.Status, r.Body)
	}
	r := postReport(t, srv.URL, body, map[string]string{"Authorization": admin.Bearer})
	if r.Status != http.StatusUnauthorized {
		t.Errorf("a token without the Bearer scheme: HTTP %d", r.Status)
	}
	r = postReport(t, srv.URL, body, map[string]string{"Authorization": "Bearer " + admin.Bearer})
	if r.Status != http.StatusOK || !strings.Contains(r.Body, `"true_positive"`) {
		t.Fatalf("a platform admin's report: HTTP %d %s", r.Status, r.Body)
	}
	if e.probeStatus(k.Plaintext) != http.StatusUnauthorized {
		t.Error("the key reported by a platform admin still works")
	}
	for name, b := range map[string][]byte{
		"not an array":    []byte(`{"token":"x"}`),
		"no token":        []byte(`[{"type":"x"}]`),
		"1001 entries":    []byte("[" + strings.Repeat(`{"token":"x"},`, 1000) + `{"token":"x"}]`),
		"not JSON at all": []byte("hello"),
	} {
		r := postReport(t, srv.URL, b, map[string]string{"Authorization": "Bearer " + admin.Bearer})
		if _, code := r.message(t); r.Status != http.StatusBadRequest || code != "BAD_USER_INPUT" {
			t.Errorf("%s: HTTP %d %s", name, r.Status, r.Body)
		}
	}
	big := bytes.Repeat([]byte(" "), btk.MaxLeakReportBytes+1)
	if r := postReport(t, srv.URL, big, map[string]string{"Authorization": "Bearer " + admin.Bearer}); r.Status != http.StatusRequestEntityTooLarge {
		t.Errorf("a body over 1 MiB: HTTP %d", r.Status)
	}
	// A platform admin's reports are not bad attempts: a scanner posting
	// more than 30 a minute is not refused (it was, by the budget of
	// unsigned reports).
	for i := range 35 {
		nothing := reportBody(map[string]string{"token": "btk_not_a_key", "type": "btk_api_key", "url": "u", "source": "content"})
		if r := postReport(t, srv.URL, nothing, map[string]string{"Authorization": "Bearer " + admin.Bearer}); r.Status != http.StatusOK {
			t.Fatalf("a platform admin's report %d: HTTP %d %s", i+1, r.Status, r.Body)
		}
	}
	// The unsigned attempts of one address are budgeted: 30 a minute.
	limited := 0
	for range 40 {
		if r := postReport(t, srv.URL, body, nil); r.Status == http.StatusTooManyRequests {
			limited++
		}
	}
	if limited == 0 {
		t.Error("40 unsigned attempts from one address were never throttled")
	}
}

// A canary key is never accepted, and its answer is byte for byte that of
// an unknown key (status, headers but Date, body) at /graphql,
// /v1/authorize and the proxy; its use is recorded with address, user
// agent and path, once a minute per key with a count.
func TestCanaryAnswersAsUnknownAndIsRecorded(t *testing.T) {
	t.Parallel()
	e, owner := newAdminEnv(t)
	var out struct {
		CreateApiKey struct {
			PlaintextKey string
			ApiKey       struct {
				ID     string
				Canary bool
			}
		}
	}
	e.must(owner, `mutation{createApiKey(input:{name:"trap",canary:true}){plaintextKey apiKey{id canary}}}`, nil, &out)
	canary := out.CreateApiKey.PlaintextKey
	if !out.CreateApiKey.ApiKey.Canary {
		t.Fatal("createApiKey(canary:true) made no canary")
	}
	// An unknown key of the same workspace prefix: the same path through the
	// key check up to the lookup.
	unknown := canary[:13] + strings.Repeat("A", 43)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("upstream")) }))
	t.Cleanup(up.Close)
	proxy := e.proxyFor(up.URL)
	var events struct {
		AuditEvents struct {
			Nodes []struct{ Metadata, TargetId, ActorEmail string }
		}
	}
	// A use is recorded apart from its request: wait (bounded) for want
	// events.
	recorded := func(want int) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			e.must(owner, `{auditEvents(action:"api_key.canary_used"){nodes{metadata targetId actorEmail}}}`, nil, &events)
			if len(events.AuditEvents.Nodes) >= want || time.Now().After(deadline) {
				return
			}
		}
	}
	gql := `{"query":"{tenantInfo{id}}"}`
	for _, target := range []struct{ name, method, url, body string }{
		{"/graphql", http.MethodPost, e.srv.URL + "/graphql", gql},
		{"/v1/authorize", http.MethodGet, e.srv.URL + "/v1/authorize", ""},
		{"proxy", http.MethodGet, proxy.URL + "/orders/7", ""},
	} {
		get := func(key string) authResponse {
			return send(t, http.DefaultClient, target.method, target.url, map[string]string{
				"X-Api-Key": key, "Content-Type": "application/json", "User-Agent": "trap-tester/1.0",
			}, strings.NewReader(target.body))
		}
		a, b := get(canary), get(unknown)
		a.Header.Del("Date")
		b.Header.Del("Date")
		if a.Status != http.StatusUnauthorized || a.Status != b.Status || a.Body != b.Body || !reflect.DeepEqual(a.Header, b.Header) {
			t.Errorf("%s: canary answered %d %v %q; unknown %d %v %q", target.name, a.Status, a.Header, a.Body, b.Status, b.Header, b.Body)
		}
		if target.name == "/graphql" {
			// The first use is the one recorded at once; the next two,
			// within its minute, are counted into the next record. Each
			// is recorded by a goroutine of its own, so wait for this
			// one before making the others.
			recorded(1)
		}
	}
	recorded(1)
	n := events.AuditEvents.Nodes
	if len(n) != 1 || n[0].TargetId != out.CreateApiKey.ApiKey.ID {
		t.Fatalf("canary events after three uses within a minute: %+v; want one", n)
	}
	var meta map[string]any
	json.Unmarshal([]byte(n[0].Metadata), &meta)
	if meta["ip"] != "127.0.0.1" || meta["userAgent"] != "trap-tester/1.0" || meta["path"] != "/graphql" || meta["count"] != 1.0 {
		t.Errorf("metadata: %v", meta)
	}
	e.clock.Advance(61 * time.Second)
	// A key in the path is recorded redacted (its display prefix only).
	send(t, http.DefaultClient, http.MethodGet, proxy.URL+"/orders/8/"+canary, map[string]string{"X-Api-Key": canary}, nil)
	recorded(2)
	if n := events.AuditEvents.Nodes; len(n) != 2 || !strings.Contains(n[0].Metadata, `"count":3`) ||
		!strings.Contains(n[0].Metadata, `"path":"/orders/8/`+canary[:btk.DisplayPrefixLen]+`…"`) || strings.Contains(n[0].Metadata, canary[btk.DisplayPrefixLen:]) {
		t.Errorf("after a minute: %+v; want a second event counting 3 uses, the key in its path redacted", n)
	}
}

// apiKeyByHash finds a key by the SHA-256 of its plaintext, with its
// workspace, for the owner tier of that workspace and platform admins only.
func TestAPIKeyByHash(t *testing.T) {
	t.Parallel()
	e, admin := newAdminEnv(t)
	k := e.createKey(admin, "found")
	ws := e.createWorkspace(admin, "Acme", "SELF_HOSTED")
	acct := e.createAccount(admin, "owner@example.com", "owner-password-1", false)
	e.setMember(admin, ws, acct, "OWNER")
	other := cred{Bearer: e.login("owner@example.com", "owner-password-1", ws)}
	q := `query($h:String!){apiKeyByHash(sha256:$h){id name status canary workspace{id name}}}`
	var out struct {
		ApiKeyByHash *struct {
			ID, Name, Status string
			Workspace        struct{ ID, Name string }
		}
	}
	e.must(admin, q, map[string]any{"h": leaktest.Hash(k.Plaintext)}, &out)
	if f := out.ApiKeyByHash; f == nil || f.ID != k.ID || f.Workspace.ID != e.adminWS || f.Workspace.Name != "Default" || f.Status != "ACTIVE" {
		t.Fatalf("owner: %+v", f)
	}
	e.must(other, q, map[string]any{"h": leaktest.Hash(k.Plaintext)}, &out)
	if out.ApiKeyByHash != nil {
		t.Error("another workspace's owner found the key")
	}
	e.must(cred{Key: k.Plaintext}, q, map[string]any{"h": leaktest.Hash(k.Plaintext)}, &out)
	if out.ApiKeyByHash != nil {
		t.Error("an API key found a key by hash")
	}
	if r := e.do(admin, q, map[string]any{"h": "btk_not_a_hash"}); r.Code() != "BAD_USER_INPUT" {
		t.Errorf("malformed hash: %+v", r.Errors)
	}
}

// session.login events carry the user agent and address (docs/webhooks.md#events).
func TestLoginEventCarriesUserAgent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var out struct{ Login struct{ AccessToken string } }
	e.must(cred{Header: map[string]string{"User-Agent": "forensics-test/2.0"}},
		`mutation($e:String!,$p:String!){login(email:$e,password:$p){accessToken}}`,
		map[string]any{"e": adminEmail, "p": adminPassword}, &out)
	var events struct {
		AuditEvents struct{ Nodes []struct{ Metadata string } }
	}
	e.must(cred{Bearer: out.Login.AccessToken}, `{auditEvents(action:"session.login",first:1){nodes{metadata}}}`, nil, &events)
	if n := events.AuditEvents.Nodes; len(n) != 1 || !strings.Contains(n[0].Metadata, `"userAgent":"forensics-test/2.0"`) ||
		!strings.Contains(n[0].Metadata, `"ip":"127.0.0.1"`) {
		t.Errorf("session.login: %+v", n)
	}
}
