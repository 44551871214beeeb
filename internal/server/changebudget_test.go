package server_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
)

// budgetRefusal is the message of a change refused by the workspace's
// budget; its group is the wait it tells, in seconds.
var budgetRefusal = regexp.MustCompile(`^too many changes in this workspace \(revoking keys is never refused\); try again in ((\d+h)?(\d+m)?\d+s)$`)

// refusedWait returns the wait a budget refusal tells, failing the test
// when r is not one.
func refusedWait(t *testing.T, what string, r response) time.Duration {
	t.Helper()
	if r.Code() != "RATE_LIMITED" {
		t.Fatalf("%s with the budget spent: %q %+v, want RATE_LIMITED", what, r.Code(), r.Errors)
	}
	m := budgetRefusal.FindStringSubmatch(r.Errors[0].Message)
	if m == nil {
		t.Fatalf("%s refused with %q: it does not say when to try again", what, r.Errors[0].Message)
	}
	d, err := time.ParseDuration(m[1])
	if err != nil || d < time.Second || d%time.Second != 0 {
		t.Fatalf("%s: told to wait %q, not whole seconds", what, m[1])
	}
	return d
}

// createBatch sends operations of 10 createApiKey (the cap of one
// operation) to workspace ws until one is refused, and returns how many
// keys they created (counted in the store: an error in an operation nulls
// its whole answer) and the first refusal. It gives up after max keys.
func createBatch(t *testing.T, e *env, c cred, ws, prefix string, max int) (int, response) {
	t.Helper()
	start := countRows(t, e.db, ws, e.clock.Now()).keys
	for op := 0; ; op++ {
		created := int(countRows(t, e.db, ws, e.clock.Now()).keys - start)
		if created >= max {
			t.Fatalf("%d creates, none refused", created)
		}
		var q strings.Builder
		q.WriteString("mutation{")
		for i := range 10 {
			fmt.Fprintf(&q, `c%d:createApiKey(input:{name:"%s %d.%d"}){apiKey{id}} `, i, prefix, op, i)
		}
		q.WriteString("}")
		if r := e.do(c, q.String(), nil); len(r.Errors) > 0 {
			r.Errors = r.Errors[:1]
			return int(countRows(t, e.db, ws, e.clock.Now()).keys - start), r
		}
	}
}

// rowCounts are what a workspace's changes write: keys, key audit entries,
// audit_events (its chain) and queued webhook deliveries.
type rowCounts struct{ keys, keyAudit, events, pending int64 }

