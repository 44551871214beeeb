package btk

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// tooManyAttempts reports whether err refuses a password check for its
// attempt budget.
func tooManyAttempts(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == CodeRateLimited && strings.HasPrefix(e.Message, "too many password attempts")
}

func TestAddressKey(t *testing.T) {
	for in, want := range map[string]string{
		"192.0.2.7":                     "192.0.2.7",
		"2001:db8:1:2:aaaa::1":          "2001:db8:1:2::/64",
		"2001:db8:1:2:ffff:ffff:ffff:1": "2001:db8:1:2::/64",
		"::ffff:192.0.2.7":              "::ffff:192.0.2.7",
		"":                              "",
		"not an address":                "not an address",
	} {
		if got := addressKey(in); got != want {
			t.Errorf("addressKey(%q) = %q, want %q", in, got, want)
		}
	}
}

// The gate's budgets, without argon2 work: a hash that does not parse fails
// at once, like a wrong password.
func TestPasswordGate(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	good := HashPassword("right-password")
	t.Run("an address that has not failed is never refused for others' failures", func(t *testing.T) {
		g := newPasswordGate()
		for i := range 1500 { // more than the account's budget a day
			g.check(ctx, now, "owner@example.com", fmt.Sprintf("10.0.%d.%d", i/250, i%250), "bad", "guess")
		}
		if ok, err := g.check(ctx, now, "owner@example.com", "192.0.2.1", good, "right-password"); !ok || err != nil {
			t.Fatalf("owner from a clean address: %v %v", ok, err)
		}
		// Second attempts from the failed addresses are charged to the
		// account: 50 a minute, then refused.
		refused := 0
		for i := range 60 {
			if _, err := g.check(ctx, now, "owner@example.com", fmt.Sprintf("10.0.0.%d", i), "bad", "guess"); tooManyAttempts(err) {
				refused++
			}
		}
		if refused != 60-accountAttempts.PerMinute {
			t.Fatalf("%d of 60 second attempts refused", refused)
		}
		if _, err := g.check(ctx, now, "owner@example.com", "10.0.0.100", good, "right-password"); !tooManyAttempts(err) {
			t.Fatalf("failed address, spent account budget: %v", err)
		}
	})
	t.Run("per account and address", func(t *testing.T) {
		g := newPasswordGate()
		for i := range pairAttempts.PerMinute {
			if _, err := g.check(ctx, now, "a@example.com", "192.0.2.1", "bad", "guess"); err != nil {
				t.Fatalf("attempt %d: %v", i, err)
			}
		}
		_, err := g.check(ctx, now, "a@example.com", "192.0.2.1", good, "right-password")
		if !tooManyAttempts(err) {
			t.Fatalf("over the pair budget: %v", err)
		}
		// 5 a minute: the next attempt is accepted 12 s on (one emission
		// interval), and the refusal says so.
		if !strings.HasSuffix(err.Error(), "; try again in 12s") {
			t.Fatalf("refusal %q does not say when to try again", err)
		}
		// Another address in the same IPv6 /64 is the same client; another
		// account from the same address is not refused.
		if ok, err := g.check(ctx, now, "b@example.com", "192.0.2.1", good, "right-password"); !ok || err != nil {
			t.Fatalf("other account, same address: %v %v", ok, err)
		}
		for range pairAttempts.PerMinute {
			g.check(ctx, now, "a@example.com", "2001:db8::1", "bad", "guess")
		}
		if _, err := g.check(ctx, now, "a@example.com", "2001:db8::ffff", good, "right-password"); !tooManyAttempts(err) {
			t.Fatalf("same /64: %v", err)
		}
	})
	t.Run("a success clears the pair", func(t *testing.T) {
		g := newPasswordGate()
		for range 3 {
			for range pairAttempts.PerMinute - 1 {
				g.check(ctx, now, "c@example.com", "192.0.2.9", "bad", "typo")
			}
			if ok, err := g.check(ctx, now, "c@example.com", "192.0.2.9", good, "right-password"); !ok || err != nil {
				t.Fatalf("after typos: %v %v", ok, err)
			}
		}
	})
	t.Run("per address", func(t *testing.T) {
		g := newPasswordGate()
		for i := range addressAttempts.PerMinute {
			g.check(ctx, now, fmt.Sprintf("u%d@example.com", i), "192.0.2.5", "bad", "guess")
		}
		if _, err := g.check(ctx, now, "new@example.com", "192.0.2.5", good, "right-password"); !tooManyAttempts(err) {
			t.Fatalf("over the address budget: %v", err)
		}
	})
}
