package btk_test

import (
	"context"
	"strings"
	"testing"

	"github.com/btk-project/btk/internal/btk"
)

// The events of leak response reach webhooks (docs/leaks.md): a canary's use
// and a leak report each queue one delivery to a subscribed webhook, whose
// payload holds no plaintext key.
func TestLeakEventsReachWebhooks(t *testing.T) {
	e := newLeakEnv(t, func(c *btk.Config) { c.WebhookAllowPrivate = true })
	ctx := context.Background()
	hook, err := e.svc.CreateWebhook(ctx, e.owner, "http://127.0.0.1:9/hook", []string{btk.EventCanaryUsed, btk.EventKeyLeaked})
	if err != nil {
		t.Fatal(err)
	}
	trap, _ := e.svc.CreateKey(ctx, e.owner, btk.CreateKeyInput{Name: "trap", Canary: true})
	leaky, _ := e.svc.CreateKey(ctx, e.owner, btk.CreateKeyInput{Name: "leaky"})
	_, _, err = e.svc.AuthenticateKey(ctx, trap.Plaintext)
	e.svc.RecordCanaryUse(ctx, err, "198.51.100.9", "curl/8.5", "/v1/x")
	if _, err := e.svc.ReportLeaks(ctx, btk.Reporter{KeyID: "github"}, []btk.LeakReport{{Token: leaky.Plaintext, URL: "u", Source: "content"}}); err != nil {
		t.Fatal(err)
	}
	ds, _, err := e.svc.WebhookDeliveries(ctx, e.owner, hook.Webhook.ID, btk.Page{First: 50})
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]int{}
	for _, d := range ds {
		types[d.EventType]++
		if strings.Contains(d.Payload, trap.Plaintext) || strings.Contains(d.Payload, leaky.Plaintext) {
			t.Errorf("a delivery holds a plaintext key: %s", d.Payload)
		}
	}
	if types[btk.EventCanaryUsed] != 1 || types[btk.EventKeyLeaked] != 1 || len(ds) != 2 {
		t.Errorf("deliveries: %v; want one api_key.canary_used and one api_key.leaked", types)
	}
}
