package server_test

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
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
	e, owner := newAdminEnv(t)
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
	tight := e.createKeyWith(owner, "tight", "rateLimitPerMinute:1,rateLimitPerDay:10")
	t2 := e.clock.Now()
	r := e.do(cred{Key: tight.Plaintext}, probe, nil)
	if r.Status != http.StatusOK || r.Header.Get("RateLimit-Limit") != "1" || r.Header.Get("RateLimit-Remaining") != "0" {
		t.Fatalf("first call: HTTP %d, RateLimit-Limit %q, RateLimit-Remaining %q", r.Status, r.Header.Get("RateLimit-Limit"), r.Header.Get("RateLimit-Remaining"))
	}
	e.clock.Advance(time.Second)
	r = e.do(cred{Key: tight.Plaintext}, probe, nil)
	if r.Status != http.StatusTooManyRequests || r.Code() != "RATE_LIMITED" || r.Errors[0].Message != "rate limit exceeded" {
		t.Fatalf("second call within the minute: HTTP %d %+v", r.Status, r.Errors)
	}
	if ra, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || ra < 1 || ra > 60 {
		t.Fatalf("Retry-After %q, want 1-60 seconds", r.Header.Get("Retry-After"))
	}
	e.flush()
	sameTime("after a 429", e.lastUsedAt(owner, tight.ID), t2)
}

// usagePoint is an UsagePoint as the API answers it.
type usagePoint struct {
	Start                          time.Time
	Accepted, RateLimited, Refused int
}

func (e *env) keyUsage(c cred, id, granularity string) (pts []usagePoint, ip, ua *string) {
	e.t.Helper()
	var out struct {
		ApiKey *struct {
			Usage             []usagePoint
			LastUsedIp        *string
			LastUsedUserAgent *string
		}
	}
	e.must(c, `query($id:ID!,$g:UsageGranularity){apiKey(id:$id){usage(granularity:$g){start accepted rateLimited refused} lastUsedIp lastUsedUserAgent}}`,
		map[string]any{"id": id, "g": granularity}, &out)
	if out.ApiKey == nil {
		e.t.Fatalf("key %s not found", id)
	}
	return out.ApiKey.Usage, out.ApiKey.LastUsedIp, out.ApiKey.LastUsedUserAgent
}

