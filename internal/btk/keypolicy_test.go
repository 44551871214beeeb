package btk

import (
	"testing"
	"time"
)

// A rotation from the dashboard keeps the old expiry only where the policy
// allows it (docs/access.md#workspace-key-policy).
func TestRotationExpiry(t *testing.T) {
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	days := 30
	policy := &Workspace{KeyPolicy: KeyPolicy{MaxLifetimeDays: &days}}
	max := now.Add(30 * 24 * time.Hour)
	soon, late := now.Add(24*time.Hour), now.Add(31*24*time.Hour)
	for _, c := range []struct {
		name string
		w    *Workspace
		old  *time.Time
		want *time.Time
	}{
		{"no policy, no expiry", &Workspace{}, nil, nil},
		{"no policy keeps a late expiry", &Workspace{}, &late, &late},
		{"no expiry gets the maximum", policy, nil, &max},
		{"an expiry within the maximum is kept", policy, &soon, &soon},
		{"the maximum itself is kept", policy, &max, &max},
		{"an expiry beyond the maximum gets the maximum", policy, &late, &max},
	} {
		got := RotationExpiry(c.w, &APIKey{ExpiresAt: c.old}, now)
		if (got == nil) != (c.want == nil) || got != nil && !got.Equal(*c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
