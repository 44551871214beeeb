package btk

import (
	"math"
	"net/mail"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"github.com/btk-project/btk/internal/access"
)

// Input limits (docs/design.md#api-keys).
const (
	MaxNameLen      = 64
	MaxPerMinute    = 1_000_000
	MaxPerDay       = 100_000_000
	MaxScopes       = 32
	MaxScopeLen     = access.MaxScopeLen
	maxWorkspaceLen = 100
	maxEmailLen     = 254
	maxPasswordLen  = 1024
)

func badInput(format string, args ...any) *Error { return Errorf(CodeBadUserInput, format, args...) }

// storedText reports whether the stores can hold s. PostgreSQL refuses a
// statement with NUL or invalid UTF-8 in its text, where SQLite would just
// match nothing: text a caller typed is checked with it before a lookup, so
// both answer the same.
func storedText(s string) bool { return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 }

// Times are stored as integer unix nanoseconds, which cover only the years
// 1678 to 2262.
var (
	minStoredTime = time.Unix(0, math.MinInt64)
	maxStoredTime = time.Unix(0, math.MaxInt64)
)

// StoredTime reports whether the stores can hold t; a time outside is the
// caller's (ErrTimeRange), the zero time included.
func StoredTime(t time.Time) bool { return !t.Before(minStoredTime) && !t.After(maxStoredTime) }

// cleanName trims a key or workspace name, puts it in Unicode NFC (so that
// "café" composed and decomposed is one name, for uniqueness too), and
// checks its length and characters.
func cleanName(what, name string, max int) (string, error) {
	if !utf8.ValidString(name) {
		return "", badInput("%s must be 1-%d characters", what, max)
	}
	name = strings.TrimSpace(norm.NFC.String(name))
	n := utf8.RuneCountInString(name)
	if n == 0 || n > max {
		return "", badInput("%s must be 1-%d characters", what, max)
	}
	if hasHiddenRunes(name) {
		return "", badInput("%s must not contain control, formatting, invisible or line-separator characters", what)
	}
	if !hasVisibleRune(name) {
		return "", badInput("%s must contain a visible character", what)
	}
	return name, nil
}

// hasHiddenRunes reports characters that could disguise a name in a list or
// a confirmation prompt (hiddenRune).
func hasHiddenRunes(s string) bool { return strings.ContainsFunc(s, hiddenRune) }

// blankRunes are graphic characters that render as nothing.
var blankRunes = map[rune]bool{
	0x2800: true,                             // BRAILLE PATTERN BLANK
	0x3164: true,                             // HANGUL FILLER (also default-ignorable)
	0x115F: true, 0x1160: true, 0xFFA0: true, // the other Hangul fillers
}

// hasVisibleRune reports whether s has a character that shows: graphic, not
// a space, not one of the blank ones.
func hasVisibleRune(s string) bool {
	for _, r := range s {
		if unicode.IsGraphic(r) && !unicode.IsSpace(r) && !blankRunes[r] && !unicode.Is(unicode.Mn, r) {
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
	for _, s := range scopes {
		if !access.ValidScope(s) {
			return nil, badInput("scope %q must match [a-z0-9:._-]{1,%d}", s, MaxScopeLen)
		}
	}
	return withoutDuplicates(scopes), nil
}

// withoutDuplicates is a new list of the items of list, each once, in the
// order they first appear.
func withoutDuplicates(list []string) []string {
	out := make([]string, 0, len(list))
	seen := make(map[string]bool, len(list))
	for _, s := range list {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
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
