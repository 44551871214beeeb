package btk

import (
	"net/mail"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Input limits (DESIGN §3).
const (
	MaxNameLen      = 64
	MaxPerMinute    = 1_000_000
	MaxPerDay       = 100_000_000
	MaxScopes       = 32
	MaxScopeLen     = 64
	maxWorkspaceLen = 100
	maxEmailLen     = 254
	maxPasswordLen  = 1024
)

func badInput(format string, args ...any) *Error { return Errorf(CodeBadUserInput, format, args...) }

// cleanName trims a key or workspace name and checks its length and characters.
func cleanName(what, name string, max int) (string, error) {
	name = strings.TrimSpace(name)
	n := utf8.RuneCountInString(name)
	if !utf8.ValidString(name) || n == 0 || n > max {
		return "", badInput("%s must be 1-%d characters", what, max)
	}
	if hasHiddenRunes(name) {
		return "", badInput("%s must not contain control or formatting characters", what)
	}
	return name, nil
}

// hasHiddenRunes reports control characters and invisible formatting ones
// (bidi overrides, zero-width characters) that could disguise a name in a
// list or a confirmation prompt.
func hasHiddenRunes(s string) bool {
	for _, r := range s {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			return true
		}
	}
	return false
}

// checkLimits validates optional per-minute and per-day limits.
func checkLimits(perMinute, perDay *int) error {
	if perMinute != nil && (*perMinute < 1 || *perMinute > MaxPerMinute) {
		return badInput("rate limit per minute must be 1-%d", MaxPerMinute)
	}
	if perDay != nil && (*perDay < 1 || *perDay > MaxPerDay) {
		return badInput("rate limit per day must be 1-%d", MaxPerDay)
	}
	if perMinute != nil && perDay != nil && *perMinute > *perDay {
		return badInput("rate limit per minute must not exceed the limit per day")
	}
	return nil
}

// maxKeyLifetime bounds expiresAt: far enough for any real key, near enough
// to stay within the stored time range.
const maxKeyLifetime = 100 * 365 * 24 * time.Hour

func checkExpiry(expiresAt *time.Time, now time.Time) error {
	if expiresAt == nil {
		return nil
	}
	if !expiresAt.After(now) {
		return badInput("expiresAt must be in the future")
	}
	if expiresAt.Sub(now) > maxKeyLifetime {
		return badInput("expiresAt must be within 100 years")
	}
	return nil
}

func checkScopes(scopes []string) ([]string, error) {
	if len(scopes) > MaxScopes {
		return nil, badInput("at most %d scopes", MaxScopes)
	}
	out := make([]string, 0, len(scopes))
	seen := make(map[string]bool, len(scopes))
	for _, s := range scopes {
		if !validScope(s) {
			return nil, badInput("scope %q must match [a-z0-9:._-]{1,%d}", s, MaxScopeLen)
		}
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out, nil
}

func validScope(s string) bool {
	if len(s) == 0 || len(s) > MaxScopeLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || strings.IndexByte(":._-", c) >= 0) {
			return false
		}
	}
	return true
}

func cleanEmail(email string) (string, error) {
	email = strings.TrimSpace(email)
	addr, err := mail.ParseAddress(email)
	if err != nil || addr.Address != email || len(email) > maxEmailLen || hasHiddenRunes(email) {
		return "", badInput("email must be a plain address like name@example.com")
	}
	return strings.ToLower(email), nil
}

func checkPassword(password string) error {
	if n := utf8.RuneCountInString(password); n < MinPasswordLen || len(password) > maxPasswordLen {
		return badInput("password must be at least %d characters", MinPasswordLen)
	}
	return nil
}
