package server_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Password checks are throttled per account and bounded per operation, so
// neither guessing nor a request full of aliased logins can burn the CPU.
func TestPasswordChecksAreBounded(t *testing.T) {
	e := newEnv(t)
	const login = `mutation($p:String!){login(email:"` + adminEmail + `",password:$p){accessToken}}`

	t.Run("one login per operation", func(t *testing.T) {
		var q strings.Builder
		q.WriteString("mutation{")
		for i := range 3 {
			fmt.Fprintf(&q, `l%d:login(email:"x@example.com",password:"guess-%d"){accessToken} `, i, i)
		}
		q.WriteString("}")
		if r := e.do(cred{}, q.String(), nil); r.Code() != "COMPLEXITY_LIMIT_EXCEEDED" || r.Data != nil && string(r.Data) != "null" {
			t.Fatalf("three aliased logins: %q %s", r.Code(), r.Data)
		}
	})

	t.Run("guesses per account and address", func(t *testing.T) {
		var codes []string
		for i := range 7 {
			codes = append(codes, e.do(cred{}, login, map[string]any{"p": fmt.Sprint("wrong-", i)}).Code())
		}
		if codes[4] != "UNAUTHENTICATED" || codes[5] != "RATE_LIMITED" || codes[6] != "RATE_LIMITED" {
			t.Fatalf("codes of 7 wrong passwords in a minute from one address: %v", codes)
		}
		// Even the right password waits at this address: its budget is spent.
		if r := e.do(cred{}, login, map[string]any{"p": adminPassword}); r.Code() != "RATE_LIMITED" {
			t.Fatalf("right password while throttled: %q", r.Code())
		}
		e.clock.Advance(time.Minute)
		if r := e.do(cred{}, login, map[string]any{"p": adminPassword}); r.Code() != "" {
			t.Fatalf("right password a minute later: %+v", r.Errors)
		}
	})
}

// A huge document is refused by the parser before validation can spend
// seconds on it, also for anonymous callers.
func TestHugeDocumentRefused(t *testing.T) {
	e := newEnv(t)
	q := "{" + strings.Repeat("__typename ", 5000) + "}"
	r := e.do(cred{}, q, nil)
	if r.Status == http.StatusOK && r.Code() == "" {
		t.Fatalf("a 5,000-field document was executed")
	}
	if r.Code() != "GRAPHQL_PARSE_FAILED" {
		t.Fatalf("got HTTP %d %q %+v", r.Status, r.Code(), r.Errors)
	}
}
