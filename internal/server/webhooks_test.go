package server_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/btk-project/btk/internal/btk"
)

// docs/webhooks.md over GraphQL: who may manage webhooks, the secret shown
// once, the delivery log, and the audit chain's head and verification.
func TestWebhooksOverGraphQL(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *btk.Config) { c.WebhookAllowPrivate = true })
	root := e.admin()
	wsA := e.createWorkspace(root, "A", "CLOUD_PRO")
	wsB := e.createWorkspace(root, "B", "CLOUD_PRO")
	users := map[string]cred{}
	for _, u := range []struct{ email, ws, role string }{
		{"owner@a.example", wsA, "OWNER"}, {"admin@a.example", wsA, "ADMIN"},
		{"member@a.example", wsA, "MEMBER"}, {"owner@b.example", wsB, "OWNER"},
	} {
		id := e.createAccount(root, u.email, "a long enough password", false)
		e.setMember(root, u.ws, id, u.role)
		users[u.email] = cred{Bearer: e.login(u.email, "a long enough password", "")}
	}
	owner := users["owner@a.example"]
	key := e.createKey(owner, "k")

	const create = `mutation($u:String!,$e:[String!]){createWebhook(input:{url:$u,events:$e}){secret webhook{id url events createdAt}}}`
	vars := map[string]any{"u": "https://hooks.example.com/btk", "e": []string{"api_key.revoked"}}
	for who, c := range map[string]cred{
		"admin": users["admin@a.example"], "member": users["member@a.example"], "key": {Key: key.Plaintext}, "anonymous": {},
	} {
		want := "FORBIDDEN"
		if who == "key" || who == "anonymous" {
			want = "UNAUTHENTICATED"
		}
		if r := e.do(c, create, vars); r.Code() != want {
			t.Errorf("createWebhook as %s: %q %+v, want %s", who, r.Code(), r.Errors, want)
		}
	}
	var out struct {
		CreateWebhook struct {
			Secret  string
			Webhook struct {
				ID     string
				URL    string
				Events []string
			}
		}
	}
	e.must(owner, create, vars, &out)
	hook := out.CreateWebhook.Webhook
	if len(out.CreateWebhook.Secret) < 40 || out.CreateWebhook.Secret[:6] != "whsec_" || hook.URL != "https://hooks.example.com/btk" ||
		len(hook.Events) != 1 {
		t.Fatalf("createWebhook: %+v", out)
	}
	if r := e.do(owner, create, map[string]any{"u": "ftp://x"}); r.Code() != "BAD_USER_INPUT" {
		t.Errorf("ftp URL: %q", r.Code())
	}
	// A type that does not exist would make a webhook that never fires.
	r := e.do(owner, create, map[string]any{"u": "https://hooks.example.com/typo", "e": []string{"api_key.revoked", "nosuch.event"}})
	if r.Code() != "BAD_USER_INPUT" || !strings.Contains(r.Errors[0].Message, `"nosuch.event"`) ||
		!strings.Contains(r.Errors[0].Message, "api_key.leaked") {
		t.Errorf("an unknown event type: %q %+v", r.Code(), r.Errors)
	}

	var list struct {
		Webhooks []struct{ ID string }
	}
	e.must(owner, `{webhooks{id url events createdAt}}`, nil, &list)
	if len(list.Webhooks) != 1 || list.Webhooks[0].ID != hook.ID {
		t.Errorf("webhooks: %+v", list)
	}
	e.must(users["owner@b.example"], `{webhooks{id}}`, nil, &list)
	if len(list.Webhooks) != 0 {
		t.Errorf("another workspace sees %d webhooks", len(list.Webhooks))
	}

	// A revocation is queued for the webhook in the same transaction.
	e.must(owner, `mutation($id:ID!){revokeApiKey(id:$id){id}}`, map[string]any{"id": key.ID}, &struct{}{})
	var ds struct {
		WebhookDeliveries struct {
			Nodes []struct {
				EventType, Status, EventId string
				Attempts                   int
				NextAttemptAt              *string
			}
			PageInfo struct{ HasNextPage bool }
		}
	}
	const deliveries = `query($id:ID!){webhookDeliveries(webhookId:$id, first:10){nodes{id webhookId eventId eventType status attempts
		lastStatusCode lastError nextAttemptAt createdAt deliveredAt} pageInfo{hasNextPage endCursor}}}`
	e.must(owner, deliveries, map[string]any{"id": hook.ID}, &ds)
	if n := ds.WebhookDeliveries.Nodes; len(n) != 1 || n[0].EventType != "api_key.revoked" || n[0].Status != "PENDING" ||
		n[0].Attempts != 0 || n[0].NextAttemptAt == nil {
		t.Errorf("deliveries: %+v", ds)
	}
	if r := e.do(users["owner@b.example"], deliveries, map[string]any{"id": hook.ID}); r.Code() != "NOT_FOUND" {
		t.Errorf("another workspace's deliveries: %q", r.Code())
	}

	// The audit chain.
	var head struct {
		AuditHead struct {
			Hash  string
			Count int
			At    *string
		}
	}
	e.must(owner, `{auditHead{hash count at}}`, nil, &head)
	if len(head.AuditHead.Hash) != 64 || head.AuditHead.Count < 3 || head.AuditHead.At == nil {
		t.Errorf("auditHead: %+v", head)
	}
	var v struct {
		VerifyAuditChain struct {
			Intact  bool
			Count   int
			Problem *struct{ Reason string }
		}
	}
	e.must(owner, `{verifyAuditChain{workspaceId intact count head{hash count at} problem{eventId position reason}}}`, nil, &v)
	if !v.VerifyAuditChain.Intact || v.VerifyAuditChain.Count != head.AuditHead.Count || v.VerifyAuditChain.Problem != nil {
		t.Errorf("verifyAuditChain: %+v", v)
	}
	if r := e.do(users["admin@a.example"], `{verifyAuditChain{intact}}`, nil); r.Code() != "FORBIDDEN" {
		t.Errorf("verifyAuditChain as ADMIN: %q", r.Code())
	}
	if r := e.do(owner, `{verifyAuditChain(serverWide:true){intact}}`, nil); r.Code() != "FORBIDDEN" {
		t.Errorf("server-wide chain as an owner: %q", r.Code())
	}
	e.must(root, `query($w:ID){verifyAuditChain(workspaceId:$w){intact}}`, map[string]any{"w": wsA}, &v)
	if !v.VerifyAuditChain.Intact {
		t.Error("a platform admin verifying workspace A")
	}
	e.must(root, `{verifyAuditChain(serverWide:true){intact count}}`, nil, &v)
	if !v.VerifyAuditChain.Intact || v.VerifyAuditChain.Count == 0 {
		t.Errorf("server-wide chain: %+v", v)
	}
	if r := e.do(owner, `{a:verifyAuditChain{intact} b:verifyAuditChain{intact}}`, nil); r.Code() == "" {
		t.Error("two chain verifications in one operation were accepted")
	}

	if r := e.do(users["owner@b.example"], `mutation($id:ID!){deleteWebhook(id:$id)}`, map[string]any{"id": hook.ID}); r.Code() != "NOT_FOUND" {
		t.Errorf("deleting another workspace's webhook: %q", r.Code())
	}
	var del struct{ DeleteWebhook bool }
	e.must(owner, `mutation($id:ID!){deleteWebhook(id:$id)}`, map[string]any{"id": hook.ID}, &del)
	if !del.DeleteWebhook {
		t.Error("deleteWebhook returned false")
	}
}

