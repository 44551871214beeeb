package storetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/btk-project/btk/internal/btk"
)

// The audit chain and the webhook outbox (docs/webhooks.md).

func addEvent(t testing.TB, db btk.Store, wsID, action string, at time.Time) *btk.AuditEvent {
	t.Helper()
	ev := &btk.AuditEvent{WorkspaceID: wsID, Action: action, ActorEmail: "a@example.com", TargetType: "api_key",
		TargetID: uuid.NewString(), Metadata: `{"n": 1, "s":"x"}`, CreatedAt: at}
	write(t, db, func(tx btk.Tx) error { return tx.AddAuditEvent(ctx, ev) })
	return ev
}

// checkChain recomputes a chain from its stored rows and compares it with
// its head; it returns the number of rows.
func checkChain(t testing.TB, db btk.Store, chain string) int64 {
	t.Helper()
	var (
		head btk.AuditHead
		rows []*btk.ChainRow
	)
	read(t, db, func(tx btk.Tx) (err error) {
		if head, err = tx.AuditChainHead(ctx, chain); err != nil {
			return err
		}
		rows, err = tx.AuditChainRows(ctx, chain, 0, 100_000)
		return err
	})
	prev := btk.ZeroChainHash
	for i, r := range rows {
		if r.Link.Seq != int64(i+1) {
			t.Fatalf("chain %q row %d has position %d", chain, i+1, r.Link.Seq)
		}
		want, err := btk.ChainHash(prev, &r.Event, r.Link.Seq, r.CreatedNano)
		if err != nil || want != r.Link.Hash {
			t.Fatalf("chain %q row %d: hash %s, recomputed %s (%v)", chain, i+1, r.Link.Hash, want, err)
		}
		prev = want
	}
	if head.Count != int64(len(rows)) || head.Hash != prev {
		t.Fatalf("chain %q head %+v, rows %d ending %s", chain, head, len(rows), prev)
	}
	if len(rows) > 0 && head.At == nil {
		t.Fatalf("chain %q head has no time", chain)
	}
	return head.Count
}

func testAuditChain(t *testing.T, db btk.Store, ws *btk.Workspace) {
	other := newWorkspace(t, db)
	var head btk.AuditHead
	read(t, db, func(tx btk.Tx) (err error) { head, err = tx.AuditChainHead(ctx, ws.ID); return err })
	if head.Count != 0 || head.Hash != btk.ZeroChainHash || head.At != nil {
		t.Fatalf("empty chain head %+v", head)
	}
	for i := range 5 {
		addEvent(t, db, ws.ID, "api_key.created", t0.Add(time.Duration(i)*time.Second))
		addEvent(t, db, "", btk.EventAccountCreated, t0.Add(time.Duration(i)*time.Second))
	}
	addEvent(t, db, other.ID, "api_key.revoked", t0)
	// Both audit rows of a key change go into the chain too.
	write(t, db, func(tx btk.Tx) error {
		return tx.AddAudit(ctx, &btk.AuditEntry{WorkspaceID: ws.ID, Action: btk.AuditCreated, APIKeyID: "k", CreatedAt: t0},
			&btk.AuditEvent{WorkspaceID: ws.ID, Action: "api_key.created", TargetType: "api_key", CreatedAt: t0})
	})
	if n := checkChain(t, db, ws.ID); n != 6 {
		t.Errorf("workspace chain has %d rows, want 6", n)
	}
	if n := checkChain(t, db, btk.ChainServerWide); n != 5 {
		t.Errorf("server-wide chain has %d rows, want 5", n)
	}
	if n := checkChain(t, db, other.ID); n != 1 {
		t.Errorf("other chain has %d rows, want 1", n)
	}
	// A failed transaction leaves the chain as it was.
	err := db.Write(ctx, func(tx btk.Tx) error {
		if err := tx.AddAuditEvent(ctx, &btk.AuditEvent{WorkspaceID: ws.ID, Action: "x.y", TargetType: "t", CreatedAt: t0}); err != nil {
			return err
		}
		return btk.ErrNotFound
	})
	mustBe(t, err, btk.ErrNotFound)
	if n := checkChain(t, db, ws.ID); n != 6 {
		t.Errorf("after a rollback the chain has %d rows, want 6", n)
	}
}

