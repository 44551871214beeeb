package server_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// maxFuzzResponse bounds what one anonymous request may make the server
// write: a proxy for the work it may cause, which the cost bounds keep
// small (a request is refused before it can expand).
const maxFuzzResponse = 256 << 10

// checkAnswer fails unless rec is a JSON answer whose status is a refusal or
// success the API defines: no 5xx other than a presented INTERNAL.
func checkAnswer(t *testing.T, rec *httptest.ResponseRecorder, what string) map[string]json.RawMessage {
	t.Helper()
	body := rec.Body.Bytes()
	if len(body) > maxFuzzResponse {
		t.Fatalf("%s: %d-byte answer", what, len(body))
	}
	var out map[string]json.RawMessage
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatalf("%s: HTTP %d, answer is not a JSON object: %q", what, rec.Code, body)
	}
	switch rec.Code {
	case http.StatusOK, http.StatusBadRequest, http.StatusUnauthorized, http.StatusRequestEntityTooLarge, http.StatusTooManyRequests:
	case http.StatusInternalServerError:
		if !bytes.Contains(body, []byte(`"code":"INTERNAL"`)) || !bytes.Contains(body, []byte(`"internal error"`)) {
			t.Fatalf("%s: HTTP 500 that is not a presented INTERNAL: %s", what, body)
		}
	default:
		t.Fatalf("%s: HTTP %d %s", what, rec.Code, body)
	}
	return out
}

// FuzzGraphQLBody feeds raw request bodies to the GraphQL endpoint, as an
// anonymous caller and with an API key.
func FuzzGraphQLBody(f *testing.F) {
	e := newEnv(f)
	key := e.createKey(e.admin(), "fuzz")
	for _, seed := range []string{
		`{"query":"{tenantInfo{id name}}"}`,
		`{"query":"{__typename}"}`,
		`{"query":"{__schema{types{name}}}"}`,
		`{"query":"query($s:[String!]){__typename}","variables":{"s":["a","b"]}}`,
		`{"query":"mutation{login(email:\"a@b.c\",password:\"password1\"){accessToken}}"}`,
		`{"query":"{...F0} fragment F0 on Query{__typename ...F1 ...F1} fragment F1 on Query{__typename}"}`,
		`{"query":"{...F0} fragment F0 on Query{...F0}"}`,
		`{"query":"{","variables":null}`,
		`{"query":"{tenantInfo{id}}","variables":{"x":[[[[[]]]]]},"extensions":{}}`,
		`{"query":"{tenantInfo{id}}","operationName":"nope"}`,
		`{"query":"query A{__typename} query B{__typename}"}`,
		`{"qeury":"{__typename}"}`,
		`[]`, `null`, `"x"`, `{`, ``,
		`{"query":"{apiKeys(first:500){nodes{id scopes}}}"}`,
		`{"query":"{auditEvents(since:\"0001-01-01T00:00:00Z\"){nodes{id}}}"}`,
	} {
		f.Add([]byte(seed), false)
		f.Add([]byte(seed), true)
	}
	f.Add([]byte(`{"query":"`+fragmentBomb(22)+`"}`), false)
	h := e.srv.Config.Handler
	f.Fuzz(func(t *testing.T, body []byte, withKey bool) {
		var who cred
		if withKey {
			who.Key = key.Plaintext
		}
		checkAnswer(t, serveGraphQL(h, body, who), "body")
	})
}

// FuzzCredentialHeaders feeds the credential headers: whatever they hold,
// the answer is a defined one (never a 5xx), and a key is never echoed.
func FuzzCredentialHeaders(f *testing.F) {
	e := newEnv(f)
	admin := e.admin()
	key := e.createKey(admin, "fuzz")
	revoked := e.createKey(admin, "revoked")
	e.do(admin, `mutation($id:ID!){revokeApiKey(id:$id){id}}`, map[string]any{"id": revoked.ID})
	var tenant struct {
		TenantInfo struct{ PublicClientKey string }
	}
	e.must(admin, `{tenantInfo{publicClientKey}}`, nil, &tenant)
	for _, seed := range [][3]string{
		{"Bearer " + admin.Bearer, "", ""},
		{"Bearer " + admin.Bearer, key.Plaintext, "not-a-token"},
		{"", key.Plaintext, ""},
		{"", revoked.Plaintext, ""},
		{"", tenant.TenantInfo.PublicClientKey, ""},
		{"bearer " + admin.Bearer[:len(admin.Bearer)-1], "", ""},
		{"Bearer ", "", ""},
		{"Basic dXNlcjpwYXNz", "btk_", ""},
		{"Bearer a.b.c", "btk_00000000_" + strings.Repeat("A", 43), ""},
		{"", key.Plaintext + " ", ""},
		{"", "\x00btk_\xff", "\u202e"},
		{"Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.", "", ""},
	} {
		f.Add(seed[0], seed[1], seed[2])
	}
	h := e.srv.Config.Handler
	f.Fuzz(func(t *testing.T, authorization, apiKey, elevation string) {
		req := httptest.NewRequest(http.MethodPost, "/graphql", strings.NewReader(`{"query":"{tenantInfo{id name}}"}`))
		req.Header.Set("Content-Type", "application/json")
		// Set directly: the handler must cope with what a client can put
		// on the wire and more.
		for name, v := range map[string]string{"Authorization": authorization, "X-Api-Key": apiKey, "X-Elevation": elevation} {
			if v != "" {
				req.Header[name] = []string{v}
			}
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		checkAnswer(t, rec, "headers")
		if rec.Code >= 500 {
			t.Fatalf("HTTP %d for credential headers", rec.Code)
		}
		if len(apiKey) >= 16 && strings.Contains(rec.Body.String(), apiKey) {
			t.Fatalf("the answer echoes the X-Api-Key value: %s", rec.Body)
		}
	})
}
