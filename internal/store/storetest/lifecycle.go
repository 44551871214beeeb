package storetest

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/btk-project/btk/internal/btk"
)

// The account lifecycle's store methods: password, disabled state, ending
// every session but one, an audit event alone.
func testAccountLifecycle(t *testing.T, db btk.Store, ws *btk.Workspace) {
	a := newAccount(t, db, "user@example.com")
	other := newAccount(t, db, "other@example.com")
	var sessions []*btk.Session
	for i, acct := range []*btk.Account{a, a, a, other} {
		s := &btk.Session{ID: uuid.NewString(), AccountID: acct.ID, WorkspaceID: ws.ID, Impersonating: i == 2,
			CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}
		write(t, db, func(tx btk.Tx) error { return tx.CreateSession(ctx, s) })
		sessions = append(sessions, s)
	}
	at := t0.Add(time.Minute)
	write(t, db, func(tx btk.Tx) error {
		if err := tx.SetAccountPassword(ctx, a.ID, "$argon2id$new"); err != nil {
			return err
		}
		if err := tx.SetAccountDisabled(ctx, a.ID, &at); err != nil {
			return err
		}
		if err := tx.RevokeAccountSessions(ctx, a.ID, sessions[0].ID, at); err != nil {
			return err
		}
		return tx.AddAuditEvent(ctx, &btk.AuditEvent{WorkspaceID: ws.ID, Action: btk.EventAccountDisabled,
			ActorID: other.ID, ActorEmail: other.Email, TargetType: "account", TargetID: a.ID, CreatedAt: at})
	})
	read(t, db, func(tx btk.Tx) error {
		got, err := tx.Account(ctx, a.ID)
		if err != nil {
			return err
		}
		if got.PasswordHash != "$argon2id$new" || got.DisabledAt == nil || !got.DisabledAt.Equal(at) {
			t.Errorf("account after the changes: %+v", got)
		}
		for i, want := range []bool{false, true, true, false} { // revoked?
			s, err := tx.Session(ctx, sessions[i].ID)
			if err != nil {
				return err
			}
			if (s.RevokedAt != nil) != want {
				t.Errorf("session %d revoked = %v, want %v", i, s.RevokedAt != nil, want)
			}
		}
		evs, _, err := tx.AuditEvents(ctx, btk.AuditFilter{WorkspaceID: ws.ID, Page: btk.Page{First: 10}})
		if err != nil {
			return err
		}
		if len(evs) != 1 || evs[0].Action != btk.EventAccountDisabled || evs[0].TargetID != a.ID || evs[0].Metadata != "{}" {
			t.Errorf("audit events: %+v", evs)
		}
		return nil
	})
	write(t, db, func(tx btk.Tx) error { return tx.SetAccountDisabled(ctx, a.ID, nil) })
	read(t, db, func(tx btk.Tx) error {
		got, err := tx.Account(ctx, a.ID)
		if err == nil && got.DisabledAt != nil {
			t.Errorf("enabled account has DisabledAt %v", got.DisabledAt)
		}
		return err
	})
	err := db.Write(ctx, func(tx btk.Tx) error { return tx.SetAccountPassword(ctx, uuid.NewString(), "x") })
	mustBe(t, err, btk.ErrNotFound)
}
