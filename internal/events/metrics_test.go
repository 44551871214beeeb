package events_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/events"
)

// docs/webhooks.md#metrics: deliveries by result, outbox depth and the
// oldest undelivered age, with no workspace, webhook or URL in any label.
func TestMetrics(t *testing.T) {
	h := newHarness(t, newSQLite(t), btk.Config{WebhookAllowPrivate: true})
	ok, down := newReceiver(t), newReceiver(t)
	down.status.Store(500)
	for _, r := range []*receiver{ok, down} {
		if _, err := h.svc.CreateWebhook(ctx, h.owner, r.srv.URL+"/secret-path?token=abc", nil); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	runWorker(t, h.svc, events.Config{AllowPrivate: true, Registerer: reg})
	if _, err := h.svc.CreateKey(ctx, h.owner, btk.CreateKeyInput{Name: "k"}); err != nil {
		t.Fatal(err)
	}
	values := func() map[string]float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]float64{}
		for _, mf := range mfs {
			for _, m := range mf.Metric {
				name := mf.GetName()
				for _, l := range m.Label {
					if l.GetName() != "result" {
						t.Errorf("%s has label %s", name, l.GetName())
					}
					if strings.Contains(l.GetValue(), "127.0.0.1") || strings.Contains(l.GetValue(), h.owner.WorkspaceID) {
						t.Errorf("%s label %s=%s", name, l.GetName(), l.GetValue())
					}
					name += "{" + l.GetValue() + "}"
				}
				switch {
				case m.Counter != nil:
					out[name] = m.Counter.GetValue()
				case m.Gauge != nil:
					out[name] = m.Gauge.GetValue()
				}
			}
		}
		return out
	}
	// 2 webhook.created events and 1 api_key.created, to each of 2 webhooks
	// (the first webhook.created reached only the first one).
	waitFor(t, "the deliveries", func() bool {
		v := values()
		return v["btk_webhook_deliveries_total{delivered}"] == 3 && v["btk_webhook_deliveries_total{retry}"] >= 2
	})
	// The gauges are read from the database every few seconds.
	waitFor(t, "the outbox gauges", func() bool {
		v := values()
		return v["btk_webhook_outbox_depth"] == 2 && v["btk_webhook_outbox_oldest_seconds"] > 0
	})
	v := values()
	for _, name := range []string{"btk_webhook_outbox_depth", "btk_webhook_outbox_oldest_seconds",
		"btk_webhook_backlogs_full", "btk_webhook_events_skipped",
		"btk_webhook_deliveries_total{failed}", "btk_webhook_deliveries_total{error}"} {
		if _, ok := v[name]; !ok {
			t.Errorf("no %s in %v", name, v)
		}
	}
}
