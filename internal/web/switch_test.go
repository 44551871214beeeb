package web_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/web"
)

// twoWorkspaces makes an account that is a MEMBER of two new workspaces.
func twoWorkspaces(e *env, email string) (first, second *btk.Workspace) {
	e.t.Helper()
	first = e.workspace("Acme "+email, btk.PlanCloudPro)
	second = e.workspace("Globex "+email, btk.PlanCloudPro)
	e.addUser(email, first.ID, btk.RoleMember)
	id := e.actor(email, userPassword, first.ID).AccountID
	if err := e.svc.SetMembership(context.Background(), e.owner(), second.ID, id, btk.RoleMember); err != nil {
		e.t.Fatal(err)
	}
	return first, second
}

// newSession is the session cookie a response set, or nil.
func newSession(r *resp) *http.Cookie {
	for _, c := range (&http.Response{Header: r.Header}).Cookies() {
		if c.Name == web.CookieName {
			return c
		}
	}
	return nil
}

// logins counts the workspace's session.login events.
func (e *env) logins(ws string) int {
	e.t.Helper()
	events, _, err := e.svc.AuditEvents(context.Background(), e.owner(),
		btk.AuditFilter{WorkspaceID: ws, EventAction: btk.EventSessionLogin, Page: btk.Page{First: 100}})
	if err != nil {
		e.t.Fatal(err)
	}
	return len(events)
}

// TestSwitchNeverExtendsTheLogin: a workspace switch replaces its session
// once, and the new one ends when the login would have. Before, every
// switch (to any workspace, the current one included) opened a session of
// 12 fresh hours, so a stolen cookie could be kept alive for ever without
// the password.
func TestSwitchNeverExtendsTheLogin(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	first, second := twoWorkspaces(e, "switch@example.com")
	e.clock.Freeze()
	ctx := context.Background()
	b := e.browser()
	login := newSession(b.post("/login", url.Values{"email": {"switch@example.com"}, "password": {userPassword}}))
	if login == nil {
		t.Fatal("login set no session cookie")
	}
	a, err := e.svc.ResolveSession(ctx, login.Value)
	if err != nil || a.WorkspaceID != first.ID {
		t.Fatalf("login opened %v (%v); want the first workspace", a, err)
	}
	before := e.logins(first.ID) + e.logins(second.ID)

	// The workspace the session is in: nothing changes.
	r := b.post("/switch", url.Values{"workspace": {first.ID}})
	if r.Status != http.StatusSeeOther || newSession(r) != nil {
		t.Errorf("switch to the current workspace: %d, cookie %v; want 303 and no new session", r.Status, newSession(r))
	}

	e.clock.Advance(11 * time.Hour)
	r = b.post("/switch", url.Values{"workspace": {second.ID}})
	switched := newSession(r)
	if r.Status != http.StatusSeeOther || switched == nil {
		t.Fatalf("switch: %d, cookie %v", r.Status, switched)
	}
	if !switched.Expires.Equal(login.Expires) {
		t.Errorf("the switched session expires %v; want the login's %v", switched.Expires, login.Expires)
	}
	if _, err := e.svc.ResolveSession(ctx, login.Value); !errors.Is(err, btk.ErrInvalidSession) {
		t.Errorf("the replaced session: %v; want it ended", err)
	}
	if got := e.logins(first.ID) + e.logins(second.ID); got != before+1 {
		t.Errorf("%d session.login events after one switch; want %d", got, before+1)
	}
	// The replaced session cannot switch again.
	if _, err := e.svc.SwitchWorkspace(ctx, a, second.ID); !errors.Is(err, btk.ErrInvalidSession) {
		t.Errorf("a second switch of the replaced session: %v; want it refused as ended", err)
	}

	e.clock.Advance(time.Hour + time.Second) // 12 hours after the password
	if _, err := e.svc.ResolveSession(ctx, switched.Value); !errors.Is(err, btk.ErrInvalidSession) {
		t.Errorf("the switched session 12 hours after the login: %v; want it expired", err)
	}
}

// TestSwitchesBounded: switches are budgeted per account, and one session
// sent to switch twice at once is replaced once.
func TestSwitchesBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	first, second := twoWorkspaces(e, "flood@example.com")
	e.clock.Freeze()
	b := e.browser()
	b.login("flood@example.com", userPassword)
	before := e.logins(first.ID) + e.logins(second.ID)
	ws := []string{second.ID, first.ID}
	switches := 0
	for i := range 50 {
		r := b.post("/switch", url.Values{"workspace": {ws[i%2]}})
		if r.Status == http.StatusTooManyRequests {
			if !strings.Contains(r.Body, "Too many workspace switches") {
				t.Errorf("a refused switch says: %s", r.Body)
			}
			break
		}
		if r.Status != http.StatusSeeOther {
			t.Fatalf("switch %d: %d", i, r.Status)
		}
		switches++
	}
	if switches != 10 {
		t.Errorf("%d switches in a minute before the refusal; want 10", switches)
	}
	if got := e.logins(first.ID) + e.logins(second.ID); got != before+switches {
		t.Errorf("%d session.login events for %d switches; want one each, none for the refused", got-before, switches)
	}

	// One session, two switches at once: one replaces it.
	e.clock.Advance(time.Minute)
	c := e.browser()
	c.login("flood@example.com", userPassword)
	u, _ := url.Parse(e.srv.URL)
	cookie := c.c.Jar.Cookies(u)
	answers := make([]string, 2)
	var wg sync.WaitGroup
	for i := range answers {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/switch", strings.NewReader(url.Values{"workspace": {second.ID}}.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("Origin", e.srv.URL)
			for _, ck := range cookie {
				req.AddCookie(ck)
			}
			res, err := http.DefaultTransport.RoundTrip(req)
			if err != nil {
				t.Error(err)
				return
			}
			res.Body.Close()
			answers[i] = res.Status + " " + res.Header.Get("Location")
		})
	}
	wg.Wait()
	// The loser finds its session ended: the login page.
	if won := "303 See Other /keys"; (answers[0] == won) == (answers[1] == won) {
		t.Errorf("two switches of one session at once answered %q; want one to the keys page", answers)
	}
}

// TestDashboardLoginChecksThePasswordOnce: an account in several workspaces
// logs in to the first with one password check. Before, the dashboard
// checked it a second time to open that workspace, spending two attempts of
// the address's budget (30 a minute) per login: the 16th login in a minute
// was refused.
func TestDashboardLoginChecksThePasswordOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	first, _ := twoWorkspaces(e, "twice@example.com")
	e.clock.Freeze()
	for i := range 20 {
		r := e.browser().post("/login", url.Values{"email": {"twice@example.com"}, "password": {userPassword}})
		if r.Status != http.StatusSeeOther {
			t.Fatalf("login %d of 20 in a minute: %d", i+1, r.Status)
		}
		if i == 0 {
			if a, err := e.svc.ResolveSession(context.Background(), newSession(r).Value); err != nil || a.WorkspaceID != first.ID {
				t.Fatalf("the login opened %v (%v); want the first workspace", a, err)
			}
		}
	}
}
