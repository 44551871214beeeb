// Package gateway is btk's one key check and what stands on it: the
// credential decision every entry point makes (/graphql, /v1/authorize, the
// reverse proxy), with a key's networks and scopes (docs/access.md);
// forward-auth at /v1/authorize and the reverse proxy (docs/gateway.md); leak
// reports at POST /v1/leaks (leaks.go, docs/leaks.md); the client address
// (trusted proxies); and the one table from an error code to the HTTP status
// of a request-level answer (status.go). See docs/design.md#credentials.
package gateway

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/ratelimit"
)

// Headers btk sets from an accepted key; a client never gets to set them.
const (
	HeaderTenantID  = "X-Tenant-Id"
	headerKeyID     = "X-Api-Key-Id"
	headerKeyScopes = "X-Api-Key-Scopes"
)

// Headers a forward-auth caller names the original request with
// (docs/access.md): Traefik and Caddy send them; the shipped nginx
// configuration sets them.
const (
	headerForwardedMethod = "X-Forwarded-Method"
	headerForwardedURI    = "X-Forwarded-Uri"
)

// entry is the entry point a key check decides for: /graphql applies a
// key's networks only; forward-auth and the proxy also the access rules.
type entry uint8

const (
	entryGraphQL entry = iota
	entryAuthorize
	entryProxy
)

// errKeyRequired answers a forward-auth or proxied request with no credential.
var errKeyRequired = &btk.Error{Code: btk.CodeUnauthenticated, Message: "API key required"}

// Credential is what Check made of a request.
type Credential int

const (
	Refused Credential = iota // the 401 or 429 is written; stop
	None                      // neither Authorization nor X-Api-Key
	Bearer                    // Authorization present: it alone decides (docs/design.md#credentials)
	Key                       // an accepted key: the actor is set
)

// Gateway makes the credential decision of every entry point.
type Gateway struct {
	svc     *btk.Service
	log     *slog.Logger
	proxies *TrustedProxies // whose X-Forwarded-For is believed
	// leakKeys sign acceptable leak reports (leaks.go); nil: none.
	leakKeys *btk.LeakReportKeys
	// upstreamTimeout bounds the wait for an upstream's response headers.
	upstreamTimeout time.Duration
	// leakBodies holds the bytes of the leak report bodies being read.
	leakBodies *BodyBudget
	// maxUpstreamConns bounds the proxy's connections to its upstream
	// (LimitUpstream).
	maxUpstreamConns int
}

// New returns the gateway of svc; proxies (nil: none) are the peers whose
// X-Forwarded-For is believed.
func New(svc *btk.Service, log *slog.Logger, proxies *TrustedProxies) *Gateway {
	return &Gateway{svc: svc, log: log, proxies: proxies, leakBodies: NewBodyBudget(btk.MaxLeakReportBytesHeld, 0, btk.ErrLeakReportsBusy)}
}

// ClientIP is the address of the client: the TCP peer, or what a trusted
// proxy (--trusted-proxies) says in X-Forwarded-For. It is the audit IP,
// the throttles' address and the access log's, for every entry point.
func (h *Gateway) ClientIP(r *http.Request) string {
	return h.proxies.ClientIP(r)
}

// Check is the one key check of every entry point (/graphql,
// /v1/authorize, the proxy listener), in the order of docs/design.md#credentials: client-sent
// X-Tenant-Id and X-Api-Key-Id are dropped; Authorization, when present,
// decides alone (the caller handles it); otherwise X-Api-Key is checked,
// counted against its limits, and the rate-limit headers are set on w. A
// refused key is answered here (401 or 429 with Retry-After). With neither
// credential the caller decides (anonymous GraphQL, or errKeyRequired).
//
// Check decides for /graphql: a key's networks apply, the access rules do
// not (docs/access.md).
func (h *Gateway) Check(w http.ResponseWriter, r *http.Request) (Credential, *btk.Actor) {
	var a btk.Actor
	var req btk.KeyRequest
	c := h.check(w, r, entryGraphQL, &a, &req)
	if c != Key {
		return c, nil
	}
	p := new(btk.Actor) // the request's context keeps it
	*p = a
	return c, p
}

