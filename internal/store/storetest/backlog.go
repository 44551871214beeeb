package storetest

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/btk-project/btk/internal/btk"
)

// The backlog bound (docs/webhooks.md#the-backlog-bound).

// addEvents writes n audit events of the workspace in one transaction, the
// i-th at at(i), and returns them.
func addEvents(t testing.TB, db btk.Store, wsID, action string, at func(int) time.Time, from, n int) []*btk.AuditEvent {
	t.Helper()
	evs := make([]*btk.AuditEvent, n)
	write(t, db, func(tx btk.Tx) error {
		for i := range evs {
			evs[i] = &btk.AuditEvent{WorkspaceID: wsID, Action: action, ActorEmail: "a@example.com", TargetType: "api_key",
				TargetID: uuid.NewString(), Metadata: `{}`, CreatedAt: at(from + i)}
			if err := tx.AddAuditEvent(ctx, evs[i]); err != nil {
				return err
			}
		}
		return nil
	})
	return evs
}

// webhookState reads a webhook back.
func webhookState(t testing.TB, db btk.Store, id string) *btk.Webhook {
	t.Helper()
	var w *btk.Webhook
	read(t, db, func(tx btk.Tx) (err error) { w, err = tx.Webhook(ctx, id); return err })
	return w
}

// allDeliveries pages through every delivery of a webhook, newest first.
func allDeliveries(t testing.TB, db btk.Store, webhookID string) []*btk.WebhookDelivery {
	t.Helper()
	var out []*btk.WebhookDelivery
	read(t, db, func(tx btk.Tx) error {
		after := ""
		for {
			ds, next, err := tx.WebhookDeliveries(ctx, btk.DeliveryFilter{WebhookID: webhookID, Page: btk.Page{First: btk.MaxPageSize, After: after}})
			if err != nil {
				return err
			}
			out = append(out, ds...)
			if next == "" {
				return nil
			}
			after = next
		}
	})
	return out
}

// pendingOf counts a webhook's PENDING deliveries row by row.
func pendingOf(t testing.TB, db btk.Store, webhookID string) int64 {
	t.Helper()
	var n int64
	for _, d := range allDeliveries(t, db, webhookID) {
		if d.Status == btk.DeliveryPending {
			n++
		}
	}
	return n
}

