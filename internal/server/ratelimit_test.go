package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/server"
	"github.com/btk-project/btk/internal/store"
)

// Rate limits over HTTP (docs/design.md#rate-limits). Every test
// runs on the injected clock: time only moves when a test advances it.

// limitedKey creates a key in the admin's workspace with the given overrides
// (0: none, the workspace or server default applies).
func limitedKey(e *env, owner cred, name string, perMinute, perDay int) newKey {
	e.t.Helper()
	vars := map[string]any{"n": name, "m": nil, "d": nil}
	if perMinute > 0 {
		vars["m"] = perMinute
	}
	if perDay > 0 {
		vars["d"] = perDay
	}
	var out struct {
		CreateApiKey struct {
			PlaintextKey string
			ApiKey       struct{ ID string }
		}
	}
	e.must(owner, `mutation($n:String!,$m:Int,$d:Int){createApiKey(input:{name:$n,rateLimitPerMinute:$m,rateLimitPerDay:$d}){plaintextKey apiKey{id}}}`, vars, &out)
	return newKey{ID: out.CreateApiKey.ApiKey.ID, Plaintext: out.CreateApiKey.PlaintextKey}
}

// burst sends n identity probes with key at once and counts the answers.
// Any answer other than 200 or 429 RATE_LIMITED fails the test.
func burst(t *testing.T, e *env, key string, n int) (ok, limited int) {
	t.Helper()
	for i, r := range concurrently(e, n, cred{Key: key}, probe, nil) {
		switch {
		case r.Status == http.StatusOK && len(r.Errors) == 0:
			ok++
		case r.Status == http.StatusTooManyRequests && r.Code() == "RATE_LIMITED":
			limited++
		default:
			t.Errorf("request %d: HTTP %d %+v", i, r.Status, r.Errors)
		}
	}
	return ok, limited
}

func headerInt(t *testing.T, r response, name string) int {
	t.Helper()
	v, err := strconv.Atoi(r.Header.Get(name))
	if err != nil {
		t.Fatalf("%s: %q is not an integer (HTTP %d)", name, r.Header.Get(name), r.Status)
	}
	return v
}

// rateHeaders is RateLimit-Limit, -Remaining and -Reset of a response.
func rateHeaders(t *testing.T, r response) [3]int {
	t.Helper()
	return [3]int{headerInt(t, r, "RateLimit-Limit"), headerInt(t, r, "RateLimit-Remaining"), headerInt(t, r, "RateLimit-Reset")}
}

func setWorkspaceLimits(e *env, c cred, ws string, perMinute, perDay any) {
	e.t.Helper()
	e.must(c, `mutation($w:ID!,$m:Int,$d:Int){setWorkspaceRateLimits(workspaceId:$w,perMinute:$m,perDay:$d){id}}`,
		map[string]any{"w": ws, "m": perMinute, "d": perDay}, &struct{}{})
}

// N concurrent requests against a per-minute limit L accept exactly min(N, L).
func TestRateLimitPerMinuteExactUnderConcurrency(t *testing.T) {
	t.Parallel()
	e, owner := newAdminEnv(t)
	for _, c := range []struct{ limit, n int }{{20, 64}, {32, 32}, {50, 16}} {
		k := limitedKey(e, owner, fmt.Sprintf("minute-%d-%d", c.limit, c.n), c.limit, 100_000)
		ok, limited := burst(t, e, k.Plaintext, c.n)
		if want := min(c.n, c.limit); ok != want || limited != c.n-want {
			t.Errorf("limit %d/min, %d concurrent requests: %d accepted, %d limited; want %d accepted", c.limit, c.n, ok, limited, want)
		}
	}
}

// The same for the per-day window: a key whose only override is per day
// (the per-minute default, 600, is far above it).
func TestRateLimitPerDayExactUnderConcurrency(t *testing.T) {
	t.Parallel()
	e, owner := newAdminEnv(t)
	for _, c := range []struct{ limit, n int }{{25, 64}, {40, 16}} {
		k := limitedKey(e, owner, fmt.Sprintf("day-%d-%d", c.limit, c.n), 0, c.limit)
		ok, limited := burst(t, e, k.Plaintext, c.n)
		if want := min(c.n, c.limit); ok != want || limited != c.n-want {
			t.Errorf("limit %d/day, %d concurrent requests: %d accepted, %d limited; want %d accepted", c.limit, c.n, ok, limited, want)
		}
		r := e.do(cred{Key: k.Plaintext}, probe, nil)
		if c.n >= c.limit {
			// Exhausted for the day: the day window is the tighter one, and
			// the next request is earned back after 86400/limit seconds.
			if r.Status != http.StatusTooManyRequests || rateHeaders(t, r) != [3]int{c.limit, 0, 86400} ||
				headerInt(t, r, "Retry-After") != 86400/c.limit {
				t.Errorf("after the day's burst: HTTP %d, headers %v, Retry-After %q", r.Status, r.Header, r.Header.Get("Retry-After"))
			}
		}
	}
}

