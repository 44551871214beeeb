package graphql

import (
	"time"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/graphql/graph"
)

// Converters of the event stream (docs/webhooks.md).

func webhook(w *btk.Webhook) *graph.Webhook {
	events := w.Events
	if events == nil {
		events = []string{}
	}
	return &graph.Webhook{ID: w.ID, URL: w.URL, Events: events, CreatedAt: w.CreatedAt}
}

func webhookDelivery(d *btk.WebhookDelivery) *graph.WebhookDelivery {
	out := &graph.WebhookDelivery{
		ID: d.ID, WebhookID: d.WebhookID, EventID: d.EventID, EventType: d.EventType,
		Status: d.Status, Attempts: d.Attempts, LastError: optString(d.LastError),
		CreatedAt: d.CreatedAt, DeliveredAt: d.DeliveredAt,
	}
	if d.LastStatusCode != 0 {
		code := d.LastStatusCode
		out.LastStatusCode = &code
	}
	if d.Status == btk.DeliveryPending {
		next := d.NextAttemptAt
		out.NextAttemptAt = &next
	}
	return out
}

func auditHead(h btk.AuditHead) *graph.AuditHead {
	var at *time.Time
	if h.At != nil {
		t := h.At.UTC()
		at = &t
	}
	return &graph.AuditHead{Hash: h.Hash, Count: int(h.Count), At: at}
}

func auditVerification(v *btk.ChainVerification) *graph.AuditVerification {
	out := &graph.AuditVerification{WorkspaceID: optString(v.Chain), Intact: v.Intact, Count: int(v.Count), Head: auditHead(v.Head)}
	if p := v.Problem; p != nil {
		out.Problem = &graph.AuditChainProblem{EventID: optString(p.EventID), Position: int(p.Seq), Reason: p.Reason}
	}
	return out
}
