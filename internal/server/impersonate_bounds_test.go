package server_test

import (
	"testing"
	"time"
)

// An impersonation session ends when the platform admin's session does, so
// impersonating again from it never outlives the login's 12 hours; and one
// admin's impersonations are budgeted (10 a minute): each opens a session
// with no password check (docs/security.md#what-a-client-can-make-the-server-hold).
func TestImpersonationBounded(t *testing.T) {
	e := newEnv(t)
	admin := e.admin()
	const imp = `mutation($w:ID!){impersonate(workspaceId:$w){accessToken expiresAt}}`
	type session struct {
		Impersonate struct {
			AccessToken string
			ExpiresAt   time.Time
		}
	}
	var first session
	e.must(admin, imp, map[string]any{"w": e.adminWS}, &first)
	loginEnds := first.Impersonate.ExpiresAt // the login was just made: its 12 hours
	e.clock.Advance(11 * time.Hour)
	from := cred{Bearer: first.Impersonate.AccessToken}
	for i := range 3 { // a chain of impersonations
		var next session
		e.must(from, imp, map[string]any{"w": e.adminWS}, &next)
		if !next.Impersonate.ExpiresAt.Equal(loginEnds) {
			t.Fatalf("impersonation %d, 11 h after the login: ends %v, want the login's end %v", i, next.Impersonate.ExpiresAt, loginEnds)
		}
		from = cred{Bearer: next.Impersonate.AccessToken}
	}
	e.clock.Advance(time.Hour)
	if r := e.do(from, `{me{email}}`, nil); r.Code() != "UNAUTHENTICATED" {
		t.Fatalf("the last of the chain after the login's 12 hours: %q", r.Code())
	}

	// The budget, replenished since the chain: 10 in a minute, then refused.
	e.clock.Advance(time.Minute)
	admin = e.admin()
	refusedAt := -1
	for i := range 12 {
		if r := e.do(admin, imp, map[string]any{"w": e.adminWS}); r.Code() == "RATE_LIMITED" {
			refusedAt = i
			break
		} else if r.Code() != "" {
			t.Fatalf("impersonation %d: %q %+v", i, r.Code(), r.Errors)
		}
	}
	if refusedAt != 10 {
		t.Fatalf("refused at impersonation %d of a minute, want the 11th (index 10)", refusedAt)
	}
}
