package storetest

import (
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
)

// The audit filters (docs/design.md#the-audit-commands): a rotation chain (APIKeyIDs), the actor's email,
// an event action, and the server-wide events (no workspace).
func testEventAuditFilters(t *testing.T, db btk.Store, ws *btk.Workspace) {
	write(t, db, func(tx btk.Tx) error {
		for i, e := range []*btk.AuditEntry{
			{Action: btk.AuditCreated, APIKeyID: "k1", ActorEmail: "a@example.com"},
			{Action: btk.AuditRotated, APIKeyID: "k1", NewAPIKeyID: "k2", ActorEmail: "B@example.com"},
			{Action: btk.AuditCreated, APIKeyID: "other", ActorEmail: "a@example.com"},
			{Action: btk.AuditRevoked, APIKeyID: "k2", ActorEmail: "b@example.com"},
		} {
			e.WorkspaceID, e.CreatedAt = ws.ID, t0.Add(time.Duration(i)*time.Minute)
			if err := tx.AddAudit(ctx, e, nil); err != nil {
				return err
			}
		}
		for i, ev := range []*btk.AuditEvent{
			{WorkspaceID: ws.ID, Action: btk.EventSessionLogin, ActorEmail: "a@example.com", TargetType: "session"},
			{WorkspaceID: ws.ID, Action: btk.EventMembershipChanged, ActorEmail: "b@example.com", TargetType: "account"},
			{Action: btk.EventAccountCreated, ActorEmail: "a@example.com", TargetType: "account"},
		} {
			ev.CreatedAt = t0.Add(time.Duration(i) * time.Minute)
			if err := tx.AddAuditEvent(ctx, ev); err != nil {
				return err
			}
		}
		return nil
	})
	read(t, db, func(tx btk.Tx) error {
		count := func(f btk.AuditFilter) int {
			f.WorkspaceID, f.First = ws.ID, 50
			es, _, err := tx.AuditEntries(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			return len(es)
		}
		if n := count(btk.AuditFilter{APIKeyIDs: []string{"k1", "k2"}}); n != 3 {
			t.Errorf("chain k1, k2: %d entries, want 3", n)
		}
		if n := count(btk.AuditFilter{APIKeyID: "k2"}); n != 2 {
			t.Errorf("k2 alone: %d entries, want 2", n)
		}
		if n := count(btk.AuditFilter{ActorEmail: "b@EXAMPLE.com"}); n != 2 {
			t.Errorf("actor b: %d entries, want 2 (case-insensitive)", n)
		}
		events := func(f btk.AuditFilter) []*btk.AuditEvent {
			f.First = 50
			evs, _, err := tx.AuditEvents(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			return evs
		}
		if evs := events(btk.AuditFilter{WorkspaceID: ws.ID}); len(evs) != 2 {
			t.Errorf("workspace events: %d, want 2", len(evs))
		}
		if evs := events(btk.AuditFilter{NoWorkspace: true}); len(evs) != 1 || evs[0].Action != btk.EventAccountCreated || evs[0].WorkspaceID != "" {
			t.Errorf("server-wide events: %+v", evs)
		}
		if evs := events(btk.AuditFilter{WorkspaceID: ws.ID, EventAction: btk.EventSessionLogin}); len(evs) != 1 {
			t.Errorf("session.login events: %d, want 1", len(evs))
		}
		if evs := events(btk.AuditFilter{WorkspaceID: ws.ID, ActorEmail: "B@example.com"}); len(evs) != 1 || evs[0].Action != btk.EventMembershipChanged {
			t.Errorf("events by b: %+v", evs)
		}
		return nil
	})
}

func testAccountsAndWorkspaceMembers(t *testing.T, db btk.Store, ws *btk.Workspace) {
	a, b := newAccount(t, db, "a@example.com"), newAccount(t, db, "b@example.com")
	write(t, db, func(tx btk.Tx) error {
		if err := tx.SetMembership(ctx, btk.Membership{WorkspaceID: ws.ID, AccountID: b.ID, Role: btk.RoleAdmin}); err != nil {
			return err
		}
		return tx.SetMembership(ctx, btk.Membership{WorkspaceID: ws.ID, AccountID: a.ID, Role: btk.RoleOwner})
	})
	read(t, db, func(tx btk.Tx) error {
		accts, err := tx.Accounts(ctx)
		if err != nil || len(accts) != 2 || accts[0].Email != "a@example.com" || accts[1].Email != "b@example.com" {
			t.Errorf("Accounts = %+v, %v", accts, err)
		}
		ms, err := tx.WorkspaceMembers(ctx, ws.ID)
		if err != nil || len(ms) != 2 || ms[0].AccountID != b.ID || ms[0].Role != btk.RoleAdmin || ms[0].Email != "b@example.com" ||
			ms[1].AccountID != a.ID || ms[1].Email != "a@example.com" {
			t.Errorf("WorkspaceMembers = %+v, %v (oldest membership first)", ms, err)
		}
		return nil
	})
}
