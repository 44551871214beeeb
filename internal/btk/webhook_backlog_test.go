package btk_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
)

// QueueEvent's decisions on a webhook's backlog
// (docs/webhooks.md#the-backlog-bound): below the bound the event is queued
// and counted; at it, the event is counted as skipped (the range and ids
// kept, the oldest and newest by time); a webhook that does not want the
// event is untouched; and when events were skipped and there is room (the
// recorder queues the notice as soon as there is, so an event finds this
// only after a race on the room), the notice is queued before the event.
func TestQueueEventBacklog(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	ev := func(id string, at time.Time) *btk.AuditEvent {
		return &btk.AuditEvent{ID: id, WorkspaceID: "ws", Action: "api_key.updated", TargetType: "api_key", Metadata: "{}", CreatedAt: at}
	}
	full := &btk.Webhook{ID: "full", WorkspaceID: "ws", Pending: btk.MaxPendingPerWebhook}
	room := &btk.Webhook{ID: "room", WorkspaceID: "ws", Pending: 3}
	deaf := &btk.Webhook{ID: "deaf", WorkspaceID: "ws", Events: []string{"api_key.revoked"}}
	hooks := []*btk.Webhook{full, room, deaf}
	for i, at := range []time.Time{t0.Add(time.Second), t0, t0.Add(2 * time.Second)} {
		ds, changed, err := btk.QueueEvent(ev(string(rune('a'+i)), at), hooks)
		if err != nil || len(ds) != 1 || ds[0].WebhookID != "room" || len(changed) != 2 || changed[0] != full || changed[1] != room {
			t.Fatalf("event %d: %d deliveries, %d changed, %v", i, len(ds), len(changed), err)
		}
	}
	if full.Pending != btk.MaxPendingPerWebhook || full.Skipped != 3 || full.SkippedTotal != 3 || !full.SkippedSince.Equal(t0) ||
		!full.SkippedUntil.Equal(t0.Add(2*time.Second)) || full.SkippedFirst != "a" || full.SkippedLast != "c" {
		t.Fatalf("full webhook %+v", full)
	}
	if room.Pending != 6 || room.Skipped != 0 || deaf.Pending != 0 {
		t.Fatalf("pending %d and %d", room.Pending, deaf.Pending)
	}
	// Room again, the notice not yet queued: it goes first, then the event.
	full.Pending--
	ds, _, err := btk.QueueEvent(ev("d", t0.Add(3*time.Second)), []*btk.Webhook{full})
	if err != nil || len(ds) != 1 || ds[0].EventType != btk.NoticeEventsSkipped {
		t.Fatalf("with room for one: %d deliveries %v", len(ds), err)
	}
	if full.Pending != btk.MaxPendingPerWebhook || full.Skipped != 1 || full.SkippedFirst != "d" || full.SkippedTotal != 4 {
		t.Fatalf("after the notice: %+v", full)
	}
	var body struct {
		Type string              `json:"type"`
		Data btk.SkippedEventsJS `json:"data"`
	}
	if err := json.Unmarshal([]byte(ds[0].Payload), &body); err != nil {
		t.Fatal(err)
	}
	want := btk.SkippedEventsJS{WebhookID: "full", WorkspaceID: "ws", Count: 3, Since: "2026-01-02T03:04:05.000000006Z",
		Until: "2026-01-02T03:04:07.000000007Z", FirstEventID: "a", LastEventID: "c"}
	if body.Type != btk.NoticeEventsSkipped || body.Data != want || ds[0].EventID != "msg_"+ds[0].ID {
		t.Fatalf("notice %s, want %+v", ds[0].Payload, want)
	}
	// No notice without room, nor without skipped events.
	if d, err := btk.SkippedNotice(full, t0); d != nil || err != nil {
		t.Fatalf("a notice without room: %v %v", d, err)
	}
	if d, err := btk.SkippedNotice(room, t0); d != nil || err != nil {
		t.Fatalf("a notice without skipped events: %v %v", d, err)
	}
}