// check is Check for the entry point at, with an accepted key's actor
// written to *a and the request it decided to *req: forward-auth and the
// proxy keep them on their stack (the proxy rechecks a long connection's
// key for req).
func (h *Gateway) check(w http.ResponseWriter, r *http.Request, at entry, a *btk.Actor, req *btk.KeyRequest) Credential {
	// Deleting absent keys from the map costs no allocation.
	delete(r.Header, HeaderTenantID)
	delete(r.Header, headerKeyID)
	delete(r.Header, headerKeyScopes)
	if header(r.Header, "Authorization") != "" {
		return Bearer
	}
	key := header(r.Header, "X-Api-Key")
	if key == "" {
		return None
	}
	// The use is counted against the key presented, with its client
	// (docs/usage.md).
	addr := h.proxies.ClientAddr(r)
	*req = btk.KeyRequest{Addr: addr, From: btk.Client{IP: addr, UserAgent: header(r.Header, "User-Agent")}}
	switch at {
	case entryAuthorize:
		// The original request, as the forward-auth caller names it;
		// without it a scoped key is refused (fail closed).
		req.Rules = true
		ms, us := r.Header[headerForwardedMethod], r.Header[headerForwardedURI]
		switch {
		case len(ms) > 1 || len(us) > 1:
			// Two names for the original request (a client's own header
			// beside the one its gateway added): neither is believed.
			// "*" is no path, which every key is refused for where the
			// rules apply (docs/access.md#forward-auth-and-the-original-request).
			req.Method, req.Path = "", "*"
		case len(ms) == 1 && len(us) == 1 && ms[0] != "" && us[0] != "":
			req.Method, req.Path = ms[0], us[0]
		}
		// The gateway forwards the client's headers to forward-auth (nginx
		// auth_request, Traefik, Caddy): an override header is here.
		req.Header = r.Header
	case entryProxy:
		req.Rules, req.Method, req.Path = true, r.Method, r.URL.EscapedPath()
		req.Header, req.Query = r.Header, r.URL.RawQuery
		if req.Path == "" {
			// An authority-form CONNECT: the upstream is asked for "/",
			// which the rules decide (an empty path would be an unknown
			// request, which a key without scopes passes).
			req.Path = "/"
		}
	}
	d, err := h.svc.CheckKey(r.Context(), key, req, a)
	h.svc.Observer().KeyChecked(btk.KeyCheckResultOf(err))
	// Forward-auth answers an accepted key's own headers too; they are set
	// here with the rate-limit headers, sharing their allocation.
	var answer *btk.Actor
	if at == entryAuthorize && err == nil {
		answer = a
	}
	if d.Limit > 0 {
		setRateLimitHeaders(w.Header(), d, answer)
	} else if answer != nil {
		setKeyHeaders(w.Header(), answer)
	}
	if err != nil {
		h.Refuse(w, r, err)
		if btk.IsCanaryUse(err) {
			// A canary key was answered as an unknown key; its use is
			// recorded apart from the request, so that neither a slow
			// database nor the once-a-minute write delays the answer and
			// tells the caller it held a trap (docs/leaks.md).
			ip, ua, path := h.ClientIP(r), r.UserAgent(), btk.RedactKeys(r.URL.Path)
			h.svc.GoRecordCanaryUse(context.WithoutCancel(r.Context()), err, ip, ua, path)
		}
		return Refused
	}
	return Key
}

