package web

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/btk-project/btk/internal/btk"
)

// The Webhooks page (docs/webhooks.md): owner tier adds, reads recent
// deliveries, and deletes. A new webhook's signing secret is shown once, on
// the page that answers the form (never in a URL; every page is no-store).

// recentDeliveries is how many deliveries the page shows per webhook.
const recentDeliveries = 10

type webhooksPage struct {
	layout
	Forbidden bool
	Hooks     []webhookRow
	Form      webhookForm
	// NewSecret is the signing secret of the webhook just created.
	NewSecret *shownOnce
	Notice    string
	Max       int
}

// newSecret shows the signing secret of a webhook just created.
func newSecret(res *btk.CreateWebhookResult) *shownOnce {
	return &shownOnce{
		ID:      "new-secret",
		Title:   "Webhook added for " + res.Webhook.URL,
		Warning: "Copy the signing secret now.",
		Why:     "This is the only time it is shown. Your receiver verifies every request with it.",
		Secret:  res.Secret,
		Done:    "/webhooks",
	}
}

type webhookForm struct{ URL, Events, Error string }

type webhookRow struct {
	ID, URL, Events string
	Created         timeValue
	Deliveries      []deliveryRow
	// The backlog (docs/webhooks.md#the-backlog-bound): Full when it is at
	// its bound; Skipped events not queued since the last notice, the
	// oldest at SkippedSince.
	Full         bool
	Max          int
	Skipped      int64
	SkippedSince *timeValue
}

type deliveryRow struct {
	EventType, Status, EventID, Code, Error string
	Badge                                   string // the badge colour: active (delivered), expired (pending), revoked (failed)
	Attempts                                int
	Created                                 timeValue
	Next                                    *timeValue
}

func (h *Handler) webhooksPage(w http.ResponseWriter, r *http.Request, a *btk.Actor) (*webhooksPage, bool) {
	l, ok := h.frame(w, r, a, "Webhooks", "webhooks")
	if !ok {
		return nil, false
	}
	p := &webhooksPage{layout: *l, Max: btk.MaxWebhooksPerWorkspace}
	hooks, err := h.svc.Webhooks(r.Context(), a)
	if p.Forbidden, ok = h.readOutcome(w, r, l, err); !ok {
		return nil, false
	}
	now := h.svc.Now()
	for _, wh := range hooks {
		row := webhookRow{ID: wh.ID, URL: wh.URL, Events: "every event", Created: newTime(wh.CreatedAt, now),
			Full: wh.Pending >= btk.MaxPendingPerWebhook, Max: btk.MaxPendingPerWebhook, Skipped: wh.Skipped}
		if wh.Skipped > 0 {
			row.SkippedSince = optTime(&wh.SkippedSince, now)
		}
		if len(wh.Events) > 0 {
			row.Events = strings.Join(wh.Events, ", ")
		}
		ds, _, err := h.svc.WebhookDeliveries(r.Context(), a, wh.ID, btk.Page{First: recentDeliveries})
		if err != nil {
			h.fail(w, r, l, err)
			return nil, false
		}
		for _, d := range ds {
			dr := deliveryRow{EventType: d.EventType, Status: string(d.Status), EventID: d.EventID, Error: d.LastError,
				Attempts: d.Attempts, Created: newTime(d.CreatedAt, now), Badge: "expired"}
			switch d.Status {
			case btk.DeliveryDelivered:
				dr.Badge = "active"
			case btk.DeliveryFailed:
				dr.Badge = "revoked"
			}
			if d.LastStatusCode != 0 {
				dr.Code = strings.TrimSpace(strconv.Itoa(d.LastStatusCode) + " " + http.StatusText(d.LastStatusCode))
			}
			if d.Status == btk.DeliveryPending {
				dr.Next = optTime(&d.NextAttemptAt, now)
			}
			row.Deliveries = append(row.Deliveries, dr)
		}
		p.Hooks = append(p.Hooks, row)
	}
	return p, true
}

func (h *Handler) webhooks(w http.ResponseWriter, r *http.Request, a *btk.Actor) {
	p, ok := h.webhooksPage(w, r, a)
	if !ok {
		return
	}
	if r.URL.Query().Get("deleted") == "1" {
		p.Notice = "The webhook was deleted; its pending deliveries were dropped."
	}
	h.render(w, r, "webhooks", http.StatusOK, p)
}

func (h *Handler) createWebhook(w http.ResponseWriter, r *http.Request, a *btk.Actor) {
	if !h.parseForm(w, r) {
		return
	}
	f := webhookForm{URL: strings.TrimSpace(r.PostForm.Get("url")), Events: r.PostForm.Get("events")}
	events := strings.FieldsFunc(f.Events, func(c rune) bool { return c == ',' || c == ' ' || c == '\n' || c == '\r' || c == '\t' })
	res, err := h.svc.CreateWebhook(r.Context(), a, f.URL, events)
	p, status, ok := answerForm(h, w, r, a, err, &f.Error, h.webhooksPage)
	if !ok {
		return
	}
	if res != nil {
		p.NewSecret = newSecret(res)
	} else {
		p.Form = f
	}
	h.render(w, r, "webhooks", status, p)
}

func (h *Handler) deleteWebhook(w http.ResponseWriter, r *http.Request, a *btk.Actor) {
	if err := h.svc.DeleteWebhook(r.Context(), a, r.PathValue("id")); err != nil {
		h.fail(w, r, nil, err)
		return
	}
	http.Redirect(w, r, "/webhooks?deleted=1", http.StatusSeeOther)
}
