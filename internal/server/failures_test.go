package server_test

import (
	"net/http"
	"testing"
)

// A failed operation writes nothing: a change and its audit rows are one
// transaction (docs/design.md#key-lifecycle). A rotation that fails after
// its revocation step (the new name is taken) must leave the old key active.
func TestFailedRotationChangesNothing(t *testing.T) {
	t.Parallel()
	e, owner := newAdminEnv(t)
	k := e.createKey(owner, "rotate-me")
	e.createKey(owner, "taken")
	otherID := e.createAccount(owner, "other@example.com", "other-password-1", false)
	e.setMember(owner, e.adminWS, otherID, "OWNER")
	otherElevation := e.elevated(cred{Bearer: e.login("other@example.com", "other-password-1", "")}, "other-password-1").Elevation
	elevated := e.elevated(owner, adminPassword)
	before := e.allIDs(owner, "apiKeys", "includeRevoked:true,")

	for _, tc := range []struct {
		name, input string
		c           cred
		want        string
	}{
		{"new name taken", `,input:{name:"taken"}`, elevated, "NAME_TAKEN"},
		{"bad new name", `,input:{name:"   "}`, elevated, "BAD_USER_INPUT"},
		{"expiry in the past", `,input:{expiresAt:"2001-01-01T00:00:00Z"}`, elevated, "BAD_USER_INPUT"},
		{"another account's elevation", ``, cred{Bearer: owner.Bearer, Elevation: otherElevation}, "ELEVATION_REQUIRED"},
		{"unknown id", ``, elevated, "NOT_FOUND"},
		{"malformed id", ``, elevated, "NOT_FOUND"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := k.ID
			switch tc.name {
			case "unknown id":
				id = "00000000-0000-4000-8000-000000000000"
			case "malformed id":
				id = "not-a-uuid"
			}
			r := e.do(tc.c, `mutation($id:ID!){rotateApiKey(id:$id`+tc.input+`){plaintextKey}}`, map[string]any{"id": id})
			if r.Status != http.StatusOK || r.Code() != tc.want {
				t.Fatalf("HTTP %d %q %+v, want %s", r.Status, r.Code(), r.Errors, tc.want)
			}
			if s := e.probeStatus(k.Plaintext); s != http.StatusOK {
				t.Fatalf("the key after a failed rotation: HTTP %d", s)
			}
		})
	}
	var status struct{ ApiKey struct{ Status string } }
	e.must(owner, `query($id:ID!){apiKey(id:$id){status}}`, map[string]any{"id": k.ID}, &status)
	if status.ApiKey.Status != "ACTIVE" {
		t.Fatalf("status after failed rotations: %s", status.ApiKey.Status)
	}
	if after := e.allIDs(owner, "apiKeys", "includeRevoked:true,"); len(after) != len(before) {
		t.Fatalf("failed rotations added keys: %d → %d", len(before), len(after))
	}
	assertAudit(t, e, owner, []string{"CREATED", "CREATED"}, []string{"api_key.created", "api_key.created"})

	// Revoking an unknown or malformed id is NOT_FOUND and writes nothing.
	for _, id := range []string{"00000000-0000-4000-8000-000000000000", "not-a-uuid", ""} {
		if r := e.do(owner, `mutation($id:ID!){revokeApiKey(id:$id){id}}`, map[string]any{"id": id}); r.Code() != "NOT_FOUND" {
			t.Errorf("revoke %q: %q %+v", id, r.Code(), r.Errors)
		}
	}
	assertAudit(t, e, owner, []string{"CREATED", "CREATED"}, nil)
}

// Audit rows record the caller's user agent and the connection's address;
// a client-sent X-Forwarded-For is not trusted.
func TestAuditRecordsRequest(t *testing.T) {
	t.Parallel()
	e, owner := newAdminEnv(t)
	c := owner
	c.Header = map[string]string{"User-Agent": "ci-bot/1.0", "X-Forwarded-For": "203.0.113.9", "X-Real-Ip": "203.0.113.9"}
	e.must(c, `mutation{createApiKey(input:{name:"k"}){plaintextKey}}`, nil, &struct{}{})
	var out struct {
		ApiKeyAuditLog struct {
			Nodes []struct{ IP, UserAgent, ActorEmail string }
		}
	}
	e.must(owner, `{apiKeyAuditLog{nodes{ip userAgent actorEmail}}}`, nil, &out)
	if len(out.ApiKeyAuditLog.Nodes) != 1 {
		t.Fatalf("%+v", out)
	}
	if n := out.ApiKeyAuditLog.Nodes[0]; n.IP != "127.0.0.1" || n.UserAgent != "ci-bot/1.0" || n.ActorEmail != adminEmail {
		t.Fatalf("audit entry %+v, want ip 127.0.0.1, userAgent ci-bot/1.0, actor %s", n, adminEmail)
	}
}
