package server_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// Malformed requests are the caller's mistake: never INTERNAL, and a body that
// cannot be decoded is not quoted back or logged (it may hold a password).
func TestMalformedRequests(t *testing.T) {
	e, owner := newAdminEnv(t)
	tests := []struct {
		name, query string
		vars        map[string]any
		want        string
	}{
		{"bad time literal", `mutation{createApiKey(input:{name:"x",expiresAt:"soon"}){plaintextKey}}`, nil, "BAD_USER_INPUT"},
		{"bad time variable", `mutation($x:Time){createApiKey(input:{name:"x",expiresAt:$x}){plaintextKey}}`, map[string]any{"x": "soon"}, "BAD_USER_INPUT"},
		{"unknown enum", `mutation{setWorkspacePlan(workspaceId:"x",plan:GOLD){id}}`, nil, "GRAPHQL_VALIDATION_FAILED"},
		{"unknown field", `{nope}`, nil, "GRAPHQL_VALIDATION_FAILED"},
		{"syntax", `{tenantInfo{`, nil, "GRAPHQL_PARSE_FAILED"},
		{"bad cursor", `{apiKeys(after:"zzz"){nodes{id}}}`, nil, "BAD_USER_INPUT"},
		{"first too large", `{apiKeys(first:501){nodes{id}}}`, nil, "BAD_USER_INPUT"},
		{"first zero", `{apiKeyAuditLog(first:0){nodes{id}}}`, nil, "BAD_USER_INPUT"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if r := e.do(owner, tc.query, tc.vars); r.Code() != tc.want {
				t.Fatalf("got %q %+v, want %s", r.Code(), r.Errors, tc.want)
			}
		})
	}

	t.Run("undecodable body", func(t *testing.T) {
		const secret = "hunter2-secret-password"
		res, err := e.srv.Client().Post(e.srv.URL+"/graphql", "application/json",
			strings.NewReader(`{"query":"mutation{login(email:\"a@b.c\",password:\"`+secret+`\"`))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if strings.Contains(string(body), secret) || !strings.Contains(string(body), "BAD_USER_INPUT") {
			t.Fatalf("HTTP %d %s", res.StatusCode, body)
		}
		if strings.Contains(e.logText(), secret) {
			t.Fatal("the server log quotes the request body")
		}
	})

	t.Run("GET is refused", func(t *testing.T) {
		res, err := e.srv.Client().Get(e.srv.URL + "/graphql?query=%7BtenantInfo%7Bid%7D%7D")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusMethodNotAllowed {
			t.Fatalf("GET /graphql: HTTP %d", res.StatusCode)
		}
	})
}