// docs/usage.md: each use of a key is counted in its hour,
// accepted, rate-limited (429) or refused (401 for a revoked key), with the
// last client's address and user agent (cut to 256 bytes); nothing is
// written before the flush; workspaceUsage sums the keys and names the top
// ones; ranges are bounded.
func TestKeyUsageCounts(t *testing.T) {
	t.Parallel()
	e, owner := newAdminEnv(t)
	lim := e.createKeyWith(owner, "limited", "rateLimitPerMinute:2")
	k := e.createKey(owner, "used")
	ua := strings.Repeat("agent/", 100) // 600 bytes
	for range 5 {
		if r := e.do(cred{Key: k.Plaintext, Header: map[string]string{"User-Agent": ua}}, probe, nil); r.Status != http.StatusOK {
			t.Fatalf("HTTP %d", r.Status)
		}
	}
	for i := range 5 { // 2 accepted, 3 refused for the limit
		want := http.StatusOK
		if i >= 2 {
			want = http.StatusTooManyRequests
		}
		if s := e.probeStatus(lim.Plaintext); s != want {
			t.Fatalf("limited call %d: HTTP %d", i, s)
		}
	}
	if pts, _, _ := e.keyUsage(owner, k.ID, "HOUR"); len(pts) == 0 || pts[len(pts)-1].Accepted != 0 {
		t.Fatalf("counted before any flush (a write per request?): %+v", pts)
	}
	e.flush()
	pts, ip, gotUA := e.keyUsage(owner, k.ID, "HOUR")
	if len(pts) != 25 {
		t.Fatalf("%d hourly points, want 25 (the last 24 hours and this one)", len(pts))
	}
	last := pts[len(pts)-1]
	if last.Accepted != 5 || last.RateLimited != 0 || last.Refused != 0 || !last.Start.Equal(e.clock.Now().Truncate(time.Hour)) {
		t.Fatalf("this hour: %+v", last)
	}
	if ip == nil || *ip != "127.0.0.1" || gotUA == nil || len(*gotUA) != 256 || !strings.HasPrefix(ua, *gotUA) {
		t.Fatalf("last client %v %v", ip, gotUA)
	}
	if p, _, _ := e.keyUsage(owner, lim.ID, "DAY"); len(p) != 8 || p[7].Accepted != 2 || p[7].RateLimited != 3 {
		t.Fatalf("limited key by day: %+v", p)
	}

	// A revoked key's uses are refused and counted against it.
	e.must(owner, `mutation($id:ID!){revokeApiKey(id:$id){id}}`, map[string]any{"id": k.ID}, &struct{}{})
	e.clock.Advance(time.Hour)
	for range 4 {
		if s := e.probeStatus(k.Plaintext); s != http.StatusUnauthorized {
			t.Fatalf("revoked key: HTTP %d", s)
		}
	}
	e.probeStatus("btk_" + strings.Repeat("x", 52)) // unknown: counted nowhere
	e.flush()
	pts, _, _ = e.keyUsage(owner, k.ID, "HOUR")
	if last := pts[len(pts)-1]; last.Refused != 4 || last.Accepted != 0 || pts[len(pts)-2].Accepted != 5 {
		t.Fatalf("after the revoke: %+v", pts[len(pts)-2:])
	}

	var ws struct {
		WorkspaceUsage struct {
			Granularity string
			Points      []usagePoint
			TopKeys     []struct {
				ApiKey                         struct{ Name string }
				Accepted, RateLimited, Refused int
			}
		}
	}
	e.must(owner, `{workspaceUsage(granularity:DAY){granularity points{start accepted rateLimited refused} topKeys(first:1){apiKey{name} accepted rateLimited refused}}}`, nil, &ws)
	var sum usagePoint
	for _, p := range ws.WorkspaceUsage.Points {
		sum.Accepted, sum.RateLimited, sum.Refused = sum.Accepted+p.Accepted, sum.RateLimited+p.RateLimited, sum.Refused+p.Refused
	}
	if sum.Accepted != 7 || sum.RateLimited != 3 || sum.Refused != 4 {
		t.Fatalf("workspace sums %+v", sum)
	}
	if top := ws.WorkspaceUsage.TopKeys; len(top) != 1 || top[0].ApiKey.Name != "used" || top[0].Accepted != 5 || top[0].Refused != 4 {
		t.Fatalf("top keys %+v", top)
	}

	// Bounded: 91 days of hours, or a too large operation, are refused.
	since := e.clock.Now().Add(-91 * 24 * time.Hour).Format(time.RFC3339)
	if r := e.do(owner, `query($id:ID!,$s:Time){apiKey(id:$id){usage(since:$s,granularity:HOUR){accepted}}}`, map[string]any{"id": k.ID, "s": since}); r.Code() != "BAD_USER_INPUT" {
		t.Fatalf("91 days of hours: %+v", r.Errors)
	}
	var aliases strings.Builder
	for i := range 10 {
		fmt.Fprintf(&aliases, "u%d:usage(since:$s,granularity:HOUR){accepted} ", i)
	}
	since = e.clock.Now().Add(-89 * 24 * time.Hour).Format(time.RFC3339)
	if r := e.do(owner, `query($id:ID!,$s:Time){apiKey(id:$id){`+aliases.String()+`}}`, map[string]any{"id": k.ID, "s": since}); r.Code() != "BAD_USER_INPUT" {
		t.Fatalf("10 series of 89 days of hours in one operation: %+v", r.Errors)
	}
	// A key alone cannot read usage; another workspace's key is not found.
	if r := e.do(cred{Key: lim.Plaintext}, `{workspaceUsage{granularity}}`, nil); r.Code() == "" {
		t.Fatal("an API key read the workspace's usage")
	}
}

// docs/usage.md: uses refused because the key is restricted (a network it
// may not be used from) or a canary count as refused against that key.
func TestRestrictedAndCanaryUsesCountRefused(t *testing.T) {
	t.Parallel()
	e, owner := newAdminEnv(t)
	netKey := e.createKeyWith(owner, "office-only", `allowedCidrs:["10.0.0.0/8"]`)
	canary := e.createKeyWith(owner, "trap", "canary:true")
	if s := e.probeStatus(netKey.Plaintext); s != http.StatusForbidden {
		t.Fatalf("key used from outside its network: HTTP %d", s)
	}
	if s := e.probeStatus(canary.Plaintext); s != http.StatusUnauthorized {
		t.Fatalf("canary: HTTP %d", s)
	}
	e.flush()
	for name, id := range map[string]string{"restricted": netKey.ID, "canary": canary.ID} {
		pts, _, _ := e.keyUsage(owner, id, "HOUR")
		if last := pts[len(pts)-1]; last.Refused != 1 || last.Accepted != 0 || last.RateLimited != 0 {
			t.Errorf("%s key: %+v, want one refused use", name, last)
		}
	}
}
