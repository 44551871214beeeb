package server_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
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

// Finding 5: failures from other addresses cannot lock the owner out. After
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
	if r := e.doWith(clientFrom(t, 200), cred{}, login, map[string]any{"p": adminPassword}); r.Code() != "RATE_LIMITED" {
		t.Fatalf("after a typo, with the account budget spent: %q", r.Code())
	}
	e.clock.Advance(time.Minute)
	if r := e.doWith(clientFrom(t, 200), cred{}, login, map[string]any{"p": adminPassword}); r.Code() != "" {
		t.Fatalf("a minute later: %q", r.Code())
	}
	// Success cleared the mark: the owner's address is clean again.
	if r := e.doWith(clientFrom(t, 200), cred{}, login, map[string]any{"p": adminPassword}); r.Code() != "" {
		t.Fatalf("again: %q", r.Code())
	}
}
