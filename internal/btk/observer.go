package btk

import "errors"

// KeyCheckResult is the outcome of checking a presented API key, as the
// metrics count it (docs/operating.md#metrics).
type KeyCheckResult uint8

const (
	KeyCheckAccepted KeyCheckResult = iota
	KeyCheckInvalid
	KeyCheckRevokedOrExpired
	KeyCheckRateLimited
	// KeyCheckError is a check that could not decide: the store or shared
	// state failed and the request was refused with 5xx.
	KeyCheckError
	// KeyCheckRestricted is a key refused by its networks or scopes (403).
	KeyCheckRestricted
	numKeyCheckResults
)

// KeyCheckResults lists every result, for metrics to prepare their series.
var KeyCheckResults = []KeyCheckResult{KeyCheckAccepted, KeyCheckInvalid, KeyCheckRevokedOrExpired, KeyCheckRateLimited, KeyCheckError, KeyCheckRestricted}

var keyCheckNames = [numKeyCheckResults]string{"accepted", "invalid", "revoked_or_expired", "rate_limited", "error", "restricted"}

func (r KeyCheckResult) String() string {
	if r < numKeyCheckResults {
		return keyCheckNames[r]
	}
	return "unknown"
}

// KeyCheckResultOf classifies the error a key check returned.
func KeyCheckResultOf(err error) KeyCheckResult {
	switch {
	case err == nil:
		return KeyCheckAccepted
	case err == ErrRateLimited: // the common refusals by identity: no unwrapping
		return KeyCheckRateLimited
	case err == ErrInvalidKey:
		return KeyCheckInvalid
	case err == ErrKeyRevokedOrExpired:
		return KeyCheckRevokedOrExpired
	case errors.Is(err, ErrRateLimited):
		return KeyCheckRateLimited
	case errors.Is(err, ErrInvalidKey):
		return KeyCheckInvalid
	case errors.Is(err, ErrKeyRevokedOrExpired):
		return KeyCheckRevokedOrExpired
	case ErrorCode(err) == CodeForbidden:
		return KeyCheckRestricted
	}
	return KeyCheckError
}

// Observer receives what the request path counts for metrics. Its methods
// run on every key-authenticated request: they must be cheap, must not block
// and must not allocate. Nothing passed to them identifies a key, workspace
// or account.
type Observer interface {
	// KeyChecked is called once per presented X-Api-Key with the outcome.
	KeyChecked(KeyCheckResult)
	// KeyCacheLookup is called once per key check that reached the cache.
	KeyCacheLookup(hit bool)
}

// NopObserver observes nothing: the default.
type NopObserver struct{}

func (NopObserver) KeyChecked(KeyCheckResult) {}
func (NopObserver) KeyCacheLookup(bool)       {}

// Observer returns the service's observer (never nil), for the HTTP layer to
// report the outcome of the key checks it makes.
func (s *Service) Observer() Observer { return s.cfg.Observer }