// A webhook's backlog holds at most MaxPendingPerWebhook deliveries; an
// event beyond it is not queued for that webhook (other webhooks, with room,
// still get it) but counted on it, with the range of the skipped events'
// times and their first and last ids. The audit log keeps every event,
// its chain intact. As soon as deliveries leave the backlog, a
// webhook.events_skipped notice takes a place, naming the range, whose
// audit events hold every skipped one; then events are queued again, and
// the next full backlog starts a new count. An attack queued 12,000–15,000
// deliveries in 25 s, retried for a day, and every claim read them all.
func testWebhookBacklogBounded(t *testing.T, db btk.Store, ws *btk.Workspace) {
	const bound = btk.MaxPendingPerWebhook
	other := newWorkspace(t, db)
	every, revokes := newWebhook(t, db, ws), newWebhook(t, db, ws, "api_key.revoked")
	otherHook := newWebhook(t, db, other)
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Millisecond) }

	addEvents(t, db, ws.ID, "api_key.created", at, 0, bound)
	if w := webhookState(t, db, every.ID); w.Pending != bound || w.Skipped != 0 || w.SkippedTotal != 0 {
		t.Fatalf("after %d events: pending %d, skipped %d", bound, w.Pending, w.Skipped)
	}
	skipped := addEvents(t, db, ws.ID, "api_key.created", at, bound, 3)
	skipped = append(skipped, addEvents(t, db, ws.ID, "api_key.revoked", at, bound+3, 1)...)
	addEvents(t, db, other.ID, "api_key.revoked", at, bound+3, 1)

	w := webhookState(t, db, every.ID)
	if w.Pending != bound || w.Skipped != 4 || w.SkippedTotal != 4 || !w.SkippedSince.Equal(at(bound)) ||
		!w.SkippedUntil.Equal(at(bound+3)) || w.SkippedFirst != skipped[0].ID || w.SkippedLast != skipped[3].ID {
		t.Fatalf("full backlog: pending %d, skipped %d (total %d) from %v to %v, first %s last %s; want %d, 4 from %v to %v",
			w.Pending, w.Skipped, w.SkippedTotal, w.SkippedSince, w.SkippedUntil, w.SkippedFirst, w.SkippedLast, bound, at(bound), at(bound+3))
	}
	if n := pendingOf(t, db, every.ID); n != bound {
		t.Fatalf("%d deliveries of the full webhook, want %d", n, bound)
	}
	// The bound is a webhook's: the others got the revocation.
	for _, h := range []*btk.Webhook{revokes, otherHook} {
		if w := webhookState(t, db, h.ID); w.Pending != 1 || w.Skipped != 0 || pendingOf(t, db, h.ID) != 1 {
			t.Errorf("another webhook: pending %d, skipped %d", w.Pending, w.Skipped)
		}
	}
	// The audit log has every event.
	if n := checkChain(t, db, ws.ID); n != bound+4 {
		t.Errorf("the chain has %d rows, want %d", n, bound+4)
	}
	var st btk.OutboxStats
	read(t, db, func(tx btk.Tx) (err error) { st, err = tx.OutboxStats(ctx, t0); return err })
	if st.Pending != bound+2 || st.Full != 1 || st.Skipped != 4 || st.OldestPending == nil || !st.OldestPending.Equal(t0) {
		t.Errorf("outbox stats %+v, want %d pending, 1 full, 4 skipped", st, bound+2)
	}

	// Two deliveries delivered, one retried: the notice takes one of the
	// two places at once.
	var mine []*btk.WebhookDelivery
	for _, d := range claimCaps(t, db, at(bound+10), "c", 10, btk.DeliveryCaps{}) {
		if d.WebhookID == every.ID && len(mine) < 3 {
			mine = append(mine, d)
		}
	}
	if len(mine) != 3 {
		t.Fatalf("claimed %d of the full webhook's deliveries, want 3", len(mine))
	}
	end := at(bound + 11)
	write(t, db, func(tx btk.Tx) error {
		freed := 0
		for i, d := range mine {
			d.Attempts = 1
			if i < 2 {
				d.Status, d.DeliveredAt = btk.DeliveryDelivered, &end
			} else {
				d.NextAttemptAt = end.Add(time.Minute)
			}
			done, err := tx.FinishWebhookDelivery(ctx, d, "c")
			if err != nil {
				return err
			}
			if done {
				freed++
			}
		}
		if freed != 2 {
			t.Errorf("%d deliveries left the backlog, want 2", freed)
		}
		return tx.RecordWebhookOutcome(ctx, btk.WebhookOutcome{WebhookID: every.ID, AttemptedAt: end, OK: true, Finished: freed, Now: end})
	})
	w = webhookState(t, db, every.ID)
	if w.Pending != bound-1 || w.Skipped != 0 || w.SkippedTotal != 4 || !w.SkippedSince.IsZero() || w.SkippedFirst != "" {
		t.Fatalf("after two deliveries: pending %d, skipped %d (total %d) since %v", w.Pending, w.Skipped, w.SkippedTotal, w.SkippedSince)
	}
	ds := allDeliveries(t, db, every.ID)
	notice := ds[0]
	if len(ds) != bound+1 || notice.EventType != btk.NoticeEventsSkipped || notice.Status != btk.DeliveryPending ||
		!notice.NextAttemptAt.Equal(end) || notice.EventID != "msg_"+notice.ID {
		t.Fatalf("%d deliveries, the newest %+v; want %d and the notice", len(ds), notice, bound+1)
	}
	var body struct {
		Type string              `json:"type"`
		Data btk.SkippedEventsJS `json:"data"`
	}
	if err := json.Unmarshal([]byte(notice.Payload), &body); err != nil {
		t.Fatal(err)
	}
	since, err1 := time.Parse(time.RFC3339Nano, body.Data.Since)
	until, err2 := time.Parse(time.RFC3339Nano, body.Data.Until)
	if body.Type != btk.NoticeEventsSkipped || body.Data.Count != 4 || body.Data.WebhookID != every.ID || body.Data.WorkspaceID != ws.ID ||
		err1 != nil || err2 != nil || !since.Equal(at(bound)) || !until.Equal(at(bound+3).Add(time.Nanosecond)) ||
		body.Data.FirstEventID != skipped[0].ID || body.Data.LastEventID != skipped[3].ID {
		t.Fatalf("notice %s", notice.Payload)
	}
	// A receiver reads the skipped events from the audit log with the
	// notice's range.
	var found map[string]bool
	read(t, db, func(tx btk.Tx) error {
		evs, _, err := tx.AuditEvents(ctx, btk.AuditFilter{WorkspaceID: ws.ID, Since: &since, Until: &until, Page: btk.Page{First: 100}})
		found = map[string]bool{}
		for _, ev := range evs {
			found[ev.ID] = true
		}
		return err
	})
	for _, ev := range skipped {
		if !found[ev.ID] {
			t.Errorf("skipped event %s is not in the audit log's range %s – %s", ev.ID, body.Data.Since, body.Data.Until)
		}
	}

	// Events are queued again while there is room; the next full backlog
	// starts a new count.
	again := addEvents(t, db, ws.ID, "api_key.created", at, bound+20, 2)
	w = webhookState(t, db, every.ID)
	if w.Pending != bound || w.Skipped != 1 || w.SkippedTotal != 5 || w.SkippedFirst != again[1].ID || !w.SkippedSince.Equal(at(bound+21)) {
		t.Fatalf("two more events: pending %d, skipped %d (total %d), first %s; want %d, 1 (5), %s",
			w.Pending, w.Skipped, w.SkippedTotal, w.SkippedFirst, bound, again[1].ID)
	}
	if n := pendingOf(t, db, every.ID); n != w.Pending {
		t.Errorf("%d pending rows, the webhook counts %d", n, w.Pending)
	}
	// A deleted webhook's backlog and counts go with it.
	write(t, db, func(tx btk.Tx) error { return tx.DeleteWebhook(ctx, every.ID) })
	read(t, db, func(tx btk.Tx) (err error) { st, err = tx.OutboxStats(ctx, t0); return err })
	if st.Pending != 2 || st.Full != 0 || st.Skipped != 0 {
		t.Errorf("after deleting the full webhook: outbox stats %+v, want 2 pending", st)
	}
}