// Both windows are checked together: a request refused by one window uses
// up neither.
func TestRateLimitWindowsDoNotConsumeEachOther(t *testing.T) {
	t.Parallel()

	t.Run("refused by the minute, the day is not used", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		owner := e.admin()
		k := limitedKey(e, owner, "k", 10, 15)
		if ok, _ := burst(t, e, k.Plaintext, 40); ok != 10 {
			t.Fatalf("first minute: %d accepted, want 10", ok)
		}
		// A minute later the minute window is full again; the day has the 5
		// requests the 10 accepted ones left (the 30 refused used none).
		e.clock.Advance(time.Minute)
		if ok, _ := burst(t, e, k.Plaintext, 40); ok != 5 {
			t.Fatalf("second minute: %d accepted, want the 5 left of the day", ok)
		}
	})

	t.Run("refused by the day, the minute is not used", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		owner := e.admin()
		// The key has its own minute (10) and takes its day from the
		// workspace (10).
		setWorkspaceLimits(e, owner, e.adminWS, 1, 10)
		k := limitedKey(e, owner, "k", 10, 0)
		if ok, _ := burst(t, e, k.Plaintext, 5); ok != 5 {
			t.Fatalf("%d accepted, want 5", ok)
		}
		// Lower the workspace day to 4: the half of the day already used
		// stays used, so 2 are left, while the minute has 5 left.
		setWorkspaceLimits(e, owner, e.adminWS, 1, 4)
		if ok, _ := burst(t, e, k.Plaintext, 20); ok != 2 {
			t.Fatalf("%d accepted after lowering the day limit, want 2", ok)
		}
		// Raise the day out of the way; a second later it has earned back
		// plenty. The 18 requests the day refused did not use the minute:
		// it has 10-5-2 = 3 left.
		setWorkspaceLimits(e, owner, e.adminWS, 1, 100_000_000)
		e.clock.Advance(time.Second)
		r := e.do(cred{Key: k.Plaintext}, probe, nil)
		if r.Status != http.StatusOK || rateHeaders(t, r)[0] != 10 || rateHeaders(t, r)[1] != 2 {
			t.Fatalf("after raising the day: HTTP %d, RateLimit-Limit/Remaining %q/%q, want 10/2",
				r.Status, r.Header.Get("RateLimit-Limit"), r.Header.Get("RateLimit-Remaining"))
		}
		if ok, _ := burst(t, e, k.Plaintext, 10); ok != 2 {
			t.Fatalf("%d accepted, want the 2 left of the minute", ok)
		}
	})
}

