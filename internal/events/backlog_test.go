package events_test

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/events"
)

// The attack (docs/webhooks.md#the-backlog-bound): an owner's flood of
// events to a webhook whose receiver does not keep up queued 12,000–15,000
// deliveries in 25 s, retried for a day. A webhook's backlog now holds at
// most btk.MaxPendingPerWebhook deliveries; the events beyond it are
// counted, not queued, and nothing promised is lost: the receiver, back,
// gets every queued event, then a webhook.events_skipped notice whose
// range of the audit log holds every event it did not get.
func TestBacklogBoundedAndRecoverable(t *testing.T) {
	const bound, extra = btk.MaxPendingPerWebhook, 5
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			store := e.open(t)
			h := newHarness(t, store, btk.Config{WebhookAllowPrivate: true})
			rcv := newReceiver(t)
			before := map[string]bool{} // the bootstrap's events
			for _, ev := range auditEvents(t, h, btk.AuditFilter{}) {
				before[ev.ID] = true
			}
			hook, err := h.svc.CreateWebhook(ctx, h.owner, rcv.srv.URL, nil) // its webhook.created is queued
			if err != nil {
				t.Fatal(err)
			}
			// The flood, written as the service writes events, fills the
			// backlog; then more through the service.
			err = store.Write(ctx, func(tx btk.Tx) error {
				for i := range bound - 1 {
					if err := tx.AddAuditEvent(ctx, &btk.AuditEvent{ID: uuid.NewString(), WorkspaceID: h.owner.WorkspaceID,
						Action: "api_key.updated", ActorID: h.owner.AccountID, ActorEmail: h.owner.Email, TargetType: "api_key",
						Metadata: `{"i":` + strconv.Itoa(i) + `}`, CreatedAt: h.clock.now()}); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			for i := range extra {
				if _, err := h.svc.CreateKey(ctx, h.owner, btk.CreateKeyInput{Name: "k" + strconv.Itoa(i)}); err != nil {
					t.Fatal(err)
				}
			}
			st, err := h.svc.OutboxStats(ctx)
			if err != nil || st.Pending != bound || st.Full != 1 || st.Skipped != extra {
				t.Fatalf("after the flood: outbox %+v (%v), want %d pending, 1 full, %d skipped", st, err, bound, extra)
			}

			runWorker(t, h.svc, events.Config{AllowPrivate: true})
			waitFor(t, "the backlog and the notice delivered", func() bool { return pending(t, h.svc) == 0 })

			got := map[string]bool{}
			var notice *btk.SkippedEventsJS
			for _, r := range rcv.requests() {
				if !verify(hook.Secret, r) {
					t.Fatalf("request %s does not verify", r.id)
				}
				if got[r.id] {
					t.Errorf("%s arrived twice", r.id)
				}
				got[r.id] = true
				var body struct {
					Type string          `json:"type"`
					Data json.RawMessage `json:"data"`
				}
				if err := json.Unmarshal(r.body, &body); err != nil {
					t.Fatal(err)
				}
				if body.Type == btk.NoticeEventsSkipped {
					if notice != nil {
						t.Fatal("two notices")
					}
					notice = &btk.SkippedEventsJS{}
					if err := json.Unmarshal(body.Data, notice); err != nil {
						t.Fatal(err)
					}
					delete(got, r.id)
				}
			}
			if len(got) != bound || notice == nil || notice.Count != extra || notice.WebhookID != hook.Webhook.ID {
				t.Fatalf("the receiver got %d events and the notice %+v; want %d and a notice of %d", len(got), notice, bound, extra)
			}
			// The receiver recovers: the audit log's range in the notice
			// holds every event of the workspace it did not get.
			since, err1 := time.Parse(time.RFC3339Nano, notice.Since)
			until, err2 := time.Parse(time.RFC3339Nano, notice.Until)
			if err1 != nil || err2 != nil {
				t.Fatalf("notice range %q %q", notice.Since, notice.Until)
			}
			inRange := map[string]bool{}
			for _, ev := range auditEvents(t, h, btk.AuditFilter{Since: &since, Until: &until}) {
				inRange[ev.ID] = true
			}
			missed := 0
			for _, ev := range auditEvents(t, h, btk.AuditFilter{}) {
				if before[ev.ID] || got["msg_"+ev.ID] {
					continue
				}
				missed++
				if !inRange[ev.ID] {
					t.Errorf("event %s (%s) was neither delivered nor in the notice's range", ev.ID, ev.Action)
				}
			}
			if missed != extra {
				t.Errorf("%d events not delivered, want %d", missed, extra)
			}
			// The delivery log shows the notice.
			ds, _, err := h.svc.WebhookDeliveries(ctx, h.owner, hook.Webhook.ID, btk.Page{First: 1})
			if err != nil || len(ds) != 1 || ds[0].EventType != btk.NoticeEventsSkipped || ds[0].Status != btk.DeliveryDelivered {
				t.Errorf("the newest delivery %+v (%v), want the notice, delivered", ds, err)
			}
			// Room again: the next event is queued and delivered.
			if _, err := h.svc.CreateKey(ctx, h.owner, btk.CreateKeyInput{Name: "after"}); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the next event", func() bool { return len(rcv.requests()) == bound+2 })
		})
	}
}

// auditEvents pages through the workspace's audit events matching f.
func auditEvents(t *testing.T, h *harness, f btk.AuditFilter) []*btk.AuditEvent {
	t.Helper()
	var out []*btk.AuditEvent
	f.Page = btk.Page{First: btk.MaxPageSize}
	for {
		evs, next, err := h.svc.AuditEvents(ctx, h.owner, f)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, evs...)
		if next == "" {
			return out
		}
		f.After = next
	}
}
