package gateway

import (
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/btk-project/btk/internal/btk"
)

// Headers of a report signed as GitHub's secret scanning signs
// (docs/leaks.md).
const (
	headerLeakKeyID     = "Github-Public-Key-Identifier"
	headerLeakSignature = "Github-Public-Key-Signature"
)

var errLeakBodyTooLarge = btk.Errorf(btk.CodeBadUserInput, "a leak report is at most %d bytes", btk.MaxLeakReportBytes)

// SetLeakReportKeys sets the public keys whose signature makes a leak
// report acceptable (--leak-report-keys); nil: none, only a platform
// admin's bearer token is.
func (h *Gateway) SetLeakReportKeys(keys *btk.LeakReportKeys) { h.leakKeys = keys }

// Leaks serves POST /v1/leaks: a leak report in GitHub's secret-scanning
// partner format, signed by a listed key or sent with a platform admin's
// bearer token; anything else 401, and an address past its budget of
// unsigned or failed attempts 429. Every reported active key is revoked at
// once; the answer labels each token by its hash. Nothing of a token is
// ever logged.
//
// What a client can make it hold is bounded (docs/security.md): a request
// that names no listed signing key is decided on its bearer token before
// its body is read, a body is read within btk.LeakReportReadTime, and the
// bodies being read hold at most btk.MaxLeakReportBytesHeld bytes together
// (503 Retry-After beyond): 1 MiB bodies sent slowly on thousands of
// connections were held whole, 1 MiB each.
func (h *Gateway) Leaks(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	if r.ContentLength > btk.MaxLeakReportBytes {
		WriteError(w, http.StatusRequestEntityTooLarge, errLeakBodyTooLarge)
		return
	}
	ip := h.ClientIP(r)
	by := btk.Reporter{IP: ip, UserAgent: r.UserAgent()}
	keyID, sig := r.Header.Get(headerLeakKeyID), r.Header.Get(headerLeakSignature)
	mayBeSigned := sig != "" && h.leakKeys.Has(keyID)
	if !mayBeSigned {
		if by.Actor = h.leakAdmin(w, r, ip); by.Actor == nil {
			return
		}
	}
	// Read within btk.LeakReportReadTime, the bytes held counted in
	// h.leakBodies as they arrive.
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(btk.LeakReportReadTime))
	body, held, err := h.leakBodies.Read(w, r, btk.MaxLeakReportBytes, nil)
	defer h.leakBodies.Release(held)
	if err != nil {
		var tooLarge *http.MaxBytesError
		switch {
		case errors.As(err, &tooLarge):
			WriteError(w, http.StatusRequestEntityTooLarge, errLeakBodyTooLarge)
		case errors.Is(err, btk.ErrLeakReportsBusy):
			Busy(w, r, err) // the rest of the body is not read
		default:
			Fail(w, btk.Errorf(btk.CodeBadUserInput, "could not read the request body"))
		}
		return
	}
	if mayBeSigned {
		if h.leakKeys.Verify(keyID, sig, body) {
			by.KeyID = keyID
		} else if by.Actor = h.leakAdmin(w, r, ip); by.Actor == nil {
			return
		}
	}
	reports, err := btk.ParseLeakReports(body)
	if err != nil {
		Fail(w, err)
		return
	}
	labels, err := h.svc.ReportLeaks(ctx, by, reports)
	if err != nil {
		h.Refuse(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(labels) // the reports are recorded: a client that left changes nothing
}

// leakAdmin decides a leak report that is not validly signed: the
// address's budget of such attempts is charged, and only a platform
// admin's bearer token is accepted. It returns nil when it has answered.
func (h *Gateway) leakAdmin(w http.ResponseWriter, r *http.Request, ip string) *btk.Actor {
	ctx := r.Context()
	ok, err := h.svc.AllowLeakAttempt(ctx, ip)
	if err != nil {
		h.Refuse(w, r, err)
		return nil
	}
	if !ok {
		w.Header().Set("Retry-After", "60")
		Fail(w, btk.ErrTooManyLeakAttempts)
		return nil
	}
	token, isBearer := BearerToken(r.Header.Get("Authorization"))
	if !isBearer {
		Fail(w, btk.ErrLeakReportRefused)
		return nil
	}
	a, err := h.svc.ResolveSession(ctx, token)
	if err != nil && btk.ErrorCode(err) != btk.CodeUnauthenticated {
		h.Refuse(w, r, err)
		return nil
	}
	if err != nil || !a.PlatformAdmin {
		Fail(w, btk.ErrLeakReportRefused)
		return nil
	}
	a.IP, a.UserAgent = ip, r.UserAgent()
	h.svc.ForgetLeakAttempts(ctx, ip)
	return a
}