// header is r.Header.Get(name) for a name in canonical form, which is how
// net/http stores received headers: one map lookup, without Get
// canonicalising the name again on every call.
func header(h http.Header, name string) string {
	if v := h[name]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// Refuse answers a request-level failure: 401 for credentials, 429 for limits.
func (h *Gateway) Refuse(w http.ResponseWriter, r *http.Request, err error) {
	switch code := btk.ErrorCode(err); code {
	case btk.CodeUnauthenticated, btk.CodeForbidden, btk.CodeRateLimited: // 401; 403 for a key's networks or scopes (docs/access.md); 429
		Fail(w, err)
	default:
		// A busy or unreachable store is 503 UNAVAILABLE (retry), logged at
		// WARN; anything else is a 500 INTERNAL at ERROR.
		h.log.Log(r.Context(), LogLevelFor(err), "authentication failed", "err", err)
		if btk.Unavailable(err) {
			Fail(w, btk.ErrUnavailable)
			return
		}
		Fail(w, err)
	}
}

// setRateLimitHeaders sets RateLimit-Limit, -Remaining and -Reset for the
// tighter window, the IETF draft's RateLimit-Policy (both windows) and
// RateLimit (the tighter one), Retry-After on a refusal, and, with key, the
// key's own headers (setKeyHeaders). Two allocations: the values share one
// slice, and the numbers that change from request to request one string
// (RateLimit's value, of which -Remaining and -Reset are parts); the values
// that depend on the limits only come from limitStringsOf. The keys are
// stored in their canonical form (what Header.Set would store, without
// canonicalising on every request), in sorted order: net/http sorts them
// again when it writes them, from an order its maps derive from ours.
func setRateLimitHeaders(h http.Header, d ratelimit.Decision, key *btk.Actor) {
	var buf [96]byte
	reset := int64(ceilSeconds(d.Reset))
	b := buf[:0]
	if d.Day {
		b = append(b, `"day";r=`...)
	} else {
		b = append(b, `"minute";r=`...)
	}
	r0 := len(b)
	b = strconv.AppendInt(b, int64(d.Remaining), 10)
	r1 := len(b)
	b = append(b, ";t="...)
	t0 := len(b)
	b = strconv.AppendInt(b, reset, 10)
	t1 := len(b)
	if !d.Allowed {
		b = strconv.AppendInt(b, int64(max(1, ceilSeconds(d.RetryAfter))), 10)
	}
	s := string(b)
	ls := limitStringsOf(d.PerMinute, d.PerDay)
	limit := ls.minute
	switch d.Limit {
	case d.PerMinute:
	case d.PerDay:
		limit = ls.day
	default: // not a window's limit: never so, but told as it is
		limit = strconv.Itoa(d.Limit)
	}
	size := 5
	if !d.Allowed {
		size++
	}
	if key != nil {
		size += 3
	}
	vals := make([]string, size)
	vals[0], vals[1], vals[2], vals[3], vals[4] = s[:t1], limit, ls.policy, s[r0:r1], s[t0:t1]
	h["Ratelimit"] = vals[0:1:1]
	h["Ratelimit-Limit"] = vals[1:2:2]
	h["Ratelimit-Policy"] = vals[2:3:3]
	h["Ratelimit-Remaining"] = vals[3:4:4]
	h["Ratelimit-Reset"] = vals[4:5:5]
	n := 5
	if !d.Allowed {
		vals[5] = s[t1:]
		h["Retry-After"] = vals[5:6:6]
		n = 6
	}
	if key != nil {
		setKeyHeadersIn(h, key, vals[n:])
	}
}

// limitStrings are the rate-limit header values that depend on the limits
// alone: RateLimit-Limit of each window, and RateLimit-Policy.
type limitStrings struct {
	perMinute, perDay int
	minute, day       string
	policy            string
}

// limitCache keeps the limitStrings of recent limits, one per slot: a key's
// limits rarely change, and the keys of a server share few limits, so
// requests seldom format them. A miss formats them anew; what a slot holds
// is replaced whole (atomically), never changed.
var limitCache [256]atomic.Pointer[limitStrings]

// limitStringsOf returns the limitStrings of perMinute and perDay.
func limitStringsOf(perMinute, perDay int) *limitStrings {
	slot := &limitCache[(uint64(perMinute)*0x9e3779b97f4a7c15^uint64(perDay))>>56] // #nosec G115 -- a hash: wrapping is intended
	if e := slot.Load(); e != nil && e.perMinute == perMinute && e.perDay == perDay {
		return e
	}
	e := &limitStrings{
		perMinute: perMinute, perDay: perDay,
		minute: strconv.Itoa(perMinute), day: strconv.Itoa(perDay),
		policy: `"minute";q=` + strconv.Itoa(perMinute) + `;w=60, "day";q=` + strconv.Itoa(perDay) + `;w=86400`,
	}
	slot.Store(e)
	return e
}

// setKeyHeaders sets X-Tenant-Id, X-Api-Key-Id and X-Api-Key-Scopes
// (space-separated, possibly empty) of an accepted key (one allocation: the
// values share a slice).
func setKeyHeaders(h http.Header, a *btk.Actor) {
	setKeyHeadersIn(h, a, make([]string, 3))
}

// setKeyHeadersIn is setKeyHeaders with the values stored in ids (three).
func setKeyHeadersIn(h http.Header, a *btk.Actor, ids []string) {
	ids[0], ids[1], ids[2] = a.KeyID, a.KeyScopes, a.WorkspaceID
	h[headerKeyID] = ids[0:1:1]
	h[headerKeyScopes] = ids[1:2:2]
	h[HeaderTenantID] = ids[2:3:3]
}

// Authorize serves /v1/authorize (docs/gateway.md#forward-auth-v1authorize), forward-auth for nginx
// auth_request, Caddy forward_auth and Traefik forwardAuth: any method, body
// ignored. 200 with X-Tenant-Id and X-Api-Key-Id for an accepted key, 200
// with neither for a bearer (the upstream verifies its own session).
func (h *Gateway) Authorize(w http.ResponseWriter, r *http.Request) {
	var a btk.Actor
	var req btk.KeyRequest
	switch h.check(w, r, entryAuthorize, &a, &req) {
	case Key: // check set the key's headers
		w.WriteHeader(http.StatusOK)
	case Bearer:
		w.WriteHeader(http.StatusOK)
	case None:
		Fail(w, errKeyRequired)
	}
}

// LogLevelFor is the level of a request-level failure's log line: WARN for
// a dependency that is busy or down, ERROR for anything else.
func LogLevelFor(err error) slog.Level {
	if btk.Unavailable(err) {
		return slog.LevelWarn
	}
	return slog.LevelError
}

// BearerToken is the token of an Authorization header of the Bearer scheme.
func BearerToken(auth string) (string, bool) {
	const prefix = "Bearer "
	if len(auth) <= len(prefix) || !equalFoldASCII(auth[:len(prefix)], prefix) {
		return "", false
	}
	return auth[len(prefix):], true
}

func equalFoldASCII(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i]|0x20, b[i]|0x20
		if x != y {
			return false
		}
	}
	return true
}

func ceilSeconds(d time.Duration) int { return int((d + time.Second - 1) / time.Second) }

// errorBody is the GraphQL-shaped body of a request-level failure.
type errorBody struct {
	Errors []errorItem `json:"errors"`
}

type errorItem struct {
	Message    string         `json:"message"`
	Extensions map[string]any `json:"extensions"`
}

// WriteError answers a request-level failure with status and the
// GraphQL-shaped body {"errors":[{"message":…,"extensions":{"code":…}}]}.
func WriteError(w http.ResponseWriter, status int, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(errorBody{Errors: []errorItem{{ // a client that left is no error of ours
		Message:    btk.ErrorMessage(err),
		Extensions: Extensions(err),
	}}})
}

// Extensions are the GraphQL error extensions of err: its code, and its
// reason when it has one (docs/design.md#error-codes).
func Extensions(err error) map[string]any {
	ext := map[string]any{"code": string(btk.ErrorCode(err))}
	if r := btk.ErrorReason(err); r != "" {
		ext["reason"] = string(r)
	}
	return ext
}
