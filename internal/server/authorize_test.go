package server_test

import (
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// authResponse is an answer of /v1/authorize (or of the proxy).
type authResponse struct {
	Status int
	Header http.Header
	Body   string
}

// message is the first error message of a GraphQL-shaped body, or "".
func (r authResponse) message(t testing.TB) (msg, code string) {
	t.Helper()
	if r.Body == "" {
		return "", ""
	}
	var b struct {
		Errors []gqlError `json:"errors"`
	}
	if err := json.Unmarshal([]byte(r.Body), &b); err != nil || len(b.Errors) != 1 {
		t.Fatalf("body is not one GraphQL-shaped error (HTTP %d): %q", r.Status, r.Body)
	}
	code, _ = b.Errors[0].Extensions["code"].(string)
	return b.Errors[0].Message, code
}

// send makes a request with the given headers to url and reads the answer.
func send(t testing.TB, client *http.Client, method, url string, header map[string]string, body io.Reader) authResponse {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return authResponse{Status: res.StatusCode, Header: res.Header, Body: string(raw)}
}

func (e *env) authorize(method string, header map[string]string) authResponse {
	e.t.Helper()
	return send(e.t, e.srv.Client(), method, e.srv.URL+"/v1/authorize", header, strings.NewReader("ignored body"))
}

// createKeyWith creates a key with extra input fields (GraphQL syntax).
func (e *env) createKeyWith(c cred, name, extra string) newKey {
	e.t.Helper()
	var out struct {
		CreateApiKey struct {
			PlaintextKey string
			ApiKey       struct{ ID string }
		}
	}
	e.must(c, `mutation($n:String!){createApiKey(input:{name:$n,`+extra+`}){plaintextKey apiKey{id}}}`, map[string]any{"n": name}, &out)
	return newKey{ID: out.CreateApiKey.ApiKey.ID, Plaintext: out.CreateApiKey.PlaintextKey}
}

var (
	policyRe = regexp.MustCompile(`^"minute";q=(\d+);w=60, "day";q=(\d+);w=86400$`)
	limitRe  = regexp.MustCompile(`^"(minute|day)";r=(\d+);t=(\d+)$`)
)

// checkRateLimitHeaders checks both header sets (docs/design.md#rate-limits) against the
// key's limits and the tighter window, and Retry-After on a refusal.
func checkRateLimitHeaders(t testing.TB, h http.Header, perMinute, perDay int, window string, remaining int, refused bool) {
	t.Helper()
	m := policyRe.FindStringSubmatch(h.Get("RateLimit-Policy"))
	if m == nil || m[1] != strconv.Itoa(perMinute) || m[2] != strconv.Itoa(perDay) {
		t.Errorf("RateLimit-Policy %q, want minute q=%d, day q=%d", h.Get("RateLimit-Policy"), perMinute, perDay)
	}
	l := limitRe.FindStringSubmatch(h.Get("RateLimit"))
	if l == nil || l[1] != window || l[2] != strconv.Itoa(remaining) || l[3] != h.Get("RateLimit-Reset") {
		t.Errorf("RateLimit %q, want %q window with r=%d and t=RateLimit-Reset (%s)", h.Get("RateLimit"), window, remaining, h.Get("RateLimit-Reset"))
	}
	wantLimit := perMinute
	if window == "day" {
		wantLimit = perDay
	}
	if h.Get("RateLimit-Limit") != strconv.Itoa(wantLimit) || h.Get("RateLimit-Remaining") != strconv.Itoa(remaining) {
		t.Errorf("RateLimit-Limit %q, -Remaining %q, want %d, %d", h.Get("RateLimit-Limit"), h.Get("RateLimit-Remaining"), wantLimit, remaining)
	}
	if reset, err := strconv.Atoi(h.Get("RateLimit-Reset")); err != nil || reset < 0 {
		t.Errorf("RateLimit-Reset %q", h.Get("RateLimit-Reset"))
	}
	ra := h.Get("Retry-After")
	if refused {
		if n, err := strconv.Atoi(ra); err != nil || n < 1 {
			t.Errorf("Retry-After %q on a refusal", ra)
		}
	} else if ra != "" {
		t.Errorf("Retry-After %q on an accepted request", ra)
	}
}

// docs/gateway.md#forward-auth-v1authorize: /v1/authorize, any method, body ignored, decides like every
// entry point (docs/design.md#credentials: credentials, messages and headers).
func TestAuthorize(t *testing.T) {
	t.Parallel()
	e, owner := newAdminEnv(t)
	ok := e.createKey(owner, "ok")

	refused := func(t *testing.T, r authResponse, status int, msg, code string) {
		t.Helper()
		if r.Status != status {
			t.Fatalf("HTTP %d, want %d: %s", r.Status, status, r.Body)
		}
		if m, c := r.message(t); m != msg || c != code {
			t.Fatalf("%q (%s), want %q (%s)", m, c, msg, code)
		}
		if r.Header.Get("X-Tenant-Id") != "" || r.Header.Get("X-Api-Key-Id") != "" {
			t.Fatalf("a refusal carries X-Tenant-Id %q, X-Api-Key-Id %q", r.Header.Get("X-Tenant-Id"), r.Header.Get("X-Api-Key-Id"))
		}
	}

	t.Run("accepted key, any method, client X-Tenant-Id dropped", func(t *testing.T) {
		for i, method := range []string{"GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"} {
			r := e.authorize(method, map[string]string{"X-Api-Key": ok.Plaintext, "X-Tenant-Id": "forged", "X-Api-Key-Id": "forged"})
			if r.Status != http.StatusOK || r.Body != "" {
				t.Fatalf("%s: HTTP %d %q, want 200 with an empty body", method, r.Status, r.Body)
			}
			if got := r.Header.Values("X-Tenant-Id"); len(got) != 1 || got[0] != e.adminWS {
				t.Fatalf("%s: X-Tenant-Id %q, want only %s", method, got, e.adminWS)
			}
			if got := r.Header.Values("X-Api-Key-Id"); len(got) != 1 || got[0] != ok.ID {
				t.Fatalf("%s: X-Api-Key-Id %q, want only %s", method, got, ok.ID)
			}
			checkRateLimitHeaders(t, r.Header, 600, 100000, "minute", 599-i, false)
		}
	})

	t.Run("no credential", func(t *testing.T) {
		refused(t, e.authorize("GET", nil), 401, "API key required", "UNAUTHENTICATED")
		refused(t, e.authorize("GET", map[string]string{"X-Tenant-Id": e.adminWS}), 401, "API key required", "UNAUTHENTICATED")
	})

	t.Run("bearer alone decides", func(t *testing.T) {
		for name, h := range map[string]map[string]string{
			"bearer":                   {"Authorization": "Bearer anything"},
			"bearer and a key":         {"Authorization": "Bearer anything", "X-Api-Key": ok.Plaintext},
			"bearer and a bad key":     {"Authorization": "Bearer anything", "X-Api-Key": "btk_nope"},
			"bearer and forged tenant": {"Authorization": owner.Bearer, "X-Tenant-Id": e.adminWS},
		} {
			r := e.authorize("GET", h)
			if r.Status != http.StatusOK || r.Header.Get("X-Tenant-Id") != "" || r.Header.Get("X-Api-Key-Id") != "" || r.Header.Get("RateLimit") != "" {
				t.Fatalf("%s: HTTP %d, X-Tenant-Id %q, X-Api-Key-Id %q, RateLimit %q; want 200 with none", name, r.Status,
					r.Header.Get("X-Tenant-Id"), r.Header.Get("X-Api-Key-Id"), r.Header.Get("RateLimit"))
			}
		}
		// The key beside the bearer was not counted.
		r := e.authorize("GET", map[string]string{"X-Api-Key": ok.Plaintext})
		checkRateLimitHeaders(t, r.Header, 600, 100000, "minute", 592, false)
	})

	t.Run("invalid keys", func(t *testing.T) {
		var ti struct {
			TenantInfo struct{ PublicClientKey string }
		}
		e.must(owner, `{tenantInfo{publicClientKey}}`, nil, &ti)
		for name, key := range map[string]string{
			"unknown":   "btk_" + e.adminWS[:8] + "_" + strings.Repeat("A", 43),
			"malformed": "btk_not-a-key",
			"garbage":   "hello",
			"bpk_":      ti.TenantInfo.PublicClientKey,
		} {
			refused(t, e.authorize("GET", map[string]string{"X-Api-Key": key}), 401, "invalid API key", "UNAUTHENTICATED")
			_ = name
		}
	})

	t.Run("revoked, rotated away, expired", func(t *testing.T) {
		revoked := e.createKey(owner, "to-revoke")
		e.must(owner, `mutation($id:ID!){revokeApiKey(id:$id){id}}`, map[string]any{"id": revoked.ID}, &struct{}{})
		refused(t, e.authorize("GET", map[string]string{"X-Api-Key": revoked.Plaintext}), 401, "API key is revoked or expired", "UNAUTHENTICATED")

		old := e.createKey(owner, "to-rotate")
		if r := e.authorize("GET", map[string]string{"X-Api-Key": old.Plaintext}); r.Status != http.StatusOK {
			t.Fatalf("before rotation: HTTP %d", r.Status)
		}
		var rot struct {
			RotateApiKey struct {
				PlaintextKey string
				ApiKey       struct{ ID string }
			}
		}
		e.must(e.elevated(owner, adminPassword), `mutation($id:ID!){rotateApiKey(id:$id){plaintextKey apiKey{id}}}`, map[string]any{"id": old.ID}, &rot)
		refused(t, e.authorize("GET", map[string]string{"X-Api-Key": old.Plaintext}), 401, "API key is revoked or expired", "UNAUTHENTICATED")
		if r := e.authorize("GET", map[string]string{"X-Api-Key": rot.RotateApiKey.PlaintextKey}); r.Status != http.StatusOK || r.Header.Get("X-Api-Key-Id") != rot.RotateApiKey.ApiKey.ID {
			t.Fatalf("the new key: HTTP %d, X-Api-Key-Id %q", r.Status, r.Header.Get("X-Api-Key-Id"))
		}

		exp := e.createKeyWith(owner, "expiring", `expiresAt:"`+e.clock.Now().Add(time.Minute).Format(time.RFC3339)+`"`)
		if r := e.authorize("GET", map[string]string{"X-Api-Key": exp.Plaintext}); r.Status != http.StatusOK {
			t.Fatalf("before expiry: HTTP %d", r.Status)
		}
		e.clock.Advance(time.Minute)
		refused(t, e.authorize("GET", map[string]string{"X-Api-Key": exp.Plaintext}), 401, "API key is revoked or expired", "UNAUTHENTICATED")
	})

	t.Run("over the minute limit", func(t *testing.T) {
		k := e.createKeyWith(owner, "minute", `rateLimitPerMinute:2,rateLimitPerDay:100`)
		for i := range 2 {
			r := e.authorize("GET", map[string]string{"X-Api-Key": k.Plaintext})
			if r.Status != http.StatusOK {
				t.Fatalf("call %d: HTTP %d", i+1, r.Status)
			}
			checkRateLimitHeaders(t, r.Header, 2, 100, "minute", 1-i, false)
		}
		r := e.authorize("GET", map[string]string{"X-Api-Key": k.Plaintext})
		refused(t, r, 429, "rate limit exceeded", "RATE_LIMITED")
		checkRateLimitHeaders(t, r.Header, 2, 100, "minute", 0, true)
		if ra, _ := strconv.Atoi(r.Header.Get("Retry-After")); ra > 60 {
			t.Fatalf("Retry-After %d for the minute window", ra)
		}
	})

	t.Run("over the day limit", func(t *testing.T) {
		k := e.createKeyWith(owner, "day", `rateLimitPerMinute:2,rateLimitPerDay:3`)
		for i := range 3 {
			if i == 2 {
				e.clock.Advance(time.Minute) // the minute window is full again
			}
			if r := e.authorize("GET", map[string]string{"X-Api-Key": k.Plaintext}); r.Status != http.StatusOK {
				t.Fatalf("call %d: HTTP %d", i+1, r.Status)
			}
		}
		e.clock.Advance(time.Minute)
		r := e.authorize("GET", map[string]string{"X-Api-Key": k.Plaintext})
		refused(t, r, 429, "rate limit exceeded", "RATE_LIMITED")
		checkRateLimitHeaders(t, r.Header, 2, 3, "day", 0, true)
		if ra, _ := strconv.Atoi(r.Header.Get("Retry-After")); ra <= 60 {
			t.Fatalf("Retry-After %d: the day window should hold the key longer than a minute", ra)
		}
	})
}

// The same key check on /graphql sets the IETF headers too.
func TestGraphQLRateLimitPolicyHeaders(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	k := e.createKeyWith(e.admin(), "gql", `rateLimitPerMinute:5,rateLimitPerDay:50`)
	r := e.do(cred{Key: k.Plaintext, Header: map[string]string{"X-Tenant-Id": "forged"}}, probe, nil)
	if r.Status != http.StatusOK {
		t.Fatalf("HTTP %d", r.Status)
	}
	checkRateLimitHeaders(t, r.Header, 5, 50, "minute", 4, false)
}