// A workspace's webhooks are bounded over GraphQL
// (docs/security.md#what-a-client-can-make-the-server-hold): at most 10,
// each URL at most 2,048 bytes and at most 32 event names, each a known
// type; past any of them createWebhook is BAD_USER_INPUT and stores
// nothing, and deleting one makes room.
func TestWebhookBoundsOverGraphQL(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *btk.Config) { c.WebhookAllowPrivate = true })
	owner := e.admin()
	const create = `mutation($u:String!,$e:[String!]){createWebhook(input:{url:$u,events:$e}){webhook{id}}}`
	base := "https://hooks.example.com/"
	events := make([]string, btk.MaxWebhookEvents+1)
	for i := range events {
		events[i] = "api_key.e" + strings.Repeat("x", i) // distinct names; no digits in an event name
	}
	for what, vars := range map[string]map[string]any{
		"a URL of 2,049 bytes": {"u": base + strings.Repeat("x", btk.MaxWebhookURLLen+1-len(base))},
		"33 events":            {"u": base, "e": events},
		"an event of 65 bytes": {"u": base, "e": []string{"api_key." + strings.Repeat("x", 57)}},
	} {
		if r := e.do(owner, create, vars); r.Code() != "BAD_USER_INPUT" {
			t.Errorf("%s: %q %+v", what, r.Code(), r.Errors)
		}
	}
	var ids []string
	for i := range btk.MaxWebhooksPerWorkspace {
		vars := map[string]any{"u": base + strings.Repeat("x", btk.MaxWebhookURLLen-len(base)), "e": btk.WebhookEventTypes()}
		if i > 0 {
			vars = map[string]any{"u": base + strconv.Itoa(i)}
		}
		var out struct {
			CreateWebhook struct{ Webhook struct{ ID string } }
		}
		e.must(owner, create, vars, &out)
		ids = append(ids, out.CreateWebhook.Webhook.ID)
	}
	r := e.do(owner, create, map[string]any{"u": base + "one-more"})
	if r.Code() != "BAD_USER_INPUT" || !strings.Contains(r.Errors[0].Message, "at most 10 webhooks") {
		t.Fatalf("an eleventh webhook: %q %+v", r.Code(), r.Errors)
	}
	var list struct{ Webhooks []struct{ ID string } }
	e.must(owner, `{webhooks{id}}`, nil, &list)
	if len(list.Webhooks) != btk.MaxWebhooksPerWorkspace {
		t.Fatalf("%d webhooks stored", len(list.Webhooks))
	}
	e.must(owner, `mutation($id:ID!){deleteWebhook(id:$id)}`, map[string]any{"id": ids[0]}, &struct{}{})
	e.must(owner, create, map[string]any{"u": base + "room-again"}, &struct{}{})
}
