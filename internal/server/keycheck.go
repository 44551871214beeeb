package server

import (
	"net/http"
	"strconv"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/ratelimit"
)

// Headers btk sets from an accepted key; a client never gets to set them.
const (
	headerTenantID = "X-Tenant-Id"
	headerKeyID    = "X-Api-Key-Id"
)

// errKeyRequired answers a forward-auth or proxied request with no credential.
var errKeyRequired = &btk.Error{Code: btk.CodeUnauthenticated, Message: "API key required"}

// credential is what checkCredential made of a request.
type credential int

const (
	credRefused credential = iota // the 401 or 429 is written; stop
	credNone                      // neither Authorization nor X-Api-Key
	credBearer                    // Authorization present: it alone decides (DESIGN §4)
	credKey                       // an accepted key: the actor is set
)

// checkCredential is the one key check of every entry point (/graphql,
// /v1/authorize, the proxy listener), in DESIGN §4's order: client-sent
// X-Tenant-Id and X-Api-Key-Id are dropped; Authorization, when present,
// decides alone (the caller handles it); otherwise X-Api-Key is checked,
// counted against its limits, and the rate-limit headers are set on w. A
// refused key is answered here (401 or 429 with Retry-After). With neither
// credential the caller decides (anonymous GraphQL, or errKeyRequired).
func (h *Handler) checkCredential(w http.ResponseWriter, r *http.Request) (credential, *btk.Actor) {
	// Deleting absent keys from the map costs no allocation.
	delete(r.Header, headerTenantID)
	delete(r.Header, headerKeyID)
	if r.Header.Get("Authorization") != "" {
		return credBearer, nil
	}
	key := r.Header.Get("X-Api-Key")
	if key == "" {
		return credNone, nil
	}
	a, d, err := h.svc.AuthenticateKey(r.Context(), key)
	h.svc.Observer().KeyChecked(btk.KeyCheckResultOf(err))
	if d.Limit > 0 {
		setRateLimitHeaders(w.Header(), d)
	}
	if err != nil {
		h.refuse(w, r, err)
		return credRefused, nil
	}
	return credKey, a
}

// refuse answers a request-level failure: 401 for credentials, 429 for limits.
func (h *Handler) refuse(w http.ResponseWriter, r *http.Request, err error) {
	switch btk.ErrorCode(err) {
	case btk.CodeUnauthenticated:
		writeError(w, http.StatusUnauthorized, err)
	case btk.CodeRateLimited:
		writeError(w, http.StatusTooManyRequests, err)
	default:
		// A busy or unreachable store is 503 UNAVAILABLE (retry), logged at
		// WARN; anything else is a 500 INTERNAL at ERROR.
		h.log.Log(r.Context(), logLevelFor(err), "authentication failed", "err", err)
		if unavailable(err) {
			writeError(w, http.StatusServiceUnavailable, btk.ErrUnavailable)
			return
		}
		writeError(w, http.StatusInternalServerError, err)
	}
}

// setRateLimitHeaders sets RateLimit-Limit, -Remaining and -Reset for the
// tighter window, the IETF draft's RateLimit-Policy (both windows) and
// RateLimit (the tighter one), and Retry-After on a refusal, with two
// allocations: the values share one string and one slice, and the keys are
// stored in their canonical form (what Header.Set would store, without
// canonicalising on every request).
func setRateLimitHeaders(h http.Header, d ratelimit.Decision) {
	const n = 6
	var buf [256]byte
	var end [n]int
	reset := int64(ceilSeconds(d.Reset))
	b := strconv.AppendInt(buf[:0], int64(d.Limit), 10)
	end[0] = len(b)
	b = strconv.AppendInt(b, int64(d.Remaining), 10)
	end[1] = len(b)
	b = strconv.AppendInt(b, reset, 10)
	end[2] = len(b)
	b = append(b, `"minute";q=`...)
	b = strconv.AppendInt(b, int64(d.PerMinute), 10)
	b = append(b, `;w=60, "day";q=`...)
	b = strconv.AppendInt(b, int64(d.PerDay), 10)
	b = append(b, `;w=86400`...)
	end[3] = len(b)
	if d.Day {
		b = append(b, `"day";r=`...)
	} else {
		b = append(b, `"minute";r=`...)
	}
	b = strconv.AppendInt(b, int64(d.Remaining), 10)
	b = append(b, ";t="...)
	b = strconv.AppendInt(b, reset, 10)
	end[4] = len(b)
	k := n - 1
	if !d.Allowed {
		b = strconv.AppendInt(b, int64(max(1, ceilSeconds(d.RetryAfter))), 10)
		end[5] = len(b)
		k = n
	}
	s := string(b)
	vals := make([]string, k)
	for i, start := 0, 0; i < k; i++ {
		vals[i], start = s[start:end[i]], end[i]
	}
	h["Ratelimit-Limit"] = vals[0:1:1]
	h["Ratelimit-Remaining"] = vals[1:2:2]
	h["Ratelimit-Reset"] = vals[2:3:3]
	h["Ratelimit-Policy"] = vals[3:4:4]
	h["Ratelimit"] = vals[4:5:5]
	if k == n {
		h["Retry-After"] = vals[5:6:6]
	}
}

// setKeyHeaders sets X-Tenant-Id and X-Api-Key-Id of an accepted key (one
// allocation: both values share a slice).
func setKeyHeaders(h http.Header, a *btk.Actor) {
	ids := []string{a.WorkspaceID, a.KeyID}
	h[headerTenantID] = ids[0:1:1]
	h[headerKeyID] = ids[1:2:2]
}

// authorize serves /v1/authorize (DESIGN §9), forward-auth for nginx
// auth_request, Caddy forward_auth and Traefik forwardAuth: any method, body
// ignored. 200 with X-Tenant-Id and X-Api-Key-Id for an accepted key, 200
// with neither for a bearer (the upstream verifies its own session).
func (h *Handler) authorize(w http.ResponseWriter, r *http.Request) {
	switch c, a := h.checkCredential(w, r); c {
	case credKey:
		setKeyHeaders(w.Header(), a)
		w.WriteHeader(http.StatusOK)
	case credBearer:
		w.WriteHeader(http.StatusOK)
	case credNone:
		writeError(w, http.StatusUnauthorized, errKeyRequired)
	}
}