// 50 concurrent writers on one workspace's chain (and the server-wide one)
// leave both chains linear and intact.
func testAuditChainConcurrent(t *testing.T, db btk.Store, ws *btk.Workspace) {
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for i := range 50 {
		wg.Go(func() {
			chain := ws.ID
			if i%5 == 0 {
				chain = ""
			}
			err := db.Write(ctx, func(tx btk.Tx) error {
				return tx.AddAuditEvent(ctx, &btk.AuditEvent{WorkspaceID: chain, Action: "api_key.created",
					ActorEmail: fmt.Sprint("w", i), TargetType: "api_key", CreatedAt: t0.Add(time.Duration(i))})
			})
			if err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := checkChain(t, db, ws.ID); n != 40 {
		t.Errorf("workspace chain has %d rows, want 40", n)
	}
	if n := checkChain(t, db, ""); n != 10 {
		t.Errorf("server-wide chain has %d rows, want 10", n)
	}
}

func newWebhook(t testing.TB, db btk.Store, ws *btk.Workspace, events ...string) *btk.Webhook {
	t.Helper()
	w := &btk.Webhook{ID: uuid.NewString(), WorkspaceID: ws.ID, URL: "https://example.com/hook", Events: events,
		Sealed: "v1:sealed", CreatedAt: t0, CreatedBy: "acct"}
	write(t, db, func(tx btk.Tx) error { return tx.CreateWebhook(ctx, w) })
	return w
}

func testWebhookOutbox(t *testing.T, db btk.Store, ws *btk.Workspace) {
	other := newWorkspace(t, db)
	all := newWebhook(t, db, ws)
	revokes := newWebhook(t, db, ws, "api_key.revoked", "api_key.expiring")
	newWebhook(t, db, other)
	read(t, db, func(tx btk.Tx) error {
		hooks, err := tx.Webhooks(ctx, ws.ID)
		if err != nil {
			return err
		}
		if len(hooks) != 2 || hooks[0].ID != all.ID || hooks[1].ID != revokes.ID || len(hooks[0].Events) != 0 ||
			len(hooks[1].Events) != 2 || hooks[1].Sealed != "v1:sealed" || !hooks[1].CreatedAt.Equal(t0) {
			t.Errorf("webhooks %+v %+v", hooks[0], hooks[len(hooks)-1])
		}
		w, err := tx.Webhook(ctx, revokes.ID)
		if err != nil || w.URL != revokes.URL {
			t.Errorf("webhook %+v %v", w, err)
		}
		_, err = tx.Webhook(ctx, uuid.NewString())
		mustBe(t, err, btk.ErrNotFound)
		return nil
	})
	created := addEvent(t, db, ws.ID, "api_key.created", t0)
	addEvent(t, db, ws.ID, "api_key.revoked", t0.Add(time.Second))
	addEvent(t, db, "", btk.EventAccountCreated, t0) // no workspace: no webhook

	var st btk.OutboxStats
	read(t, db, func(tx btk.Tx) (err error) { st, err = tx.OutboxStats(ctx, t0); return err })
	if st.Pending != 3 || st.OldestPending == nil || !st.OldestPending.Equal(t0) {
		t.Fatalf("outbox stats %+v, want 3 pending since t0", st)
	}

	// Claims: due ones only, each once while leased.
	claimed := claim(t, db, t0.Add(time.Minute), "c1")
	if len(claimed) != 3 {
		t.Fatalf("claimed %d deliveries, want 3", len(claimed))
	}
	for _, d := range claimed {
		if d.URL != "https://example.com/hook" || d.Sealed != "v1:sealed" || d.Status != btk.DeliveryPending ||
			d.Payload == "" || d.WorkspaceID != ws.ID {
			t.Errorf("claimed %+v", d)
		}
		if d.WebhookID == all.ID && d.EventType == "api_key.created" && d.EventID != "msg_"+created.ID {
			t.Errorf("event id %q, want msg_%s", d.EventID, created.ID)
		}
	}
	again := claim(t, db, t0.Add(90*time.Second), "c2")
	if len(again) != 0 {
		t.Fatalf("a leased delivery was claimed again: %d", len(again))
	}
	// One delivered; one failed and retried later; the lease of the third runs out.
	d0, d1 := claimed[0], claimed[1]
	now := t0.Add(time.Minute)
	d0.Status, d0.Attempts, d0.LastStatusCode, d0.DeliveredAt = btk.DeliveryDelivered, 1, 204, &now
	d1.Status, d1.Attempts, d1.LastStatusCode, d1.LastError, d1.NextAttemptAt = btk.DeliveryPending, 1, 500, "boom", t0.Add(time.Hour)
	write(t, db, func(tx btk.Tx) error {
		// Delivered: it left the backlog; retried: it stays.
		if done, err := tx.FinishWebhookDelivery(ctx, d0, "c1"); err != nil || !done {
			t.Errorf("finishing a delivered delivery: %v %v, want true", done, err)
		}
		if done, err := tx.FinishWebhookDelivery(ctx, d1, "c1"); err != nil || done {
			t.Errorf("finishing a retried delivery: %v %v, want false", done, err)
		}
		if err := tx.RecordWebhookOutcome(ctx, btk.WebhookOutcome{WebhookID: d0.WebhookID, AttemptedAt: now, OK: true, Finished: 1, Now: now}); err != nil {
			return err
		}
		// A lost claim changes nothing.
		stale := *claimed[2]
		stale.Status = btk.DeliveryDelivered
		if done, err := tx.FinishWebhookDelivery(ctx, &stale, "not-mine"); err != nil || done {
			t.Errorf("finishing under a lost claim: %v %v, want false", done, err)
		}
		return nil
	})
	read(t, db, func(tx btk.Tx) (err error) { st, err = tx.OutboxStats(ctx, t0); return err })
	if st.Pending != 2 || st.Full != 0 || st.Skipped != 0 {
		t.Errorf("outbox stats %+v after one delivery, want 2 pending", st)
	}
	again = claim(t, db, t0.Add(3*time.Minute), "c3")
	if len(again) != 1 || again[0].ID != claimed[2].ID {
		t.Fatalf("after the lease ran out: claimed %d, want the third", len(again))
	}
	read(t, db, func(tx btk.Tx) error {
		ds, next, err := tx.WebhookDeliveries(ctx, btk.DeliveryFilter{WebhookID: all.ID, Page: btk.Page{First: 1}})
		if err != nil {
			return err
		}
		if len(ds) != 1 || next == "" || ds[0].EventType != "api_key.revoked" {
			t.Fatalf("first page %+v next %q", ds, next)
		}
		ds2, next2, err := tx.WebhookDeliveries(ctx, btk.DeliveryFilter{WebhookID: all.ID, Page: btk.Page{First: 5, After: next}})
		if err != nil {
			return err
		}
		if len(ds2) != 1 || next2 != "" || ds2[0].EventType != "api_key.created" {
			t.Fatalf("second page %+v", ds2)
		}
		for _, d := range append(ds, ds2...) {
			if d.ID == d0.ID && (d.Status != btk.DeliveryDelivered || d.LastStatusCode != 204 || d.DeliveredAt == nil || d.Attempts != 1) {
				t.Errorf("delivered %+v", d)
			}
			if d.ID == d1.ID && (d.Status != btk.DeliveryPending || d.LastError != "boom" || !d.NextAttemptAt.Equal(t0.Add(time.Hour))) {
				t.Errorf("retried %+v", d)
			}
		}
		rs, _, err := tx.WebhookDeliveries(ctx, btk.DeliveryFilter{WebhookID: revokes.ID, Page: btk.Page{First: 5}})
		if err != nil || len(rs) != 1 || rs[0].EventType != "api_key.revoked" {
			t.Fatalf("filtered webhook got %d deliveries (%v), want only the revoke", len(rs), err)
		}
		return nil
	})
	write(t, db, func(tx btk.Tx) error { return tx.DeleteWebhook(ctx, all.ID) })
	write(t, db, func(tx btk.Tx) error { mustBe(t, tx.DeleteWebhook(ctx, all.ID), btk.ErrNotFound); return nil })
	read(t, db, func(tx btk.Tx) (err error) { st, err = tx.OutboxStats(ctx, t0); return err })
	if st.Pending != 1 {
		t.Errorf("after deleting a webhook %d pending, want 1", st.Pending)
	}
}

// Several claimers at once never get the same delivery.
func testWebhookClaimsConcurrent(t *testing.T, db btk.Store, ws *btk.Workspace) {
	newWebhook(t, db, ws)
	write(t, db, func(tx btk.Tx) error {
		for i := range 200 {
			if err := tx.AddAuditEvent(ctx, &btk.AuditEvent{WorkspaceID: ws.ID, Action: "api_key.created",
				TargetType: "api_key", CreatedAt: t0.Add(time.Duration(i))}); err != nil {
				return err
			}
		}
		return nil
	})
	var (
		mu   sync.Mutex
		seen = map[string]int{}
		wg   sync.WaitGroup
	)
	for c := range 4 {
		wg.Go(func() {
			for range 100 {
				var ds []*btk.WebhookDelivery
				err := db.Write(ctx, func(tx btk.Tx) (err error) {
					ds, err = tx.ClaimWebhookDeliveries(ctx, t0.Add(time.Minute), time.Hour, uuid.NewString()+fmt.Sprint(c), 7, btk.DeliveryCaps{})
					return err
				})
				if err != nil {
					t.Error(err)
					return
				}
				if len(ds) == 0 {
					return
				}
				mu.Lock()
				for _, d := range ds {
					seen[d.ID]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(seen) != 200 {
		t.Errorf("claimed %d distinct deliveries, want 200", len(seen))
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("delivery %s claimed %d times", id, n)
		}
	}
}

func testExpiryNotices(t *testing.T, db btk.Store, ws *btk.Workspace) {
	now := t0.Add(24 * time.Hour)
	soon, later, far := key(ws, "soon"), key(ws, "later"), key(ws, "far")
	soon.ExpiresAt, later.ExpiresAt, far.ExpiresAt = ptr(now.Add(12*time.Hour)), ptr(now.Add(3*24*time.Hour)), ptr(now.Add(30*24*time.Hour))
	revoked := key(ws, "revoked")
	revoked.ExpiresAt = ptr(now.Add(time.Hour))
	for _, k := range []*btk.APIKey{soon, later, far, revoked} {
		createKey(t, db, k)
	}
	write(t, db, func(tx btk.Tx) error { return tx.RevokeAPIKey(ctx, revoked.ID, now, "acct", "") })
	expiring := func(at time.Time) map[string]bool {
		out := map[string]bool{}
		read(t, db, func(tx btk.Tx) error {
			ks, err := tx.ExpiringKeys(ctx, at, at.Add(7*24*time.Hour), at.Add(24*time.Hour), 10)
			for _, k := range ks {
				out[k.Name] = true
			}
			return err
		})
		return out
	}
	if got := expiring(now); len(got) != 2 || !got["soon"] || !got["later"] {
		t.Fatalf("expiring %v, want soon and later", got)
	}
	mark := func(id string, days int) bool {
		var ok bool
		write(t, db, func(tx btk.Tx) (err error) { ok, err = tx.MarkExpiryNotice(ctx, id, days); return err })
		return ok
	}
	if !mark(soon.ID, 1) || mark(soon.ID, 1) || mark(soon.ID, 7) {
		t.Fatal("the 1-day notice must be marked once, and covers the 7-day one")
	}
	if !mark(later.ID, 7) || mark(later.ID, 7) {
		t.Fatal("the 7-day notice must be marked once")
	}
	if got := expiring(now); len(got) != 0 {
		t.Fatalf("after the notices: expiring %v", got)
	}
	// Two days later, "later" is within a day: its 1-day notice is due.
	if got := expiring(now.Add(2*24*time.Hour + time.Hour)); len(got) != 1 || !got["later"] {
		t.Fatalf("a day before: expiring %v, want later", got)
	}
	if !mark(later.ID, 1) {
		t.Fatal("the 1-day notice after the 7-day one")
	}
}

// Tamper runs the tamper-evidence cases of the audit chain on an engine:
// exec runs a statement directly on the database (no parameters), as a
// database user could. Each case is caught by VerifyAuditChain and named.
func Tamper(t *testing.T, open Opener, exec func(t *testing.T, db btk.Store, query string)) {
	admin := &btk.Actor{AccountID: uuid.NewString(), Email: "admin@example.com", PlatformAdmin: true}
	setup := func(t *testing.T) (btk.Store, *btk.Service, *btk.Workspace, []*btk.AuditEvent) {
		db := open(t)
		svc, err := btk.NewService(ctx, db, []byte("0123456789abcdef0123456789abcdef"), btk.Config{})
		if err != nil {
			t.Fatal(err)
		}
		ws := newWorkspace(t, db)
		var evs []*btk.AuditEvent
		for i := range 5 {
			evs = append(evs, addEvent(t, db, ws.ID, "api_key.created", t0.Add(time.Duration(i)*time.Second)))
		}
		res, err := svc.VerifyAuditChain(ctx, admin, ws.ID, false)
		if err != nil || !res.Intact || res.Count != 5 || res.Head.Count != 5 {
			t.Fatalf("untouched chain: %+v %v", res, err)
		}
		return db, svc, ws, evs
	}
	verify := func(t *testing.T, svc *btk.Service, ws *btk.Workspace) *btk.ChainProblem {
		t.Helper()
		res, err := svc.VerifyAuditChain(ctx, admin, ws.ID, false)
		if err != nil {
			t.Fatal(err)
		}
		if res.Intact || res.Problem == nil {
			t.Fatalf("tampered chain verified intact: %+v", res)
		}
		t.Logf("caught: row %q at %d: %s", res.Problem.EventID, res.Problem.Seq, res.Problem.Reason)
		return res.Problem
	}
	t.Run("edit", func(t *testing.T) {
		db, svc, ws, evs := setup(t)
		exec(t, db, `UPDATE audit_events SET actor_email = 'someone@else' WHERE id = '`+evs[2].ID+`'`)
		if p := verify(t, svc, ws); p.EventID != evs[2].ID || p.Seq != 3 {
			t.Errorf("named %+v, want the edited row 3", p)
		}
	})
	t.Run("delete", func(t *testing.T) {
		db, svc, ws, evs := setup(t)
		exec(t, db, `DELETE FROM audit_events WHERE id = '`+evs[1].ID+`'`)
		if p := verify(t, svc, ws); p.EventID != evs[2].ID || p.Seq != 2 {
			t.Errorf("named %+v, want the row after the gap (position 2 missing)", p)
		}
	})
	t.Run("delete the latest", func(t *testing.T) {
		db, svc, ws, evs := setup(t)
		exec(t, db, `DELETE FROM audit_events WHERE id = '`+evs[4].ID+`'`)
		if p := verify(t, svc, ws); p.Seq != 5 {
			t.Errorf("named %+v, want position 5 missing", p)
		}
	})
	t.Run("insert", func(t *testing.T) {
		db, svc, ws, _ := setup(t)
		exec(t, db, `INSERT INTO audit_events (id, workspace_id, action, actor_email, target_type, metadata, created_at)
			VALUES ('forged', '`+ws.ID+`', 'api_key.created', 'x@example.com', 'api_key', '{}', 1)`)
		if p := verify(t, svc, ws); p.EventID != "forged" {
			t.Errorf("named %+v, want the inserted row", p)
		}
	})
	t.Run("insert with a copied link", func(t *testing.T) {
		db, svc, ws, evs := setup(t)
		exec(t, db, `INSERT INTO audit_events (id, workspace_id, action, actor_email, target_type, metadata, created_at, chain_seq, chain_hash)
			SELECT 'forged', workspace_id, action, actor_email, target_type, metadata, created_at, chain_seq, chain_hash
			FROM audit_events WHERE id = '`+evs[4].ID+`'`)
		if p := verify(t, svc, ws); p.EventID != "forged" {
			t.Errorf("named %+v, want the inserted row", p)
		}
	})
	t.Run("server-wide", func(t *testing.T) {
		db, svc, _, _ := setup(t)
		ev := addEvent(t, db, "", btk.EventAccountCreated, t0)
		addEvent(t, db, "", btk.EventAccountCreated, t0)
		res, err := svc.VerifyAuditChain(ctx, admin, "", true)
		if err != nil || !res.Intact || res.Count != 2 {
			t.Fatalf("server-wide chain: %+v %v", res, err)
		}
		exec(t, db, `UPDATE audit_events SET metadata = '{"n": 2}' WHERE id = '`+ev.ID+`'`)
		res, err = svc.VerifyAuditChain(ctx, admin, "", true)
		if err != nil || res.Intact || res.Problem.EventID != ev.ID {
			t.Fatalf("edited server-wide row: %+v %v", res, err)
		}
	})
}

// Retention deletes the finished deliveries (delivered or failed) created
// before the cut, never a pending one however old; twice (two instances)
// deletes nothing more.
func testPruneDeliveries(t *testing.T, db btk.Store, ws *btk.Workspace) {
	newWebhook(t, db, ws)
	for i := range 4 {
		addEvent(t, db, ws.ID, "api_key.created", t0.Add(time.Duration(i)*time.Hour))
	}
	claimed := claim(t, db, t0.Add(5*time.Hour), "c")
	if len(claimed) != 4 {
		t.Fatalf("claimed %d, want 4", len(claimed))
	}
	// Oldest first: hour 0 delivered, hour 1 failed, hour 2 pending (old but
	// unfinished), hour 3 delivered but after the cut.
	now := t0.Add(5 * time.Hour)
	claimed[0].Status, claimed[0].DeliveredAt = btk.DeliveryDelivered, &now
	claimed[1].Status = btk.DeliveryFailed
	claimed[2].Status = btk.DeliveryPending
	claimed[3].Status, claimed[3].DeliveredAt = btk.DeliveryDelivered, &now
	write(t, db, func(tx btk.Tx) error {
		for _, d := range claimed {
			if _, err := tx.FinishWebhookDelivery(ctx, d, "c"); err != nil {
				return err
			}
		}
		return nil
	})
	cut := t0.Add(3 * time.Hour)
	if n, err := db.PruneDeliveries(ctx, cut); err != nil || n != 2 {
		t.Fatalf("pruned %d, %v; want 2", n, err)
	}
	if n, err := db.PruneDeliveries(ctx, cut); err != nil || n != 0 {
		t.Fatalf("pruned again %d, %v", n, err)
	}
	read(t, db, func(tx btk.Tx) error {
		ds, _, err := tx.WebhookDeliveries(ctx, btk.DeliveryFilter{WebhookID: claimed[0].WebhookID, Page: btk.Page{First: 10}})
		if err != nil {
			return err
		}
		if len(ds) != 2 || ds[0].ID != claimed[3].ID || ds[1].ID != claimed[2].ID {
			t.Fatalf("left %d deliveries, want the pending one and the recent one", len(ds))
		}
		return nil
	})
}

// Fair claims: a workspace whose receivers hang (deliveries leased, never
// finished) and that keeps adding events holds at most the caps, and
// another workspace's newer event is claimed in the next round.
func testWebhookClaimsFair(t *testing.T, db btk.Store) {
	busy, quiet := newWorkspace(t, db), newWorkspace(t, db)
	hooks := map[string]bool{}
	for range 10 {
		hooks[newWebhook(t, db, busy).ID] = true
	}
	qh := newWebhook(t, db, quiet)
	for i := range 20 {
		addEvent(t, db, busy.ID, "api_key.created", t0.Add(time.Duration(i)*time.Millisecond))
	}
	caps := btk.DefaultDeliveryCaps(8)
	claim := func(name string, at time.Time) []*btk.WebhookDelivery {
		return claimCaps(t, db, at, name, 8, caps)
	}
	first := claim("r1", t0.Add(time.Second))
	if len(first) != caps.PerWorkspace {
		t.Fatalf("first round claimed %d of 200 deliveries of one workspace, want %d (its cap)", len(first), caps.PerWorkspace)
	}
	// More events of the busy workspace, then one of the quiet one, newest.
	for i := range 20 {
		addEvent(t, db, busy.ID, "api_key.created", t0.Add(time.Second+time.Duration(i)*time.Millisecond))
	}
	addEvent(t, db, quiet.ID, "api_key.created", t0.Add(2*time.Second))
	second := claim("r2", t0.Add(3*time.Second))
	if len(second) != 1 || second[0].WebhookID != qh.ID {
		t.Fatalf("second round claimed %d deliveries, want only the quiet workspace's one", len(second))
	}
	// Per webhook: without a workspace cap, each webhook gets at most 2.
	caps = btk.DeliveryCaps{PerWebhook: 2}
	perHook := map[string]int{}
	for _, d := range append(first, claim("r3", t0.Add(3*time.Second))...) {
		perHook[d.WebhookID]++
	}
	for id, n := range perHook {
		if !hooks[id] || n > 2 {
			t.Errorf("webhook %s has %d in flight, want at most 2 of the busy workspace's", id, n)
		}
	}
	if len(perHook) < 4 {
		t.Errorf("only %d webhooks served", len(perHook))
	}
}

// Fair claims within a workspace (docs/webhooks.md#delivery): one
// webhook, or its failing webhooks together, never hold the workspace's
// whole share. A healthy webhook's deliveries are claimed while failing
// ones hold theirs and have an older backlog; a failing webhook holds 1;
// among failing webhooks the one whose latest attempt ended longest ago
// goes first, so a due retry is not held back by hanging receivers'
// backlogs. An attack had one hanging receiver hold both of its
// workspace's slots and another webhook's events come minutes late.
func testWebhookClaimsFairInWorkspace(t *testing.T, db btk.Store, ws *btk.Workspace) {
	caps := btk.DefaultDeliveryCaps(8)
	if caps.PerWorkspace <= caps.PerWebhook || caps.FailingPerWorkspace >= caps.PerWorkspace || caps.PerFailingWebhook >= caps.PerWebhook {
		t.Fatalf("caps %+v: a webhook, or the failing ones together, would hold the workspace's share", caps)
	}
	hang1, hang2, flaky, healthy := newWebhook(t, db, ws), newWebhook(t, db, ws), newWebhook(t, db, ws), newWebhook(t, db, ws)
	names := map[string]string{hang1.ID: "hang1", hang2.ID: "hang2", flaky.ID: "flaky", healthy.ID: "healthy"}
	attempt := func(w *btk.Webhook, at time.Time, ok bool) {
		t.Helper()
		write(t, db, func(tx btk.Tx) error {
			return tx.RecordWebhookOutcome(ctx, btk.WebhookOutcome{WebhookID: w.ID, AttemptedAt: at, OK: ok, Now: at})
		})
	}
	// The steady state of the attack: two receivers that hang (their
	// attempts time out), one that answers 500 and one that answers at once.
	attempt(flaky, t0.Add(100*time.Millisecond), false)
	attempt(hang1, t0.Add(500*time.Millisecond), false)
	attempt(hang2, t0.Add(500*time.Millisecond), false)
	attempt(healthy, t0.Add(600*time.Millisecond), true)
	for i := range 6 {
		addEvent(t, db, ws.ID, "api_key.created", t0.Add(time.Duration(i)*time.Millisecond))
	}
	at := t0.Add(time.Second)
	settle := func(d *btk.WebhookDelivery, claim string, end time.Time, ok bool) {
		t.Helper()
		d.Attempts++
		if ok {
			d.Status, d.DeliveredAt = btk.DeliveryDelivered, &end
		} else {
			d.Status, d.NextAttemptAt = btk.DeliveryPending, end.Add(btk.WebhookBackoff(d.Attempts, 0))
		}
		write(t, db, func(tx btk.Tx) error {
			done, err := tx.FinishWebhookDelivery(ctx, d, claim)
			if err != nil {
				return err
			}
			o := btk.WebhookOutcome{WebhookID: d.WebhookID, AttemptedAt: end, OK: ok, Now: end}
			if done {
				o.Finished = 1
			}
			return tx.RecordWebhookOutcome(ctx, o)
		})
	}
	round := func(name string, now time.Time, want map[string]int) map[string]*btk.WebhookDelivery {
		t.Helper()
		ds := claimCaps(t, db, now, name, 8, caps)
		got, one := map[string]int{}, map[string]*btk.WebhookDelivery{}
		for _, d := range ds {
			got[names[d.WebhookID]]++
			one[names[d.WebhookID]] = d
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("round %s claimed %v, want %v", name, got, want)
		}
		return one
	}
	// Each failing webhook gets 1, and they together 2 of the workspace's
	// 3: flaky (its latest attempt the longest ago) and hang1; the healthy
	// webhook gets the third.
	r1 := round("r1", at, map[string]int{"flaky": 1, "hang1": 1, "healthy": 1})
	settle(r1["healthy"], "r1", at.Add(time.Millisecond), true)
	settle(r1["flaky"], "r1", at.Add(2*time.Millisecond), false)
	// hang1 still hangs: hang2 takes the failing webhooks' second place
	// (its latest attempt is older than flaky's), the healthy webhook the
	// rest.
	r2 := round("r2", at.Add(3*time.Millisecond), map[string]int{"hang2": 1, "healthy": 1})
	settle(r2["healthy"], "r2", at.Add(4*time.Millisecond), true)
	// Both hang: the failing webhooks' share is held, flaky's retry (due)
	// waits, and the healthy webhook is still served.
	retryDue := at.Add(2*time.Millisecond + btk.WebhookBackoff(1, 0))
	round("r3", retryDue, map[string]int{"healthy": 1})
	// hang1's attempt times out: flaky, whose attempt ended longer ago,
	// takes the freed place before hang1 (and before hang2's backlog).
	settle(r1["hang1"], "r1", retryDue.Add(time.Millisecond), false)
	round("r4", retryDue.Add(2*time.Millisecond), map[string]int{"flaky": 1})

	// An attempt recorded late (another instance's, older) changes nothing.
	attempt(hang1, retryDue, true)
	attempt(healthy, t0, false)
	read(t, db, func(tx btk.Tx) error {
		for _, w := range []*btk.Webhook{hang1, healthy} {
			got, err := tx.Webhook(ctx, w.ID)
			if err != nil {
				return err
			}
			failing := got.FailingSince != nil
			if failing != (w == hang1) {
				t.Errorf("%s: failing since %v after an older attempt was recorded late", names[w.ID], got.FailingSince)
			}
		}
		got, err := tx.Webhook(ctx, hang1.ID)
		if err != nil {
			return err
		}
		if !got.LastAttemptAt.Equal(retryDue.Add(time.Millisecond)) || !got.FailingSince.Equal(t0.Add(500*time.Millisecond)) {
			t.Errorf("hang1: last attempt %v, failing since %v", got.LastAttemptAt, got.FailingSince)
		}
		return nil
	})
	attempt(hang1, retryDue.Add(time.Second), true)
	read(t, db, func(tx btk.Tx) error {
		got, err := tx.Webhook(ctx, hang1.ID)
		if err == nil && got.FailingSince != nil {
			t.Errorf("hang1 answered: still failing since %v", got.FailingSince)
		}
		return err
	})
	// A deleted webhook's attempt is no error.
	write(t, db, func(tx btk.Tx) error { return tx.DeleteWebhook(ctx, flaky.ID) })
	attempt(flaky, retryDue.Add(time.Hour), true)
}

// claimCaps claims up to limit due deliveries at at, within caps, leased
// for a minute to claimer.
func claimCaps(t testing.TB, db btk.Store, at time.Time, claimer string, limit int, caps btk.DeliveryCaps) []*btk.WebhookDelivery {
	t.Helper()
	var ds []*btk.WebhookDelivery
	write(t, db, func(tx btk.Tx) (err error) {
		ds, err = tx.ClaimWebhookDeliveries(ctx, at, time.Minute, claimer, limit, caps)
		return err
	})
	return ds
}

// claim claims up to 10 due deliveries at at, leased for a minute to
// claimer.
func claim(t *testing.T, db btk.Store, at time.Time, claimer string) []*btk.WebhookDelivery {
	t.Helper()
	return claimCaps(t, db, at, claimer, 10, btk.DeliveryCaps{})
}

// An event alone (a session's elevation, a canary key's use) racing a
// change that locks its workspace row first and then writes its event
// (a key created, a plan changed): on PostgreSQL the event alone must not
// lock the chain's head before the workspace row, which its audit_events
// row's foreign key locks (FOR KEY SHARE) and the change holds FOR UPDATE,
// or the two wait for each other (deadlock detected).
func testAuditEventRacesWorkspaceLock(t *testing.T, db btk.Store, ws *btk.Workspace) {
	const n = 8
	errs := make([]error, n)
	race(db, n, func(i int) {
		ev := &btk.AuditEvent{WorkspaceID: ws.ID, Action: "session.elevated", ActorEmail: fmt.Sprint("w", i),
			TargetType: "session", CreatedAt: t0.Add(time.Duration(i))}
		errs[i] = db.Write(ctx, func(tx btk.Tx) error {
			if i%2 == 0 {
				if _, err := tx.Workspace(ctx, ws.ID); err != nil {
					return err
				}
				widen() // the events alone take the chain meanwhile
			}
			return tx.AddAuditEvent(ctx, ev)
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