// The 429 answer: GraphQL-shaped body, RATE_LIMITED, Retry-After within the
// window (a request at now+Retry-After succeeds, one a second earlier does
// not), and the RateLimit-* headers of the tighter window on every
// key-authenticated response.
func TestRateLimitResponse(t *testing.T) {
	t.Parallel()
	e, owner := newAdminEnv(t)
	k := limitedKey(e, owner, "seven", 7, 1000) // one request earned back every 60/7 s

	for i := range 7 {
		r := e.do(cred{Key: k.Plaintext}, probe, nil)
		if r.Status != http.StatusOK {
			t.Fatalf("request %d: HTTP %d %+v", i+1, r.Status, r.Errors)
		}
		// The minute window is the tighter one; it is full again
		// ceil((i+1) * 60/7) seconds from now.
		want := [3]int{7, 6 - i, int((time.Duration(i+1)*time.Minute/7 + time.Second - 1) / time.Second)}
		if got := rateHeaders(t, r); got != want {
			t.Fatalf("request %d: RateLimit-Limit/Remaining/Reset %v, want %v", i+1, got, want)
		}
		if r.Header.Get("Retry-After") != "" {
			t.Fatalf("request %d: Retry-After on an accepted request", i+1)
		}
	}

	// The 8th: the raw answer.
	status, header, body := rawProbe(t, e, k.Plaintext)
	if status != http.StatusTooManyRequests {
		t.Fatalf("8th request: HTTP %d %s", status, body)
	}
	if ct := header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("429 Content-Type %q", ct)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(body, &doc); err != nil || len(doc) != 1 || doc["errors"] == nil {
		t.Fatalf("429 body %s: want an object with errors only", body)
	}
	var errs []struct {
		Message    string
		Extensions map[string]any
	}
	if err := json.Unmarshal(doc["errors"], &errs); err != nil || len(errs) != 1 ||
		errs[0].Message != "rate limit exceeded" || len(errs[0].Extensions) != 1 || errs[0].Extensions["code"] != "RATE_LIMITED" {
		t.Fatalf("429 body %s", body)
	}
	ra, err := strconv.Atoi(header.Get("Retry-After"))
	if err != nil || ra != 9 { // ceil(60/7 s)
		t.Fatalf("Retry-After %q, want 9", header.Get("Retry-After"))
	}
	if header.Get("RateLimit-Limit") != "7" || header.Get("RateLimit-Remaining") != "0" || header.Get("RateLimit-Reset") != "60" {
		t.Fatalf("429 RateLimit headers %q/%q/%q, want 7/0/60",
			header.Get("RateLimit-Limit"), header.Get("RateLimit-Remaining"), header.Get("RateLimit-Reset"))
	}

	// One second before Retry-After: still refused; at Retry-After: accepted.
	e.clock.Advance(time.Duration(ra-1) * time.Second)
	if r := e.do(cred{Key: k.Plaintext}, probe, nil); r.Status != http.StatusTooManyRequests {
		t.Fatalf("%d s later: HTTP %d, want 429", ra-1, r.Status)
	}
	e.clock.Advance(time.Second)
	if r := e.do(cred{Key: k.Plaintext}, probe, nil); r.Status != http.StatusOK {
		t.Fatalf("Retry-After (%d s) later: HTTP %d %+v", ra, r.Status, r.Errors)
	}

	// A key-authenticated answer with a field error carries the headers too.
	other := limitedKey(e, owner, "other", 0, 0)
	r := e.do(cred{Key: other.Plaintext}, `{me{id}}`, nil)
	if r.Status != http.StatusOK || r.Code() != "UNAUTHENTICATED" || rateHeaders(t, r) != [3]int{600, 599, 1} {
		t.Fatalf("me with a key: HTTP %d %+v, RateLimit %q/%q/%q", r.Status, r.Errors,
			r.Header.Get("RateLimit-Limit"), r.Header.Get("RateLimit-Remaining"), r.Header.Get("RateLimit-Reset"))
	}

	// The day window when it is the tighter one.
	dayKey := limitedKey(e, owner, "day", 0, 3)
	r = e.do(cred{Key: dayKey.Plaintext}, probe, nil)
	if r.Status != http.StatusOK || rateHeaders(t, r) != [3]int{3, 2, 28800} {
		t.Fatalf("day-bound key: HTTP %d, RateLimit %v", r.Status, r.Header)
	}

	// No RateLimit headers where no key was accepted or limited: a session,
	// an unknown key, a revoked key.
	e.must(owner, `mutation($id:ID!){revokeApiKey(id:$id){id}}`, map[string]any{"id": other.ID}, &struct{}{})
	for what, c := range map[string]cred{
		"session":     owner,
		"unknown key": {Key: "btk_" + e.adminWS[:8] + "_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"},
		"revoked key": {Key: other.Plaintext},
	} {
		r := e.do(c, probe, nil)
		for _, h := range []string{"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset", "Retry-After"} {
			if v := r.Header.Get(h); v != "" {
				t.Errorf("%s (HTTP %d): %s: %q", what, r.Status, h, v)
			}
		}
	}
}

// rawProbe sends the identity probe with key and returns the raw answer.
func rawProbe(t *testing.T, e *env, key string) (int, http.Header, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/graphql", bytes.NewReader([]byte(`{"query":"`+probe+`"}`)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Api-Key", key)
	res, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, res.Header, body
}

