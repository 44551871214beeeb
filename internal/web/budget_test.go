package web_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/btk-project/btk/internal/btk"
)

// The dashboard's create, rotate and webhook forms show the workspace's
// change budget refusal (docs/security.md#what-a-client-can-make-the-server-hold)
// with when to try again, keep what was typed, and issue nothing; revoking
// is never refused.
func TestDashboardShowsChangeBudgetRefusal(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.clock.Freeze()
	ctx := context.Background()
	owner := e.owner()
	kept, err := e.svc.CreateKey(ctx, owner, btk.CreateKeyInput{Name: "kept"})
	if err != nil {
		t.Fatal(err)
	}
	b := e.browser()
	b.login(ownerEmail, ownerPassword)
	for i := 0; ; i++ { // the minute's budget, spent elsewhere (a script)
		_, err := e.svc.CreateKey(ctx, owner, btk.CreateKeyInput{Name: fmt.Sprintf("batch %d", i)})
		if btk.ErrorCode(err) == btk.CodeRateLimited {
			break
		}
		if err != nil || i > btk.DefaultChangeBudget.PerMinute {
			t.Fatalf("create %d: %v", i, err)
		}
	}
	const told = "Too many changes in this workspace (revoking keys is never refused); try again in 1s."
	r := b.post("/keys", url.Values{"name": {"one more"}})
	if r.Status != http.StatusTooManyRequests || !strings.Contains(r.Body, told) || newKey(r.Body) != "" ||
		!strings.Contains(r.Body, `value="one more"`) {
		t.Errorf("create form over the budget: %d\n%s", r.Status, r.Body)
	}
	r = b.post("/keys/"+kept.Key.ID+"/rotate", url.Values{"password": {ownerPassword}})
	if r.Status != http.StatusTooManyRequests || !strings.Contains(r.Body, told) || newKey(r.Body) != "" {
		t.Errorf("rotate form over the budget: %d\n%s", r.Status, r.Body)
	}
	r = b.post("/webhooks", url.Values{"url": {"https://93.184.215.14/hook"}})
	if r.Status != http.StatusTooManyRequests || !strings.Contains(r.Body, told) {
		t.Errorf("webhook form over the budget: %d\n%s", r.Status, r.Body)
	}
	if k, err := e.svc.Key(ctx, owner, kept.Key.ID); err != nil || k.RevokedAt != nil {
		t.Fatalf("the key after a refused rotation: %+v %v", k, err)
	}
	if r := b.post("/keys/"+kept.Key.ID+"/revoke", nil); r.Status != http.StatusSeeOther {
		t.Errorf("revoke over the budget: %d\n%s", r.Status, r.Body)
	}
}