// A webhook's count of pending deliveries (which claims and the bound rely
// on) equals its PENDING rows after events, claims and outcomes racing
// each other: claimers finishing deliveries (delivered, retried, given up,
// or under a lost claim) while writers add events.
func testWebhookBacklogCounted(t *testing.T, db btk.Store, ws *btk.Workspace) {
	hooks := []*btk.Webhook{newWebhook(t, db, ws), newWebhook(t, db, ws), newWebhook(t, db, ws, "api_key.revoked")}
	// Recorders take the webhook rows in id order, as writers of events lock
	// them (RecordDeliveries).
	slices.SortFunc(hooks, func(a, b *btk.Webhook) int { return strings.Compare(a.ID, b.ID) })
	var (
		wg    sync.WaitGroup
		errMu sync.Mutex
		errs  []error
	)
	fail := func(err error) {
		errMu.Lock()
		errs = append(errs, err)
		errMu.Unlock()
	}
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Microsecond) }
	for g := range 2 {
		wg.Go(func() {
			for i := range 40 {
				action := "api_key.created"
				if i%3 == 0 {
					action = "api_key.revoked"
				}
				ev := &btk.AuditEvent{WorkspaceID: ws.ID, Action: action, ActorEmail: fmt.Sprint("w", g), TargetType: "api_key",
					Metadata: `{}`, CreatedAt: at(g*1000 + i)}
				if err := db.Write(ctx, func(tx btk.Tx) error { return tx.AddAuditEvent(ctx, ev) }); err != nil {
					fail(err)
					return
				}
			}
		})
	}
	for c := range 3 {
		wg.Go(func() {
			for round := range 60 {
				claim := fmt.Sprint("c", c, "-", round)
				err := db.Write(ctx, func(tx btk.Tx) error {
					ds, err := tx.ClaimWebhookDeliveries(ctx, at(5000), time.Hour, claim, 4, btk.DeliveryCaps{})
					if err != nil {
						return err
					}
					freed := map[string]int{}
					for i, d := range ds {
						d.Attempts++
						switch i % 4 {
						case 0, 1:
							d.Status = btk.DeliveryDelivered
							d.DeliveredAt = &t0
						case 2:
							d.Status = btk.DeliveryFailed
						case 3:
							d.NextAttemptAt = at(4000) // retried, due again
						}
						owner := claim
						if round%7 == 0 {
							owner = "lost" // another instance took it: nothing changes
						}
						done, err := tx.FinishWebhookDelivery(ctx, d, owner)
						if err != nil {
							return err
						}
						if done {
							freed[d.WebhookID]++
						}
					}
					for _, h := range hooks {
						if n := freed[h.ID]; n > 0 {
							if err := tx.RecordWebhookOutcome(ctx, btk.WebhookOutcome{WebhookID: h.ID, AttemptedAt: t0, Finished: n, Now: t0}); err != nil {
								return err
							}
						}
					}
					return nil
				})
				if err != nil {
					fail(err)
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		t.Fatal(err)
	}
	var total int64
	for _, h := range hooks {
		w := webhookState(t, db, h.ID)
		if n := pendingOf(t, db, h.ID); n != w.Pending {
			t.Errorf("webhook %s counts %d pending, has %d", h.ID, w.Pending, n)
		}
		total += w.Pending
	}
	var st btk.OutboxStats
	read(t, db, func(tx btk.Tx) (err error) { st, err = tx.OutboxStats(ctx, t0); return err })
	if st.Pending != total {
		t.Errorf("outbox stats %d pending, the webhooks %d", st.Pending, total)
	}
}

// Deleting a webhook (and writing its webhook.deleted event, in one
// transaction, as the service does) races events of its workspace: a
// writer of an event holds the chain's head and then locks the workspace's
// webhook rows to decide on their backlogs, so on PostgreSQL the deletion
// must take the head before the webhook's row, or the two wait for each
// other (deadlock detected).
func testDeleteWebhookRacesEvents(t *testing.T, db btk.Store, ws *btk.Workspace) {
	const n = 8
	hooks := make([]*btk.Webhook, n)
	for i := range n {
		if i%2 == 0 {
			hooks[i] = newWebhook(t, db, ws)
		}
	}
	errs := make([]error, n)
	race(db, n, func(i int) {
		errs[i] = db.Write(ctx, func(tx btk.Tx) error {
			if hooks[i] != nil {
				if err := tx.DeleteWebhook(ctx, hooks[i].ID); err != nil {
					return err
				}
				widen() // the events take the chain's head meanwhile
			}
			return tx.AddAuditEvent(ctx, &btk.AuditEvent{WorkspaceID: ws.ID, Action: btk.EventWebhookDeleted,
				ActorEmail: fmt.Sprint("w", i), TargetType: "webhook", Metadata: `{}`, CreatedAt: t0.Add(time.Duration(i))})
		})
	})
	for i, err := range errs {
		if err != nil {
			t.Errorf("writer %d: %v", i, err)
		}
	}
	if got := checkChain(t, db, ws.ID); got != n {
		t.Errorf("chain has %d rows, want %d", got, n)
	}
}

// Recording deliveries' outcomes races changes that lock their workspace's
// row and then write an event (a key created, a plan changed): a writer of
// an event locks the workspace's webhook rows after the workspace's row,
// and a recorder must not take them in the other order. On PostgreSQL a
// second update of a webhook's row in one transaction checks its foreign
// key, locking the workspace's row after the webhook's: three instances
// creating keys while they delivered deadlocked so.
func testWebhookOutcomesRaceEvents(t *testing.T, db btk.Store, ws *btk.Workspace) {
	hook := newWebhook(t, db, ws)
	const n = 8
	addEvents(t, db, ws.ID, "api_key.created", func(i int) time.Time { return t0.Add(time.Duration(i)) }, 0, n)
	claimed := claimCaps(t, db, t0.Add(time.Minute), "c", n, btk.DeliveryCaps{})
	if len(claimed) != n {
		t.Fatalf("claimed %d, want %d", len(claimed), n)
	}
	errs := make([]error, 2*n)
	race(db, 2*n, func(i int) {
		if i%2 == 0 {
			errs[i] = db.Write(ctx, func(tx btk.Tx) error {
				if _, err := tx.Workspace(ctx, ws.ID); err != nil { // locks it (PostgreSQL)
					return err
				}
				widen() // the recorders take the webhook's row meanwhile
				return tx.AddAuditEvent(ctx, &btk.AuditEvent{WorkspaceID: ws.ID, Action: "api_key.created",
					ActorEmail: fmt.Sprint("w", i), TargetType: "api_key", Metadata: `{}`, CreatedAt: t0.Add(time.Hour + time.Duration(i))})
			})
			return
		}
		d := claimed[i/2]
		end := t0.Add(2 * time.Minute)
		d.Attempts, d.Status, d.DeliveredAt = 1, btk.DeliveryDelivered, &end
		errs[i] = db.Write(ctx, func(tx btk.Tx) error {
			done, err := tx.FinishWebhookDelivery(ctx, d, "c")
			if err != nil || !done {
				return fmt.Errorf("finish: %v %v", done, err)
			}
			return tx.RecordWebhookOutcome(ctx, btk.WebhookOutcome{WebhookID: hook.ID, AttemptedAt: end, OK: true, Finished: 1, Now: end})
		})
	})
	for i, err := range errs {
		if err != nil {
			t.Errorf("writer %d: %v", i, err)
		}
	}
	if w := webhookState(t, db, hook.ID); w.Pending != n || pendingOf(t, db, hook.ID) != n {
		t.Errorf("the webhook counts %d pending, has %d; want %d", w.Pending, pendingOf(t, db, hook.ID), n)
	}
}

// Deleting a webhook (the service's DeleteWebhook) while the worker
// records a batch of its deliveries' outcomes (RecordDeliveries, the batch
// in the order the attempts ended, here the reverse of the claim's): on
// PostgreSQL the two lock the deliveries' rows, and must do so in one
// order, or each holds rows the other waits for (deadlock detected): the
// owner's delete answered INTERNAL, or the worker's batch failed and was
// sent again after its lease. The batch also holds deliveries of a webhook
// that stays, whose row the deletion's event locks. Round after round
// until a deadline: neither side fails, the deleted webhook's deliveries
// are gone (none is claimed again) and the other's backlog stays counted.
func testDeleteWebhookRacesOutcomes(t *testing.T, db btk.Store, ws *btk.Workspace) {
	svc, err := btk.NewService(ctx, db, []byte("0123456789abcdef0123456789abcdef"), btk.Config{})
	if err != nil {
		t.Fatal(err)
	}
	owner := &btk.Actor{AccountID: uuid.NewString(), Email: "owner@example.com", WorkspaceID: ws.ID, Role: btk.RoleOwner}
	stays := newWebhook(t, db, ws)
	const events = 12
	deadline := time.Now().Add(10 * time.Second)
	var deleted []string
	rounds := 0
	for ; rounds < 40 && time.Now().Before(deadline); rounds++ {
		hook := newWebhook(t, db, ws)
		deleted = append(deleted, hook.ID)
		addEvents(t, db, ws.ID, "api_key.created", func(i int) time.Time { return t0.Add(time.Duration(i)) }, rounds*events, events)
		ds, err := svc.ClaimDeliveries(ctx, fmt.Sprint("c", rounds), time.Minute, 2*events, btk.DeliveryCaps{})
		if err != nil || len(ds) != 2*events {
			t.Fatalf("round %d: claimed %d deliveries (%v), want %d", rounds, len(ds), err, 2*events)
		}
		slices.Reverse(ds)
		for _, d := range ds {
			svc.SettleDelivery(d, 204, "", 0)
		}
		errs := make([]error, 2)
		race(db, 2, func(i int) {
			if i == 0 {
				errs[i] = svc.RecordDeliveries(ctx, ds)
			} else {
				errs[i] = svc.DeleteWebhook(ctx, owner, hook.ID)
			}
		})
		if errs[0] != nil || errs[1] != nil {
			t.Fatalf("round %d: recording: %v; deleting: %v", rounds, errs[0], errs[1])
		}
		read(t, db, func(tx btk.Tx) error { _, err := tx.Webhook(ctx, hook.ID); mustBe(t, err, btk.ErrNotFound); return nil })
		if n := len(allDeliveries(t, db, hook.ID)); n != 0 {
			t.Fatalf("round %d: the deleted webhook has %d deliveries", rounds, n)
		}
	}
	t.Logf("%d rounds", rounds)
	for _, d := range claimCaps(t, db, t0.Add(48*time.Hour), "after", 1000, btk.DeliveryCaps{}) {
		if slices.Contains(deleted, d.WebhookID) {
			t.Errorf("a delivery of deleted webhook %s was claimed again", d.WebhookID)
		}
	}
	if w := webhookState(t, db, stays.ID); w.Pending != pendingOf(t, db, stays.ID) {
		t.Errorf("the webhook that stays counts %d pending, has %d", w.Pending, pendingOf(t, db, stays.ID))
	}
}

// UndoMigration0014 is the SQL, for both engines, that takes a database
// back to migration 0013's outbox: the engines' upgrade tests run it on a
// store that SeedBacklogForUpgrade filled, then open the store again.
const UndoMigration0014 = `DROP INDEX webhooks_backlog;
	DROP INDEX webhook_deliveries_next;
	DROP INDEX webhook_deliveries_leased;
	DROP INDEX webhook_deliveries_pending_age;
	CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE status = 'PENDING';
	ALTER TABLE webhooks DROP COLUMN pending;
	ALTER TABLE webhooks DROP COLUMN skipped;
	ALTER TABLE webhooks DROP COLUMN skipped_since;
	ALTER TABLE webhooks DROP COLUMN skipped_until;
	ALTER TABLE webhooks DROP COLUMN skipped_first;
	ALTER TABLE webhooks DROP COLUMN skipped_last;
	ALTER TABLE webhooks DROP COLUMN skipped_total;
	DELETE FROM schema_migrations WHERE version = 14`

// SeedBacklogForUpgrade writes webhooks with pending, retried and
// delivered deliveries. The function it returns checks, on the store
// upgraded again to migration 0014, that each webhook counts its pending
// deliveries, which claims rely on (docs/webhooks.md#the-backlog-bound): a
// claim takes every pending one, and none is lost in the upgrade.
func SeedBacklogForUpgrade(t *testing.T, db btk.Store) func(*testing.T, btk.Store) {
	ws := newWorkspace(t, db)
	a, b := newWebhook(t, db, ws), newWebhook(t, db, ws, "api_key.revoked")
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Second) }
	addEvents(t, db, ws.ID, "api_key.created", at, 0, 4)
	addEvents(t, db, ws.ID, "api_key.revoked", at, 4, 3)
	// Of a's 7: 2 delivered, 1 retried later.
	ds := claimCaps(t, db, at(10), "c", 3, btk.DeliveryCaps{})
	write(t, db, func(tx btk.Tx) error {
		for i, d := range ds {
			d.Attempts = 1
			if i < 2 {
				end := at(11)
				d.Status, d.DeliveredAt = btk.DeliveryDelivered, &end
			} else {
				d.NextAttemptAt = at(12)
			}
			if _, err := tx.FinishWebhookDelivery(ctx, d, "c"); err != nil {
				return err
			}
		}
		return nil
	})
	return func(t *testing.T, db btk.Store) {
		want := map[string]int64{a.ID: pendingOf(t, db, a.ID), b.ID: pendingOf(t, db, b.ID)}
		if want[a.ID]+want[b.ID] != 8 {
			t.Fatalf("after the upgrade %d and %d deliveries pending, want 8 in all", want[a.ID], want[b.ID])
		}
		for id, n := range want {
			if w := webhookState(t, db, id); w.Pending != n || w.Skipped != 0 || w.SkippedTotal != 0 {
				t.Errorf("webhook %s counts %d pending (skipped %d), has %d", id, w.Pending, w.Skipped, n)
			}
		}
		if got := claimCaps(t, db, at(20), "after", 20, btk.DeliveryCaps{}); len(got) != 8 {
			t.Errorf("a claim after the upgrade took %d deliveries, want the 8 pending", len(got))
		}
	}
}