// Effective limit = the key's override, else the workspace default, else the
// server default (btk.Config); setWorkspaceRateLimits applies to the very
// next request.
func TestRateLimitPrecedence(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *btk.Config) { c.DefaultPerMinute, c.DefaultPerDay = 30, 50_000 })
	owner := e.admin()
	inherits := limitedKey(e, owner, "inherits", 0, 0)
	ownMinute := limitedKey(e, owner, "own-minute", 5, 0)
	ownDay := limitedKey(e, owner, "own-day", 0, 6)

	limitOf := func(k newKey) int {
		t.Helper()
		r := e.do(cred{Key: k.Plaintext}, probe, nil)
		if r.Status != http.StatusOK {
			t.Fatalf("HTTP %d %+v", r.Status, r.Errors)
		}
		return headerInt(t, r, "RateLimit-Limit")
	}
	// RateLimit-Limit names the limit of the window with fewer requests
	// left; the numbers are chosen so that it shows the limit under test.
	check := func(step string, want ...int) {
		t.Helper()
		for i, k := range []newKey{inherits, ownMinute, ownDay} {
			if got := limitOf(k); got != want[i] {
				t.Errorf("%s: key %d has RateLimit-Limit %d, want %d", step, i, got, want[i])
			}
		}
	}
	check("server defaults", 30, 5, 6)

	setWorkspaceLimits(e, owner, e.adminWS, 12, nil)
	check("workspace per-minute default", 12, 5, 6)
	if got := limitOf(limitedKey(e, owner, "new", 0, 0)); got != 12 {
		t.Errorf("a new key: RateLimit-Limit %d, want the workspace's 12", got)
	}

	setWorkspaceLimits(e, owner, e.adminWS, nil, 20)
	check("workspace per-day default", 20, 5, 6)

	setWorkspaceLimits(e, owner, e.adminWS, nil, nil)
	check("workspace defaults removed", 30, 5, 6)

	// The change applies to the next request also for an exhausted key:
	// lowering the limit does not give it anything; raising it makes it
	// earn requests back at the new rate at once.
	tight := limitedKey(e, owner, "tight", 0, 0)
	setWorkspaceLimits(e, owner, e.adminWS, 2, nil)
	if ok, _ := burst(t, e, tight.Plaintext, 6); ok != 2 {
		t.Fatalf("%d accepted at 2/min, want 2", ok)
	}
	r := e.do(cred{Key: tight.Plaintext}, probe, nil)
	if r.Status != http.StatusTooManyRequests || headerInt(t, r, "Retry-After") != 30 {
		t.Fatalf("exhausted at 2/min: HTTP %d Retry-After %q, want 429 after 30 s", r.Status, r.Header.Get("Retry-After"))
	}
	setWorkspaceLimits(e, owner, e.adminWS, 60, nil)
	r = e.do(cred{Key: tight.Plaintext}, probe, nil)
	if r.Status != http.StatusTooManyRequests || headerInt(t, r, "Retry-After") != 1 || headerInt(t, r, "RateLimit-Limit") != 60 {
		t.Fatalf("exhausted, raised to 60/min: HTTP %d Retry-After %q Limit %q, want 429 after 1 s at limit 60",
			r.Status, r.Header.Get("Retry-After"), r.Header.Get("RateLimit-Limit"))
	}
	e.clock.Advance(time.Second)
	if r := e.do(cred{Key: tight.Plaintext}, probe, nil); r.Status != http.StatusOK {
		t.Fatalf("a second later at 60/min: HTTP %d", r.Status)
	}
}