func countRows(t *testing.T, db btk.Store, ws string, now time.Time) rowCounts {
	t.Helper()
	ctx := context.Background()
	var c rowCounts
	err := db.Read(ctx, func(tx btk.Tx) error {
		for after := ""; ; {
			keys, next, err := tx.APIKeys(ctx, btk.KeyFilter{WorkspaceID: ws, IncludeRevoked: true, Page: btk.Page{First: btk.MaxPageSize, After: after}})
			if err != nil {
				return err
			}
			c.keys += int64(len(keys))
			if after = next; next == "" {
				break
			}
		}
		for after := ""; ; {
			entries, next, err := tx.AuditEntries(ctx, btk.AuditFilter{WorkspaceID: ws, Page: btk.Page{First: btk.MaxPageSize, After: after}})
			if err != nil {
				return err
			}
			c.keyAudit += int64(len(entries))
			if after = next; next == "" {
				break
			}
		}
		head, err := tx.AuditChainHead(ctx, ws)
		if err != nil {
			return err
		}
		c.events = head.Count
		out, err := tx.OutboxStats(ctx, now)
		c.pending = out.Pending
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A workspace's changes are budgeted (docs/security.md#what-a-client-can-make-the-server-hold):
// an OWNER rotating keys in a loop under one elevation wrote 878 rotations
// a second, three rows each that nothing deletes. 600 changes a minute
// (creates, rotations, updates, webhooks, roles, limits, policy), then
// RATE_LIMITED saying when to try again, and the budget refills at 10 a
// second. A refused change writes nothing; revocations, deleting a webhook
// and removing a member are never refused; a platform admin acting on the
// workspace from elsewhere is neither counted nor refused.
func TestWorkspaceChangesBudgeted(t *testing.T) {
	e := newEnv(t, func(c *btk.Config) { c.WebhookAllowPrivate = true })
	root := e.admin()
	ws := e.createWorkspace(root, "Busy", "CLOUD_PRO")
	const pw = "a long enough password"
	ownerID := e.createAccount(root, "owner@busy.example", pw, false)
	e.setMember(root, ws, ownerID, "OWNER") // a platform admin naming the workspace: not counted
	memberID := e.createAccount(root, "member@busy.example", pw, false)
	e.setMember(root, ws, memberID, "MEMBER")
	owner := cred{Bearer: e.login("owner@busy.example", pw, ws)}

	// A webhook (one change): a refused change must queue no delivery.
	var hook struct {
		CreateWebhook struct{ Webhook struct{ ID string } }
	}
	e.must(owner, `mutation{createWebhook(input:{url:"http://127.0.0.1:9/hook"}){webhook{id}}}`, nil, &hook)
	kept := e.createKey(owner, "kept")
	created, refused := createBatch(t, e, owner, ws, "batch", 1000)
	if created != btk.DefaultChangeBudget.PerMinute-2 {
		t.Fatalf("%d creates after 2 changes before the refusal; want %d (600 a minute)", created, btk.DefaultChangeBudget.PerMinute-2)
	}
	if wait := refusedWait(t, "the 601st change", refused); wait != time.Second {
		t.Errorf("told to wait %v; the budget takes one again every 100 ms", wait)
	}

	elevated := e.elevated(owner, pw) // writes session.elevated
	before := countRows(t, e.db, ws, e.clock.Now())
	for what, q := range map[string]string{
		"createApiKey":           `mutation{createApiKey(input:{name:"one more"}){apiKey{id}}}`,
		"rotateApiKey":           `mutation($id:ID!){rotateApiKey(id:$id){apiKey{id}}}`,
		"updateApiKey":           `mutation($id:ID!){updateApiKey(id:$id,input:{name:"renamed"}){id}}`,
		"createWebhook":          `mutation{createWebhook(input:{url:"http://127.0.0.1:9/other"}){webhook{id}}}`,
		"setWorkspaceRateLimits": `mutation($w:ID!){setWorkspaceRateLimits(workspaceId:$w,perMinute:10,perDay:100){id}}`,
		"setWorkspaceKeyPolicy":  `mutation($w:ID!){setWorkspaceKeyPolicy(workspaceId:$w,maxLifetimeDays:30){id}}`,
		"setMembership (a role)": `mutation($w:ID!,$m:ID!){setMembership(workspaceId:$w,accountId:$m,role:ADMIN)}`,
		"ten rotations":          `mutation($id:ID!){a:rotateApiKey(id:$id){apiKey{id}} b:rotateApiKey(id:$id){apiKey{id}} c:rotateApiKey(id:$id){apiKey{id}} d:rotateApiKey(id:$id){apiKey{id}} e:rotateApiKey(id:$id){apiKey{id}} f:rotateApiKey(id:$id){apiKey{id}} g:rotateApiKey(id:$id){apiKey{id}} h:rotateApiKey(id:$id){apiKey{id}} i:rotateApiKey(id:$id){apiKey{id}} j:rotateApiKey(id:$id){apiKey{id}}}`,
	} {
		vars := map[string]any{}
		for _, v := range []struct{ name, value string }{{"$id", kept.ID}, {"$w", ws}, {"$m", memberID}} {
			if strings.Contains(q, v.name+":") {
				vars[v.name[1:]] = v.value
			}
		}
		r := e.do(elevated, q, vars)
		refusedWait(t, what, r)
		if len(r.Errors) > 1 && len(r.Errors) != 10 {
			t.Errorf("%s: %d errors", what, len(r.Errors))
		}
	}
	if got := countRows(t, e.db, ws, e.clock.Now()); got != before {
		t.Fatalf("refused changes wrote rows: %+v, before %+v", got, before)
	}

	// The operator is never refused: impersonating, or naming the workspace.
	imp := cred{Bearer: e.impersonate(root, ws)}
	e.createKey(imp, "by the operator")
	e.must(root, `mutation($w:ID!){setWorkspaceRateLimits(workspaceId:$w,perMinute:100,perDay:1000){id}}`, map[string]any{"w": ws}, &struct{}{})

	// Taking away is never refused: revoke a key, delete the webhook,
	// remove a member, revoke all.
	e.must(owner, `mutation($id:ID!){revokeApiKey(id:$id){id}}`, map[string]any{"id": kept.ID}, &struct{}{})
	if e.probeStatus(kept.Plaintext) != 401 {
		t.Error("the revoked key still works")
	}
	e.must(owner, `mutation($id:ID!){deleteWebhook(id:$id)}`, map[string]any{"id": hook.CreateWebhook.Webhook.ID}, &struct{}{})
	e.must(owner, `mutation($w:ID!,$m:ID!){setMembership(workspaceId:$w,accountId:$m,role:null)}`, map[string]any{"w": ws, "m": memberID}, &struct{}{})
	var all struct{ RevokeAllApiKeys struct{ RevokedCount int } }
	e.must(owner, `mutation{revokeAllApiKeys{revokedCount}}`, nil, &all)
	if want := created + 1; all.RevokeAllApiKeys.RevokedCount != want {
		t.Errorf("revoke-all with the budget spent revoked %d; want %d", all.RevokeAllApiKeys.RevokedCount, want)
	}
	// One that revokes nothing, past the budget, writes nothing: an owner
	// repeating it would otherwise write an audit pair each time.
	before = countRows(t, e.db, ws, e.clock.Now())
	for range 3 {
		e.must(owner, `mutation{revokeAllApiKeys{revokedCount}}`, nil, &all)
		if all.RevokeAllApiKeys.RevokedCount != 0 {
			t.Fatalf("a second revoke-all revoked %d", all.RevokeAllApiKeys.RevokedCount)
		}
	}
	if got := countRows(t, e.db, ws, e.clock.Now()); got != before {
		t.Errorf("empty revoke-alls past the budget wrote rows: %+v, before %+v", got, before)
	}

	// Waiting as told is enough, and the budget refills at 10 a second.
	e.clock.Advance(time.Second)
	created, refused = createBatch(t, e, owner, ws, "later", 100)
	if created != 10 {
		t.Errorf("%d creates a second after the refusal; want 10", created)
	}
	refusedWait(t, "the 11th change of that second", refused)
	// With room again, an empty revoke-all is audited as before.
	e.clock.Advance(time.Minute)
	e.must(owner, `mutation{revokeAllApiKeys{revokedCount}}`, nil, &all)
	before = countRows(t, e.db, ws, e.clock.Now())
	e.must(owner, `mutation{revokeAllApiKeys{revokedCount}}`, nil, &all)
	if got := countRows(t, e.db, ws, e.clock.Now()); got.keyAudit != before.keyAudit+1 || got.events != before.events+1 {
		t.Errorf("an empty revoke-all within the budget: %+v, before %+v; want its audit pair", got, before)
	}
}

// The budget is the workspace's on every instance (Redis): changes on A
// spend what B allows, B's refusal says when, and after that wait B
// accepts; the day's budget is shared too. A budget of the test's own
// (btk.Config.ChangeBudget) keeps the run short.
func TestWorkspaceChangesBudgetSharedAcrossInstances(t *testing.T) {
	small := func(c *btk.Config) { c.ChangeBudget.PerMinute, c.ChangeBudget.PerDay = 5, 8 }
	ea, eb := twoInstances(t, func(db btk.Store) btk.Store { return db }, small)
	root := ea.admin()
	ws := ea.createWorkspace(root, "Shared", "CLOUD_PRO")
	const pw = "a long enough password"
	id := ea.createAccount(root, "owner@shared.example", pw, false)
	ea.setMember(root, ws, id, "OWNER")
	onA := cred{Bearer: ea.login("owner@shared.example", pw, ws)}
	onB := cred{Bearer: eb.login("owner@shared.example", pw, ws)}

	k := ea.createKey(onA, "k")
	for i := range 4 {
		updateKey(t, ea, onA, k.ID, fmt.Sprintf(`name:"k%d"`, i)).decode(t, &struct{}{})
	}
	wait := refusedWait(t, "a create on B after 5 changes on A", eb.do(onB, `mutation{createApiKey(input:{name:"b"}){apiKey{id}}}`, nil))
	if wait != 12*time.Second {
		t.Errorf("B says to wait %v; 5 a minute takes one again every 12 s", wait)
	}
	// Revoking on B is never refused.
	eb.must(onB, `mutation($id:ID!){revokeApiKey(id:$id){id}}`, map[string]any{"id": k.ID}, &struct{}{})
	ea.clock.Advance(wait)
	eb.createKey(onB, "b")
	refusedWait(t, "a create on A after B took the one refilled", ea.do(onA, `mutation{createApiKey(input:{name:"a"}){apiKey{id}}}`, nil))
	// A minute later the minute's budget is full, the day's (8) has 2 left.
	ea.clock.Advance(time.Minute)
	ea.createKey(onA, "a")
	eb.createKey(onB, "b2")
	wait = refusedWait(t, "a change past the day's budget", eb.do(onB, `mutation{createApiKey(input:{name:"b3"}){apiKey{id}}}`, nil))
	if wait < time.Hour || wait > 3*time.Hour {
		t.Errorf("past 8 a day, told to wait %v; the day's budget takes one again every 3 h", wait)
	}
}
