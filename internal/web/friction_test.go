package web_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/btk-project/btk/internal/btk"
)

// The dashboard offers only what works (docs/design.md#dashboard): what each role and plan is offered, the audit log's
// addresses and filters, and a key's own page.
func TestDashboardOffersWhatWorks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	acme := e.workspace("Acme", btk.PlanCloudPro)
	e.addUser("boss@example.com", acme.ID, btk.RoleOwner)
	e.addUser("viewer@example.com", acme.ID, btk.RoleAdmin)
	boss := e.loggedIn("boss@example.com", userPassword)
	created := boss.post("/keys", url.Values{"name": {"payments"}})
	if !btk.WellFormedKey(newKey(created.Body)) {
		t.Fatalf("create: %d", created.Status)
	}
	keys, _, err := e.svc.ListKeys(ctx, e.actor("boss@example.com", userPassword, acme.ID), false, btk.Page{First: 10})
	if err != nil || len(keys) != 1 {
		t.Fatal(keys, err)
	}
	id := keys[0].ID

	// The audit log shows where the create came from, and filters.
	audit := boss.get("/audit")
	if !strings.Contains(audit.Body, "Created key") || !strings.Contains(audit.Body, "from 127.0.0.1") {
		t.Errorf("the audit log does not show the create's address:\n%s", audit.Body)
	}
	if r := boss.get("/audit?action=session.login"); strings.Contains(r.Body, `<span class="action">Created key`) || !strings.Contains(r.Body, `<span class="action">Logged in`) {
		t.Error("the action filter does not filter")
	}
	if r := boss.get("/audit?actor=nobody%40example.com"); !strings.Contains(r.Body, "No events match these filters") {
		t.Error("the actor filter does not filter")
	}
	if r := boss.get("/audit?from=2000-01-01&to=2000-01-02"); !strings.Contains(r.Body, "No events match these filters") {
		t.Error("the date filter does not filter")
	}
	if r := boss.get("/audit?from=yesterday"); r.Status != http.StatusBadRequest {
		t.Errorf("a bad date: %d", r.Status)
	}

	// The key's page: settings, history with the address, usage.
	page := boss.get("/keys/" + id)
	for _, want := range []string{"<h2 id=\"settings-title\">Settings", "Restrictions", "From anywhere", "History", "from 127.0.0.1", "<svg viewBox", "Day (UTC)"} {
		if want == "from 127.0.0.1" {
			want = "<code>127.0.0.1</code>"
		}
		if !strings.Contains(page.Body, want) {
			t.Errorf("the key page lacks %q", want)
		}
	}
	if r := boss.get("/keys/" + e.createKey(e.owner(), "elsewhere").Key.ID); r.Status != http.StatusNotFound {
		t.Errorf("another workspace's key page: %d", r.Status)
	}

	// ADMIN: no Audit link, no Rotate; the key page without its history.
	viewer := e.loggedIn("viewer@example.com", userPassword)
	list := viewer.get("/keys")
	if strings.Contains(list.Body, `href="/audit"`) || strings.Contains(list.Body, "/rotate") {
		t.Error("the ADMIN is offered the audit log or Rotate")
	}
	if p := viewer.get("/keys/" + id); p.Status != 200 || !strings.Contains(p.Body, "for workspace owners") {
		t.Errorf("ADMIN key page: %d", p.Status)
	}

	// CLOUD_STARTER: Rotate is not offered, and the page says why; Revoke is.
	if _, err := e.svc.SetWorkspacePlan(ctx, e.owner(), acme.ID, btk.PlanCloudStarter); err != nil {
		t.Fatal(err)
	}
	list = boss.get("/keys")
	if strings.Contains(list.Body, "/rotate") || !strings.Contains(list.Body, "Rotate is not offered") || !strings.Contains(list.Body, "/revoke") {
		t.Errorf("on CLOUD_STARTER:\n%s", list.Body)
	}
	if p := boss.get("/keys/" + id); strings.Contains(p.Body, "/rotate\"") || !strings.Contains(p.Body, "Rotate is not offered") {
		t.Error("the key page offers Rotate on CLOUD_STARTER")
	}
}
