package web_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/btk-project/btk/internal/btk"
)

// docs/webhooks.md: the Webhooks page — owners add a webhook (the secret is
// shown once, on the answer to the form only), see recent deliveries with
// their status, and delete it; other roles are told who manages them.
func TestWebhooksPage(t *testing.T) {
	e := newEnv(t)
	b := e.loggedIn(ownerEmail, ownerPassword)

	r := b.get("/webhooks")
	if r.Status != http.StatusOK || !strings.Contains(r.Body, "Add webhook") || !strings.Contains(r.Body, `href="/webhooks" aria-current="page"`) {
		t.Fatalf("GET /webhooks: %d\n%s", r.Status, r.Body)
	}
	// A private receiver is refused, with the reason on the page.
	r = b.post("/webhooks", url.Values{"url": {"http://127.0.0.1:9/x"}})
	if r.Status != http.StatusBadRequest || !strings.Contains(r.Body, "private") {
		t.Errorf("private receiver: %d", r.Status)
	}
	r = b.post("/webhooks", url.Values{"url": {"https://93.184.215.14/hook"}, "events": {"api_key.created, api_key.revoked"}})
	if r.Status != http.StatusOK {
		t.Fatalf("add: %d\n%s", r.Status, r.Body)
	}
	const open = `<code id="new-secret" class="secret" tabindex="0">`
	i := strings.Index(r.Body, open)
	if i < 0 {
		t.Fatalf("no secret on the answer:\n%s", r.Body)
	}
	secret := r.Body[i+len(open):]
	secret = secret[:strings.Index(secret, "<")]
	if !strings.HasPrefix(secret, "whsec_") || r.Header.Get("Cache-Control") != "no-store" || r.Header.Get("Location") != "" {
		t.Errorf("secret %q, Cache-Control %q, Location %q", secret, r.Header.Get("Cache-Control"), r.Header.Get("Location"))
	}
	// A key change queues a delivery, shown with its status; the secret is never shown again.
	e.createKey(e.owner(), "ci")
	r = b.get("/webhooks")
	if strings.Contains(r.Body, secret) || strings.Contains(r.Body, "whsec_") {
		t.Error("the secret was shown again")
	}
	if !strings.Contains(r.Body, "api_key.created") || !strings.Contains(r.Body, "PENDING") || !strings.Contains(r.Body, "api_key.created, api_key.revoked") {
		t.Errorf("the delivery is not listed:\n%s", r.Body)
	}
	for _, seen := range b.seen {
		if strings.Contains(seen.Header.Get("Location"), secret) {
			t.Error("the secret in a redirect")
		}
	}
	hooks, err := e.svc.Webhooks(t.Context(), e.owner())
	if err != nil || len(hooks) != 1 {
		t.Fatalf("webhooks %d %v", len(hooks), err)
	}
	// Another role is told who manages webhooks; it cannot delete.
	e.addUser("member@example.com", e.ws.ID, btk.RoleAdmin)
	m := e.loggedIn("member@example.com", userPassword)
	if r := m.get("/webhooks"); r.Status != http.StatusOK || !strings.Contains(r.Body, "managed by workspace owners") || strings.Contains(r.Body, hooks[0].ID) {
		t.Errorf("ADMIN's page: %d", r.Status)
	}
	if r := m.post("/webhooks/"+hooks[0].ID+"/delete", nil); r.Status != http.StatusForbidden {
		t.Errorf("ADMIN deleting: %d", r.Status)
	}
	// Delete.
	r = b.post("/webhooks/"+hooks[0].ID+"/delete", nil)
	if r.Status != http.StatusSeeOther || r.Header.Get("Location") != "/webhooks?deleted=1" {
		t.Fatalf("delete: %d %s", r.Status, r.Header.Get("Location"))
	}
	if r := b.get("/webhooks?deleted=1"); strings.Contains(r.Body, hooks[0].ID) || !strings.Contains(r.Body, "was deleted") {
		t.Errorf("after delete:\n%s", r.Body)
	}
}

// docs/webhooks.md#the-backlog-bound: a webhook whose backlog is full says
// so on its card, with the events skipped and since when; the notice that
// names them is in its deliveries once there is room.
func TestWebhooksPageShowsFullBacklog(t *testing.T) {
	var store btk.Store
	e := newWrappedEnv(t, func(s btk.Store) btk.Store { store = s; return s })
	b := e.loggedIn(ownerEmail, ownerPassword)
	ctx := t.Context()
	if _, err := e.svc.CreateWebhook(ctx, e.owner(), "https://93.184.215.14/hook", []string{"api_key.updated"}); err != nil {
		t.Fatal(err)
	}
	if r := b.get("/webhooks"); strings.Contains(r.Body, "backlog") {
		t.Fatalf("an empty backlog is reported:\n%s", r.Body)
	}
	err := store.Write(ctx, func(tx btk.Tx) error {
		for range btk.MaxPendingPerWebhook + 2 {
			if err := tx.AddAuditEvent(ctx, &btk.AuditEvent{WorkspaceID: e.ws.ID, Action: "api_key.updated", ActorEmail: ownerEmail,
				TargetType: "api_key", Metadata: "{}", CreatedAt: e.svc.Now()}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	r := b.get("/webhooks")
	if !strings.Contains(r.Body, "2 events were not queued for this webhook since <time") ||
		!strings.Contains(r.Body, "its backlog of 1000 pending deliveries is full") {
		t.Errorf("the full backlog is not reported:\n%s", r.Body)
	}
}
