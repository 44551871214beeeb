package web_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
)

// The dashboard shows a key's scopes, networks and expiry; its create form
// keeps its three fields and, under a maximum lifetime, says the key will
// expire on the date it sets, and sets it (docs/access.md).
func TestDashboardLeastPrivilege(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	owner := e.owner()
	res, err := e.svc.CreateKey(ctx, owner, btk.CreateKeyInput{Name: "narrow", Scopes: []string{"orders:read"}, AllowedCIDRs: []string{"192.0.2.0/24"}})
	if err != nil {
		t.Fatal(err)
	}
	b := e.loggedIn(ownerEmail, ownerPassword)
	page := b.get("/keys")
	for _, want := range []string{"orders:read", "192.0.2.0/24", "Restrictions"} {
		if !strings.Contains(page.Body, want) {
			t.Errorf("/keys does not show %q", want)
		}
	}
	if strings.Contains(page.Body, `id="expiry-note"`) {
		t.Error("an expiry note without a lifetime policy")
	}
	detail := b.get("/keys/" + res.Key.ID)
	for _, want := range []string{"Networks", "192.0.2.0/24", "orders:read"} {
		if !strings.Contains(detail.Body, want) {
			t.Errorf("/keys/{id} does not show %q", want)
		}
	}

	max := 30
	if _, err := e.svc.SetWorkspaceKeyPolicy(ctx, owner, e.ws.ID, &max, nil); err != nil {
		t.Fatal(err)
	}
	page = b.get("/keys")
	want := e.svc.Now().Add(30 * 24 * time.Hour).UTC().Format("2006-01-02")
	if !strings.Contains(page.Body, `id="expiry-note"`) || !strings.Contains(page.Body, want) {
		t.Errorf("/keys under a 30-day policy does not say the key expires on %s", want)
	}
	// The key issued before the policy, without an expiry, shows when the
	// policy ends it, not "Never".
	ends := res.Key.CreatedAt.Add(30 * 24 * time.Hour).UTC()
	row := keyRowOf(t, page.Body, res.Key.ID)
	cell, _, _ := strings.Cut(row[strings.Index(row, `data-label="Expires"`):], "</td>")
	if !strings.Contains(cell, `datetime="`+ends.Format(time.RFC3339)+`"`) || !strings.Contains(cell, "max lifetime") || strings.Contains(cell, "Never") {
		t.Errorf("/keys under a 30-day policy shows the expiry of the key without one as:\n%s", cell)
	}
	detail = b.get("/keys/" + res.Key.ID)
	if !strings.Contains(detail.Body, `<dt>Expires</dt><dd><time datetime="`+ends.Format(time.RFC3339)+`">`) ||
		!strings.Contains(detail.Body, "the workspace's maximum key lifetime") {
		t.Errorf("/keys/{id} under a 30-day policy does not show the key expiring at %s by the policy", ends.Format(time.RFC3339))
	}
	if n := strings.Count(page.Body[strings.Index(page.Body, `<form method="post" action="/keys"`):], "<input"); n < 3 {
		t.Errorf("create form has %d inputs", n)
	}
	created := b.post("/keys", url.Values{"name": {"under-policy"}})
	if created.Status != http.StatusOK || newKey(created.Body) == "" {
		t.Fatalf("create under a lifetime policy: %d", created.Status)
	}
	keys, _, err := e.svc.ListKeys(ctx, owner, false, btk.Page{First: 50})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if k.Name == "under-policy" && (k.ExpiresAt == nil || k.ExpiresAt.Sub(e.svc.Now()) > 30*24*time.Hour || k.ExpiresAt.Sub(e.svc.Now()) < 29*24*time.Hour) {
			t.Errorf("dashboard key expires at %v", k.ExpiresAt)
		}
	}
}

// keyRowOf is the table row of the key id on the API Keys page.
func keyRowOf(t *testing.T, page, id string) string {
	t.Helper()
	i := strings.Index(page, `href="/keys/`+id+`"`)
	if i < 0 {
		t.Fatalf("no row for key %s", id)
	}
	start := strings.LastIndex(page[:i], "<tr")
	end := strings.Index(page[i:], "</tr>")
	return page[start : i+end]
}

// Under a maximum lifetime the dashboard rotates a key without asking for an
// expiry, as it creates one: the new key keeps the old expiry if the policy
// allows it, else gets the maximum, and the confirmation and the answer say
// the date (docs/access.md#workspace-key-policy).
func TestDashboardRotateUnderLifetimePolicy(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	owner := e.owner()
	e.clock.Freeze()
	now := e.svc.Now()
	soon := now.Add(10 * 24 * time.Hour).UTC().Truncate(time.Second)
	late := now.Add(90 * 24 * time.Hour).UTC().Truncate(time.Second)
	keys := map[string]*time.Time{"no-expiry": nil, "expires-soon": &soon, "expires-late": &late}
	ids := map[string]string{}
	for name, exp := range keys {
		res, err := e.svc.CreateKey(ctx, owner, btk.CreateKeyInput{Name: name, ExpiresAt: exp})
		if err != nil {
			t.Fatal(err)
		}
		ids[name] = res.Key.ID
	}
	max := 30
	if _, err := e.svc.SetWorkspaceKeyPolicy(ctx, owner, e.ws.ID, &max, nil); err != nil {
		t.Fatal(err)
	}
	maxExpiry := now.Add(30 * 24 * time.Hour).UTC().Truncate(time.Second)
	b := e.loggedIn(ownerEmail, ownerPassword)
	for _, c := range []struct {
		name string
		want time.Time
		says string
	}{
		{"no-expiry", maxExpiry, "key policy limits a key's lifetime"},
		{"expires-soon", soon, "keeps this key's expiry"},
		{"expires-late", maxExpiry, "key policy limits a key's lifetime"},
	} {
		date := c.want.Format("Jan 2, 2006")
		confirm := b.get("/keys/" + ids[c.name] + "/rotate")
		note, _, _ := strings.Cut(confirm.Body[max0(strings.Index(confirm.Body, `id="expiry-note"`)):], "</p>")
		if !strings.Contains(note, c.says) || !strings.Contains(note, `datetime="`+c.want.Format(time.RFC3339)+`"`) || !strings.Contains(note, date) {
			t.Errorf("%s: the rotate page does not say the new key will expire on %s (%q):\n%s", c.name, date, c.says, note)
		}
		rotated := b.post("/keys/"+ids[c.name]+"/rotate", url.Values{"password": {ownerPassword}})
		if rotated.Status != http.StatusOK || newKey(rotated.Body) == "" {
			t.Fatalf("%s: rotate under a 30-day policy: %d\n%s", c.name, rotated.Status, rotated.Body)
		}
		if !strings.Contains(rotated.Body, "The new key expires on "+date+".") {
			t.Errorf("%s: the rotated key's page does not say it expires on %s", c.name, date)
		}
		k := activeKey(t, e, c.name)
		if k.ID == ids[c.name] || k.ExpiresAt == nil || !k.ExpiresAt.Equal(c.want) {
			t.Errorf("%s: the new key %s expires at %v, want %v", c.name, k.ID, k.ExpiresAt, c.want)
		}
	}
}

func max0(i int) int {
	if i < 0 {
		return 0
	}
	return i
}

// activeKey is the workspace's active key named name.
func activeKey(t *testing.T, e *env, name string) *btk.APIKey {
	t.Helper()
	keys, _, err := e.svc.ListKeys(context.Background(), e.owner(), false, btk.Page{First: 50})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if k.Name == name {
			return k
		}
	}
	t.Fatalf("no active key %q", name)
	return nil
}
