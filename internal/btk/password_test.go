package btk

import (
	"strings"
	"testing"
	"time"
)

func TestPasswordHash(t *testing.T) {
	h := HashPassword("correct horse")
	if !strings.HasPrefix(h, "$argon2id$v=19$m=19456,t=2,p=1$") || strings.Contains(h, "correct horse") {
		t.Fatalf("hash %q", h)
	}
	if h == HashPassword("correct horse") {
		t.Fatal("two hashes of one password are equal: no salt")
	}
	tests := []struct {
		hash, password string
		want           bool
	}{
		{h, "correct horse", true},
		{h, "correct horsE", false},
		{h, "", false},
		{"", "correct horse", false},
		{"$argon2i$v=19$m=19456,t=2,p=1$c2FsdA$aGFzaA", "x", false},
		{strings.Replace(h, "t=2", "t=x", 1), "correct horse", false},
	}
	for _, tc := range tests {
		if got := CheckPassword(tc.hash, tc.password); got != tc.want {
			t.Errorf("CheckPassword(%q, %q) = %v", tc.hash, tc.password, got)
		}
	}
}

func TestTokensCannotStandInForEachOther(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	tokens := NewTokens([]byte(strings.Repeat("s", 32)), clock)
	sess := &Session{ID: "sid", AccountID: "acct", ExpiresAt: now.Add(SessionTTL)}
	st := tokens.SessionToken(sess)
	et, exp := tokens.ElevationToken("acct", "sid")
	if exp != now.Add(5*time.Minute) {
		t.Fatalf("elevation expires %v", exp)
	}
	if c, err := tokens.ParseSession(st); err != nil || c.AccountID != "acct" || c.SessionID != "sid" {
		t.Fatalf("session token: %+v %v", c, err)
	}
	if _, err := tokens.ParseSession(et); err == nil {
		t.Fatal("an elevation token passed as a session token")
	}
	if tokens.CheckElevation(st, "acct", "sid") {
		t.Fatal("a session token passed as an elevation token")
	}
	if !tokens.CheckElevation(et, "acct", "sid") {
		t.Fatal("valid elevation refused")
	}
	if tokens.CheckElevation(et, "acct", "other-session") || tokens.CheckElevation(et, "other", "sid") {
		t.Fatal("elevation not bound to account and session")
	}
	other := NewTokens([]byte(strings.Repeat("o", 32)), clock)
	if _, err := other.ParseSession(st); err == nil {
		t.Fatal("token accepted under another secret")
	}
	// alg=none and a tampered payload are refused.
	parts := strings.Split(st, ".")
	if _, err := tokens.ParseSession("eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0." + parts[1] + "."); err == nil {
		t.Fatal("alg none accepted")
	}
	now = now.Add(5*time.Minute + time.Second)
	if tokens.CheckElevation(et, "acct", "sid") {
		t.Fatal("elevation valid after 5 minutes")
	}
	now = now.Add(SessionTTL)
	if _, err := tokens.ParseSession(st); err == nil {
		t.Fatal("session valid after 12 hours")
	}
}
