package web_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// Device tokens (docs/security.md#password-throttles): the dashboard keeps the device token in the cookie
// btk_device; a browser presenting it logs in although others spent the
// account's budgets from its address.
func TestDeviceCookieExemptsFromOthersFailures(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.clock.Freeze()
	owner := e.browser()
	r := owner.post("/login", url.Values{"email": {ownerEmail}, "password": {ownerPassword}})
	var device *http.Cookie
	for _, c := range (&http.Response{Header: r.Header}).Cookies() {
		if c.Name == "btk_device" {
			device = c
		}
	}
	if device == nil || !device.HttpOnly || !strings.HasPrefix(device.Value, "btkd_") || device.SameSite != http.SameSiteStrictMode {
		t.Fatalf("no HttpOnly SameSite=Strict btk_device cookie: %v", r.Header.Values("Set-Cookie"))
	}
	attacker := e.browser()
	var last *resp
	for range 8 {
		last = attacker.post("/login", url.Values{"email": {ownerEmail}, "password": {"wrong-password"}})
	}
	if last.Status != http.StatusTooManyRequests {
		t.Fatalf("the attacker's 8th guess: %d, want 429", last.Status)
	}
	owner.login(ownerEmail, ownerPassword)
}
