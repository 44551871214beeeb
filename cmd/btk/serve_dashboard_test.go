package main

import (
	"net/http"
	"path/filepath"
	"testing"
	"time"
)

// TestServeDashboardFlag: the dashboard answers at / by default beside
// /graphql and the health endpoints, and --dashboard=false turns it off.
func TestServeDashboardFlag(t *testing.T) {
	c := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	status := func(url string) (int, http.Header) {
		t.Helper()
		res, err := c.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode, res.Header
	}
	on := startServe(t, filepath.Join(t.TempDir(), "btk.db"))
	if code, h := status(on.url + "/login"); code != http.StatusOK || h.Get("Content-Security-Policy") == "" {
		t.Errorf("GET /login with the dashboard: %d %v", code, h)
	}
	if code, h := status(on.url + "/"); code != http.StatusSeeOther || h.Get("Location") != "/login" {
		t.Errorf("GET / with the dashboard: %d %s", code, h.Get("Location"))
	}
	if code, _ := status(on.url + "/healthz"); code != http.StatusOK {
		t.Errorf("GET /healthz with the dashboard: %d", code)
	}
	var me struct{ Me struct{ Email string } }
	on.must(on.login(), `{ me { email } }`, nil, &me)
	off := startServe(t, filepath.Join(t.TempDir(), "btk.db"), "--dashboard=false")
	for _, p := range []string{"/", "/login", "/keys", "/assets/style.css"} {
		if code, _ := status(off.url + p); code != http.StatusNotFound {
			t.Errorf("GET %s with --dashboard=false: %d, want 404", p, code)
		}
	}
}