// restart closes the server and the database after flushing usage, as `btk
// serve` does at shutdown, and opens a new service and server on the same
// database with the same clock.
func restart(e *env, opts ...envOption) {
	e.t.Helper()
	ctx := context.Background()
	e.flush()
	e.srv.Close()
	if err := e.db.Close(); err != nil {
		e.t.Fatal(err)
	}
	db, err := store.Open(ctx, e.dbPath, false)
	if err != nil {
		e.t.Fatal(err)
	}
	cfg := btk.Config{Now: e.clock.Now}
	for _, o := range opts {
		o(&cfg)
	}
	svc, err := btk.NewService(ctx, db, nil, cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	e.db, e.svc = db, svc
	log := slog.New(slog.NewTextHandler(lockedWriter{e.logMu, e.logs}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e.srv = httptest.NewServer(server.New(svc, db, log))
	e.t.Cleanup(func() { db.Close() })
}

// Day counts survive a restart (they are persisted with the last_used_at
// flush); the minute window starts full.
func TestRateLimitDayCountsSurviveRestart(t *testing.T) {
	t.Parallel()
	e, owner := newAdminEnv(t)
	day := limitedKey(e, owner, "day", 0, 5)
	minute := limitedKey(e, owner, "minute", 3, 1000)
	t0 := e.clock.Now()
	if ok, _ := burst(t, e, day.Plaintext, 8); ok != 5 {
		t.Fatalf("%d accepted, want 5", ok)
	}
	if ok, _ := burst(t, e, minute.Plaintext, 3); ok != 3 {
		t.Fatalf("%d accepted, want 3", ok)
	}
	e.clock.Advance(time.Second)
	r := e.do(cred{Key: day.Plaintext}, probe, nil)
	if r.Status != http.StatusTooManyRequests {
		t.Fatalf("before the restart: HTTP %d", r.Status)
	}
	retryBefore := headerInt(t, r, "Retry-After")

	restart(e)
	owner = e.admin()
	r = e.do(cred{Key: day.Plaintext}, probe, nil)
	if r.Status != http.StatusTooManyRequests || r.Code() != "RATE_LIMITED" {
		t.Fatalf("after the restart: HTTP %d %+v; the exhausted day window must stay exhausted", r.Status, r.Errors)
	}
	if got := headerInt(t, r, "Retry-After"); got != retryBefore {
		t.Fatalf("Retry-After %d after the restart, %d before", got, retryBefore)
	}
	if got := rateHeaders(t, r); got[0] != 5 || got[1] != 0 {
		t.Fatalf("RateLimit %v after the restart, want limit 5, 0 remaining", got)
	}
	// The minute window is in memory only: it starts full.
	r = e.do(cred{Key: minute.Plaintext}, probe, nil)
	if got := rateHeaders(t, r); r.Status != http.StatusOK || got[0] != 3 || got[1] != 2 {
		t.Fatalf("minute-bound key after the restart: HTTP %d, RateLimit %v", r.Status, r.Header)
	}
	// The day earns requests back on schedule: one every 86400/5 s after the
	// burst at t0.
	e.clock.Advance(t0.Add(86400/5*time.Second).Sub(e.clock.Now()) - time.Second)
	if r := e.do(cred{Key: day.Plaintext}, probe, nil); r.Status != http.StatusTooManyRequests {
		t.Fatalf("a second before one request is earned back: HTTP %d", r.Status)
	}
	e.clock.Advance(time.Second)
	if r := e.do(cred{Key: day.Plaintext}, probe, nil); r.Status != http.StatusOK {
		t.Fatalf("when one request is earned back: HTTP %d %+v", r.Status, r.Errors)
	}
	// Refused requests, before and after the restart, did not move lastUsedAt.
	e.flush()
	if got := e.lastUsedAt(owner, day.ID); got == nil || !got.Equal(e.clock.Now()) {
		t.Fatalf("lastUsedAt %v, want %v", got, e.clock.Now())
	}
}

// Refused requests (401, 429) do not update lastUsedAt; accepted ones do,
// also when they come in a concurrent burst.
func TestRateLimitRefusalsLeaveLastUsedAt(t *testing.T) {
	t.Parallel()
	e, owner := newAdminEnv(t)
	k := limitedKey(e, owner, "k", 3, 1000)
	t0 := e.clock.Now()
	if ok, _ := burst(t, e, k.Plaintext, 10); ok != 3 {
		t.Fatalf("%d accepted, want 3", ok)
	}
	e.flush()
	if got := e.lastUsedAt(owner, k.ID); got == nil || !got.Equal(t0) {
		t.Fatalf("lastUsedAt %v after the burst, want %v", got, t0)
	}
	e.clock.Advance(5 * time.Second) // still exhausted: one request every 20 s
	if ok, limited := burst(t, e, k.Plaintext, 5); ok != 0 || limited != 5 {
		t.Fatalf("%d accepted, %d limited; want all 5 limited", ok, limited)
	}
	e.must(owner, `mutation($id:ID!){revokeApiKey(id:$id){id}}`, map[string]any{"id": k.ID}, &struct{}{})
	e.clock.Advance(time.Minute)
	if r := e.do(cred{Key: k.Plaintext}, probe, nil); r.Status != http.StatusUnauthorized {
		t.Fatalf("revoked key: HTTP %d", r.Status)
	}
	e.flush()
	if got := e.lastUsedAt(owner, k.ID); got == nil || !got.Equal(t0) {
		t.Fatalf("lastUsedAt %v after refused requests, want %v", got, t0)
	}
}
