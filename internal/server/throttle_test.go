package server_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// clientFrom returns an HTTP client whose connections come from the
// loopback address 127.0.0.n, so that the server sees another client
// address (Linux routes all of 127/8 to lo).
func clientFrom(t *testing.T, n int) *http.Client {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(n))}, Timeout: 5 * time.Second}
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		return d.DialContext(ctx, network, addr)
	}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// Failures from other addresses cannot lock the owner out. After
// 100 failed logins from 100 addresses (and a second round from 60 of them,
// which spends the account's budget of 50 a minute), the owner logs in at once from an address
// that has not failed; the failing addresses stay throttled.
func TestOwnerLogsInAfterFailuresElsewhere(t *testing.T) {
	e := newEnv(t)
	const login = `mutation($p:String!){login(email:"` + adminEmail + `",password:$p){accessToken}}`
	for round, last := range []int{101, 61} {
		for n := 2; n <= last; n++ {
			r := e.doWith(clientFrom(t, n), cred{}, login, map[string]any{"p": fmt.Sprintf("guess-%d-%d", round, n)})
			if c := r.Code(); c != "UNAUTHENTICATED" && c != "RATE_LIMITED" {
				t.Fatalf("guess from 127.0.0.%d: %q %+v", n, c, r.Errors)
			}
		}
	}
	// The account's budget (50 a minute) is spent for the failing addresses.
	if r := e.doWith(clientFrom(t, 2), cred{}, login, map[string]any{"p": adminPassword}); r.Code() != "RATE_LIMITED" {
		t.Fatalf("right password from an address that failed, account budget spent: %q", r.Code())
	}
	// The owner, from a clean address: at once, with no wait.
	r := e.doWith(clientFrom(t, 200), cred{}, login, map[string]any{"p": adminPassword})
	if r.Code() != "" {
		t.Fatalf("owner from a clean address after 160 failures elsewhere: %q %+v", r.Code(), r.Errors)
	}
	// A typo from the owner's address, then the right password: the account
	// budget now applies there too, and is spent: the owner waits a minute
	// (or uses another address), not a day.
	e.doWith(clientFrom(t, 200), cred{}, login, map[string]any{"p": "typo"})
	r = e.doWith(clientFrom(t, 200), cred{}, login, map[string]any{"p": adminPassword})
	if r.Code() != "RATE_LIMITED" {
		t.Fatalf("after a typo, with the account budget spent: %q", r.Code())
	}
	// The refusal says how long to wait; waiting that long is enough.
	m := regexp.MustCompile(`; try again in (\d+)s$`).FindStringSubmatch(r.Errors[0].Message)
	if m == nil {
		t.Fatalf("refusal %q does not say when to try again", r.Errors[0].Message)
	}
	wait, _ := strconv.Atoi(m[1])
	if wait < 1 || wait > 60 {
		t.Fatalf("told to wait %ds for a budget of 50 a minute", wait)
	}
	e.clock.Advance(time.Duration(wait) * time.Second)
	if r := e.doWith(clientFrom(t, 200), cred{}, login, map[string]any{"p": adminPassword}); r.Code() != "" {
		t.Fatalf("%ds later, as told: %q", wait, r.Code())
	}
	// Success cleared the mark: the owner's address is clean again.
	if r := e.doWith(clientFrom(t, 200), cred{}, login, map[string]any{"p": adminPassword}); r.Code() != "" {
		t.Fatalf("again: %q", r.Code())
	}
}

// Device tokens (docs/security.md#password-throttles): an attacker spends the account's budget from many
// addresses; the owner, whose own address failed once, logs in 21 times in
// that minute with the device token of an earlier login (and is refused
// without it).
func TestDeviceTokenExemptsOwnerFromAccountBudget(t *testing.T) {
	e := newEnv(t)
	const login = `mutation($p:String!,$d:String){login(email:"` + adminEmail + `",password:$p,deviceToken:$d){accessToken deviceToken}}`
	owner := clientFrom(t, 200)
	var first struct {
		Login struct{ AccessToken, DeviceToken string }
	}
	e.must(cred{}, login, map[string]any{"p": adminPassword}, &first)
	device := first.Login.DeviceToken
	if device == "" {
		t.Fatal("login returned no device token")
	}
	// Two guesses from each of 60 addresses: the second ones spend the
	// account's budget (50 a minute).
	for round := range 2 {
		for n := 2; n <= 61; n++ {
			r := e.doWith(clientFrom(t, n), cred{}, login, map[string]any{"p": fmt.Sprintf("guess-%d-%d", round, n)})
			if c := r.Code(); c != "UNAUTHENTICATED" && c != "RATE_LIMITED" {
				t.Fatalf("guess from 127.0.0.%d: %q %+v", n, c, r.Errors)
			}
		}
	}
	e.doWith(owner, cred{}, login, map[string]any{"p": "typo"})
	if r := e.doWith(owner, cred{}, login, map[string]any{"p": adminPassword}); r.Code() != "RATE_LIMITED" {
		t.Fatalf("owner without its device token: %q, want RATE_LIMITED", r.Code())
	}
	for i := range 21 {
		var out struct {
			Login struct{ AccessToken, DeviceToken string }
		}
		r := e.doWith(owner, cred{}, login, map[string]any{"p": adminPassword, "d": device})
		r.decode(t, &out)
		if out.Login.AccessToken == "" || out.Login.DeviceToken != device {
			t.Fatalf("login %d with the device token: %+v", i, out)
		}
	}
	// Another account's token, or a forged one, exempts nothing.
	if r := e.doWith(owner, cred{}, login, map[string]any{"p": adminPassword, "d": device[:len(device)-2] + "xx"}); r.Code() != "RATE_LIMITED" {
		t.Fatalf("a forged device token: %q", r.Code())
	}
}
