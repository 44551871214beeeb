package server_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"
)

func (e *env) lastUsedAt(c cred, id string) *time.Time {
	e.t.Helper()
	var out struct {
		ApiKey *struct{ LastUsedAt *time.Time }
	}
	e.must(c, `query($id:ID!){apiKey(id:$id){lastUsedAt}}`, map[string]any{"id": id}, &out)
	if out.ApiKey == nil {
		e.t.Fatalf("key %s not found", id)
	}
	return out.ApiKey.LastUsedAt
}

// docs/design.md#storage: last_used_at is collected in memory on each
// accepted call and written in batches; refused calls (401, 429) leave it.
func TestLastUsedAt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	owner := e.admin()
	k := e.createKey(owner, "used")
	idle := e.createKey(owner, "idle")
	sameTime := func(what string, got *time.Time, want time.Time) {
		t.Helper()
		if got == nil || !got.Equal(want) {
			t.Fatalf("%s: lastUsedAt %v, want %v", what, got, want)
		}
	}

	t0 := e.clock.Now()
	if s := e.probeStatus(k.Plaintext); s != http.StatusOK {
		t.Fatalf("probe: HTTP %d", s)
	}
	if got := e.lastUsedAt(owner, k.ID); got != nil {
		t.Fatalf("lastUsedAt %v before any flush: a database write per request", got)
	}
	e.flush()
	sameTime("after an accepted call and a flush", e.lastUsedAt(owner, k.ID), t0)
	if got := e.lastUsedAt(owner, idle.ID); got != nil {
		t.Fatalf("an unused key has lastUsedAt %v", got)
	}

	// The latest accepted call wins.
	e.clock.Advance(time.Minute)
	t1 := e.clock.Now()
	e.probeStatus(k.Plaintext)
	e.flush()
	sameTime("after a later call", e.lastUsedAt(owner, k.ID), t1)

	// A session request with a key alongside uses the session, not the key.
	e.clock.Advance(time.Minute)
	if r := e.do(cred{Bearer: owner.Bearer, Key: idle.Plaintext}, probe, nil); r.Status != http.StatusOK {
		t.Fatalf("bearer and key: HTTP %d", r.Status)
	}
	e.flush()
	if got := e.lastUsedAt(owner, idle.ID); got != nil {
		t.Fatalf("the key beside a bearer token was marked used at %v", got)
	}

	// 401: a revoked key's calls are not recorded.
	e.must(owner, `mutation($id:ID!){revokeApiKey(id:$id){id}}`, map[string]any{"id": k.ID}, &struct{}{})
	e.clock.Advance(time.Minute)
	if s := e.probeStatus(k.Plaintext); s != http.StatusUnauthorized {
		t.Fatalf("revoked key: HTTP %d", s)
	}
	e.flush()
	sameTime("after a 401", e.lastUsedAt(owner, k.ID), t1)

	// 429: a call over the key's limit is not recorded.
	var out struct {
		CreateApiKey struct {
			PlaintextKey string
			ApiKey       struct{ ID string }
		}
	}
	e.must(owner, `mutation{createApiKey(input:{name:"tight",rateLimitPerMinute:1,rateLimitPerDay:10}){plaintextKey apiKey{id}}}`, nil, &out)
	tight := out.CreateApiKey
	t2 := e.clock.Now()
	r := e.do(cred{Key: tight.PlaintextKey}, probe, nil)
	if r.Status != http.StatusOK || r.Header.Get("RateLimit-Limit") != "1" || r.Header.Get("RateLimit-Remaining") != "0" {
		t.Fatalf("first call: HTTP %d, RateLimit-Limit %q, RateLimit-Remaining %q", r.Status, r.Header.Get("RateLimit-Limit"), r.Header.Get("RateLimit-Remaining"))
	}
	e.clock.Advance(time.Second)
	r = e.do(cred{Key: tight.PlaintextKey}, probe, nil)
	if r.Status != http.StatusTooManyRequests || r.Code() != "RATE_LIMITED" || r.Errors[0].Message != "rate limit exceeded" {
		t.Fatalf("second call within the minute: HTTP %d %+v", r.Status, r.Errors)
	}
	if ra, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || ra < 1 || ra > 60 {
		t.Fatalf("Retry-After %q, want 1-60 seconds", r.Header.Get("Retry-After"))
	}
	e.flush()
	sameTime("after a 429", e.lastUsedAt(owner, tight.ApiKey.ID), t2)
}
