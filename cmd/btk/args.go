package main

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/btk-project/btk/internal/client"
)

// Parsing of flag and argument values shared by several commands.

// optional is nil for "" and &s otherwise: a GraphQL argument left out.
func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// intFlag is an int flag that is nil until given, for optional arguments.
type intFlag struct{ p **int }

func (f intFlag) String() string {
	if *f.p == nil {
		return ""
	}
	return strconv.Itoa(**f.p)
}

func (f intFlag) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil {
		return fmt.Errorf("not a whole number: %q", s)
	}
	*f.p = &n
	return nil
}

func (intFlag) Type() string { return "int" }

var daysRE = regexp.MustCompile(`^(\d+)d(.*)$`)

// parseDuration is time.ParseDuration that also takes days: "90d", "1d12h".
func parseDuration(s string) (time.Duration, error) {
	var d time.Duration
	rest := s
	if m := daysRE.FindStringSubmatch(s); m != nil {
		days, err := strconv.Atoi(m[1])
		if err != nil || days > 100000 {
			return 0, fmt.Errorf("invalid duration %q", s)
		}
		d, rest = time.Duration(days)*24*time.Hour, m[2]
	}
	if rest != "" {
		r, err := time.ParseDuration(rest)
		if err != nil {
			return 0, fmt.Errorf("invalid duration %q: want for example 90d, 36h or 1d12h", s)
		}
		d += r
	}
	return d, nil
}

// parseExpiry turns --expires-in DURATION or --expires-at RFC3339 into a
// time in the future; nil when neither was given.
func parseExpiry(in, at string, now time.Time) (*time.Time, error) {
	switch {
	case in != "" && at != "":
		return nil, usageErrorf("--expires-in and --expires-at cannot be used together")
	case in != "":
		d, err := parseDuration(in)
		if err != nil {
			return nil, usageErrorf("--expires-in: %v", err)
		}
		if d <= 0 {
			return nil, usageErrorf("--expires-in must be positive")
		}
		t := now.Add(d).UTC().Truncate(time.Second)
		return &t, nil
	case at != "":
		t, err := time.Parse(time.RFC3339, at)
		if err != nil {
			return nil, usageErrorf("--expires-at: want an RFC 3339 time such as 2027-01-31T00:00:00Z, got %q", at)
		}
		return &t, nil
	}
	return nil, nil
}

// parseSince turns "24h", "7d" (that long ago) or an RFC 3339 time into a time.
// flag names the flag (--since, --until) in the error.
func parseSince(flag, s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	d, err := parseDuration(s)
	if err != nil || d <= 0 {
		return time.Time{}, usageErrorf("%s: want a duration such as 24h or 7d, or an RFC 3339 time, got %q", flag, s)
	}
	return now.Add(-d).UTC(), nil
}

// parseOptionalSince is parseSince for a flag that may be left out: nil then.
func parseOptionalSince(flag, s string, now time.Time) (*time.Time, error) {
	if s == "" {
		return nil, nil
	}
	t, err := parseSince(flag, s, now)
	if err != nil {
		return nil, err
	}
	return &t, nil
}

// enumValue matches s, case-insensitively and with - for _, against the
// values of a GraphQL enum.
func enumValue[T ~string](flag, s string, values []T) (T, error) {
	want := strings.ToUpper(strings.ReplaceAll(s, "-", "_"))
	names := make([]string, len(values))
	for i, v := range values {
		if string(v) == want {
			return v, nil
		}
		names[i] = strings.ToLower(string(v))
	}
	return "", usageErrorf("%s: want one of %s, got %q", flag, strings.Join(names, ", "), s)
}

func parsePlan(s string) (client.Plan, error) { return enumValue("plan", s, client.AllPlan) }

func parseAction(s string) (client.ApiKeyAuditAction, error) {
	return enumValue("--action", s, client.AllApiKeyAuditAction)
}

// parseRole takes a role or "none" (nil: remove the membership).
func parseRole(s string) (*client.Role, error) {
	if strings.EqualFold(s, "none") {
		return nil, nil
	}
	r, err := enumValue("role", s, slices.Concat(client.AllRole, []client.Role{"NONE"}))
	if err != nil {
		return nil, err
	}
	return &r, nil
}

// enumNames are a GraphQL enum's values as the command line writes them.
func enumNames[T ~string](values []T) []string {
	out := make([]string, len(values))
	for i, v := range values {
		out[i] = strings.ToLower(string(v))
	}
	return out
}
